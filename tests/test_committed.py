"""The committed results: pieces, their merge, provenance, and a recomputed spot check."""

import dataclasses
import importlib
import json

import pytest

from convres.committed import assemble, load_paper_result, merge_data, paper_path, pieces, run_piece
from convres.experiments import EXPERIMENTS, run_experiment, settings
from convres.experiments import jena, sst2
from convres.experiments.simulations import rerun_escape
from tests.test_reliability import run_main


def test_merge_concatenates_seed_records_and_keeps_the_rest():
    a = {"runs": [{"seed": 0, "x": 1}], "cells": [{"d": 4, "runs": [{"seed": 0}]}], "grid": [1, 2],
                                  "N": 3}
    b = {"runs": [{"seed": 1, "x": 2}], "cells": [{"d": 4, "runs": [{"seed": 1}]}], "grid": [1, 2],
                                  "N": 3}
    assert merge_data([a, b]) == {"runs": [{"seed": 0, "x": 1}, {"seed": 1, "x": 2}],
                                  "cells": [{"d": 4, "runs": [{"seed": 0}, {"seed": 1}]}], "grid": [1, 2],
                                  "N": 3}


@pytest.mark.parametrize("name", ["simulations", "jena", "sst2"])
def test_pieces_cover_every_seed_once_in_order(name):
    blocks = pieces(name)
    assert [s for b in blocks for s in b] == settings(name, "paper")["seeds"]
    assert all(blocks)


@pytest.fixture
def one_seed_pieces(monkeypatch):
    for name in ("simulations", "jena", "sst2"):
        monkeypatch.setitem(EXPERIMENTS, name, dataclasses.replace(EXPERIMENTS[name], piece_seeds=1))


@pytest.mark.parametrize("name", ["jena", "sst2"])
def test_real_data_experiments_merge_too(name, one_seed_pieces, tmp_path):
    """Jena and SST-2 in one-seed pieces give the claims of the whole run (to float32 round-off:
    SST-2 runs in float32, and a batch of other runs rounds differently)."""
    for k in (0, 1):
        run_piece(name, k, folder=tmp_path, profile="smoke")
    merged, _ = load_paper_result(name, tmp_path, "smoke")
    whole = run_experiment(name, "smoke").claims()
    assert [c["verdict"] for c in merged.claims()] == [c["verdict"] for c in whole]
    for cm, cw in zip(merged.claims(), whole):
        assert cm.get("effect") == pytest.approx(cw.get("effect"), rel=1e-5, abs=1e-9)


def test_pieces_merge_to_the_whole_run(one_seed_pieces, tmp_path):
    """Piece by piece (smoke profile, one seed each) gives the claims and the per-seed speeds of
    the run of every seed at once."""
    assert pieces("simulations", "smoke") == [[0], [1]]
    for k in (1, 0):  # in any order
        run_piece("simulations", k, folder=tmp_path, profile="smoke")
    stored = json.loads(paper_path("simulations", tmp_path, "smoke").read_text())
    assert stored["pieces"] == {"total": 2, "done": [0, 1], "missing": [], "planned_seeds": [0, 1]}
    assert [p["piece"] for p in stored["provenance"]] == [0, 1]
    assert {"commit", "command", "wall_seconds", "machine", "torch"} <= set(stored["provenance"][0])
    merged, _ = load_paper_result("simulations", tmp_path, "smoke")
    whole = run_experiment("simulations", "smoke")
    assert merged.settings == whole.settings
    key = [(c["verdict"], c.get("units"), c.get("agree")) for c in whole.claims()]
    assert [(c["verdict"], c.get("units"), c.get("agree")) for c in merged.claims()] == key
    for cm, cw in zip(merged.claims(), whole.claims()):
        assert cm.get("effect") == pytest.approx(cw.get("effect"), abs=1e-9)
    assert merged.summary()["escape"] == whole.summary()["escape"]


