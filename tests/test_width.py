"""The width theorem (convres.width): bounds against the true centre, monotonicity, d_min certified."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from convres import width
from convres.certify import centre, certificate, chain, r_sigma_lower, smoothness_upper
from convres.cli import main
from convres.instances import certified_instance
from convres.model import trace_no_grad
from convres.rank import sigma_nn, spectral_norm, stacked
from convres.width import crossing, events, width_condition, worst_case, worst_ratio

#: The inputs of a Centre that the chain reads (all bounded from above by the worst case).
UPPER = ("x_i", "q_i", "k_i", "v_i", "x", "sx", "z0", "a0", "h0", "w1", "w2", "u", "R0")


def _true_parts(params, X, Y, cfg) -> dict:
    """The intermediate norms of the worst case's table, measured exactly."""
    tr = trace_no_grad(params, X, cfg)
    n = X.shape[1]
    Z, M = stacked(tr.Z[0]), stacked(tr.M[0])
    U = torch.full((n, n), 1.0 / n, dtype=X.dtype)
    return {"X_F": float(X.norm()), "sigma_X": sigma_nn(X), "sigma_Z": sigma_nn(Z),
            "Z_F": float(Z.norm()), "M_F": float(M.norm()), "A": spectral_norm(stacked(tr.A[0])),
            "P": spectral_norm(Z @ params["layer1.W_1"]),
            "eps_S": float((tr.S[0] - U).flatten(1).norm(dim=1).max()),
            "y": float(Y.norm())}


def _dominates(wc, c, rel=0.0):
    """Every input of the chain at the centre ``c`` within the worst case ``wc``, sigma_0 above it."""
    w = wc.centre()
    for name in UPPER:
        assert np.all(np.asarray(getattr(c, name)) <= np.asarray(getattr(w, name)) * (1 + rel)), name
    assert c.sigma_0 >= wc.sigma_0


@pytest.mark.parametrize("N,n,d,regime", [(1, 2, 200, {}), (2, 2, 300, {}), (1, 4, 120, {}),
                                          (3, 2, 400, {"targets": "gaussian"}),
                                          (2, 3, 256, {"activation": "tanh", "beta": 2.0}),
                                          (1, 3, 600, {"branch_scale": 0.2, "readout_scale": 1.0})])
def test_the_worst_case_dominates_the_true_centre(N, n, d, regime):
    """Lemma wd-lem-below far below d_min: every norm within its worst-case bound, sigma_0 above."""
    wc = worst_case(N, n, d, 0.05, **regime)
    for seed in range(4):
        params, X, Y, cfg = certified_instance(seed, N=N, n=n, d=d, **regime)
        _dominates(wc, centre(params, X, Y, cfg))
        parts = _true_parts(params, X, Y, cfg)
        for name in ("X_F", "Z_F", "M_F", "A", "P", "eps_S", "y"):
            assert parts[name] <= getattr(wc, name) * (1 + 1e-12), (name, seed)
        for name in ("sigma_X", "sigma_Z"):
            assert parts[name] >= getattr(wc, name), (name, seed)


def test_the_chain_is_monotone_in_every_input_and_in_the_radius():
    """Lemma wd-lem-monotone: raising an input never lowers chain(), L_upper or the ratio."""
    for seed, (N, n, d) in enumerate([(1, 2, 256), (2, 2, 128), (2, 3, 64), (3, 1, 64)]):
        c = centre(*certified_instance(seed, N=N, n=n, d=d))
        for r in (0.01, 0.3, 2.0):
            base = chain(c, r)
            for name in UPPER:
                for factor in (1.001, 2.0):
                    raised = dataclasses.replace(c, **{name: getattr(c, name) * factor})
                    up = chain(raised, r)
                    for f in dataclasses.fields(up):
                        assert np.all(getattr(up, f.name) >= getattr(base, f.name) * (1 - 1e-14)), (name, f)
                    assert smoothness_upper(raised, r) >= smoothness_upper(c, r) * (1 - 1e-14)
        chains = [chain(c, r) for r in [0.0, *np.geomspace(1e-3, 3, 25)]]
        for a, b in zip(chains, chains[1:]):
            assert b.delta_H >= a.delta_H and np.all(b.dF >= a.dF - 1e-15)
        ratio = certificate(*certified_instance(seed, N=N, n=n, d=d)).ratio
        lower = dataclasses.replace(c, sigma_0=0.9 * c.sigma_0)
        assert lower.rho() / r_sigma_lower(lower) >= ratio


