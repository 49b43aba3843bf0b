"""Gradient descent: the update rule, monotone decrease, divergence, determinism, errors."""

import numpy as np
import pytest
import torch

from convres import ModelConfig, gradient_descent, init_params, loss, synthetic_regression
from convres.gd import History


def instance(beta=1.0, L=1):
    cfg = ModelConfig(d=6, d_qk=6, m=6, c=1, L=L, beta=beta)
    X, Y = synthetic_regression(4, 3, 6, 1, seed=0)
    return cfg, init_params(cfg, seed=1), X, Y


def test_one_step_is_params_minus_mu_grad():
    cfg, params, X, Y = instance()
    mu = 0.01
    theta, h = gradient_descent(params, X, Y, cfg, mu=mu, steps=1)
    w = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    grads = torch.autograd.grad(loss(w, X, Y, cfg), list(w.values()))
    for (k, v), g in zip(params.items(), grads):
        assert torch.allclose(theta[k], v - mu * g, atol=1e-15, rtol=0)
    assert h.loss[0] == pytest.approx(float(loss(params, X, Y, cfg)), rel=1e-14)
    assert h.loss[1] == pytest.approx(float(loss(theta, X, Y, cfg)), rel=1e-14)


def test_does_not_modify_its_input():
    cfg, params, X, Y = instance()
    before = {k: v.clone() for k, v in params.items()}
    gradient_descent(params, X, Y, cfg, mu=0.01, steps=3)
    assert all(torch.equal(before[k], params[k]) for k in params)


@pytest.mark.parametrize("beta,L", [(0.0, 1), (0.5, 1), (1.0, 1), (1.0, 2)])
def test_small_step_decreases_the_loss_monotonically(beta, L):
    cfg, params, X, Y = instance(beta, L)
    _, h = gradient_descent(params, X, Y, cfg, mu=1e-3, steps=200)
    assert h.status == "max_steps" and h.steps == 200
    assert np.all(np.diff(h.loss) < 0)
    assert np.all(h.ratio < 1)


def test_huge_step_is_reported_as_divergence_without_nans():
    cfg, params, X, Y = instance()
    theta, h = gradient_descent(params, X, Y, cfg, mu=1e4, steps=50)
    assert h.status == "diverged" and h.diverged
    assert "mu=10000" in h.message
    assert np.all(np.isfinite(h.loss)) and np.all(np.isfinite(h.sigma_min_Z))
    assert all(torch.isfinite(v).all() for v in theta.values())


def test_tolerance_stops_with_converged():
    cfg, params, X, Y = instance()
    _, h = gradient_descent(params, X, Y, cfg, mu=0.01, steps=5000, tol=1e-3)
    assert h.status == "converged" and h.loss[-1] <= 1e-3 < h.loss[-2]


def test_same_seed_gives_bit_identical_history():
    runs = []
    for _ in range(2):
        cfg, params, X, Y = instance()
        runs.append(gradient_descent(params, X, Y, cfg, mu=0.01, steps=30)[1])
    a, b = runs
    for field in ("loss", "grad_norm", "sigma_min_Z", "sigma_max_Z", "sigma_min_H", "sigma_max_H"):
        assert np.array_equal(getattr(a, field), getattr(b, field))


def test_record_every_and_singular_values():
    cfg, params, X, Y = instance()
    _, h = gradient_descent(params, X, Y, cfg, mu=0.01, steps=25, record_every=10)
    assert h.record_steps.tolist() == [0, 10, 20, 25]
    assert len(h.loss) == len(h.grad_norm) == 26 and len(h.ratio) == 25
    assert np.all(h.sigma_min_Z <= h.sigma_max_Z) and np.all(h.sigma_min_H > 0)
    Z = torch.linalg.svdvals((torch.softmax(X @ params["layer1.W_Q"] @ params["layer1.W_K"].T
                                            @ X.transpose(1, 2) / 6 ** 0.5, -1)
                              @ X @ params["layer1.W_V"] + X).reshape(-1, 6))
    assert h.sigma_min_Z[0] == pytest.approx(float(Z[-1]), rel=1e-12)


def test_history_round_trips_through_a_dict():
    cfg, params, X, Y = instance()
    _, h = gradient_descent(params, X, Y, cfg, mu=0.01, steps=5)
    h2 = History.from_dict(h.to_dict())
    assert np.array_equal(h.loss, h2.loss) and h2.status == h.status and h2.record_steps.dtype == np.int64


@pytest.mark.parametrize("kwargs,match", [
    (dict(mu=0.0), "mu"), (dict(mu=-1.0), "mu"), (dict(mu=float("inf")), "mu"),
    (dict(steps=-1), "steps"), (dict(steps=2.5), "steps"), (dict(record_every=0), "record_every"),
    (dict(tol=-1.0), "tol"),
])
def test_bad_run_arguments(kwargs, match):
    cfg, params, X, Y = instance()
    args = dict(mu=0.01, steps=3) | kwargs
    with pytest.raises(ValueError, match=match):
        gradient_descent(params, X, Y, cfg, **args)


def test_mismatched_params_and_data():
    cfg, params, X, Y = instance()
    with pytest.raises(ValueError, match="expected"):
        gradient_descent(params, X, Y, cfg.replace(d=5, d_qk=5, m=5), mu=0.01, steps=1)
    with pytest.raises(ValueError, match="features"):
        gradient_descent(params, X[..., :5], Y, cfg, mu=0.01, steps=1)