#: What each experiment computes without its evaluation seeds (so once for all pieces).
SHARED = {"simulations": ["_tune"], "jena": ["_tune", "_time_of_day_check"],
          "sst2": ["_tune", "_precision_check", "_run_sst2_wide"]}


@pytest.mark.parametrize("name", list(SHARED))
def test_the_pieces_of_a_run_tune_and_check_once(name, one_seed_pieces, tmp_path, monkeypatch):
    """The step sizes tuned on the probe seeds, and the checks on a probe seed, are the same for
    every piece: the first piece computes them, the second reads them back (and the merged run has
    one set of steps)."""
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))
    module = importlib.import_module(f"convres.experiments.{name}")
    calls: list[str] = []
    for f in SHARED[name]:
        original = getattr(module, f)
        monkeypatch.setattr(module, f, lambda *a, _f=f, _g=original, **k: calls.append(_f) or _g(*a, **k))
    run_piece(name, 0, folder=tmp_path, profile="smoke")
    first = list(calls)
    run_piece(name, 1, folder=tmp_path, profile="smoke")
    assert sorted(set(first)) == sorted(SHARED[name]) and calls == first
    merged, _ = load_paper_result(name, tmp_path, "smoke")
    assert merged.data["step_sizes"] == run_experiment(name, "smoke").data["step_sizes"]


def test_a_missing_piece_is_listed_not_filled(one_seed_pieces, tmp_path):
    run_piece("simulations", 1, folder=tmp_path, profile="smoke")
    res, info = load_paper_result("simulations", tmp_path, "smoke")
    assert info["pieces"]["done"] == [1] and info["pieces"]["missing"] == [0]
    assert res.settings["seeds"] == [1]
    assert {r["seed"] for c in res.data["escape"] for r in c["runs"]} == {1}


def test_a_piece_of_other_settings_is_refused(one_seed_pieces, tmp_path):
    path, _ = run_piece("simulations", 0, folder=tmp_path, profile="smoke")
    stored = json.loads(path.read_text())
    stored["settings"]["steps"] += 1
    path.write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="other settings.*--piece 0"):
        assemble("simulations", tmp_path, "smoke")


def test_nothing_committed_reads_as_none(tmp_path):
    assert load_paper_result("sst2", tmp_path) is None
    assert assemble("sst2", tmp_path) is None


def test_committed_results_are_the_paper_profile_of_today():
    """Every committed file was assembled from pieces of today's paper settings."""
    for name in EXPERIMENTS:
        if paper_path(name).is_file():
            res, info = load_paper_result(name)
            full = settings(name, "paper")
            assert {**res.settings, "seeds": full["seeds"]} == full
            assert info["pieces"]["done"] and res.claims()


def test_a_committed_run_computes_again_to_the_same_numbers():
    """The spot check of the committed simulations: one run of the escape law (the smallest
    d_QK, beta = 0, the first seed) computed again here matches the committed record."""
    loaded = load_paper_result("simulations")
    assert loaded is not None, "results/simulations-paper.json is committed"
    res, info = loaded
    s = res.settings
    cell = min(res.data["escape"], key=lambda c: c["d_qk"])
    stored = next(r for r in cell["runs"] if r["beta"] == 0.0 and r["seed"] == s["seeds"][0])
    again = rerun_escape(s, cell["d_qk"], cell["scale"], 0.0, stored["eta"], stored["seed"])
    assert again["loss0"] == pytest.approx(stored["loss0"], rel=1e-12)
    assert again["escape"] == stored["escape"] and again["steps_to"] == stored["steps_to"]
    assert again["status"] == stored["status"]
    assert info["provenance"][0]["commit"]


def _jena_rerun_matches(res, steps: int) -> None:
    s = res.settings
    stored = next(r for r in res.data["runs"] if r["beta"] == 1.0 and r["seed"] == s["seeds"][0]
                  and "best" in r["protocols"])
    again = jena.rerun(s, stored["beta"], stored["seed"], stored["eta"], steps)
    assert again == pytest.approx(stored["train_mse"][:steps + 1], rel=1e-9)