def test_the_scaling_argument_of_part_i():
    """wd-thm-width (i): norms x lambda, scale x lambda^-2: delta_H x lambda, r_sigma^lo unchanged."""
    c = centre(*certified_instance(0, N=2, n=2, d=128))
    lam = 0.37
    scaled = dataclasses.replace(c, **{k: getattr(c, k) * lam for k in
                                       ("x_i", "q_i", "k_i", "v_i", "x", "sx", "z0", "a0", "sigma_0")},
                                 s=c.s / lam ** 2)
    for r in (0.05, 0.5):
        assert chain(scaled, r).delta_H == pytest.approx(lam * chain(c, r).delta_H, rel=1e-12)
    assert r_sigma_lower(scaled) == pytest.approx(r_sigma_lower(c), rel=1e-9)


def test_the_worst_case_ratio_falls_with_the_width():
    """R(d) is non-increasing, infinite at small d, < 1 from d_min on; R(d_min - 1) >= 1; at d_min the
    worst case is close to the true centre."""
    for N, n in ((1, 2), (2, 4)):
        ds = np.unique(np.geomspace(N * n + 2, 5e4, 120).astype(int))
        R = np.array([worst_ratio(N, n, int(d))[0] for d in ds])
        finite = np.isfinite(R)
        assert not finite[0] and finite[-1]     # too narrow: an infinite ratio, not an error
        assert np.all(np.diff(R[finite]) <= 1e-12 * R[finite][1:])
        w = width_condition(N, n)
        assert w.ratio < 1 <= w.ratio_below and w.d_min > N * n
        assert worst_ratio(N, n, w.d_min)[0] < 1 <= worst_ratio(N, n, w.d_min - 1)[0]
    wc = worst_case(1, 2, width_condition(1, 2).d_min)    # not vacuous: sigma_0 within 1.25, R_0 within 1.5
    for seed in range(3):
        c = centre(*certified_instance(seed, N=1, n=2, d=wc.d))
        assert wc.sigma_0 <= c.sigma_0 < 1.25 * wc.sigma_0
        assert c.R0 <= wc.R0 < 1.5 * c.R0


def test_d_min_grows_with_nn_falls_with_delta_and_is_at_least_quadratic():
    d = {Nn: width_condition(1, Nn).d_min for Nn in (1, 2, 4, 8, 64)}
    assert d[1] < d[2] < d[4] < d[8] < d[64]
    assert all(d[k] >= width.quadratic_lower_bound(1, k) for k in d)
    by_delta = [width_condition(2, 2, dl).d_min for dl in (0.5, 0.05, 1e-3)]
    assert by_delta[0] < by_delta[1] < by_delta[2]
    assert width_condition(1, 2, beta=2.0).d_min < d[2] < width_condition(1, 2, beta=0.5).d_min
    assert width_condition(1, 2, targets="gaussian").d_min > d[2]
    assert sum(map(len, events(1, 2).values())) == 19                     # the failure events counted
    assert sum(map(len, events(2, 2, "gaussian").values())) == 26
    assert sum(map(len, events(1, 1, activation="tanh").values())) == 17


def test_gelu_second_moment_matches_quadrature():
    """Lemma wd-lem-gelu2 against a trapezoid rule on [-12, 12] (400001 points)."""
    g = torch.linspace(-12, 12, 400001, dtype=torch.float64)
    density = torch.exp(-g ** 2 / 2) / math.sqrt(2 * math.pi)
    for sigma in (0.1, 1.0, 3.0):
        u = sigma * g
        gelu = torch.nn.functional.gelu(u)
        c_psi, c_e = width.gelu_second_moment(sigma)
        assert c_psi == pytest.approx(float(torch.trapezoid(gelu ** 2 * density, g)) / sigma ** 2, rel=1e-9)
        assert c_e == pytest.approx(float(torch.trapezoid((gelu - u / 2) ** 2 * density, g)) / sigma ** 2,
                                    rel=1e-9)
    values = [width.gelu_second_moment(s)[1] for s in np.linspace(0.01, 5, 50)]
    assert np.all(np.diff(values) > 0) and values[-1] < 0.25


