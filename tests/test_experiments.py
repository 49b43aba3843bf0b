"""Experiments beyond the common suite: errors, reruns, SST-2 data, figures, CLI, tables, scope."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from convres import experiments as ex
from convres import plotting, report, tables
from convres.cli import main
from convres.experiments.base import RUN_CONTEXT, rerun_diverged, run_context
from convres.plotting import beta_colors
from convres.scope import scope_summary


@pytest.fixture(scope="module", autouse=True)
def module_cache(tmp_path_factory):
    """One fresh results cache for the module: a run that two tests make is computed once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONVRES_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def small_profile(monkeypatch, name, **changes):
    """Replace the `book` profile of experiment `name` for one test."""
    e = ex.EXPERIMENTS[name]
    monkeypatch.setitem(ex.EXPERIMENTS, name, dataclasses.replace(
        e, profiles={**e.profiles, "book": {**e.profiles["book"], **changes}}))


# --- settings and the runner -----------------------------------------------------------------------

def test_an_unknown_experiment_profile_or_setting_is_named():
    for call, name in ((lambda: ex.settings("nope"), "nope"), (lambda: ex.settings("jena", "big"), "big"),
                       (lambda: ex.run_experiment("simulations", overrides={"foo": 1}), "foo")):
        with pytest.raises(ValueError, match=name):
            call()


def test_the_book_profile_s_regimes_are_wide_narrow_and_of_uniform_attention():
    s = ex.settings("simulations")
    regimes = {r["name"]: r for r in s["regimes"]}
    assert regimes["wide"]["N"] * s["n"] <= s["d"] < regimes["narrow"]["N"] * s["n"]
    assert regimes["uniform attention"]["scale"] == "1/d_qk" and regimes["uniform attention"]["d_qk"] >= 1024


def test_an_arm_that_diverges_is_rerun_on_every_seed_at_half_its_step_and_its_follower_with_it():
    calls = []

    def run(pending):                # an arm diverges on seed 1 above a step of 1
        calls.append(dict(pending))
        return {a: [{"seed": k, "status": "diverged" if k == 1 and e > 1 else "ok"} for k in (0, 1)]
                for a, e in pending.items()}
    out, failed = rerun_diverged({"b": 4.0, "a": 1.0, "half": 2.0}, run, 3, follows={"half": "b"})
    assert calls[1:] == [{"b": 2.0, "half": 1.0}, {"b": 1.0, "half": 0.5}]   # sorted, the follower at half
    assert [e for e, _ in failed["b"]] == [4.0, 2.0] and [e for e, _ in failed["half"]] == [2.0]
    assert failed["a"] == [] and all(r["status"] == "ok" for v in out.values() for r in v)
    out, failed = rerun_diverged({"b": 8.0}, run, 1)            # at most `times` reruns: the last kept
    assert len(failed["b"]) == 1 and out["b"][1]["status"] == "diverged"


def test_a_run_context_merges_into_the_current_one_and_restores_it_on_exit():
    assert RUN_CONTEXT.get() is None
    with run_context(commit="c", store="s") as outer:
        with run_context(data={"f": 1}, shared=[]) as inner:         # a run within a piece: its commit kept
            assert RUN_CONTEXT.get() is inner == {"commit": "c", "store": "s", "data": {"f": 1}, "shared": []}
        assert RUN_CONTEXT.get() is outer == {"commit": "c", "store": "s"}
        with pytest.raises(KeyError), run_context(store="t"):
            raise KeyError("a failing run")
        assert RUN_CONTEXT.get() is outer
    assert RUN_CONTEXT.get() is None


# --- SST-2 (simulations and Jena: tests/test_simulations.py, tests/test_jena.py) ---------------------

def test_sst2_data_on_files_in_the_real_format(tmp_path, tiny_sst2):
    s = {**ex.settings("sst2", "smoke"), **tiny_sst2}
    task = ex.sst2_data(s, data_dir=tmp_path)
    assert task.X.shape == (16, 10, 4) and task.X.dtype == torch.float32 and task.Y.shape == (16, 1)
    assert task.X_val.shape == (12, 10, 4) and len(task.tokens_val) == 12     # every sentence >= 10 tokens
    assert int(task.labels.sum()) == 8 and set(task.Y[:, 0].tolist()) == {-1.0, 1.0}
    flat = task.X.reshape(-1, 4).double()
    assert torch.allclose(flat.mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-5)
    assert task.info["vocab_size"] == 20 and task.info["oov_train"] == 0
    again = ex.sst2_data(s, data_dir=tmp_path)
    assert torch.equal(task.X, again.X) and torch.equal(task.X_val, again.X_val)   # deterministic
    Yt = ex.sst2.token_targets(task.Y, 10)
    assert Yt.shape == (16, 10, 1) and torch.equal(Yt[:, 3], task.Y)


def test_beta_colors_distinguish_adjacent_betas():
    betas = [0.0, 0.1, 0.25, 0.5, 1.0]
    rgb = np.array([c[:3] for c in beta_colors(betas)])
    assert min(np.abs(rgb[i] - rgb[i + 1]).sum() for i in range(len(betas) - 1)) > 0.25
    assert beta_colors([1.0, 0.0]) == beta_colors([0.0, 1.0])[::-1] and len(beta_colors([0.5])) == 1
    assert all(sum(c[:3]) < 2.2 for c in beta_colors(betas))   # no pale colour on white


