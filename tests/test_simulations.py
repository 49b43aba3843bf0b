"""Simulations (claims S1-S5): speed measures, the escape fit, tuned steps, reruns, the claims."""

import math

import numpy as np
import pytest
import torch

from convres import experiments as ex
from convres.experiments import simulations as sim
from convres.experiments.sim_reruns import second_pass
from convres.gd import sweep
from convres.instances import simulations_instance
from convres.model import attention_scale
from convres.stats import linear_rate, power_fit

TINY = dict(betas=[0.0, 1.0], seeds=[0, 1], curve_seeds=[0], steps=20, d_qks=[16, 64], escape_steps=20,
            eta_grid=[0.064, 0.128], scales=["1/d_qk", "1/sqrt(d_qk)"],
            regimes=[dict(name="wide", N=4, d_qk=32, scale="1/sqrt(d_qk)"),
                     dict(name="uniform attention", N=4, d_qk=64, scale="1/d_qk")])
pytestmark = pytest.mark.usefixtures("fresh_cache")


def test_speed_counts_steps_to_each_level_the_escape_and_the_mean_log_loss():
    loss = [1.0, 0.9, 0.4, 1e-3, 1e-7]
    v = sim.speed(loss, floor=0.9, horizon=4)
    assert v["steps_to"] == {"0.01": 3, "1e-06": 4} and v["escape"] == 2 and v["horizon"] == 4
    assert v["mean_log_loss"] == pytest.approx(np.mean(np.log10([0.9, 0.4, 1e-3, 1e-7])))
    v = sim.speed([1.0, 0.99, 0.98], floor=1.0, horizon=2)
    assert v["steps_to"] == {"0.01": None, "1e-06": None} and v["escape"] is None   # censored
    assert sim.speed([1.0, 0.5], floor=1.0, horizon=10, diverged=True)["mean_log_loss"] is None
    # the rate: over the linear phase, per unit of mu t
    mu, r = 0.01, 3.0
    plateau = [1.0] * 50                              # a plateau first, then Phi_t = exp(-r mu t)
    loss = plateau + list(np.exp(-r * mu * np.arange(1, 2000)))
    assert linear_rate(loss, mu, phase=sim.LINEAR_PHASE) == pytest.approx(r, rel=1e-9)
    # a run that never reaches 1e-3 of its start: its average rate over the whole run
    assert linear_rate([1.0, 0.5, 0.25], 0.1, phase=sim.LINEAR_PHASE) == pytest.approx(math.log(4) / 0.2)
    assert linear_rate([1.0], 0.1, phase=sim.LINEAR_PHASE) is None


def test_the_power_fit_recovers_a_b_and_p():
    d = [16, 64, 256, 1024, 4096]
    fit = power_fit(d, [[20 + 0.5 * q ** 0.8 for q in d]])
    assert fit["p"] == pytest.approx(0.8, abs=0.01) and fit["a"] == pytest.approx(20, rel=0.1)
    assert fit["b"] == pytest.approx(0.5, rel=0.1)
    # seeds that differ by a factor: the same curve; a and p trade off, so p is known less well
    T = [[(20 + 0.5 * q ** 0.8) * f for q in d] for f in (0.8, 1.0, 1.25)]
    assert power_fit(d, T)["p"] == pytest.approx(0.8, abs=0.05)
    fit = power_fit(d, [[3.0 * q ** 0.5 for q in d], [np.nan] * 5])              # nan: left out
    assert fit["p"] == pytest.approx(0.5, abs=0.002) and fit["a"] == pytest.approx(0.0, abs=1e-3)
    assert fit["b"] == pytest.approx(3.0, rel=0.01)
    assert abs(power_fit(d, T, fine=False)["p"] - 0.8) <= 0.01                     # the coarser grid