def test_width_sweep_certifies_the_instances_of_certified_instance_and_finds_the_crossing():
    rows = width.width_sweep([128, 1024], [(1, 2), (2, 2)], [3])
    assert [(r["d"], r["N"]) for r in rows] == [(128, 1), (128, 2), (1024, 1), (1024, 2)]
    for row in rows:
        direct = certificate(*certified_instance(3, N=row["N"], n=row["n"], d=row["d"]))
        assert row["ratio"] == pytest.approx(direct.ratio, rel=1e-12)
    one = [r for r in rows if r["N"] == 1]
    assert one[0]["ratio"] > 1 > one[1]["ratio"]
    assert 128 < crossing([128, 1024], [r["ratio"] for r in one]) < 1024
    assert crossing([1, 2], [2.0, 1.5]) == math.inf and crossing([4, 8], [0.5, 0.2]) == 4
    assert crossing([1, 4], [2.0, 0.5]) == pytest.approx(2.0)


@pytest.mark.parametrize("N,n,seeds", [(1, 1, (20001, 20002)), (1, 2, (20001, 20002))])
def test_instances_drawn_at_d_min_are_certified_by_the_command_line(capsys, N, n, seeds):
    """At d = d_min, theorem --certify certifies at least a 1 - delta fraction of fresh seeds."""
    assert main(["theorem", "width", "--N", str(N), "--n", str(n), "--json"]) == 0
    w = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)   # strict JSON
    assert {"d_min", "delta", "N", "n", "ratio", "mu_alpha"} <= set(w) and w["delta"] == 0.05
    certified = 0
    for seed in seeds:
        assert main(["theorem", "certify", "--N", str(N), "--n", str(n), "--d", str(w["d_min"]),
                     "--seed", str(seed), "--steps", "2", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        certified += out["certified"]
        if out["certified"]:
            assert out["violations"] == 0 and out["mu_alpha"] >= w["mu_alpha"] * (1 - 1e-9)
    assert certified / len(seeds) >= 1 - w["delta"]


@pytest.mark.parametrize("call,name", [
    (lambda: worst_case(1, 2, 100, 1.5), "delta"),
    (lambda: width_condition(1, 2, scale="1/sqrt(d_qk)"), "scale"),
    (lambda: width_condition(1, 2, gamma=0.1), "gamma"),
    (lambda: width_condition(1, 2, activation="softplus"), "softplus"),
    (lambda: worst_case(1, 4, 3, 0.05, data=width.fixed_data(*width.orthonormal_data(1, 4, 0.05))), "d0"),
], ids=["delta", "scale", "unknown", "activation", "fixed data"])
def test_a_bad_setting_is_a_clear_error_naming_it(call, name, clear_error):
    clear_error(call, name)


def test_fixed_data_the_worst_case_dominates_the_true_centre():
    """Corollary wd-cor-fixed: on fixed data every norm within its bound, sigma_0 above its bound."""
    for Nn, d in ((2, 64), (4, 160), (8, 300)):
        X0, Y = width.orthonormal_data(1, Nn, 0.05, seed=Nn)
        wc = worst_case(1, Nn, d, 0.05, data=width.fixed_data(X0, Y))
        for seed in range(50000, 50008):
            params, _, _, cfg = certified_instance(seed, N=1, n=1, d=d)
            _dominates(wc, centre(params, width.padded(X0, d), Y, cfg), rel=1e-12)   # round-off only


def test_fixed_data_the_ratio_falls_to_a_limit_linear_in_the_targets(capsys):
    """Fixed data: the ratio falls with d to a limit linear in ||Y||_F; unit targets never certify."""
    X0, Y = width.orthonormal_data(1, 4, 0.05)
    ratios = [worst_ratio(1, 4, d, 0.05, width.fixed_data(X0, Y))[0] for d in range(40, 2000, 37)]
    assert np.all(np.diff(ratios) <= 1e-12)
    small, big = (width_condition(1, 4, data=width.fixed_data(X0, Y * k)) for k in (1.0, 2.0))
    assert small.d_min is not None and abs(big.ratio_limit / small.ratio_limit - 2) < 1e-3
    unit = width_condition(1, 4, data=width.fixed_data(X0, Y * 2 / 0.05))
    assert unit.d_min is None and unit.ratio_limit > 1
    assert main(["theorem", "width", "--data", "fixed", "--N", "1", "--n", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["d_min"] is not None and out["ratio_limit"] < 1
