"""The theory's quantities (convres.theory): lemmas on random draws, the checker, the bound."""

import json
import math

import numpy as np
import pytest
import torch

from convres import ModelConfig, init_params, synthetic_regression, theory
from convres.certify import certified_run
from convres.checks import FLOAT_TOL
from convres.cli import main
from convres.experiments import settings
from convres.experiments.theorem import non_vacuous_steps
from convres.gd import loss_and_grad
from convres.instances import certified_instance, theorem_instance
from convres.lemmas import ffn_lemma, hessian_norm, parameter_count, r_sigma_upper, residual_lemma
from convres.model import forward_trace, loss
from convres.rank import sigma_nn, stacked
from convres.scope import scope_rows, scope_table
from convres.theory import check_assumptions, ffn_theorem_run, part_b_check, theorem_run, verify_run


def small(seed=0, beta=1.0, **kw):
    return theorem_instance(seed, beta=beta, N=2, n=3, d=8, **kw)


@pytest.mark.parametrize("seed", range(20))
def test_residual_and_ffn_lemmas_on_random_draws(seed):
    gen = torch.Generator().manual_seed(seed)
    beta = float(torch.rand(1, generator=gen)) * 2
    L = 1 + seed % 2
    cfg = ModelConfig(d=8, d_qk=8, m=8, c=1, L=L, beta=beta, activation=("relu", "gelu", "tanh")[seed % 3])
    X, _ = synthetic_regression(2, 3, 8, 1, seed=seed)
    params = init_params(cfg, seed=seed + 100)
    for layer in range(1, L + 1):
        r = residual_lemma(params, X, cfg, layer=layer)
        assert r["sigma_Z"] >= r["weyl"] - 1e-10 and r["weyl"] >= r["crude"] - 1e-10
        f = ffn_lemma(params, X, cfg, layer=layer)
        assert f["sigma_H"] >= f["weyl"] - 1e-10 and f["weyl"] >= f["crude"] - 1e-10


def test_hessian_norm_matches_the_exact_hessian_on_a_tiny_model_and_is_inf_on_overflow():
    params, X, Y, cfg = theorem_instance(0, N=1, n=2, d=3)
    blocks = torch.func.hessian(lambda p: loss(p, X, Y, cfg))(params)        # {a: {b: d^2 Phi / da db}}
    rows = [torch.cat([blocks[a][b].reshape(params[a].numel(), -1) for b in params], 1) for a in params]
    exact = float(torch.linalg.eigvalsh(torch.cat(rows)).abs().max())
    assert hessian_norm(params, X, Y, cfg, iters=300) == pytest.approx(exact, rel=1e-3)
    # ``theorem --beta 1000 --layers 20``: the Hessian-vector product overflows (theorem_run: a clear error)
    assert hessian_norm(*theorem_instance(0, beta=1000.0, layers=20), iters=3) == math.inf


def collapsed():
    """beta = 0 and uniform attention: all rows of a sequence equal (rank collapse of H_0)."""
    params, X, Y, cfg = small(0, beta=0.0)
    return dict(params, **{"layer1.W_Q": torch.zeros_like(params["layer1.W_Q"])}), X, Y, cfg


@pytest.mark.parametrize("fails,instance,kw", [
    (None, small, {}),
    ("width", lambda: theorem_instance(0, N=4, n=3, d=8), {}),           # N n = 12 > d = 8
    ("smooth activation", lambda: small(0, activation="relu"), {}),
    ("non-degenerate H_0", collapsed, {}),
    ("non-vacuous rate", small, dict(mu=1e-9, steps=10)),               # a step too small for the horizon
])
def test_the_checker_holds_on_a_good_instance_and_fails_where_it_should(fails, instance, kw):
    holds = {c.name: c.holds for c in check_assumptions(*instance(), **kw)}
    assert not holds[fails] if fails else all(holds.values()) and "non-vacuous rate" not in holds


