"""The reliability policies of issue 22, one test per policy on the review's examples and on fresh
cases (the property-based versions are in ``tests/test_properties.py``)."""

import io
import json
import os
import sys
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from convres import ModelConfig, cache, cli, gradient_descent, init_params, paths, synthetic_regression
from convres.cli import main
from convres.data import DataError, load_sst2, read_checksums, read_jena
from convres.runtime import CostRefused, check_memory
from tests.test_data import SLICE_HEADER, jena_rows, write_slice
from tests.test_reliability import run_main

CFG = ModelConfig(d=4, d_qk=4, m=4)




# --- flags: every flag used or refused; --json always JSON --------------------------------------

@pytest.mark.parametrize("args, flag", [
    (("theorem", "--N", "3"), "--N"), (("theorem", "--n", "3"), "--n"), (("theorem", "--d", "8"), "--d"),
    (("theorem", "--scope", "--seed", "3"), "--seed"),
    (("theorem", "--certify", "--beta", "1"), "--beta"),       # even the default value: it is not used
    (("theorem", "--width-condition", "--steps", "5"), "--steps"),
    (("theorem", "--width-condition", "--route", "ffn"), "--route"),
    (("theorem", "--delta", "0.1"), "--delta"),
    (("reproduce", "--list", "--refresh"), "--refresh"),
    (("reproduce", "simulations", "--list"), "NAME"),
])
def test_a_flag_the_mode_does_not_use_is_an_error(capsys, args, flag):
    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"{flag} (used only by" in err and "does not apply to" in err


def test_every_flag_of_every_subcommand_has_a_mode():
    parser = cli.build_parser()
    options = cli._track_given(parser)
    for command, modes in cli.APPLIES.items():
        sub = parser._subparsers._group_actions[0].choices[command]
        dests = {a.dest for a in sub._actions if a.option_strings and a.dest != "help"} | (
            {"name"} if command == "reproduce" else set())
        assert dests == set().union(*modes.values()), command
    assert options["width_condition"] == "--width-condition"


@pytest.mark.parametrize("args", [("reproduce", "--list", "--json"), ("reproduce", "--json")])
def test_json_is_always_json(capsys, args):
    code, out, _ = run_main(capsys, *args)
    rows = json.loads(out)
    assert code == 0 and {r["name"] for r in rows} >= {"simulations", "jena", "sst2"}


# --- output: checked, exit non-zero when lost ---------------------------------------------------