# --- the command line ---------------------------------------------------------------------------------

def test_cli_reproduce_download_fetches_missing_data_then_runs(tmp_path, capsys, monkeypatch, mirror):
    _, files, server = mirror
    monkeypatch.setenv("CONVRES_DATA_DIR", str(tmp_path / "data"))
    small_profile(monkeypatch, "jena", **ex.settings("jena", "smoke"))
    # without --download: a clear error naming the flag and the data-directory setting, no download
    assert main(["reproduce", "jena", "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert "python -m convres data" in err and "CONVRES_DATA_DIR" in err and server.requests == []
    assert main(["reproduce", "jena", "--download", "--json", "--out", str(tmp_path / "figs")]) == 0
    zipped = tmp_path / "data" / "jena_climate" / "jena_climate_2009_2016.csv.zip"
    assert [p for p, _ in server.requests] == ["/jena.zip"] and zipped.read_bytes() == files["/jena.zip"]
    assert json.loads(capsys.readouterr().out)["summary"]["diverged_runs"] == 0
    assert main(["reproduce", "jena", "--download", "--json", "--out", str(tmp_path / "figs")]) == 0
    assert len(server.requests) == 1  # present now: not downloaded again


# --- the report's tables and figures (each record's own figure: tests/test_experiments_common.py) ------

def test_the_report_tables_and_the_other_figures_from_small_results(tmp_path, tiny_sst2):
    """The figures have labels, markers and one legend outside the data."""
    def labelled(fig):
        return all(ax.get_legend() is None and ax.get_ylabel() for ax in fig.axes) and len(fig.legends) == 1

    results = {"simulations": ex.run_experiment("simulations", "smoke"),
               "sst2": ex.run_experiment("sst2", "smoke", overrides=tiny_sst2, data_dir=tmp_path)}
    sim, sst = results["simulations"], results["sst2"]
    fig = plotting.plot_simulations(sim)
    assert all(line.get_marker() not in (None, "None", "") for line in fig.axes[0].lines[:2])
    k = sim.summary()
    fig = plotting.plot_escape_law(k["escape_law"], k["escape_fit"])
    assert labelled(fig) and fig.axes[0].get_xscale() == "log"
    assert labelled(plotting.plot_sst2(sst, "common")) and labelled(plotting.plot_sst2_summary(sst))
    assert len(plotting.plot_sst2(sst).axes) == len(sst.settings["depths"])      # one panel per depth
    assert plotting.thumbnail_png(plotting.plot_sst2(sst)).startswith(b"\x89PNG")
    assert plotting.show(plotting.plot_sst2(sst), width=300).width == 300
    rows = ex.claims(results)
    page = report.claims_html(rows, {"fig-sst2-final": b"\x89PNG"})
    assert page.count("<tr>") == len(rows) + 1 and 'href="sst2.html#fig-sst2-final"' in page
    assert 'href="simulations.html#fig-sim-regimes">figure</a>' in page     # no thumbnail given
    assert all(report.VERDICT_COLORS[r["verdict"]] in page for r in rows)
    assert "<details>" in report.criteria_html(rows)
    assert set(report.settings_table(results)["experiment"]) == {"simulations", "sst2"}
    spread = report.spread_table(results)
    assert {"median", "min to max", "seeds"} <= set(spread.columns) and len(spread) > 0
    compute = report.compute_table(results, "test machine")
    assert list(compute["experiment"]) == ["simulations", "sst2"] and (compute["gradient-descent runs"] > 0).all()
    assert "SST-2 wide FFN" in set(report.deviations_table(results)["what"])
    k = sst.summary()                                                   # the SST-2 chapter's tables
    pages = (tables.init_table(k["init_output_std"]), tables.stable_steps_table(k["step_sizes"]),
             tables.per_model_table(k), tables.sensitivity_table(sst.claims()),
             tables.accuracy_table(k["heldout"]), tables.design_checks_table(k["design_checks"]))
    html = [t.to_html() for t in pages]
    assert all("<td" in h and "nan" not in h for h in html)
    assert html[0].count("<tr>") - 1 == len(k["init_output_std"])        # one row per arm and depth
    assert "sst2 arms alive" in html[-1] and "≤ 1" in html[-1]               # the operator from CHECKS
    with pytest.raises(ValueError, match="unknown verdict"):
        report.badge("great")


def test_scope_summary_folds_the_theory_rows():
    rows = [{"experiment": "a", "theorem": "t", "hypothesis": "h1", "holds": True, "value": 1.0, "threshold": 1.0},
            {"experiment": "a", "theorem": "t", "hypothesis": "h2", "holds": False, "value": 3.0, "threshold": 2.0},
            {"experiment": "b", "theorem": "t", "hypothesis": "h1", "holds": True, "value": 1.0, "threshold": 1.0}]
    t = scope_summary(rows)
    assert t["shape hypotheses"].tolist() == ["fail: h2 (3 vs 2)", "all hold"]
