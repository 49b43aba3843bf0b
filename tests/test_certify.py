"""The certified bounds (convres.certify) at sampled and adversarial points; mutants are caught."""

import json
import math

import numpy as np
import pytest
import torch

from convres import ModelConfig, certify, init_params, synthetic_regression
from convres.certify import centre, certificate, certified_run, chain, r_sigma_lower, smoothness_bounds
from convres.checks import FLOAT_TOL as ENVELOPE_TOL
from convres.cli import main
from convres.instances import certified_instance, ffn_certified_instance
from convres.lemmas import activation_rows, r_sigma_upper
from convres.model import forward_trace
from convres.rank import sigma_k, sigma_nn, stacked

INSTANCES = 200
CHUNKS = 10


def random_instance(k: int):
    """A small random instance of every kind the bounds allow: ``(params, X, Y, cfg, rng)``."""
    g = np.random.default_rng(k)
    N, n = int(g.integers(1, 3)), int(g.integers(2, 4))
    cfg = ModelConfig(d=int(g.integers(N * n, N * n + 5)), d_qk=int(g.integers(1, 5)),
                      m=int(g.integers(2, 7)), c=int(g.integers(1, 3)), beta_attn=float(g.uniform(0, 1.5)),
                      beta_ffn=float(g.uniform(0, 1.5)), activation=("gelu", "tanh", "softplus")[k % 3],
                      scale=("1/sqrt(d_qk)", "1/d_qk", 1.0, 3.0)[int(g.integers(4))])
    X, Y = synthetic_regression(N, n, cfg.d, cfg.c, seed=k)
    X = X * float(g.uniform(0.3, 2.0))
    params = init_params(cfg, seed=k + 1, branch_scale=float(np.exp(g.uniform(np.log(0.05), np.log(2.0)))))
    params["W_U"] = params["W_U"] * float(np.exp(g.uniform(np.log(0.1), np.log(2.0))))
    return params, X, Y, cfg, g