@pytest.mark.parametrize("seed,beta,layers", [(0, 1.0, 1), (1, 1.0, 1), (2, 0.5, 1), (3, 1.0, 2)])
def test_the_bound_and_the_path_length_lemma_hold_on_random_instances(seed, beta, layers):
    params, X, Y, cfg = small(seed, beta, layers=layers)
    r = theorem_run(params, X, Y, cfg, steps=60, seed=seed)
    chk, out = r.check, r.summary()
    assert out["violations"] == 0 and out["max_excess"] <= FLOAT_TOL and out["status"] == "max_steps"
    assert (chk.pl_margin >= -1e-9).all()
    assert (chk.descent_margin >= -1e-12 * out["initial_loss"]).all()
    assert out["final_loss"] < out["initial_loss"]
    # where the measured descent (mu/2 form) holds, the PL lemma gives Phi_{t+1} <= (1 - mu s_t^2) Phi_t
    assert (chk.half_margin >= -1e-12 * out["initial_loss"]).all()
    sigma_t = chk.sigma_ratio * 2 * math.sqrt(r.alpha)
    ratio = chk.contraction.excess + 1 - r.mu * r.alpha
    assert (ratio <= 1 - r.mu * sigma_t ** 2 + FLOAT_TOL).all()
    # observed steps: that, and sigma_t >= sigma_0 / 2 (seed 2, beta 0.5: sigma_t drops below it)
    assert chk.observed == int((chk.sigma_ratio >= 0.5).sum())
    assert 0 < chk.max_distance < math.inf
    # lemma thm-lem-path (the descent inequality holds at every step): the path length sum_t mu ||g_t||
    # is at most 2 sqrt(2 Phi_0 / lambda), lambda = min_t ||g_t||^2 / (2 Phi_t)
    h = r.history
    lam = float(np.min(h.grad_norm ** 2 / (2 * h.loss[:-1])))
    path = float(np.sum(r.mu * h.grad_norm))
    assert chk.max_distance <= path * (1 + 1e-9) and path <= 2 * math.sqrt(2 * h.loss[0] / lam)


@pytest.mark.parametrize("seed,layers", [(0, 1), (1, 1), (2, 2)])
def test_r_sigma_upper_is_attained_by_an_explicit_point(seed, layers):
    """Lemma thm-lem-rsigma: moving the last W_2 by c A^+ u v^T just beyond the bound."""
    params, X, Y, cfg = small(seed, layers=layers)
    bound = r_sigma_upper(params, X, cfg)
    tr = forward_trace(params, X, cfg)
    U, S, Vh = torch.linalg.svd(stacked(tr.H[-1]), full_matrices=False)     # N n = 6 <= d = 8 rows
    sigma0, u, v = float(S[-1]), U[:, -1], Vh[-1]
    A = cfg.act(stacked(tr.Z[-1]) @ params[f"layer{layers}.W_1"])
    step = 0.5001 * sigma0 * torch.outer(torch.linalg.pinv(A) @ u, v)
    moved = dict(params, **{f"layer{layers}.W_2": params[f"layer{layers}.W_2"] - step})
    assert sigma_nn(forward_trace(moved, X, cfg).H[-1]) < sigma0 / 2
    assert float(step.norm()) == pytest.approx(bound * 1.0002, rel=1e-9)