def test_a_small_run_tunes_every_arm_at_every_d_qk():
    r = ex.run_experiment("simulations", overrides=TINY)
    assert [c["name"] for c in r.data["regimes"]] == ["wide", "uniform attention"]
    wide = r.data["regimes"][0]
    assert set(wide["runs"]) == {"tuned", "common"}
    runs = wide["runs"]["tuned"]
    keys = {"steps_to", "escape", "mean_log_loss", "rate", "sigma_min_Z0", "diverged"}
    assert all(keys <= set(x) for x in runs)
    assert all(("loss" in x) == (x["seed"] == 0) for x in runs)                   # curves of curve_seeds
    common = {x["eta"] for x in wide["runs"]["common"]}
    assert len(common) == 1 or sim.reruns(r)
    assert all(x["tuned_eta"] == x["eta"] or x["diverged_before"] for x in runs)
    arms = [t["arm"] for t in r.data["step_sizes"]]
    # regimes x beta, then scales x d_QK x beta: a step tuned at every d_QK
    assert len(arms) == 2 * 2 + 2 * 2 * 2 and len(set(arms)) == len(arms)
    assert all(t["chosen"] <= t["largest_stable"] / 2 + 1e-12 for t in r.data["step_sizes"])
    cells = {(c["scale"], c["d_qk"]): c for c in r.data["escape"]}
    assert set(cells) == {(sc, q) for sc in TINY["scales"] for q in TINY["d_qks"]}
    assert set(cells[("1/d_qk", 16)]["runs"]) == {"tuned", "half"}
    assert set(cells[("1/d_qk", 64)]["runs"]) == {"tuned", "half", "common"}       # the largest d_QK
    assert set(cells[("1/sqrt(d_qk)", 64)]["runs"]) == {"tuned"}
    tuned0 = {x["seed"]: x["eta"] for x in cells[("1/d_qk", 16)]["runs"]["tuned"] if x["beta"] == 0}
    assert all(x["eta"] == tuned0[x["seed"]] / 2 for x in cells[("1/d_qk", 16)]["runs"]["half"])
    k = r.summary()
    assert {"d_qk", "beta", "median", "censored", "diverged"} <= set(k["escape_law"][0])
    assert [(x["d_lo"], x["d_hi"]) for x in k["escape_fit"]["local_slopes"]] == [(16, 64)]
    assert k["runs"] == sum(len(v) for c in r.data["regimes"] + r.data["escape"] for v in c["runs"].values())


def test_a_diverged_arm_records_its_reruns_and_a_second_pass_starts_it_lower():
    """The rerun policy itself: tests/test_experiments.py (``rerun_diverged``)."""
    s = dict(ex.settings("simulations", "smoke"), seeds=[0, 1])
    arms, follows = {("tuned", 0.0): (0.0, 64.0), ("half", 0.0): (0.0, 32.0)}, {("half", 0.0): ("tuned", 0.0)}
    out = sim._evaluate(s, "here", 4, 16, "1/d_qk", arms, 30, sim.ESCAPE_STOP, follows=follows)
    tuned = out[("tuned", 0.0)]
    k = round(math.log2(64.0 / tuned[0]["eta"]))
    assert 1 <= k <= sim.HALVINGS and all(x["tuned_eta"] == 64.0 for x in tuned)
    assert any(x["diverged_before"] for x in tuned)
    assert all(set(x["diverged_before"]) <= {64.0 / 2 ** i for i in range(k)} for x in tuned)
    assert {x["eta"] for x in out[("half", 0.0)]} == {64.0 / 2 ** (k + 1)}      # follows the tuned arm
    # a second pass of a run in pieces starts an arm at a quarter of its step, with its follower
    out = sim._evaluate(s, "here", 4, 16, "1/d_qk", arms, 30, sim.ESCAPE_STOP, follows=follows,
                        halve={("here", "tuned", 0.0): 2})
    assert out[("tuned", 0.0)][0]["eta"] <= 16.0 and out[("half", 0.0)][0]["eta"] <= 8.0
    # the second pass is a setting checked at the entry point
    s = ex.settings("simulations", "paper")
    cell = "escape, scale 1/d_qk, d_QK = 64"
    assert sim.halvings(s) == {(cell, "tuned", 0.0): 2, (cell, "half", 0.0): 2}
    for bad in ([cell, "tuned", 0.0, 1], [cell + "0", "tuned", 0.0, 1, []], [cell, "best", 0.0, 1, []],
                [cell, "tuned", 0.0, 0, []], [cell, "tuned", 0.0, 1.0, []], [cell, "tuned", "0", 1, []],
                [cell, "tuned", 0.0, 1, [[0.1]]]):
        with pytest.raises(ValueError, match="setting 'halve'"):
            sim.halvings({**s, "halve": [bad]})
    with pytest.raises(ValueError, match="setting 'halve'"):
        ex.run_experiment("simulations", "smoke", overrides={"halve": [["wide", "tuned", 0.0]]})


