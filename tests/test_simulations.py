"""Simulations: speed as steps to a threshold, the escape law, tuned steps per arm, the claims graded
by the pre-registered rule (on small runs and on constructed results)."""

import dataclasses

import numpy as np
import pytest

from convres import experiments as ex
from convres.experiments import simulations as sim

TINY = dict(betas=[0.0, 1.0], seeds=[0, 1], steps=20, probe_steps=10, d_qks=[16, 64], escape_steps=20,
            escape_probe_steps=10, tune_d_qk=16, tune_extend=1, scales=["1/d_qk", "1/sqrt(d_qk)"],
            regimes=[dict(name="wide", N=4, d_qk=32, scale="1/sqrt(d_qk)"),
                     dict(name="uniform attention", N=4, d_qk=64, scale="1/d_qk")])


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))


def test_speed_counts_steps_to_each_level_and_the_escape():
    loss = [1.0, 0.9, 0.4, 1e-3, 1e-7]
    v = sim.speed(loss, floor=0.9, horizon=4)
    assert v["steps_to"] == {"0.01": 3, "1e-06": 4} and v["escape"] == 2 and v["horizon"] == 4
    v = sim.speed([1.0, 0.99, 0.98], floor=1.0, horizon=2)
    assert v["steps_to"] == {"0.01": None, "1e-06": None} and v["escape"] is None   # censored


def test_a_small_run_tunes_every_arm_records_speed_and_is_cached(monkeypatch):
    r = ex.run_experiment("simulations", overrides=TINY)
    assert [c["name"] for c in r.data["regimes"]] == ["wide", "uniform attention"]
    wide = r.data["regimes"][0]
    assert set(wide["runs"]) == {"tuned", "common"}
    assert all("steps_to" in x and "escape" in x and x["horizon"] == 20 for x in wide["runs"]["tuned"])
    assert all("bound_holds" in x for x in wide["runs"]["common"])        # N n <= d: checked
    assert all(x["eta"] == ex.settings("simulations")["eta"] for x in wide["runs"]["common"])
    tuned = {t["arm"]: t for t in r.data["step_sizes"]}
    assert len(tuned) == 2 * 2 + 2 * 2                                     # regimes x beta + scales x beta
    assert all(t["grid"][0] < t["chosen"] < t["grid"][-1] for t in tuned.values() if t["bracketed"])
    assert [c["d_qk"] for c in r.data["escape"]] == [16, 64, 16, 64]
    k = r.summary()
    assert k["seeds"] == 2 and len(k["escape_law"]) == 2 and len(k["escape"]) == 8
    e = ex.EXPERIMENTS["simulations"]
    monkeypatch.setitem(ex.EXPERIMENTS, "simulations",
                        dataclasses.replace(e, run=lambda *a, **k: pytest.fail("cache not used")))
    assert ex.run_experiment("simulations", overrides=TINY).data == r.data


def test_the_probe_seeds_are_not_the_evaluation_seeds():
    for profile in ex.PROFILES:
        s = ex.settings("simulations", profile)
        assert not set(s["probe_seeds"]) & set(s["seeds"])
    assert len(ex.settings("simulations", "book")["seeds"]) >= 10


def _run(beta, seed, t1, t6, esc, horizon=1000):
    return dict(beta=beta, seed=seed, eta=0.032, status="converged", horizon=horizon, escape=esc,
                steps_to={"0.01": t1, "1e-06": t6}, floor_ratio=0.7, loss0=1.0)


def _constructed(times, escape, seeds=range(10)):
    """A simulations result: ``times[regime][beta] = (t1, t6)`` for every seed, and ``escape[d_qk] =
    (beta 0 escape, beta 1 escape)`` at scale 1/d_qk."""
    s = dict(ex.settings("simulations"), seeds=list(seeds), betas=[0.0, 0.1, 1.0], scales=["1/d_qk"],
             d_qks=sorted(escape), steps=1000, escape_steps=1000,
             regimes=[dict(name=n, N=4, d_qk=32 if n != "uniform attention" else 1024,
                           scale="1/d_qk" if n == "uniform attention" else "1/sqrt(d_qk)") for n in times])
    regimes = [dict(name=r["name"], N=4, n=4, d=32, d_qk=r["d_qk"], scale=r["scale"],
                    runs={p: [_run(b, k, *times[r["name"]][b], None) for k in s["seeds"] for b in s["betas"]]
                          for p in ("tuned", "common")}) for r in s["regimes"]]
    esc = [dict(d_qk=q, scale="1/d_qk", runs=[_run(b, k, 10, 20, escape[q][int(b)] + k) for k in s["seeds"]
                                               for b in (0.0, 1.0)]) for q in sorted(escape)]
    return ex.Result(ex.EXPERIMENTS["simulations"], "book", s, {"regimes": regimes, "escape": esc,
                                                                "step_sizes": []}, 0.0)


def _verdicts(res):
    return {r["claim"].split(" (")[0].split(",")[0]: r["verdict"] for r in res.claims()}


def test_the_verdicts_follow_the_numbers():
    fast = {0.0: (500, 900), 0.1: (100, 300), 1.0: (20, 60)}
    law = {16: (20, 5), 64: (80, 5), 256: (320, 5)}
    v = _verdicts(_constructed({"wide": fast, "uniform attention": fast}, law))
    assert set(v.values()) == {"reproduced"}
    # the residual slower everywhere, escape not growing with d_QK: not reproduced / inconclusive
    slow = {0.0: (20, 60), 0.1: (100, 300), 1.0: (500, 900)}
    flat = {16: (80, 5), 64: (80, 5), 256: (80, 5)}
    v = _verdicts(_constructed({"wide": slow, "uniform attention": slow}, flat))
    assert v["The stronger the residual"] == "not reproduced"
    assert v["Even a small residual converges faster than none."] == "not reproduced"
    assert v["Without the residual"] == "not reproduced"
    assert v["The stall without the residual grows as the attention approaches uniform"] != "reproduced"


def test_a_censored_time_counts_as_the_horizon():
    never = {0.0: (None, None), 0.1: (100, 300), 1.0: (20, 60)}
    res = _constructed({"wide": never, "uniform attention": never}, {16: (20, 5), 64: (80, 5)})
    row = next(r for r in res.claims() if r["claim"].startswith("Without the residual"))
    assert row["effect"] == pytest.approx(1 - 20 / 1000) and "censored" in row["measurement"]


def test_the_escape_law_recovers_a_power():
    law = {q: (int(3 * q ** 0.5), 5) for q in (16, 64, 256, 1024)}
    res = _constructed({"uniform attention": {0.0: (1, 1), 0.1: (1, 1), 1.0: (1, 1)}}, law, seeds=[0])
    fit = ex.escape_law(res, "1/d_qk")
    assert fit["slope"] == pytest.approx(0.5, abs=0.02) and fit["censored"] == [0, 0, 0, 0]
    assert np.all(np.diff(fit["median"]) > 0)