P0, X0, Y0, CFG0 = small(0)
BAD_ARGUMENTS = {   # what is wrong -> (the call, a name its error must say)
    "mu without steps": (lambda: check_assumptions(P0, X0, Y0, CFG0, mu=0.1), "steps"),
    "a pooled model": (lambda: check_assumptions(P0, X0, Y0[:, 0], CFG0.replace(pool="mean")), "pool"),
    "a weight the model lacks": (lambda: theory.lazy_report(P0, X0, Y0, CFG0, None, block="W_Z"), "block"),
    "a Hessian that overflows": (lambda: theorem_run(*theorem_instance(0, beta=1000.0, layers=20), steps=2),
                                 "Hessian"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_ARGUMENTS[case])


def test_verify_run_counts_a_violation():
    params, X, Y, cfg = small(0)
    r = theorem_run(params, X, Y, cfg, steps=20)
    h, d = r.history, np.zeros(21)
    # a step size claimed 1000 times larger makes the bound (1 - mu alpha) false
    fake = verify_run(h, np.ones(20), np.ones(21), r.mu * 1000, r.alpha, r.L_hat, d, tol=FLOAT_TOL)
    assert fake.contraction.violations > 0 and fake.contraction.max_excess > 0
    assert not fake.every_step_observed
    assert r.check.every_step_observed
    out = theorem_run(params, X, Y, cfg, steps=30, mu=1e3).summary()   # a diverged run verifies nothing
    assert out["status"] == "diverged" and out["violations"] is None and out["max_excess"] is None


@pytest.mark.parametrize("beta,vacuous", [("1", False), ("0", True)])
def test_cli_theorem_json(beta, vacuous, capsys):
    """The default instance holds its bound; without the residual the bound promises < 10%."""
    assert main(["theorem", "run", "--beta", beta, "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)   # strict JSON
    assert out["steps"] == 300 and out["violations"] == 0 and math.isfinite(out["alpha"])
    assert out["mu"] <= out["mu_max"] and out["mu_max_is_estimate"] is True and out["part_b_holds"] is False
    assert out["assumptions_hold"] is not vacuous
    assert (out["mu"] * out["alpha"] * out["steps"] < math.log(1 / 0.9)) is vacuous
    assert non_vacuous_steps(0.01, 100) == 11 and non_vacuous_steps(1e-9, 100) == 100     # (A4)'s T, capped


def test_part_b_fails_on_the_default_instance_and_holds_for_a_certified_step():
    """Part (b): rho > r_sigma_upper > r_sigma_lower by default, the (A5) radius rho x 2 J_0 / sigma_0;
    part_b_holds is False (certified failure), True (certified for this run's step) or None."""
    params, X, Y, cfg = theorem_instance(0)
    b = part_b_check(params, X, Y, cfg)
    assert b["fails"] and b["holds"] is None and b["rho"] > b["r_sigma_upper"] > b["r_sigma_lower"] > 0
    phi, _, tr = loss_and_grad(params, X, Y, cfg)
    sigma_0 = sigma_nn(tr.H[-1])
    assert b["rho"] == pytest.approx(4 * math.sqrt(2 * float(phi)) / sigma_0)
    assert b["radius_lower_A5"] / b["rho"] == pytest.approx(2 * b["J0"] / sigma_0)
    assert b["radius_lower_A5"] >= 2 * b["rho"]
    r = theorem_run(*small(0), steps=2)
    assert r.summary()["part_b_holds"] is (False if r.part_b["fails"] else None)
    b = part_b_check(*certified_instance(0, d=512, N=1, n=1))
    assert b["holds"] is True and not b["fails"] and b["rho"] < b["r_sigma_lower"] <= b["r_sigma_upper"]
    # a certified instance: True only when the run's step is at most the certified one
    params, X, Y, cfg = certified_instance(0, d=1024)
    fast = theorem_run(params, X, Y, cfg, steps=2, smoothness_samples=0).summary()
    assert fast["mu_certified"] is not None and fast["mu"] > fast["mu_certified"]
    assert fast["part_b_holds"] is None and fast["run_step_certified"] is False
    slow = theorem_run(params, X, Y, cfg, steps=2, mu=fast["mu_certified"], smoothness_samples=0).summary()
    assert slow["part_b_holds"] is True and slow["run_step_certified"] is True


# --- the FFN theorem (thm-ffn) ---------------------------------------------------------------------

def ffn_instance(pool=None, L=1, m=24):
    cfg = ModelConfig(d=8, d_qk=8, m=m, c=1, L=L, activation="gelu", pool=pool)
    X, Y = synthetic_regression(3, 4, 8, 1, seed=0, pooled=pool == "mean")
    return init_params(cfg, seed=1), X, Y, cfg


@pytest.mark.parametrize("pool,L", [(None, 1), ("mean", 1), ("mean", 2), (None, 2)])
def test_ffn_pl_lemma_holds_at_every_recorded_step(pool, L):
    """||grad_{W_2} Phi||^2 >= 2 sigma_rows(M~)^2 sigma_c(W_U)^2 Phi at every recorded step."""
    params, X, Y, cfg = ffn_instance(pool=pool, L=L)
    r = ffn_theorem_run(params, X, Y, cfg, mu=0.002, steps=40, record_every=5, smoothness_iters=5)
    out = r.summary()
    assert out["rows"] == (3 if pool == "mean" else 12)
    assert out["readout"] == ("pooled" if pool else "per token")
    assert out["min_lemma_margin"] >= -1e-9 and len(r.lemma_margin) == 8
    assert out["recorded_steps"] == 9 and out["checked_steps"] == 40
    assert set(out["hypotheses"]) >= {"width", "output_dim", "smooth_activation", "full_rank_activations",
                                      "full_rank_readout", "non_vacuous_rate", "step_size",
                                      "sigma_M_along_run", "sigma_U_along_run", "descent_along_run"}
    for h in out["hypotheses"].values():
        assert set(h) >= {"holds", "value", "threshold"}
    json.dumps(out, allow_nan=False)


def test_ffn_theorem_holds_with_a_small_step_in_float64_and_float32_and_counts_violations_above_it():
    params, X, Y, cfg = ffn_instance(pool="mean")
    r = ffn_theorem_run(params, X, Y, cfg, mu=0.002, steps=60, record_every=1)
    out = r.summary()
    assert out["violations"] == 0 and out["observed_steps"] == 60
    assert out["hypotheses"]["descent_along_run"]["holds"]
    assert (r.pl_margin >= -1e-9).all()
    # the bound at each step follows from the PL lemma at that step and the measured descent
    ratio = r.contraction.excess + 1 - r.mu * r.alpha_ffn
    assert (ratio <= 1 + 1e-12).all()
    p32 = {k: v.float() for k, v in params.items()}
    out = ffn_theorem_run(p32, X.float(), Y.float(), cfg, mu=0.002, steps=10, smoothness_iters=0).summary()
    assert out["dtype"] == "float32" and out["violations"] == 0
    big = ffn_theorem_run(params, X, Y, cfg, mu=0.05, steps=20).summary()   # mu above 1/L
    assert big["violations"] > 0 and not big["hypotheses"]["step_size"]["holds"]
    gone = ffn_theorem_run(params, X, Y, cfg, mu=0.2, steps=20).summary()  # diverged: verifies nothing
    assert gone["status"] == "diverged" and gone["violations"] is None


def test_ffn_theorem_sees_a_too_narrow_ffn_and_rank_collapse_per_token_but_not_pooled():
    """m = 6 < 12 rows per token; beta = 0, uniform attention: sigma_Nn(M) = 0 per token, pooled
    sigma_N(PM) > 0."""
    out = ffn_theorem_run(*ffn_instance(m=6), mu=0.002, steps=3, smoothness_iters=0).summary()
    assert not out["hypotheses"]["width"]["holds"] and out["alpha_ffn"] == 0
    for pool, collapsed in ((None, True), ("mean", False)):
        params, X, Y, cfg = ffn_instance(pool=pool)
        params["layer1.W_Q"] = torch.zeros_like(params["layer1.W_Q"])
        out = ffn_theorem_run(params, X, Y, cfg.replace(beta=0.0), mu=0.001, steps=2,
                              smoothness_iters=0).summary()
        assert (not out["hypotheses"]["full_rank_activations"]["holds"]) is collapsed
        assert "step_size" not in out["hypotheses"]


# --- scope ------------------------------------------------------------------------------------------

def test_the_scope_table_is_computed_from_the_settings_and_its_rows_decide_each_hypothesis():
    rows = scope_table()
    readout = {r["experiment"]: r["holds"] for r in rows if r["hypothesis"] == "per-token readout"}
    assert all(h for e, h in readout.items() if e.startswith("sst2 L="))   # a loss at every token
    assert not any(h for e, h in readout.items() if e.startswith(("sst2 wide", "jena")))  # pooled
    assert {r["theorem"] for r in rows} == {"thm-main", "thm-ffn"}
    for r in rows:
        assert set(r) == {"experiment", "theorem", "hypothesis", "holds", "value", "threshold", "note"}
        assert isinstance(r["holds"], bool)
    by = {(r["experiment"], r["theorem"], r["hypothesis"]): r for r in rows}
    s = settings("sst2")
    sst = by[(f"sst2 L={s['depths'][0]}, residual", "thm-ffn", "(F1) width m >= rows")]
    assert sst["value"] == s["m"] and sst["holds"] == (s["m"] >= sst["threshold"])
    sim = settings("simulations")
    first = (sim.get("regimes") or [dict(N=sim["N"])])[0]
    label = next(r["experiment"] for r in rows if r["experiment"].startswith("simulations"))
    w = by[(label, "thm-main", "(A1) width N n <= d")]
    assert w["value"] == first.get("N", sim["N"]) * sim["n"] and w["threshold"] == sim["d"]
    cfg = ModelConfig(d=11, d_qk=11, m=16, c=1, activation="relu")
    rows = {r["hypothesis"]: r for r in scope_rows("jena-like", cfg, 107, 24) if r["theorem"] == "thm-main"}
    assert parameter_count(cfg) == 726
    assert not rows["(A1) width N n <= d"]["holds"] and not rows["any PL: parameters p >= outputs"]["holds"]
    assert not rows["(A2) smooth activation"]["holds"]
    wide = scope_rows("wide", ModelConfig(d=8, d_qk=8, m=64, c=1, activation="gelu", pool="mean"), 32, 10)
    ffn = {r["hypothesis"]: r["holds"] for r in wide if r["theorem"] == "thm-ffn"}
    assert all(ffn.values())


def test_certified_scope_names_what_fails_and_what_is_certified(capsys):
    """theorem scope: no experiment as it stands is certified; the certified variants are."""
    assert main(["theorem", "scope", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for r in rows:
        assert set(r) == {"experiment", "configuration", "theorem", "certified", "failing_hypothesis",
                          "ratio"}
        assert (r["failing_hypothesis"] is None) == r["certified"]
        assert r["theorem"] in ("thm-main", "thm-ffn") and "N=" in r["configuration"]
    own = [r for r in rows if "certified variant" not in r["experiment"]]
    assert own and not any(r["certified"] for r in own)
    assert {r["experiment"].split()[0] for r in own} == {"simulations", "jena", "sst2", "rank_collapse_gd"}
    variants = [r for r in rows if "certified variant" in r["experiment"] and r["theorem"] == "thm-ffn"]
    assert variants and all(r["certified"] and r["ratio"] < 1 for r in variants)
    wide = {r["theorem"]: r for r in own if r["experiment"] == "simulations (wide)"}
    assert wide["thm-ffn"]["ratio"] > 1 and "proper initialization" in wide["thm-ffn"]["failing_hypothesis"]
    sst = [r for r in own if r["experiment"].startswith("sst2 wide FFN") and r["theorem"] == "thm-ffn"]
    assert sst and "one block" in sst[0]["failing_hypothesis"]
    assert main(["theorem", "scope"]) == 0
    assert "certified" in capsys.readouterr().out


def test_tangent_kernel_blocks_and_the_lazy_report():
    """The tangent kernel is the sum of its blocks; W_U carries most of it when certified."""
    params, X, Y, cfg = small(0)
    tk = theory.tangent_kernel_blocks(params, X, cfg)
    assert tk["lambda_min"] >= sum(b["lambda_min"] for b in tk["blocks"].values()) - 1e-9
    assert sum(b["trace_share"] for b in tk["blocks"].values()) == pytest.approx(1.0)
    params, X, Y, cfg = certified_instance(0, d=512)
    lazy = theory.lazy_report(params, X, Y, cfg, certified_run(params, X, Y, cfg, steps=12))
    assert lazy["tangent_kernel"]["blocks"]["W_U"]["lambda_min_share"] > 0.9
    assert lazy["displacement_share"]["W_U"] > 0.9 and lazy["loss"][0] == lazy["loss_one_block"][0]
    assert lazy["one_block_gap"]["10"] < 0.05 and lazy["linearization_error"] < 0.01
    assert lazy["H0_minus_X"] < 0.1 and lazy["sigma_Nn_H0"] > 0