def test_reruns_are_listed_per_arm():
    res = _constructed(lambda b: -2.0 - 4 * b, lambda q: 5 * q, noise=0.05)
    runs = res.data["escape"][0]["runs"]["tuned"]
    for r in runs:
        if r["beta"] == 0.0:
            r.update(eta=0.032, diverged_before=[0.064] if r["seed"] in (3, 5) else [])
    (row,) = sim.reruns(res)
    assert row["where"] == "escape, scale 1/d_qk, d_QK = 16" and row["arm"] == ["tuned", 0.0]
    assert row["diverged_seeds"] == [3, 5] and row["rerun_seeds"] == list(range(10))
    assert row["rerun_eta"] == [0.032] and row["every_seed"] and row["eta"] == 0.064
    runs[0]["eta"] = 0.064                                   # one seed at the tuned step: pieces
    assert not sim.reruns(res)[0]["every_seed"]
    next(r for r in runs if r["beta"] == 0.0 and r["eta"] == 0.032)["eta"] = 0.016   # halved twice
    assert second_pass(res) == [["escape, scale 1/d_qk, d_QK = 16", "tuned", 0.0, 2, [[0.064, [3, 5]]]]]
    k = res.summary()
    assert k["diverged_before_rerun"] == k["diverged_at_tuned"] == 2
    # the second pass: its runs diverge no more, the setting halve keeps the first pass's seeds
    halve = second_pass(res)
    for r in runs:
        r["diverged_before"] = []
    res = ex.Result(res.experiment, res.profile, {**res.settings, "halve": halve}, res.data, 0.0)
    assert sim.reruns(res)[0]["diverged_at"] == [[0.064, [3, 5]]] and res.summary()["diverged_at_tuned"] == 2


# --- the claims on constructed results -------------------------------------------------------------

def _run(beta, seed, eta, *, mll, t2, t6, esc, rate=1.0, sigma=1.0, horizon=1000, diverged=False):
    return dict(beta=beta, seed=seed, eta=eta, tuned_eta=eta, diverged_before=[],
                status="diverged" if diverged else "converged", diverged=diverged,
                diverged_at=None, horizon=horizon, escape=esc, steps_to={"0.01": t2, "1e-06": t6},
                mean_log_loss=None if diverged else mll, rate=None if diverged else rate, sigma_min_Z0=sigma,
                floor_ratio=0.7, loss0=1.0)


def _constructed(speed, escape, seeds=range(10), *, noise=0.0):
    """A simulations result: mean log-loss ``speed(b)`` plus noise, escape ``escape(d_QK)`` at beta 0."""
    seeds = list(seeds)
    betas = [0.0, 0.1, 0.5, 1.0]
    rng = np.random.default_rng(1)
    s = dict(ex.settings("simulations"), seeds=seeds, betas=betas, scales=["1/d_qk"], d_qks=[16, 64, 256])
    s.pop("halve")                                                  # the book's reruns are its own
    regimes = []
    for name in ("wide", "narrow", "uniform attention"):
        runs = []
        for k in seeds:
            for b in betas:
                v = speed(b) + noise * rng.standard_normal()
                runs.append(_run(b, k, 0.064, mll=v, t2=int(100 * 2 ** (v / 4)), t6=int(300 * 2 ** (v / 4)),
                                 esc=None, rate=10 ** (-v / 4), sigma=(1 + b) * (1 - v / 100)))
        regimes.append(dict(name=name, N=4, n=4, d=32, d_qk=32, scale="1/sqrt(d_qk)",
                            runs={"tuned": runs, "common": runs}))
    esc = []
    for q in s["d_qks"]:
        runs = {p: [_run(b, k, 0.064 if p != "half" else 0.032, mll=-5, t2=50, t6=90,
                         esc=(escape(q) * (2 if p == "half" else 1) + k) if b == 0 else 2)
                    for k in seeds for b in ((0.0,) if p == "half" else (0.0, 1.0))]
                for p in ("tuned", "half", "common")}
        esc.append(dict(d_qk=q, scale="1/d_qk", N=4, n=4, runs=runs))
    steps = [dict(arm="x", grid=[0.032, 0.064, 0.128], chosen=0.064, best=0.064, largest_stable=0.128,
                  stable=[True, True, True], diverged=[0, 0, 0], horizon=1000, bracketed=True,
                  unresolved=False, capped=False)]
    return ex.Result(ex.EXPERIMENTS["simulations"], "book", s,
                     {"regimes": regimes, "escape": esc, "step_sizes": steps}, 0.0)


def _grades(res):
    return {r["id"]: r["verdict"] for r in res.claims()}


