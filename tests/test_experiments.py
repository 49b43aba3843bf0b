"""Experiments: settings, the runner and its cache, the data of the Jena and SST-2 tasks, the report's criteria, the CLI."""

import dataclasses
import json

import numpy as np
import pytest

from convres import experiments as ex
from convres.cli import main
from convres.paths import data_dir
from convres.data import JENA_FEATURES

TINY_SIM = dict(betas=[0.0, 1.0], seeds=[0], steps=20)


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def offline():
    if not (data_dir() / "sst2" / "train.parquet").is_file():
        pytest.skip("no offline data (set CONVRES_DATA_DIR)")


def result(name, settings, data):
    return ex.Result(name, "book", settings, data, 0.0)


def small_profile(monkeypatch, name, **changes):
    """Replace the `book` profile of experiment `name` for one test."""
    e = ex.EXPERIMENTS[name]
    monkeypatch.setitem(ex.EXPERIMENTS, name, dataclasses.replace(
        e, profiles={**e.profiles, "book": {**e.profiles["book"], **changes}}))


def test_settings_are_copies_and_validated():
    s = ex.settings("jena", "book")
    s["betas"].append(7)
    assert 7 not in ex.settings("jena", "book")["betas"]
    with pytest.raises(ValueError, match="unknown experiment 'nope'"):
        ex.settings("nope")
    with pytest.raises(ValueError, match="unknown profile 'big'"):
        ex.settings("jena", "big")
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['foo'\]"):
        ex.run_experiment("simulations", overrides={"foo": 1})
    for name in ("simulations", "jena"):  # the paper's sweeps: beta from 0 to 1, depths 2, 6, 10
        for profile in ("book", "paper"):
            s = ex.settings(name, profile)
            if "betas" in s:
                assert 0.0 in s["betas"] and 1.0 in s["betas"] and len(s["seeds"]) >= 3
    assert ex.settings("sst2")["depths"] == [2, 6, 10]


def test_measured_rate_of_a_geometric_sequence():
    loss = 5.0 * 0.9 ** np.arange(50)
    assert ex.measured_rate(loss) == pytest.approx(0.1, rel=1e-12)
    loss = np.r_[1.0, 0.5, 0.25, 1e-30, 1e-31]  # stops before the float floor
    assert ex.measured_rate(loss) == pytest.approx(0.5, rel=1e-12)


def test_simulations_run_and_cache(monkeypatch):
    r = ex.run_experiment("simulations", overrides=TINY_SIM)
    assert [x["beta"] for x in r.data["runs"]] == [0.0, 1.0]
    assert all(len(x["loss"]) == 21 and x["loss"][-1] < x["loss"][0] for x in r.data["runs"])
    assert all(x["bound_holds"] for x in r.data["runs"])
    e = ex.EXPERIMENTS["simulations"]
    monkeypatch.setitem(ex.EXPERIMENTS, "simulations",
                        dataclasses.replace(e, run=lambda *a, **k: pytest.fail("cache not used")))
    assert ex.run_experiment("simulations", overrides=TINY_SIM).data == r.data
    k = r.summary()
    assert [x["beta"] for x in k["median_rate_per_beta"]] == [0.0, 1.0]


def test_empty_lists_are_refused():
    with pytest.raises(ValueError, match="'betas' of 'simulations' must be a non-empty list"):
        ex.run_experiment("simulations", overrides={"betas": []})
    with pytest.raises(ValueError, match="'seeds'"):
        ex.run_experiment("jena", overrides={"seeds": []})


def test_same_result_after_a_second_computation():
    a = ex.run_experiment("simulations", overrides=TINY_SIM)
    b = ex.run_experiment("simulations", overrides=TINY_SIM, refresh=True)
    assert a.data == b.data


def test_jena_data_is_the_next_hour_temperature(offline):
    s = ex.settings("jena", "paper")
    X, Y = ex.jena_data(s)
    assert X.shape == (321, 24, 11) and Y.shape == (321, 24, 1)
    t = list(JENA_FEATURES).index("T (degC)")
    assert np.allclose(Y[:, :-1, 0], X[:, 1:, t])            # target = temperature one hour later
    assert np.allclose(Y[:-1, -1, 0], X[1:, -2, t])         # ... also for the last position (stride 2)
    flat = X[::12].reshape(-1, 11)                           # disjoint windows cover the rows
    assert abs(float(flat.mean())) < 0.1


def test_jena_tiny_run(offline):
    r = ex.run_experiment("jena", overrides=dict(betas=[0.0, 1.0], seeds=[0, 1], steps=5, probe_steps=3,
                                                 stride=24, end="2009-01-08 00:00"))
    r = r.data
    assert r["mu"] in [eta / r["N"] for eta in ex.settings("jena")["eta_grid"]]
    assert len(r["runs"]) == 4 and all(len(x["loss"]) == 6 for x in r["runs"])


