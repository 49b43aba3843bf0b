"""The certified separation (convres.separation): its bounds on random draws, the plateau, the CLI."""

import json
import math

import numpy as np
import pytest
import torch

from convres import separation
from convres.cli import main
from convres.collapse import rank_one_floor
from convres.gd import gradient_descent
from convres.instances import theorem_instance
from convres.lemmas import flat_norm
from convres.model import forward_trace, phi
from convres.separation import TAU, centred, path_check, perp_centre, separation_instance, separation_report

ATTENTION = ("layer1.W_Q", "layer1.W_K")


def _box_point(params, ra, rw, gen, X=None, cfg=None, steps=0):
    """A point of B(ra, rw), then ``steps`` steps of projected ascent on ``||C(F)||``."""
    boxes = ((ATTENTION, ra), ([k for k in params if k not in ATTENTION], rw))
    q = {}
    for keys, r in boxes:
        u = {k: torch.randn(params[k].shape, generator=gen, dtype=torch.float64) for k in keys}
        scale = r * float(torch.rand(1, generator=gen)) ** 0.25 / flat_norm(u.values())
        q.update({k: params[k] + scale * u[k] for k in keys})
    for _ in range(steps):
        grads = torch.func.grad(lambda p: centred(forward_trace(p, X, cfg).F).norm())(q)
        for keys, r in boxes:
            g = flat_norm(grads[k] for k in keys) or 1.0
            moved = {k: q[k].detach() + 0.3 * r * grads[k] / g - params[k] for k in keys}
            norm = flat_norm(moved.values())
            q.update({k: params[k] + moved[k] * min(1.0, r / norm) for k in keys})
    return q


INSTANCES = [  # default initializations without the residual (where the bounds are hard), and the family
    lambda seed: theorem_instance(seed, beta=0.0, N=2, n=4, d=16, d_qk=4, scale="1/sqrt(d_qk)"),
    lambda seed: theorem_instance(seed, beta=0.0, N=2, n=3, d=12, d_qk=32, scale="1/d_qk", activation="tanh"),
    lambda seed: (lambda X, Y, p, cfg: (p, X, Y, cfg))(*separation_instance(16, seed, d=64)),
]


@pytest.mark.parametrize("make", INSTANCES)
@pytest.mark.parametrize("seed", [50000, 50001])
def test_the_within_sequence_chain_bounds_the_model(make, seed):
    """Lemma sep-lem-chain: ||C(F)|| and the Jacobian of C(F) within their bounds on B(ra, rw)."""
    params, X, Y, cfg = make(seed)
    pc = perp_centre(params, X, Y, cfg)
    gen = torch.Generator().manual_seed(seed)
    for ra, rw in [(0.02, 0.02), (0.1, 0.3), (0.3, 0.05)]:
        delta, ja, jw = separation.perp_chain(pc, ra, rw)
        for steps in (0, 0, 8):
            q = _box_point(params, ra, rw, gen, X=X, cfg=cfg, steps=steps)
            assert float(centred(forward_trace(q, X, cfg).F).norm()) <= pc.cF + delta
        q = _box_point(params, ra, rw, gen)
        J = torch.func.jacrev(lambda p: centred(forward_trace(p, X, cfg).F).reshape(-1))(q)
        J = torch.cat([j.flatten(1) for j in J.values()], 1)
        assert float(torch.linalg.matrix_norm(J, 2)) <= math.hypot(ja, jw)


@pytest.mark.parametrize("make", INSTANCES)
def test_the_path_radii_bound_gradient_descent(make):
    """Lemma sep-lem-path: every iterate's distances and residual are within the radii."""
    params, X, Y, cfg = make(50002)
    pc = perp_centre(params, X, Y, cfg)
    for mu in (0.003, 0.03, 0.3):
        path = separation.path_radii(pc, mu, max_steps=300)
        seen = []

        def record(step, path=path, seen=seen):
            if step.t < len(path):
                seen.append((flat_norm(step.params[k] - params[k] for k in ATTENTION),
                             flat_norm(step.params[k] - params[k] for k in params),
                             float((step.trace.F - Y - centred(step.trace.F - Y)).norm())))

        gradient_descent(params, X, Y, cfg, mu, len(path) - 1, callback=record)
        for (ra, r, R), (a, t, p) in zip(path, seen):
            assert a <= ra * (1 + 1e-9) + 1e-15 and t <= r * (1 + 1e-9) + 1e-15 and p <= R * (1 + 1e-9)