def test_a_jena_run_computed_alone_is_the_run_of_the_experiment():
    """:func:`convres.experiments.jena.rerun` (the spot check below) recomputes a run of the
    experiment: the smoke profile, every step."""
    res = run_experiment("jena", "smoke")
    _jena_rerun_matches(res, res.settings["steps"])


def test_an_sst2_run_computed_alone_is_the_run_of_the_experiment():
    """:func:`convres.experiments.sst2.rerun` recomputes every run of the smoke profile, to the
    round-off of float32 (the experiment stacks the arms of a seed, the rerun runs one alone)."""
    res = run_experiment("sst2", "smoke")
    for r in res.data["runs"]:
        again = sst2.rerun(res.settings, r["L"], r["beta"], r["seed"], r["eta"], res.settings["steps"])
        assert again == pytest.approx(r["mse"], rel=1e-4)


def test_a_committed_jena_run_computes_again_to_the_same_numbers():
    """The spot check of the committed Jena pieces: the first 100 steps of one run (beta = 1, the
    first seed, its tuned step; every training window) computed again match the committed curve."""
    loaded = load_paper_result("jena")
    assert loaded is not None, "results/jena-paper.json is committed"
    _jena_rerun_matches(loaded[0], 100)
    assert loaded[1]["provenance"][0]["commit"]


def test_merge_refuses_pieces_that_disagree_outside_their_seeds():
    with pytest.raises(ValueError, match=r"differ at data\.eta"):
        merge_data([{"eta": 0.1, "runs": [{"seed": 0}]}, {"eta": 0.2, "runs": [{"seed": 1}]}])
    with pytest.raises(ValueError, match="share seeds"):
        merge_data([{"runs": [{"seed": 0, "x": 1}]}, {"runs": [{"seed": 0, "x": 2}]}])
    same = [{"seed": 7, "x": 1.0}]   # records of a side run every piece computes alike
    assert merge_data([{"wide": same}, {"wide": [{"seed": 7, "x": 1.0 + 1e-13}]}]) == {"wide": same}


@pytest.mark.parametrize("args, needle", [
    (["reproduce", "simulations", "--piece", "0"], "--profile paper"),
    (["reproduce", "all", "--profile", "paper", "--piece", "0"], "one experiment"),
    (["reproduce", "simulations", "--profile", "paper", "--piece", "99"], "pieces 0 to 4"),
    (["reproduce", "simulations", "--profile", "paper", "--piece", "0", "--out", "x"], "--out"),
])
def test_piece_usage_errors_name_the_fix(capsys, args, needle):
    code, _, err = run_main(capsys, *args)
    assert code == 2 and "Traceback" not in err and needle in err, err


def test_a_piece_from_the_command_line(one_seed_pieces, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("convres.cli.PROFILE", "smoke")
    code, out, err = run_main(capsys, "reproduce", "simulations", "--profile", "smoke", "--piece", "1",
                              "--results", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["pieces"]["done"] == [1]


@pytest.mark.parametrize("which", [0, -1])
def test_a_committed_sst2_run_computes_again_to_the_same_numbers(which):
    """The spot check of the committed SST-2 pieces: the first 20 steps of one run (L = 2 with
    residuals, the first seed and the last, each of another piece, at its tuned step; all 8,192
    sentences) computed again match the committed curve to float32 round-off (the committed pieces
    were computed with autograd's gradient, this with the hand-written one: measured 1.2e-6)."""
    loaded = load_paper_result("sst2")
    assert loaded is not None, "results/sst2-paper.json is committed"
    res, info = loaded
    seed = res.settings["seeds"][which]
    stored = next(r for r in res.data["runs"] if r["L"] == 2 and r["beta"] == 1.0 and r["seed"] == seed)
    again = sst2.rerun(res.settings, 2, 1.0, seed, stored["eta"], 20)
    assert again == pytest.approx(stored["mse"][:21], rel=1e-5)
    assert info["provenance"][which]["commit"]
