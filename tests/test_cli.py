"""The command line: one parser per command and mode, one error path, strict JSON on stdout."""

import dataclasses
import json
import subprocess
import sys

import pytest

from convres import __version__, cli
from convres.cli import main
from convres.experiments import EXPERIMENTS


def run_main(capsys, *args):
    """``(exit status, stdout, stderr)`` of ``python -m convres ARGS`` (argparse's usage errors: 2)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as done:
        code = done.code
    out = capsys.readouterr()
    return code, out.out, out.err


def a_clear_error(code, out, err, *names):
    """Exit 2, nothing on stdout, no traceback, one line naming the problem (argparse adds its usage)."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert code == 2 and out == "" and "Traceback" not in err and all(n in last for n in names), err


def test_the_entry_point_in_a_subprocess():
    out = subprocess.run([sys.executable, "-m", "convres", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(c in out.stdout for c in ("gd", "theorem", "reproduce", "data"))
    out = subprocess.run([sys.executable, "-m", "convres", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout
    closed = subprocess.run(f"{sys.executable} -m convres reproduce >&-", shell=True, capture_output=True,
                            text=True)   # stdout closed: one line, no traceback
    assert closed.returncode == 2 and len(closed.stderr.splitlines()) == 1
    assert "Traceback" not in closed.stderr


def test_the_modes_print_strict_json_and_reproduce_lists_the_experiments(capsys):
    code, out, _ = run_main(capsys, "reproduce")
    assert code == 0 and all(n in out for n in ("simulations", "jena", "sst2", "all"))
    code, out, _ = run_main(capsys, "gd", "--steps", "20", "--json")
    result = json.loads(out, parse_constant=pytest.fail)
    assert code == 0 and result["steps"] == 20 and result["final_loss"] < result["initial_loss"]


@pytest.mark.parametrize("args, names", [
    (("reproduce", "rank_collapse_gd", "--profile", "paper", "--piece", "0"), ("rank_collapse_gd",)),
    (("reproduce", "simulations", "--device", "cpu:1"), ("cpu:1",)),
    (("reproduce", "simulations", "--results", "r"), ("--results",)),
    (("reproduce", "../etc/passwd"), ("../etc/passwd",)),
    (("reproduce", "simulations", "--out", "/dev/null"), ("--out", "/dev/null")),   # not a folder
    (("reproduce", "jena", "--piece", "0"), ("--profile book", "--profile paper")),
    (("reproduce", "simulations", "--profile", "paper", "--piece", "0", "--out", "x"), ("--out",)),
    (("reproduce", "simulations", "--profile", "paper", "--piece", "99"), ("99",)),
    (("theorem", "certify", "--d", "1"), ("--d",)),
    (("theorem", "--certify"), ("certify", "width", "scope")),    # a mode is a subcommand, not a flag
    (("theorem", "certify", "--beta", "1"), ("--beta",)),       # a flag of another mode: refused
    (("gd", "--seed", "-1"), ("--seed",)),
    (("data", "bogus"), ("bogus",)),
])
def test_bad_requests_are_one_clear_line_before_any_work(capsys, monkeypatch, tmp_path, args, names):
    monkeypatch.setattr(cli, "result", lambda *a, **k: pytest.fail("an experiment was run"))
    if "--piece" in args:   # a piece's results folder: never the checkout's
        args = (*args, "--results", tmp_path)
    a_clear_error(*run_main(capsys, *args), *names)


def test_an_error_of_the_work_is_one_line_and_an_interrupt_exits_130(capsys, monkeypatch):
    for failure, code in [(ValueError("the instance is degenerate; use another --seed"), 2),
                          (OSError(28, "No space left on device"), 2), (KeyboardInterrupt(), 130)]:
        monkeypatch.setattr(cli, "sigma_min_table", lambda *a, _f=failure, **k: (_ for _ in ()).throw(_f))
        got, out, err = run_main(capsys, "rank-collapse")
        assert got == code and out == "" and len(err.strip().splitlines()) == 1


def test_a_piece_from_the_command_line(capsys, monkeypatch, tmp_path, fresh_cache):
    sim = EXPERIMENTS["simulations"]
    monkeypatch.setitem(EXPERIMENTS, "simulations", dataclasses.replace(
        sim, profiles={**sim.profiles, "paper": sim.profiles["smoke"]}, piece_seeds=1))
    code, out, err = run_main(capsys, "reproduce", "simulations", "--profile", "paper", "--piece", "1",
                              "--results", tmp_path, "--json")
    assert code == 0 and json.loads(out)["pieces"]["done"] == [1], err


def test_reproduce_prints_strict_json_and_writes_the_figure(capsys, tmp_path, fresh_cache):
    code, out, err = run_main(capsys, "reproduce", "rank_collapse_gd", "--profile", "smoke", "--json",
                              "--out", tmp_path / "figs", "--device", "cpu")
    report = json.loads(out, parse_constant=pytest.fail)
    assert code == 0 and (tmp_path / "figs" / "rank_collapse_gd-smoke.png").stat().st_size > 1000, err
    assert {"settings", "summary", "claims", "figure"} <= set(report) and report["summary"]["device"] == "cpu"