def test_sst2_tiny_run(offline):
    r = ex.run_experiment("sst2", overrides=dict(size=8, depths=[2], seeds=[0], steps=10, probe_steps=3,
                                                 error_every=5, eta_grid=[0.1, 0.01])).data
    assert r["N"] == 8 and len(r["runs"]) == 2
    for x in r["runs"]:
        assert len(x["error"]) == 3 and all(0 <= e <= 1 for e in x["error"])
        assert x["mu"] in (0.1 / 8, 0.01 / 8)


def _fake(results_loss, betas):
    return result("jena", {"steps": 10, "start": "2009-01-01 01:00", "end": "2009-01-28 17:00", "freq": "1h"},
                  {"runs": [{"beta": b, "seed": s, "status": "max_steps", "loss": [1.0, v]}
                            for b, per_seed in zip(betas, results_loss) for s, v in enumerate(per_seed)]})


def test_report_criteria_jena():
    betas = [0.0, 0.1, 1.0]
    rows = ex.claims({"jena": _fake([[5, 5, 5], [4, 4, 4], [1, 1, 1]], betas)})
    assert [r["verdict"] for r in rows] == ["reproduced", "reproduced"]
    rows = ex.claims({"jena": _fake([[5, 5, 5], [6, 4, 7], [1, 1, 1]], betas)})
    assert [r["verdict"] for r in rows] == ["partly", "partly"]
    rows = ex.claims({"jena": _fake([[1, 1, 1], [6, 6, 6], [3, 3, 3]], betas)})
    assert [r["verdict"] for r in rows] == ["not reproduced", "not reproduced"]


def test_report_jena_rows_name_the_slice():
    rows = ex.claims({"jena": _fake([[5, 5, 5], [4, 4, 4], [1, 1, 1]], [0.0, 0.1, 1.0])})
    assert all("2009-01-01 01:00 .. 2009-01-28 17:00" in r["criterion"] and "11 of the 14 features"
               in r["criterion"] for r in rows)


def test_report_linear_convergence_row_is_an_a_posteriori_check():
    def fake(holds):
        return result("simulations", {"mu": 0.01, "N": 4, "n": 4, "d": 32}, {"runs": [
            {"beta": b, "seed": 0, "status": "max_steps", "loss": [1.0, 1e-3], "rate": 0.05, "alpha0": 1.0,
             "bound_holds": h} for b, h in zip([0.0, 1.0], holds)]})
    row = ex.claims({"simulations": fake([True, True])})[2]
    assert row["verdict"] == "holds a posteriori" and "part (a)" in row["criterion"]
    assert "not a test of the paper's alpha" in row["criterion"] and "5x to 5x" in row["measurement"]
    assert ex.claims({"simulations": fake([True, False])})[2]["verdict"] == "partly"
    assert ex.claims({"simulations": fake([False, False])})[2]["verdict"] == "not reproduced"


def test_report_criteria_sst2():
    def fake(err):
        return result("sst2", {}, {"runs": [
            {"L": L, "beta": b, "seed": 0, "status": "max_steps", "loss": [1.0, e + 0.01], "error": [0.5, e]}
            for (L, b), e in err.items()]})
    good = {(2, 1.0): 0.2, (6, 1.0): 0.1, (10, 1.0): 0.0, (2, 0.0): 0.3, (6, 0.0): 0.4, (10, 0.0): 0.5}
    assert [r["verdict"] for r in ex.claims({"sst2": fake(good)})] == ["reproduced"] * 3
    ceiling = {(2, 1.0): 0.0, (6, 1.0): 0.0, (10, 1.0): 0.0, (2, 0.0): 0.3, (6, 0.0): 0.4, (10, 0.0): 0.5}
    assert ex.claims({"sst2": fake(ceiling)})[1]["verdict"] == "inconclusive"
    bad = {(2, 1.0): 0.4, (6, 1.0): 0.5, (10, 1.0): 0.5, (2, 0.0): 0.3, (6, 0.0): 0.2, (10, 0.0): 0.1}
    assert [r["verdict"] for r in ex.claims({"sst2": fake(bad)})] == ["not reproduced"] * 3


def test_cli_list_and_errors(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("simulations", "jena", "sst2", "all"))
    assert main(["reproduce", "nope"]) == 2
    assert "unknown experiment 'nope'" in capsys.readouterr().err