class Flat:
    """The model as a function of one flat parameter vector (for exact Jacobians and Hessians)."""

    def __init__(self, params, X, Y, cfg):
        self.params, self.X, self.Y, self.cfg = params, X, Y, cfg
        self.theta0 = torch.cat([w.reshape(-1) for w in params.values()])

    def unflat(self, v):
        parts = torch.split(v, [w.numel() for w in self.params.values()])
        return {k: t.reshape(w.shape) for (k, w), t in zip(self.params.items(), parts)}

    def F(self, v):
        return forward_trace(self.unflat(v), self.X, self.cfg).F.reshape(-1)

    def phi(self, v):
        return 0.5 * (forward_trace(self.unflat(v), self.X, self.cfg).F - self.Y).pow(2).sum()

    def parts(self, v):
        """``(S, Z, M, H)`` at ``v``, stacked."""
        p = self.unflat(v)
        tr = forward_trace(p, self.X, self.cfg)
        Z = stacked(tr.Z[0])
        return tr.S[0], Z, self.cfg.act(Z @ p["layer1.W_1"]), stacked(tr.H[0])

    def point(self, r: float, g, block: int | None = None):
        """A point at distance ``r`` from the centre: a random direction, or one in a single block."""
        u = torch.as_tensor(g.standard_normal(self.theta0.shape[0]), dtype=torch.float64)
        if block is not None:                                    # zero outside the block
            kept = {k: t * k.endswith(certify.BLOCKS[block]) for k, t in self.unflat(u).items()}
            u = torch.cat([t.reshape(-1) for t in kept.values()])
        return self.theta0 + r * u / u.norm()


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_sampled_point_of_the_ball_breaks_a_bound(chunk):
    """Increments of S_i, Z, M, H, the Jacobian and Hessian norms and sigma_Nn(H) within bounds."""
    worst = {}
    for k in range(chunk * INSTANCES // CHUNKS, (chunk + 1) * INSTANCES // CHUNKS):
        params, X, Y, cfg, g = random_instance(k)
        c = centre(params, X, Y, cfg)
        r = float(r_sigma_lower(c)) if k % 2 == 0 else float(g.uniform(0.05, 1.0))   # thm-lem-rlo's, or any
        ch = chain(c, r)
        L_up, J_up, _ = smoothness_bounds(c, r)
        f = Flat(params, X, Y, cfg)
        S0, Z0, M0, H0 = f.parts(f.theta0)
        for j, block in enumerate((None, int(g.integers(6)))):
            v = f.point(r * math.sqrt(float(g.uniform(0.25, 1.0))), g, block)
            S, Z, M, H = f.parts(v)
            dS = (S - S0).flatten(1).norm(dim=1) / torch.as_tensor(ch.dS_i).clamp_min(1e-300)
            dZ = float((Z - Z0).norm())
            J = torch.autograd.functional.jacobian(f.F, v, vectorize=True)
            ratios = {
                "S": float(dS.max()),
                "Z": dZ / ch.delta_Z if ch.delta_Z > 0 else dZ * 1e300,
                "M": float((M - M0).norm()) / ch.delta_M,
                "H": float(torch.linalg.matrix_norm(H - H0, 2)) / ch.delta_H,
                "J": float(torch.linalg.matrix_norm(J, 2)) / J_up,
            }
            if j == 0 and k % 2 == 1:
                hess = torch.autograd.functional.hessian(f.phi, v, vectorize=True)
                ratios["L"] = float(torch.linalg.eigvalsh(hess).abs().max()) / L_up
            if k % 2 == 0 and c.sigma_0 > 0:
                ratios["sigma"] = (c.sigma_0 / 2) / max(sigma_nn(H), 1e-300)
            for name, q in ratios.items():
                worst[name] = max(worst.get(name, 0.0), q)
    assert all(q <= 1 + 1e-9 for q in worst.values()), worst


def ascend(f, r, objective, g, steps=20):
    """Projected gradient ascent of ``objective`` on the ball of radius ``r``: the best point."""
    v = max((f.point(r, g) for _ in range(4)), key=lambda w: float(objective(w)))
    best, best_val = v, float(objective(v))
    for _ in range(steps):
        v = v.detach().requires_grad_(True)
        grad, = torch.autograd.grad(objective(v), v)
        v = v.detach() + 0.5 * r * grad / grad.norm().clamp_min(1e-300)
        step = v - f.theta0
        v = f.theta0 + step * min(1.0, r / float(step.norm()))
        if float(objective(v)) > best_val:
            best, best_val = v, float(objective(v))
    return best


def test_an_adversarial_ascent_breaks_neither_r_sigma_lower_nor_delta_H_and_mutants_are_caught():
    """The chain is exact at the centre; ascents inside B_{r_sigma_lower} break neither sigma_0 / 2 nor
    delta_H; the checks can fail: they break a third of delta_H, the Hessian the L bound without its
    second-order term."""
    broken_L = broken_H = False
    for k in range(0, 24, 2):
        params, X, Y, cfg, g = random_instance(k)
        c = centre(params, X, Y, cfg)
        r = float(r_sigma_lower(c))
        ch0 = chain(c, 0.0)                  # exact at the centre, where the J bound's W_U block is attained
        assert ch0.delta_H == 0.0 and ch0.Hbar == pytest.approx(c.h0) and certify.second_order(c, ch0) >= 0
        assert certify.jacobian_upper(c, 0.0) >= c.h0 and certify.smoothness_upper(c, 0.0) >= c.h0 ** 2
        f = Flat(params, X, Y, cfg)
        H0 = f.parts(f.theta0)[3]
        low = ascend(f, r, lambda v, f=f: -torch.linalg.svdvals(f.parts(v)[3])[-1], g)
        assert sigma_nn(f.parts(low)[3]) >= c.sigma_0 / 2 * (1 - 1e-12)
        far = ascend(f, r, lambda v, f=f, H0=H0: torch.linalg.matrix_norm(f.parts(v)[3] - H0, 2), g)
        dH = float(torch.linalg.matrix_norm(f.parts(far)[3] - H0, 2))
        assert dH <= chain(c, r).delta_H * (1 + 1e-12)
        assert r_sigma_upper(params, X, cfg) >= r
        broken_H |= dH > chain(c, r).delta_H / 3
        hess = torch.autograd.functional.hessian(f.phi, f.point(r, g), vectorize=True)
        broken_L |= float(torch.linalg.eigvalsh(hess).abs().max()) > 0.5 * smoothness_bounds(c, r)[1] ** 2
    assert broken_L and broken_H


@pytest.mark.parametrize("args,expect", [
    ("--steps 5", dict(certified=True, route="main", N=1, n=2, d=1024, steps=5)),
    ("--d 64 --steps 3", dict(certified=False, route="main", d=64, steps=3)),
    ("--route ffn --steps 6", dict(certified=True, route="ffn", N=4, n=4, d=8, m=4096, steps=6)),
])
def test_cli_certify_json(args, expect, capsys):
    """A certified instance has no violation; an uncertified one is a result of observations."""
    assert main(["theorem", "certify", *args.split(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in expect} == expect and (out["ratio"] < 1) == out["certified"]
    assert {"r_sigma_lower", "L_upper", "mu", "alpha", "initial_loss", "final_loss", "status"} <= set(out)
    if out["certified"]:
        assert out["violations"] == 0 and out["observed_violations"] is None
        assert out["final_loss"] <= out["envelope_final"]
    else:
        assert out["violations"] is None and out["observed_violations"] == 0


P16, X16, Y16, CFG16 = certified_instance(0, d=16)
PF, XF, YF, CFGF = ffn_certified_instance(0, m=64)
BAD_INPUTS = {   # what is wrong -> (the call, a name its error must say)
    "two layers": (lambda: certificate(init_params(CFG16.replace(L=2), seed=0), X16, Y16, CFG16.replace(L=2)),
                   "L = 1"),
    "ReLU": (lambda: certified_run(P16, X16, Y16, CFG16.replace(activation="relu")), "activation"),
    "an unknown route": (lambda: certify.check_certifiable(PF, XF, YF, CFGF, route="attention"), "route"),
    "the FFN's certificate for the main route": (
        lambda: certified_run(PF, XF, YF, CFGF, steps=2, cert=certify.ffn_certificate(PF, XF, YF, CFGF)),
        "FFNCertificate"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_what_cannot_be_certified_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_INPUTS[case])


# --- the softmax constant, the (1 - eps) certificate ---------------------------------------------

def _softmax_second(z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``D^2 softmax(z)[h, h] = p (h - m)^2 - p v`` with ``m = p.h``, ``v`` the variance of h under p."""
    p = torch.softmax(z, 0)
    y = h - (p * h).sum()
    return p * y ** 2 - p * (p * y ** 2).sum()


def test_the_softmax_second_derivative_constant():
    """Lemma thm-lem-softmax: ||D^2 p[h, h]|| <= (sqrt 7 / 4) ||h||^2, the formula is autograd's."""
    g = torch.Generator().manual_seed(0)
    worst, one = 0.0, torch.ones((), dtype=torch.float64)
    for k in range(300):
        n = 2 + k % 7
        z = 3 * torch.randn(n, generator=g, dtype=torch.float64)
        h = torch.randn(n, generator=g, dtype=torch.float64)
        h = h / h.norm()
        if k < 5:   # the formula against forward-mode differentiation twice
            first = lambda t, z=z, h=h: torch.func.jvp(lambda u: torch.softmax(z + u * h, 0), (t,), (one,))[1]  # noqa: E731
            exact = torch.func.jvp(first, (0 * one,), (one,))[1]
            assert torch.allclose(exact, _softmax_second(z, h), atol=1e-12)
        for _ in range(30):  # ascend the ratio over (z, h)
            z, h = z.detach().requires_grad_(True), h.detach().requires_grad_(True)
            val = _softmax_second(z, h / h.norm()).norm()
            gz, gh = torch.autograd.grad(val, [z, h])
            z, h = z + 0.5 * gz, h + 0.5 * gh
        worst = max(worst, float(_softmax_second(z.detach(), h.detach() / h.detach().norm()).norm()))
    assert 0.25 < worst <= certify.SOFTMAX_C2


def test_the_eps_certificates_are_met_by_their_runs():
    """Corollary sc-cor-eps: eps = 1/2 (the book's, the default) and the sharpest eps of the grid are each
    met by their run: the envelope, the ball of radius rho, sigma_t >= (1 - eps) sigma_0 at every step."""
    params, X, Y, cfg = certified_instance(2, d=1024)
    c = centre(params, X, Y, cfg)
    book, sharp = certify.certificate_of(c), certify.sharpest_certificate_of(c)
    assert book.eps == 0.5 and book.rho == pytest.approx(4 * c.R0 / c.sigma_0) and book.certified
    assert sharp.certified and sharp.eps in certify.EPS_GRID and sharp.mu_alpha > 3 * book.mu_alpha
    assert sharp.alpha == pytest.approx(((1 - sharp.eps) * c.sigma_0) ** 2)
    assert not any(certify.certificate_of(c, eps).certified for eps in (0.02, 0.04))   # too small a ball
    for cert, given in ((book, None), (sharp, sharp)):
        run = certified_run(params, X, Y, cfg, steps=6, cert=given)
        out = run.summary()
        assert out["violations"] == 0 and out["checked_steps"] == 6 and out["eps"] == cert.eps
        assert out["final_loss"] <= (1 - cert.mu * cert.alpha) ** 6 * out["initial_loss"]
        assert run.distance.max() <= cert.rho and run.path[-1] <= cert.rho
        assert run.sigma.min() >= (1 - cert.eps) * c.sigma_0
        assert (run.ratio <= 1 - cert.mu * cert.alpha + ENVELOPE_TOL).all()


# --- the FFN route -------------------------------------------------------------------------------

def test_the_ffn_route_certifies_n_n_above_d_and_its_run_obeys_the_envelope():
    """Corollary ffn-cor-cert: N n = 16 > d = 8 certified, 120 steps with 0 violations; too narrow an
    FFN fails its certificate as a result, not an error; pooled, the output bounds are divided by
    nu = sqrt(n)."""
    params, X, Y, cfg = ffn_certified_instance(0)
    assert X.shape[0] * X.shape[1] > cfg.d
    cert = certify.ffn_certificate(params, X, Y, cfg)
    assert cert.certified and cert.ratio < 0.25 and cert.rows == 16 and not cert.pooled
    assert cert.r_lower == min(cert.r_M, cert.sigma_U0 / 2) and cert.radius <= 1.01 * cert.rho
    assert cert.mu_alpha <= cert.rate_ceiling
    run = certify.ffn_certified_run(params, X, Y, cfg, steps=120, cert=cert)
    out = run.summary()
    assert out["route"] == "ffn" and out["violations"] == 0 and out["checked_steps"] == 120
    assert out["final_loss"] <= out["envelope_final"] and run.path[-1] <= cert.rho
    assert run.sigma.min() >= cert.sigma_M0 / 2 and run.sigma_U.min() >= cert.sigma_U0 / 2
    narrow = certify.ffn_certificate(*ffn_certified_instance(0, m=8))     # m = 8 < 16 rows: sigma_M0 = 0
    assert narrow.sigma_M0 == 0 and not narrow.certified and math.isinf(narrow.ratio)
    params, X, Y, cfg = ffn_certified_instance(0, N=8, n=4, d=8, m=1024, pool="mean")
    f = certify.ffn_centre(params, X, Y, cfg)
    cert = certify.ffn_certificate_of(f)
    assert f.rows == 8 and f.pooled and cert.pooled
    J_tok = certify.jacobian_upper(f.chain, cert.radius)
    assert cert.J_upper == pytest.approx(J_tok / 2, rel=1e-12)
    assert cert.r_M == certify.radius_within(f.chain, "M", 2 * f.sigma_M0 / 2)       # nu = sqrt(n) = 2
    assert chain(f.chain, cert.r_M).delta_M <= f.sigma_M0 < chain(f.chain, 1.001 * cert.r_M).delta_M
    run = certify.ffn_certified_run(params, X, Y, cfg, steps=4, cert=cert)
    assert run.summary()["readout"] == "pooled" and (run.violations == 0 or not cert.certified)


@pytest.mark.parametrize("pool", [None, "mean"])
def test_ffn_radius_and_pooled_smoothness_hold_at_sampled_points(pool):
    """Lemmas ffn-lem-rlo and ffn-lem-lup-pooled at sampled points: sigma, delta_M, L_upper."""
    worst = {}
    for k in range(6):
        cfg = ModelConfig(d=4, d_qk=3, m=24, c=1, activation=("gelu", "tanh", "softplus")[k % 3], pool=pool,
                          beta=float(0.5 + k / 4))
        N = 5 if pool else 2
        X, Y = synthetic_regression(N, 3, 4, 1, seed=k, pooled=pool == "mean")
        params = init_params(cfg, seed=k + 1, branch_scale=0.3)
        f = certify.ffn_centre(params, X, Y, cfg)
        r = certify.ffn_certificate_of(f).r_lower
        ch = chain(f.chain, r)
        L_up = smoothness_bounds(f.chain, r, readout=1 / math.sqrt(3) if pool else 1.0)[0]
        flat = Flat(params, X, Y, cfg)
        g = np.random.default_rng(k)
        M0 = flat.parts(flat.theta0)[2]
        for block in (None, 2, 3, 4):
            v = flat.point(r * math.sqrt(float(g.uniform(0.3, 1.0))), g, block)
            M = forward_trace(flat.unflat(v), X, cfg).M[0]
            rows = activation_rows(M, cfg)
            worst["sigma"] = max(worst.get("sigma", 0.0), (f.sigma_M0 / 2) / max(sigma_k(rows), 1e-300))
            worst["M"] = max(worst.get("M", 0.0), float((stacked(M) - M0).norm()) / ch.delta_M)
            hess = torch.autograd.functional.hessian(flat.phi, v, vectorize=True)
            worst["L"] = max(worst.get("L", 0.0), float(torch.linalg.eigvalsh(hess).abs().max()) / L_up)
    assert all(q <= 1 + 1e-9 for q in worst.values()), worst
    assert worst["M"] > 0.05 and worst["L"] > 0.01, worst    # the bounds are not vacuous
