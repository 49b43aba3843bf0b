"""The model: invariants, stacked configurations, torch.func, determinism and errors on bad input."""

import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

import convres
from convres import ModelConfig, check_inputs, forward, forward_trace, gradient_descent, init_params, loss
from convres.instances import synthetic_regression
from convres.lemmas import hessian_norm
from convres.model import ACTIVATIONS, memory_estimate, param_shapes, phi_and_grad
from convres.runtime import CostRefused

SMALL = dict(d=3, d_qk=2, m=4, c=2)


def small_instance(L=1, beta=1.0, activation="relu", pool=None, seed=0):
    cfg = ModelConfig(**SMALL, L=L, beta=beta, activation=activation, pool=pool)
    X, Y = synthetic_regression(2, 3, cfg.d, cfg.c, seed=seed, pooled=pool == "mean")
    return cfg, init_params(cfg, seed=seed + 1), X, Y


# Autograd's derivative of the forward pass against finite differences, one check per code path
# (two blocks and a smooth activation, and the pooled readout); the hand-written gradient
# (phi_and_grad, convres.backprop) against autograd and finite differences below.
@pytest.mark.parametrize("L,activation,pool", [(2, "gelu", None), (1, "relu", "mean")])
def test_gradients_match_finite_differences(L, activation, pool):
    cfg, params, X, Y = small_instance(L, 0.5, activation, pool)
    names = list(params)
    weights = tuple(params[k].clone().requires_grad_(True) for k in names)
    assert torch.autograd.gradcheck(lambda *w: loss(dict(zip(names, w)), X, Y, cfg), weights, eps=1e-6,
                                    atol=1e-5, rtol=1e-4)


def autograd_phi_and_grad(params, X, Y, cfg, residual=None):
    """The reference: Phi per configuration and autograd's gradient of their sum."""
    w = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    F = forward_trace(w, X, cfg, residual=residual).F
    phi = 0.5 * (F - Y).pow(2).flatten(1).sum(1) if w["W_U"].dim() == 3 else 0.5 * (F - Y).pow(2).sum()
    return phi.detach(), dict(zip(w, torch.autograd.grad(phi.sum(), list(w.values()))))


@pytest.mark.parametrize("L,activation,pool", [(1, "relu", None), (3, "gelu", None), (2, "tanh", "mean"),
                                               (2, "softplus", None), (1, "gelu", "mean")])
@pytest.mark.parametrize("stack", ["none", "shared data", "data per configuration"])
def test_the_hand_written_gradient_equals_autograd(L, activation, pool, stack):
    cfg = ModelConfig(d=5, d_qk=3, m=7, c=2, L=L, activation=activation, pool=pool, scale="1/d_qk")
    X, Y = synthetic_regression(3, 4, 5, 2, seed=1, pooled=pool == "mean")
    residual = (0.7, 0.4)
    if stack == "none":
        params = init_params(cfg, seed=1)
    else:
        params = {k: torch.stack([init_params(cfg, seed=s)[k] for s in range(3)]) for k in param_shapes(cfg)}
        residual = (torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64), 0.3)
        if stack == "data per configuration":
            X, Y = torch.stack([X, 2 * X, -X]), torch.stack([Y, -Y, 0.5 * Y])
    phi, grads, trace = phi_and_grad(params, X, Y, cfg, residual=residual)
    ref_phi, ref_grads = autograd_phi_and_grad(params, X, Y, cfg, residual)
    assert torch.allclose(phi, ref_phi, rtol=1e-14, atol=0)
    assert list(grads) == list(params)
    for k, g in grads.items():
        assert g.shape == params[k].shape
        assert float((g - ref_grads[k]).abs().max()) <= 1e-12 * float(ref_grads[k].abs().max()), k
    for a, b in zip(trace, forward_trace(params, X, cfg, residual=residual)):
        for u, v in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            assert u.shape == v.shape and torch.allclose(u, v, rtol=1e-14, atol=1e-15)
    assert phi_and_grad(params, X, Y, cfg, residual=residual, trace=False)[2] is None