def test_cli_reproduce_json(tmp_path, capsys, monkeypatch):
    small_profile(monkeypatch, "simulations", **TINY_SIM)
    assert main(["reproduce", "simulations", "--json", "--out", str(tmp_path)]) == 0
    k = json.loads(capsys.readouterr().out)
    assert {"settings", "summary", "claims"} <= set(k) and k["settings"]["steps"] == 20
    assert [x["beta"] for x in k["summary"]["median_rate_per_beta"]] == [0.0, 1.0]
    assert {"claim", "verdict", "measurement"} <= set(k["claims"][0])
    assert (tmp_path / "simulations-book.png").is_file()


def test_bad_settings_and_results_give_clear_errors():
    with pytest.raises(TypeError, match="overrides must be a dict"):
        ex.run_experiment("simulations", overrides=[("steps", 3)])
    for key, bad in (("window", 0), ("stride", 1.5), ("target", "wind")):
        s = {**ex.settings("jena"), key: bad}
        with pytest.raises(ValueError, match=f"setting '{key}'"):
            ex.jena_data(s)
    with pytest.raises(ValueError, match=r"unknown experiment\(s\) \['jenna'\]"):
        ex.claims({"jenna": None})


def test_sst2_figure_when_steps_are_not_a_multiple_of_error_every():
    from convres.plotting import plot_sst2

    runs = [{"L": L, "beta": b, "seed": 0, "status": "max_steps", "loss": list(np.linspace(2, 1, 26)),
             "error": [0.5, 0.4, 0.3, 0.2], "error_steps": [0, 10, 20, 25]} for L in (2, 6) for b in (0.0, 1.0)]
    fig = plot_sst2(result("sst2", {"steps": 25, "error_every": 10}, {"runs": runs}))
    ax1, ax2 = fig.axes
    assert list(ax2.lines[0].get_xdata()) == [0, 10, 20, 25]
    assert [line.get_linestyle() for line in ax1.lines[:2]] == ["-", "--"]
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)


def _fake_jena_zip(dest):
    """A small file in the layout of the Keras zip (14 features, 10-minute rows, 2009-01-01 .. 01-09)."""
    import io
    import zipfile

    import pandas as pd

    from convres.data import JENA_ALL_FEATURES, JENA_BOUNDS

    time = pd.date_range("2009-01-01 00:10", "2009-01-09 00:00", freq="10min")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({c: np.mean(JENA_BOUNDS[c]) + rng.normal(size=len(time)) for c in JENA_ALL_FEATURES})
    df.insert(0, "Date Time", time.strftime("%d.%m.%Y %H:%M:%S"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("jena_climate_2009_2016.csv", df.to_csv(index=False))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buf.getvalue())
    return dest


def test_cli_reproduce_download_fetches_missing_data_then_runs(tmp_path, capsys, monkeypatch):
    import convres.data as data

    calls = []
    monkeypatch.setattr(data, "_atomic_download", lambda url, dest: calls.append(url) or _fake_jena_zip(dest))
    monkeypatch.setenv("CONVRES_DATA_DIR", str(tmp_path / "data"))
    small_profile(monkeypatch, "jena", betas=[0.0, 1.0], seeds=[0], steps=3, probe_steps=2, stride=24,
                  end="2009-01-08 00:00")
    # without --download: a clear error naming the flag and the data-directory setting, no download
    assert main(["reproduce", "jena", "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert "reproduce jena --download" in err and "CONVRES_DATA_DIR" in err and calls == []
    assert main(["reproduce", "jena", "--download", "--json", "--out", str(tmp_path / "figs")]) == 0
    assert calls == [data.JENA_URL]
    assert (tmp_path / "data" / "jena_climate" / "jena_climate_2009_2016.csv.zip").is_file()
    assert json.loads(capsys.readouterr().out)["summary"]["diverged_runs"] == 0
    assert main(["reproduce", "jena", "--download", "--json", "--out", str(tmp_path / "figs")]) == 0
    assert calls == [data.JENA_URL]  # present now: not downloaded again


def test_download_rejects_unknown_dataset():
    from convres.data import download
    with pytest.raises(ValueError, match="dataset must be one of"):
        download("mnist")


def test_cli_reproduce_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "taken.png"
    f.write_text("x")
    assert main(["reproduce", "simulations", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "is an existing file, not a folder" in err and "--out" in err


def test_beta_colors_distinguish_adjacent_betas():
    from convres.plotting import beta_colors

    betas = [0.0, 0.1, 0.25, 0.5, 1.0]
    rgb = np.array([c[:3] for c in beta_colors(betas)])
    assert min(np.abs(rgb[i] - rgb[i + 1]).sum() for i in range(len(betas) - 1)) > 0.25
    assert beta_colors([1.0, 0.0]) == beta_colors([0.0, 1.0])[::-1] and len(beta_colors([0.5])) == 1
