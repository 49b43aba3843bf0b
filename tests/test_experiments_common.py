"""The common suite: every experiment record, at its smoke settings, behaves alike."""

import dataclasses
import importlib
import json
import shutil
from functools import cache

import pytest

from convres import experiments as ex
from convres.cache import dumps, loads
from convres.committed import load_committed, pieces, run_piece
from convres.data import DATASETS
from convres.experiments import simulations as sim
from convres.experiments.base import LIST_SETTINGS
from convres.protocol import CLAIMS, EVALUATION_SEEDS, PILOT_SEEDS, PROBE_SEEDS
from convres.show import tex

pytestmark = pytest.mark.parametrize("record", list(ex.EXPERIMENTS), indirect=True)


@pytest.fixture(scope="module", autouse=True)
def once():
    """Each record's smoke result is read once for the module."""
    yield
    smoke.cache_clear()
    claims.cache_clear()


@cache
def smoke(name: str) -> ex.Result:
    return ex.run_experiment(name, "smoke")


@cache
def claims(name: str) -> list[dict]:
    return smoke(name).claims()


@pytest.fixture
def record(request):
    """The name of the record under test; a record on a data set needs the offline copy."""
    name = request.param
    if name in DATASETS:
        request.getfixturevalue("offline")
    return name


def test_the_settings_are_copies_and_a_setting_that_would_run_nothing_is_refused_by_name(record):
    """An empty list, a bad or repeated seed, a zero step, a repeated beta or probe seed: refused."""
    before = json.dumps(ex.EXPERIMENTS[record].profiles["smoke"])
    s = ex.settings(record, "smoke")
    for v in s.values():
        if isinstance(v, (list, dict)):
            v.clear()
    assert json.dumps(ex.settings(record, "smoke")) == before
    s = ex.settings(record, "smoke")
    bad = [(k, []) for k in LIST_SETTINGS if k in s]
    if s.get("seeds"):
        bad += [("seeds", [-1]), ("seeds", s["seeds"][:1] * 2)]
    if "betas" in s:
        bad.append(("betas", s["betas"][:1] * 2))
    if "eta_grid" in s:
        bad.append(("eta_grid", [*s["eta_grid"], 0.0]))
    if "probe_seeds" in s:
        bad.append(("probe_seeds", s["seeds"][:1]))
    for key, value in bad:
        with pytest.raises(ValueError, match=f"'{key}' of '{record}'"):
            ex.run_experiment(record, "smoke", overrides={key: value}, data_dir="/nonexistent")


def test_the_book_and_paper_profiles_of_an_experiment_with_claims_follow_the_protocol(record):
    """Its evaluation seeds, probe seeds (and pilot seeds) are the protocol's, its steps a factor-2 grid."""
    for profile in ("book", "paper"):
        s = ex.settings(record, profile)
        assert ("probe_seeds" in s) == ex.EXPERIMENTS[record].in_report
        if "probe_seeds" in s:
            assert s["seeds"] == list(EVALUATION_SEEDS[profile]) and s["probe_seeds"] == list(PROBE_SEEDS)
            assert s.get("pilot_seeds", list(PILOT_SEEDS)) == list(PILOT_SEEDS)
            grid = sorted(s["eta_grid"])
            assert all(b == 2 * a for a, b in zip(grid, grid[1:]))


def test_the_summary_is_strict_json_and_the_result_reads_back_from_the_cache_and_from_json(record):
    res = smoke(record)
    summary = res.summary()
    assert list(summary)[:len(ex.SUMMARY_KEYS)] == list(ex.SUMMARY_KEYS) and summary["device"] == "cpu"
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    e = ex.EXPERIMENTS[record]
    with pytest.MonkeyPatch.context() as mp:                 # read from the cache, not computed
        mp.setitem(ex.EXPERIMENTS, record, dataclasses.replace(e, run=lambda *a, **k: pytest.fail("computed")))
        cached = ex.run_experiment(record, "smoke")
    doc = loads(dumps(res.to_json()), record)
    again = ex.Result(ex.EXPERIMENTS[doc["name"]], doc["profile"], doc["settings"], doc["data"], doc["seconds"])
    for other in (cached, again):
        assert (other.name, other.profile, other.settings, other.data) == (record, "smoke", res.settings, res.data)


def test_the_claims_are_the_protocol_s_each_with_its_id_and_a_verdict(record):
    rows = claims(record)
    assert [r["id"] for r in rows] == [c.id for c in CLAIMS.values() if c.experiment == record]
    for r in rows:
        assert r["experiment"] == record and r["verdict"] in ex.VERDICTS and r["claim"]
        assert {"effect", "ci", "margin", "units", "sign_test_p", "sensitivity", "diverged", "tex", "criterion",
                "measurement", "evidence", "figure"} <= set(r)
        assert r["verdict"] not in ("inconclusive", "not testable") or r["reason"]
        assert tex(r["tex"]) and tex(r["criterion"]) and "$" not in r["claim"] + r["measure"]   # TeX, and words
    assert ex.EXPERIMENTS[record].in_report == bool(rows)