def test_the_verdicts_follow_the_numbers():
    fast = _constructed(lambda b: -2.0 - 4 * b, lambda q: 5 * q, noise=0.05)
    assert _grades(fast) == {"S1": "reproduced", "S2": "reproduced", "S3": "reproduced", "S4": "reproduced",
                             "S5": "reproduced"}
    fit = fast.summary()["escape_fit"]
    assert fit["p"] == pytest.approx(1.0, abs=0.05) and fit["p_ci"][0] <= fit["p"] <= fit["p_ci"][1]
    assert all(x["slope"] == pytest.approx(1.0, abs=0.05) for x in fit["local_slopes"])
    # the residual slower everywhere, no plateau growing with d_QK
    slow = _constructed(lambda b: -6.0 + 4 * b, lambda q: 3, noise=0.05)
    g = _grades(slow)
    assert g["S1"] == g["S2"] == "reversed" and g["S3"] != "reproduced" and g["S4"] != "reproduced"
    # S5 is graded within each beta over seeds: sigma_min(Z_0) a function of beta alone has no correlation
    res = _constructed(lambda b: -2.0 - 4 * b, lambda q: 5 * q, noise=0.05)
    for c in res.data["regimes"]:
        for r in c["runs"]["tuned"]:
            r["sigma_min_Z0"] = 1 + r["beta"]
    s5 = next(r for r in res.claims() if r["id"] == "S5")
    assert s5["verdict"] == "inconclusive"
    assert s5["interval"] == "none" and s5["units"] == 10


def test_a_diverged_run_is_not_a_unit_and_a_failed_design_check_makes_every_claim_not_testable():
    """(a) an unresolved tuning, (b) a run still diverged after the reruns (one constructed list of
    tuned and common runs: it counts twice)."""
    res = _constructed(lambda b: -2.0 - 4 * b, lambda q: 5 * q, noise=0.05)
    cell = res.data["escape"][-1]
    cell["runs"]["tuned"][0] = _run(0.0, 0, 0.064, mll=-5, t2=50, t6=90, esc=None, diverged=True)
    s3 = next(r for r in res.claims() if r["id"] == "S3")
    assert s3["units"] == 9 and s3["diverged"] == 1 and sim.stalled(res) == 0
    cell["runs"]["tuned"][2] = _run(0.0, 1, 0.064, mll=-1, t2=None, t6=None, esc=None)
    assert sim.stalled(res) == 1
    res = _constructed(lambda b: -2.0 - 4 * b, lambda q: 5 * q, noise=0.05)
    res.data["step_sizes"][0].update(unresolved=True, best=None)
    res.data["regimes"][0]["runs"]["tuned"][0].update(diverged=True, mean_log_loss=None, rate=None)
    assert set(_grades(res).values()) == {"not testable"}
    checks = {c["name"]: (c["value"], c["passed"]) for c in res.summary()["design_checks"]}
    assert checks == {"simulations tuning resolves": (1, False), "simulations runs stable": (2, False)}


def test_one_builder_draws_the_simulations_instance():
    """The experiment's runs and the theorem chapters' certified variants draw the same instance."""
    s = ex.settings("simulations", "book")
    regime = s["regimes"][2]
    p, X, Y, cfg = sim.instance(s, regime["N"], regime["d_qk"], regime["scale"], 3)
    r = simulations_instance(3, N=regime["N"], n=4, d=32, m=32, d_qk=regime["d_qk"], scale=regime["scale"],
                             readout_scale=2.0)[0]
    assert torch.equal(r["W_U"], 2 * p["W_U"]) and torch.equal(r["layer1.W_Q"], p["layer1.W_Q"])


@pytest.mark.parametrize("scale, beta", [("1/d_qk", 0.0), ("1/sqrt(d_qk)", 0.0), ("1/d_qk", 1.0)])
def test_the_qk_reduction_runs_the_same_gradient_descent(scale, beta):
    """qk_reduced gives the same run over the plateau on a smaller problem."""
    s = ex.settings("simulations", "book")
    p, X, Y, cfg = sim.instance(s, 4, 256, scale, 3)
    cfg = cfg.with_residual(beta)
    q, cq = sim.qk_reduced(p, cfg)
    assert q["layer1.W_Q"].shape == (32, 64) and cq.d_qk == 64 and attention_scale(cq) == attention_scale(cfg)
    assert all(torch.equal(p[w], q[w]) for w in p if "W_Q" not in w and "W_K" not in w)
    runs = sweep([p, q], [X, X], [Y, Y], [cfg, cq], [0.016 / 16] * 2, 60)
    a, b = (torch.as_tensor(h.loss) for _, h in runs)
    assert len(a) == len(b) == 61 and torch.allclose(a, b, rtol=1e-12, atol=0)
    small = sim.instance(s, 4, 64, scale, 3)
    assert sim.qk_reduced(*small[::3]) == small[::3]          # d_QK <= 2 d: unchanged