def test_vmap_of_grad_of_phi_equals_autograd_one_by_one():
    """Also: a mask made inside a torch.func transform is not reused by a later pass or transform."""
    cfg, _, X, Y = small_instance(L=2)
    plist = [init_params(cfg, seed=s) for s in range(3)]
    stacked = {k: torch.stack([p[k] for p in plist]) for k in plist[0]}
    grads = torch.func.vmap(torch.func.grad(convres.phi), in_dims=(0, None, None, None))(stacked, X, Y, cfg)
    for i, p in enumerate(plist):
        w = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        auto = torch.autograd.grad(loss(w, X, Y, cfg), list(w.values()))
        for k, g in zip(w, auto):
            assert torch.allclose(grads[k][i], g, rtol=1e-12, atol=1e-13), k
    out = torch.func.vmap(lambda p: convres.forward_trace(p, X, cfg).F)(stacked)
    assert torch.allclose(out, forward(stacked, X, cfg), rtol=1e-13, atol=1e-14)
    # the checked entry points refuse to be traced by vmap rather than skip their checks
    with pytest.raises(RuntimeError):
        torch.func.vmap(convres.forward, in_dims=(0, None, None))(stacked, X, cfg)
    norms = [hessian_norm(plist[0], X, Y, cfg, iters=3) for _ in range(2)]   # Hessian-vector products
    assert norms[0] == norms[1] > 0


def test_activation_table_constants():
    x = torch.linspace(-8, 8, 200001, dtype=torch.float64, requires_grad=True)
    for name, act in ACTIVATIONS.items():
        y = act(x)
        d1, = torch.autograd.grad(y.sum(), x, create_graph=True)
        top = float(d1.detach().abs().max())   # the constants are suprema: attained or nearly so
        assert 0.999 * act.lip < top <= act.lip + 1e-9, name
        if act.smooth:
            d2, = torch.autograd.grad(d1.sum(), x)
            top2 = float(d2.abs().max())
            assert 0.999 * act.lip2 < top2 <= act.lip2 + 1e-9, name
        ratio = (y.detach() / x.detach()).abs()
        assert float(ratio[x.detach().abs() > 1e-3].max()) <= act.gain + 1e-9, name