def test_the_figure_is_labelled_with_one_legend_outside_the_data(record):
    res = smoke(record)
    if res.experiment.plot is None:
        with pytest.raises(ValueError, match=record):
            res.figure()
        return
    fig = res.figure()
    assert fig.axes and all(ax.get_ylabel() and (ax.lines or ax.collections) for ax in fig.axes)
    assert any(ax.get_xlabel() for ax in fig.axes)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1


#: What each experiment computes without its evaluation seeds (so once for all pieces).
SHARED = {"simulations": ["_probe_runs"], "jena": ["_pilots", "_tune"],
          "sst2": ["_precision_check", "_run_sst2_wide", "_tune"]}


def test_the_pieces_merge_into_the_run_of_every_seed(record, tmp_path, monkeypatch):
    """Pieces in any order compute the shared parts once and merge into the whole run."""
    if not ex.settings(record, "smoke").get("seeds"):
        for profile in (p for p in ex.PROFILES if not ex.settings(record, p).get("seeds")):
            with pytest.raises(ValueError, match=f"{record!r} has no evaluation seeds.*reproduce {record}"):
                pieces(record, profile)
        return
    monkeypatch.setitem(ex.EXPERIMENTS, record, dataclasses.replace(ex.EXPERIMENTS[record], piece_seeds=1))
    whole, expected = smoke(record), claims(record)
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))     # nothing shared computed yet
    calls: list[str] = []
    for f in SHARED.get(record, []):
        module = importlib.import_module(f"convres.experiments.{record}")
        original = getattr(module, f)
        monkeypatch.setattr(module, f, lambda *a, _f=f, _g=original, **k: calls.append(_f) or _g(*a, **k))
    blocks = pieces(record, "smoke")
    assert blocks == [[s] for s in whole.settings["seeds"]]
    run_piece(record, len(blocks) - 1, folder=tmp_path / "R", profile="smoke")
    first = list(calls)
    for k in reversed(range(len(blocks) - 1)):
        run_piece(record, k, folder=tmp_path / "R", profile="smoke")
    assert sorted(set(first)) == SHARED.get(record, []) and calls == first
    merged, info = load_committed(record, tmp_path / "R", "smoke")
    if record == "simulations":   # an arm one piece reran at half its step: the second pass (``halve``)
        halve = [h for h, x in zip(sim.second_pass(merged), sim.reruns(merged)) if not x["every_seed"]]
        if halve:
            e = ex.EXPERIMENTS[record]
            monkeypatch.setitem(ex.EXPERIMENTS, record, dataclasses.replace(
                e, profiles={**e.profiles, "smoke": {**e.profiles["smoke"], "halve": halve}}))
            shutil.rmtree(tmp_path / "R")
            for k in range(len(blocks)):
                run_piece(record, k, folder=tmp_path / "R", profile="smoke")
            merged, info = load_committed(record, tmp_path / "R", "smoke")
            whole = ex.run_experiment(record, "smoke")
            expected = whole.claims()
    assert info["pieces"] == {"total": len(blocks), "done": list(range(len(blocks))), "missing": [],
                              "planned_seeds": whole.settings["seeds"]}
    assert [p["piece"] for p in info["provenance"]] == list(range(len(blocks)))
    assert merged.settings == whole.settings and merged.data.get("step_sizes") == whole.data.get("step_sizes")
    rows = merged.claims()
    assert [(c["id"], c["verdict"], c["units"]) for c in rows] == \
        [(c["id"], c["verdict"], c["units"]) for c in expected]
    rel = 1e-5 if whole.settings.get("dtype") == "float32" else 0
    for cm, cw in zip(rows, expected):
        assert cm["effect"] == pytest.approx(cw["effect"], rel=rel, abs=1e-9)
    if record == "simulations":
        assert merged.summary()["escape_law"] == whole.summary()["escape_law"]


def timeless(x):
    """``x`` less its wall times (the entries ``"seconds"``)."""
    if isinstance(x, dict):
        return {k: timeless(v) for k, v in x.items() if k != "seconds"}
    return [timeless(v) for v in x] if isinstance(x, list) else x


def test_computed_again_it_gives_the_same_numbers(record):
    res = smoke(record)
    again = ex.run_experiment(record, "smoke", refresh=True)
    assert timeless(again.data) == timeless(res.data) and again.settings == res.settings