@pytest.mark.parametrize("d_qk,seed", [(16, 50010), (64, 50011), (256, 50012)])
def test_the_plateau_holds_along_gradient_descent_and_every_path_bound_is_above_the_run(d_qk, seed):
    """Theorem sep-thm (a) on fresh seeds: the run stays at or above half the floor up to T_lb;
    path_check: every observed/bound ratio is at most 1."""
    X, Y, params, cfg = separation_instance(d_qk, seed, d=256)
    for mu in (0.1, 1.0):
        pl = separation.plateau_certificate(params, X, Y, cfg, mu)
        assert pl.certified and pl.floor == pytest.approx(rank_one_floor(Y))
        _, h = gradient_descent(params, X, Y, cfg, mu, pl.T_lb)
        assert np.min(h.loss) >= 0.5 * pl.floor
    X, Y, params, cfg = separation_instance(d_qk, seed + 10, d=128)
    for mu in (0.05, 0.5):
        chk = path_check(params, X, Y, cfg, mu)
        assert chk["steps"] >= 1 and len(chk["loss"]) == chk["steps"] + 1
        assert all(0 < chk[k] <= 1 for k in ("r", "r_a", "R", "CF")) and chk["dCF"] <= 1


def test_the_floor_lemma():
    """Lemma sep-lem-floor: ||C(F)|| <= TAU ||C(Y)|| implies Phi >= floor / 2 (random outputs)."""
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        Y, F = torch.randn(3, 4, 1, generator=gen, dtype=torch.float64), torch.randn(3, 4, 1, generator=gen)
        shrink = float(torch.rand(1, generator=gen))
        F = F * TAU * float(centred(Y).norm()) / float(centred(F).norm()) * shrink
        assert 0.5 * float((F - Y).pow(2).sum()) >= 0.5 * rank_one_floor(Y) * (1 - 1e-12)


def test_the_report_and_its_rebuild(capsys):
    """The JSON of `theorem separation` has its fields; `rebuild` rebuilds the arm; above mu_res the
    residual arm's rate and steps_to are null, the *_at_mu_res ones are not."""
    assert main(["theorem", "separation", "--d-qk", "16", "--seed", "1", "--d", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instance"]["d_qk"] == 16 and isinstance(out["plateau"]["T_lb"], int)
    rep = separation_report(64, 7, d=128)
    assert {"certified", "T_lb", "floor", "mu"} <= set(rep["plateau"])
    assert {"certified", "rate", "steps_to"} <= set(rep["with_residual"])
    assert {"N", "n", "d", "d_qk", "m", "seed", "scale", "rebuild"} <= set(rep["instance"])
    X, Y, params, cfg = eval(rep["instance"]["rebuild"])
    X2, Y2, p2, _ = separation_instance(64, 7, d=128)
    assert cfg.residual == (0.0, 0.0) and torch.equal(X, X2) and torch.equal(Y, Y2)
    assert float(phi(params, X, Y, cfg)) == float(phi(p2, X2, Y2, cfg))
    base = separation_report(256, 3)
    wr = base["with_residual"]
    assert wr["certified"] and wr["rate"] == wr["rate_at_mu_res"]
    assert wr["steps_to"] == wr["steps_to_at_mu_res"]
    above = separation_report(256, 3, mu=10 * wr["mu"])
    assert above["with_residual"]["rate"] is None and above["with_residual"]["steps_to"] is None
    assert above["with_residual"]["rate_at_mu_res"] == wr["rate_at_mu_res"]
    assert not above["separation"]["certified"] and above["separation"]["window"] is None


def test_bad_input(clear_error):
    X, Y, params, cfg = separation_instance(16, 0, d=64)
    clear_error(lambda: perp_centre(params, X, Y, cfg.with_residual(1.0)), "residual")
    clear_error(lambda: separation.balanced_targets(1, 3, 0), "n=3")