def paper_forward(params, X, L, beta_attn, beta_ffn, s):
    """The model as the paper writes it: per block Z = Attn(H) + beta H, H' = FFN(Z) + beta Z."""
    H = X
    for l in range(1, L + 1):
        W = {k: params[f"layer{l}.{k}"] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
        S = torch.softmax(s * H @ W["W_Q"] @ W["W_K"].T @ H.transpose(1, 2), -1)
        Z = S @ H @ W["W_V"] + beta_attn * H
        H = torch.relu(Z @ W["W_1"]) @ W["W_2"] + beta_ffn * Z
    return H @ params["W_U"]


@pytest.mark.parametrize("L,residual,scale,s", [(2, (0.0, 0.0), "1/sqrt(d_qk)", 2 ** -0.5),
                                                (1, (1.0, 1.0), "1/d_qk", 0.5), (2, (0.7, 0.7), "1", 1.0),
                                                (1, (0.0, 1.0), 0.3, 0.3), (2, (1.0, 0.0), None, 2 ** -0.5)])
def test_the_forward_pass_is_the_papers_formula(L, residual, scale, s):
    """Each block, each residual coefficient (or both) and each attention scale as the paper writes them."""
    cfg, params, X, _ = small_instance(L=L)
    default = {} if scale is None else {"scale": scale}
    cfg = cfg.replace(beta_attn=residual[0], beta_ffn=residual[1], **default)
    paper = paper_forward(params, X, L, *residual, s)
    assert torch.allclose(forward(params, X, cfg), paper, atol=1e-13, rtol=0)


def test_init_is_deterministic_seeded_and_of_full_rank():
    cfg = ModelConfig(d=8, d_qk=8, m=8, c=1, L=2)
    a, b, c = init_params(cfg, seed=5), init_params(cfg, seed=5), init_params(cfg, seed=6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["W_U"], c["W_U"])
    assert {k: tuple(v.shape) for k, v in a.items()} == param_shapes(cfg)
    assert all(v.dtype == torch.float64 and torch.linalg.matrix_rank(v) == min(v.shape) for v in a.values())


def test_pool_mean_gives_one_output_per_sequence():
    cfg, params, X, Y = small_instance(pool="mean")
    assert tuple(forward(params, X, cfg).shape) == (2, cfg.c) == tuple(Y.shape)


CFG0, P0, X0, Y0 = small_instance()
BAD_CALLS = {   # what is wrong -> (the call, a name its error must say); an overflow is an error, not NaN
    # the numeric fields: tests/test_values.py
    **{f"config {f}={v!r}": (lambda f=f, v=v: ModelConfig(**dict(SMALL, **{f: v})), f)
       for f, v in [("activation", "sigmoidish"), ("scale", "1/sqrt(d)"), ("pool", "max")]},
    "init dtype": (lambda: init_params(CFG0, dtype=torch.int64), "dtype"),
    "init seed": (lambda: init_params(CFG0, seed=2**70), "seed"),
    # one per policy of check_inputs (more forms of X and Y: tests/test_gd.py)
    "W_U missing": (lambda: check_inputs({k: v for k, v in P0.items() if k != "W_U"}, X0, Y0, CFG0), "W_U"),
    "W_V of another shape": (lambda: check_inputs(dict(P0, **{"layer1.W_V": P0["W_U"][:2]}), X0, Y0, CFG0),
                             "layer1.W_V"),
    "numpy weights": (lambda: check_inputs({k: v.numpy() for k, v in P0.items()}, X0, Y0, CFG0), "params"),
    "X one sequence": (lambda: check_inputs(P0, X0[0], Y0, CFG0), "X.unsqueeze"),
    "no tokens": (lambda: check_inputs(P0, X0[:, :0], Y0[:, :0], CFG0), "X"),
    "loss overflows": (lambda: loss(P0, X0 * 1e160, Y0, CFG0), "overflow"),
    "cfg a dict": (lambda: forward(P0, X0, {"d": 3}), "ModelConfig"),
    "init cfg a dict": (lambda: init_params({"d": 3}), "ModelConfig"),
    "weights of mixed dtypes": (lambda: forward(dict(P0, W_U=P0["W_U"].float()), X0, CFG0), "weights"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_CALLS[case])


# --- the cost policy: checked before anything is allocated ---------------------------------------------

BUDGET = 16 * 2**20          # the memory the property below pretends the machine has

huge = st.one_of(st.integers(1, 8), st.integers(1, 10**3), st.integers(1, 10**7))
layers = st.one_of(st.integers(1, 3), st.integers(1, 10**4))
tokens = st.one_of(st.integers(1, 8), st.integers(500, 5000), st.integers(1, 10**7))   # attention: n^2


@settings(max_examples=200)
@given(d=huge, d_qk=huge, m=huge, c=st.integers(1, 3), L=layers, N=huge, n=tokens,
       pool=st.sampled_from([None, "mean"]), B=st.sampled_from([None, 1, 3]))
def test_the_cost_policy_refuses_before_allocating_whatever_the_sizes(monkeypatch, d, d_qk, m, c, L, N, n,
                                                                      pool, B):
    """For any sizes the cost policy refuses before allocating, or the estimate bounds what runs."""
    monkeypatch.setattr(convres.runtime, "available_memory", lambda device=None: BUDGET)
    cfg = ModelConfig(d=d, d_qk=d_qk, m=m, c=c, L=L, pool=pool)
    sizes = f"d={d}, d_qk={d_qk}, m={m}, c={c}, L={L}"
    if memory_estimate(cfg, 0, 0, training=False) > BUDGET:
        with pytest.raises(CostRefused, match=sizes):
            init_params(cfg)
        return event("weights refused")
    params = init_params(cfg)
    assert sum(w.nbytes for w in params.values()) <= memory_estimate(cfg, 0, 0, training=False)
    if N * n * d * L > 10**5:    # an input (or a run) too large for a unit test: the weights were checked
        return event("weights accepted, no input")
    stacked = {k: v.expand(B, *v.shape).contiguous() for k, v in params.items()} if B else params
    X, Y = synthetic_regression(N, n, d, c, seed=0, pooled=pool == "mean")
    on = f"N={N}, n={n}, d={d}"
    if memory_estimate(cfg, N, n, configs=B or 1, training=False) > BUDGET:
        for call in (lambda: forward(stacked, X, cfg), lambda: loss(stacked, X, Y, cfg)):
            with pytest.raises(CostRefused, match=on):
                call()
        event("forward refused")
    else:
        trace = forward_trace(stacked, X, cfg)
        kept = sum(t.nbytes for field in trace[:6] for t in field) + trace.F.nbytes
        assert kept <= memory_estimate(cfg, N, n, configs=B or 1, training=False)
        assert torch.equal(forward(stacked, X, cfg), trace.F)
    if memory_estimate(cfg, N, n) > BUDGET:
        with pytest.raises(CostRefused, match=on):
            gradient_descent(params, X, Y, cfg, 1e-3, 1)
        event("gradient descent refused")
    else:
        assert gradient_descent(params, X, Y, cfg, 1e-3, 1).history.steps in (0, 1)
