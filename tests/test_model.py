"""The model: gradients, invariants, determinism and errors on bad input."""

import itertools

import pytest
import torch

import convres
from convres import ModelConfig, forward, forward_trace, init_params, loss, synthetic_regression
from convres.model import ACTIVATIONS, param_shapes, validate_data, validate_params

SMALL = dict(d=3, d_qk=2, m=4, c=2)


def small_instance(L=1, beta=1.0, activation="relu", pool=None, seed=0):
    cfg = ModelConfig(**SMALL, L=L, beta=beta, activation=activation, pool=pool)
    X, Y = synthetic_regression(2, 3, cfg.d, cfg.c, seed=seed, pooled=pool == "mean")
    return cfg, init_params(cfg, seed=seed + 1), X, Y


@pytest.mark.parametrize("L,beta,activation",
                         list(itertools.product([1, 2], [0.0, 0.5, 1.0], sorted(ACTIVATIONS))))
def test_gradients_match_finite_differences(L, beta, activation):
    cfg, params, X, Y = small_instance(L, beta, activation)
    names = list(params)

    def phi(*weights):
        return loss(dict(zip(names, weights)), X, Y, cfg)

    weights = tuple(params[k].clone().requires_grad_(True) for k in names)
    assert torch.autograd.gradcheck(phi, weights, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradients_with_mean_pooling():
    cfg, params, X, Y = small_instance(L=2, pool="mean")
    names = list(params)
    weights = tuple(params[k].clone().requires_grad_(True) for k in names)
    assert torch.autograd.gradcheck(lambda *w: loss(dict(zip(names, w)), X, Y, cfg), weights)


def test_attention_rows_are_probability_vectors():
    cfg, params, X, _ = small_instance(L=2)
    for S in forward_trace(params, X, cfg).S:
        assert torch.allclose(S.sum(-1), torch.ones(S.shape[:-1], dtype=S.dtype), atol=1e-14)
        assert (S >= 0).all()


def test_beta_zero_is_the_model_without_residuals():
    cfg, params, X, _ = small_instance(L=2, beta=0.0)
    H = X
    for l in (1, 2):
        W = {k: params[f"layer{l}.{k}"] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
        S = torch.softmax((X if l == 1 else H) @ W["W_Q"] @ W["W_K"].T @ H.transpose(1, 2) / 2 ** 0.5, -1)
        attn = S @ H @ W["W_V"]
        H = torch.relu(attn @ W["W_1"]) @ W["W_2"]
    assert torch.allclose(forward(params, X, cfg), H @ params["W_U"], atol=1e-13, rtol=0)


def test_beta_one_is_the_papers_formula():
    cfg, params, X, _ = small_instance(beta=1.0)
    W = {k: params[f"layer1.{k}"] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
    attn = torch.softmax(X @ W["W_Q"] @ W["W_K"].T @ X.transpose(1, 2) / 2 ** 0.5, -1) @ X @ W["W_V"]
    ffn = lambda Z: torch.relu(Z @ W["W_1"]) @ W["W_2"]  # noqa: E731
    paper = (ffn(attn + X) + attn + X) @ params["W_U"]
    assert torch.allclose(forward(params, X, cfg), paper, atol=1e-13, rtol=0)


def test_separate_residual_coefficients():
    cfg, params, X, _ = small_instance()
    tr = forward_trace(params, X, cfg.replace(beta_attn=0.0, beta_ffn=1.0))
    tr0 = forward_trace(params, X, cfg.replace(beta=0.0))
    assert torch.allclose(tr.Z[0], tr0.Z[0])
    assert not torch.allclose(tr.H[0], tr0.H[0])


def test_attention_scales():
    cfg = ModelConfig(d=4, d_qk=16, m=4)
    assert convres.model.attention_scale(cfg) == 0.25
    assert convres.model.attention_scale(cfg.replace(scale="1/d_qk")) == 1 / 16
    assert convres.model.attention_scale(cfg.replace(scale="1")) == 1.0
    assert convres.model.attention_scale(cfg.replace(scale=0.3)) == 0.3


def test_init_is_deterministic_and_seeded():
    cfg = ModelConfig(**SMALL, L=2)
    a, b, c = init_params(cfg, seed=5), init_params(cfg, seed=5), init_params(cfg, seed=6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["W_U"], c["W_U"])
    assert {k: tuple(v.shape) for k, v in a.items()} == param_shapes(cfg)
    assert all(v.dtype == torch.float64 for v in a.values())


def test_initial_weights_have_full_rank():
    cfg = ModelConfig(d=8, d_qk=8, m=8, c=1)
    for W in init_params(cfg, seed=0).values():
        assert torch.linalg.matrix_rank(W) == min(W.shape)


def test_pool_mean_gives_one_output_per_sequence():
    cfg, params, X, Y = small_instance(pool="mean")
    assert tuple(forward(params, X, cfg).shape) == (2, cfg.c) == tuple(Y.shape)


@pytest.mark.parametrize("field,value,error", [
    ("d", 0, ValueError), ("d_qk", -1, ValueError), ("m", 2.5, ValueError), ("L", True, ValueError),
    ("beta", -0.1, ValueError), ("beta", float("nan"), TypeError), ("beta_ffn", -1.0, ValueError),
    ("activation", "sigmoidish", ValueError), ("scale", "1/sqrt(d)", ValueError),
    ("scale", -2.0, ValueError), ("pool", "max", ValueError),
])
def test_bad_config_is_rejected(field, value, error):
    kwargs = dict(SMALL, **{field: value})
    with pytest.raises(error, match=field if field not in ("scale",) else "scale"):
        ModelConfig(**kwargs)


def test_bad_params_are_rejected():
    cfg, params, X, Y = small_instance()
    with pytest.raises(ValueError, match="missing"):
        validate_params({k: v for k, v in params.items() if k != "W_U"}, cfg)
    bad = dict(params, **{"layer1.W_V": torch.zeros(2, 2, dtype=torch.float64)})
    with pytest.raises(ValueError, match=r"layer1.W_V.*shape \(2, 2\), expected \(3, 3\)"):
        validate_params(bad, cfg)
    with pytest.raises(ValueError, match="NaN"):
        validate_params(dict(params, W_U=params["W_U"] * float("nan")), cfg)
    with pytest.raises(TypeError, match="dict"):
        validate_params([1, 2], cfg)


def test_bad_data_is_rejected():
    cfg, params, X, Y = small_instance()
    with pytest.raises(ValueError, match=r"X must have shape \(N sequences"):
        validate_data(X[0], Y, cfg)
    with pytest.raises(ValueError, match="d=3"):
        validate_data(X[..., :2], Y, cfg)
    with pytest.raises(ValueError, match="NaN"):
        validate_data(X * float("nan"), Y, cfg)
    with pytest.raises(ValueError, match="Y has shape"):
        validate_data(X, Y[:, :, :1], cfg)
    with pytest.raises(TypeError, match="share a dtype"):
        validate_data(X, Y.float(), cfg)
    with pytest.raises(TypeError, match="torch.Tensor"):
        validate_data(X.numpy(), Y, cfg)


def test_forward_and_loss_check_their_inputs():
    cfg, params, X, Y = small_instance()
    with pytest.raises(TypeError, match=r"X has dtype torch.float32 but the weights have dtype torch.float64"):
        forward(params, X.float(), cfg)
    with pytest.raises(ValueError, match="d=3"):
        forward(params, X[..., :2], cfg)
    with pytest.raises(ValueError, match="Y has shape"):
        loss(params, X, Y[:1], cfg)
    with pytest.raises(TypeError, match="ModelConfig"):
        forward(params, X, {"d": 3})
    with pytest.raises(TypeError, match="mix dtypes"):
        forward(dict(params, W_U=params["W_U"].float()), X, cfg)