class Full(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("stdout", [None, Full()], ids=["closed", "full"])
def test_lost_output_is_exit_status_1(capsys, monkeypatch, stdout):
    monkeypatch.setattr(sys, "stdout", stdout)
    code = main(["gd", "--steps", "2", "--json"])
    err = capsys.readouterr().err
    assert code == 1 and "output" in err and "lost" in err and "Traceback" not in err


def test_a_warning_made_an_error_is_one_line(capsys, monkeypatch, tmp_path):
    """PYTHONWARNINGS=error turns the cache's warning into an exception: one line, exit 2."""
    monkeypatch.setenv("CONVRES_CACHE_DIR", "/proc/convres-no")
    monkeypatch.setattr(cli, "run_experiment", lambda *a, **k: cache.cached_json("x", {}, lambda: 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_main(capsys, "reproduce", "simulations", "--out", str(tmp_path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "CacheWarning" in err and "CONVRES_CACHE_DIR" in err and "PYTHONWARNINGS" in err


# --- what runs: the benchmark by a fixed path of the source checkout -----------------------------

def test_bench_never_runs_a_script_found_next_to_an_installed_package(capsys, monkeypatch, tmp_path):
    fake = tmp_path / "site-packages"
    (fake / "benchmarks").mkdir(parents=True)
    (fake / "benchmarks" / "gd_speed.py").write_text("def main(argv):\n    raise SystemExit('ran!')\n")
    monkeypatch.setattr(cli, "REPOSITORY", fake)
    monkeypatch.setattr(cli, "BENCH_SCRIPT", fake / "benchmarks" / "gd_speed.py")
    code, out, err = run_main(capsys, "bench", "--profile", "tiny")
    assert code == 2 and "ran!" not in out + err and "run it from a clone" in err


# --- environment: every path setting validated and named -----------------------------------------

@pytest.mark.parametrize("env, value", [
    (paths.CACHE_ENV, ""), (paths.CACHE_ENV, "   "), (paths.CACHE_ENV, "~nosuchuserqq/c"),
    (paths.DATA_ENV, ""), (paths.DATA_ENV, "~nosuchuserqq")])
def test_a_bad_path_setting_is_named(monkeypatch, env, value):
    monkeypatch.setenv(env, value)
    with pytest.raises(paths.PathSettingError, match=env):
        (paths.cache_dir if env == paths.CACHE_ENV else paths.data_dir)()


@pytest.mark.parametrize("xdg", ["", "relative/dir"])
def test_an_empty_or_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path, xdg):
    monkeypatch.delenv(paths.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(paths.XDG_ENV, xdg)
    assert paths.cache_dir() == tmp_path / ".cache" / "convres" / "results"


def test_path_arguments_are_checked_like_the_variables():
    with pytest.raises(paths.PathSettingError, match="data_dir"):
        paths.data_dir(b"/tmp")
    with pytest.raises(paths.PathSettingError, match="data_dir is empty"):
        load_sst2(data_dir="")


# --- interrupts say what was kept ------------------------------------------------------------

def test_an_interrupt_before_anything_finished_says_so(capsys, monkeypatch, tmp_path):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "run_experiment", interrupted)
    code, _, err = run_main(capsys, "reproduce", "simulations", "--out", str(tmp_path))
    assert code == 130 and "nothing new was cached" in err


# --- cost: estimated from the shapes, refused before allocating ---------------------------------

def test_cost_is_refused_with_the_estimate_and_what_to_change():
    with pytest.raises(CostRefused, match=r"needs about 8\.\d+e\+03 GiB.*use less"):
        check_memory(2**43, "this thing", "use less")
    X = torch.zeros(1, 60_000, 4, dtype=torch.float64)   # attention: n^2 = 3.6e9 entries per block
    Y = torch.zeros(1, 60_000, 1, dtype=torch.float64)
    with pytest.raises(CostRefused, match=r"n=60000.*GiB.*tokens n"):
        gradient_descent(init_params(CFG), X, Y, CFG, 0.01, 1)


def test_absurd_step_counts_are_refused():
    X, Y = synthetic_regression(2, 3, 4)
    with pytest.raises(ValueError, match="steps=.*more than"):
        gradient_descent(init_params(CFG), X, Y, CFG, 0.01, 10**30)


def test_a_sentence_too_long_is_refused_before_any_padding(tmp_path):
    (tmp_path / "sst2").mkdir()
    table = pa.table({"sentence": ["a b c", " ".join(["w"] * 20_000)], "label": pa.array([0, 1], pa.int64()),
                      "idx": pa.array([0, 1], pa.int32())})
    pq.write_table(table, tmp_path / "sst2" / "train.parquet")
    with pytest.raises(DataError, match="row 1 has 20,000 tokens, more than max_tokens=256"):
        load_sst2(data_dir=tmp_path)
    assert len(load_sst2(data_dir=tmp_path, max_tokens=20_000)) == 2


# --- the caller's objects ----------------------------------------------------------------------

def test_a_callback_editing_the_trace_is_refused():
    X, Y = synthetic_regression(2, 3, 4)
    p = init_params(CFG)

    def edit(step):
        step.trace.Z[0].zero_()
    with pytest.raises(RuntimeError, match="step.trace"):
        gradient_descent(p, X, Y, CFG, 0.01, 2, callback=edit)


# --- data content -------------------------------------------------------------------------------

def test_a_jena_column_named_twice_is_an_error(tmp_path):
    rows = [r + "," + r.split(",")[1] for r in jena_rows(features=11, trailing_zeros=False)]
    path = write_slice(tmp_path, rows=rows, header=SLICE_HEADER + ",p (mbar)")
    with pytest.raises(DataError, match=r"names the column\(s\) \['p \(mbar\)'\] twice"):
        read_jena(path)


def test_sst2_rows_repeated_are_an_error(tmp_path):
    (tmp_path / "sst2").mkdir()
    table = pa.table({"sentence": ["a b c", "d e f"] * 2, "label": pa.array([0, 1] * 2, pa.int64()),
                      "idx": pa.array([0, 1, 0, 1], pa.int32())})
    pq.write_table(table, tmp_path / "sst2" / "train.parquet")
    with pytest.raises(DataError, match="2 row.s. repeat an idx of an earlier row, the first at row 2"):
        load_sst2(data_dir=tmp_path)


@pytest.mark.parametrize("kind", ["dir", "fifo", "dev-zero"])
def test_an_unusable_checksum_file_is_an_error_not_verification_off(tmp_path, kind):
    manifest = tmp_path / "SHA256SUMS"
    if kind == "dir":
        manifest.mkdir()
    elif kind == "fifo":
        os.mkfifo(manifest)
    else:
        os.symlink("/dev/zero", manifest)
    with pytest.raises(DataError, match="SHA256SUMS.*nothing could be verified"):
        read_checksums(tmp_path)


def test_an_empty_out_folder_is_refused_not_the_working_directory(capsys, monkeypatch):
    monkeypatch.setattr(cli, "run_experiment", lambda *a, **k: pytest.fail("an experiment was run"))
    code, out, err = run_main(capsys, "reproduce", "simulations", "--out", "")
    assert code == 2 and out == "" and "--out is empty" in err
