"""Gradient descent: runs and sweeps, stopping rules, callbacks, devices, dtypes and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import ModelConfig, forward_trace, gradient_descent, init_params, loss, synthetic_regression
from convres import sweep as run_sweep
from convres.gd import History, Run, Step, chunk_size

TOL = 1e-10


def instance(beta=1.0):
    cfg = ModelConfig(d=6, d_qk=6, m=6, c=1, beta=beta)
    X, Y = synthetic_regression(4, 3, 6, 1, seed=0)
    return cfg, init_params(cfg, seed=1), X, Y


def sweep(L=1, activation="relu", pool=None, d=6, N=4, n=3):
    cfg = ModelConfig(d=d, d_qk=d, m=d + 2, c=2, L=L, activation=activation, pool=pool)
    X, Y = synthetic_regression(N, n, d, 2, seed=0, pooled=pool == "mean")
    cfgs = [cfg.replace(beta=b) for b in (0.0, 0.3, 1.0, 1.0)]
    params = [init_params(cfg, seed=s) for s in (1, 2, 3, 4)]
    return params, X, Y, cfgs, [1e-3, 2e-3, 1e-3, 5e-4]


def assert_same(runs_a, runs_b, tol=TOL):
    """Two lists of runs agree: statuses, messages, every recorded array and the final weights."""
    assert len(runs_a) == len(runs_b)
    for (theta_a, ha), (theta_b, hb) in zip(runs_a, runs_b):
        assert (ha.status, ha.message, ha.mu, ha.steps) == (hb.status, hb.message, hb.mu, hb.steps)
        np.testing.assert_array_equal(ha.record_steps, hb.record_steps)
        for field in ("loss", "grad_norm", "sigma_min_Z", "sigma_max_Z", "sigma_min_H", "sigma_max_H"):
            np.testing.assert_allclose(getattr(ha, field), getattr(hb, field), rtol=tol, atol=tol,
                                       err_msg=field)
        assert list(theta_a) == list(theta_b)
        for k in theta_a:
            assert float((theta_a[k] - theta_b[k]).abs().max()) < tol, k
            assert torch.isfinite(theta_a[k]).all()


def one_by_one(params, X, Y, cfg, mu, steps, chunk=None, **kw):
    """The runs of a sweep one at a time (``X``, ``Y``, ``cfg``, ``mu``: one for all, or a list)."""
    each = [v if isinstance(v, list) else [v] * len(params) for v in (X, Y, cfg, mu)]
    return [gradient_descent(p, *args, steps, **kw) for p, *args in zip(params, *each)]


def test_a_non_finite_start_blames_the_scale_not_mu():
    cfg, params, X, Y = instance(beta=1e300)
    theta, h = gradient_descent(params, X, Y, cfg, mu=0.01, steps=5)
    assert h.status == "diverged" and "initial loss" in h.message and "mu" not in h.message
    assert h.steps == 0 and len(h.loss) == 1 and not np.isfinite(h.loss[0]) and h.diverged_at == 0
    assert all(torch.equal(theta[k], params[k]) for k in params)   # the (finite) starting point


def test_a_run_records_every_k_steps_is_deterministic_and_round_trips_through_a_dict():
    cfg, params, X, Y = instance()
    run = gradient_descent(params, X, Y, cfg, mu=0.01, steps=25, record_every=10)
    h = run.history
    assert isinstance(run, Run) and run.history is run[1] and run.params is run[0]
    assert h.record_steps.tolist() == [0, 10, 20, 25]
    assert len(h.loss) == 26 and len(h.grad_norm) == 25 and len(h.ratio) == 25
    assert np.all(h.sigma_min_Z <= h.sigma_max_Z) and np.all(h.sigma_min_H > 0)
    Z = torch.linalg.svdvals(forward_trace(params, X, cfg).Z[0].reshape(-1, 6))   # the model's Z, stacked
    assert h.sigma_min_Z[0] == pytest.approx(float(Z[-1]), rel=1e-12)
    assert_same([run], [gradient_descent(params, X, Y, cfg, mu=0.01, steps=25, record_every=10)], tol=1e-300)
    h2 = History.from_dict(h.to_dict())
    assert np.array_equal(h.loss, h2.loss) and h2.status == h.status and h2.record_steps.dtype == np.int64


STACKED = {f"L={L}, {act}, pool {pool}, chunk {chunk}": (L, act, pool, chunk) for chunk in (1, 3, None)
           for L, act, pool in ((1, "relu", None), (2, "gelu", None), (2, "tanh", "mean"))}


def sweep_case(name):
    """A sweep of several kinds: ``(params, X, Y, cfg, mu, steps, keywords)``."""
    if name in STACKED:
        return (*sweep(*STACKED[name][:3]), 30, dict(record_every=7, chunk=STACKED[name][3]))
    if name == "separate residuals, another scale":
        cfg = ModelConfig(d=5, d_qk=3, m=4, c=1, scale="1/d_qk")
        X, Y = synthetic_regression(3, 4, 5, 1, seed=5)
        cfgs = [cfg.replace(beta_attn=0.0, beta_ffn=1.0), cfg.replace(beta_attn=1.0, beta_ffn=0.0),
                cfg.replace(beta=0.5)]
        return [init_params(cfg, seed=s) for s in (7, 8, 9)], X, Y, cfgs, 2e-3, 40, {}
    if name == "configurations of different sizes":
        params, X, Y, cfgs, mus = sweep()
        wide = cfgs[0].replace(m=11, activation="gelu")
        return params[:2] + [init_params(wide, seed=5)], X, Y, cfgs[:2] + [wide], mus[:3], 10, {}
    if name == "two diverge at different steps":
        params, X, Y, cfgs, _ = sweep(L=2)
        return params, X, Y, cfgs, [1e-3, 0.5, 1e-3, 1e4], 40, dict(record_every=10, chunk=4)
    if name == "a blowup threshold":
        params, X, Y, cfgs, _ = sweep()
        return params, X, Y, cfgs, [1e-3, 1.0, 1e-3, 1e-3], 30, dict(blowup=2.0, chunk=4)
    if name == "converged at different steps":
        cfg = ModelConfig(d=6, d_qk=6, m=6, c=1)
        X, Y = synthetic_regression(4, 3, 6, 1, seed=0)
        params = [init_params(cfg, seed=s) for s in (1, 1, 2)]
        cfgs = [cfg.replace(beta=b) for b in (0.5, 1.0, 1.0)]
        return params, X, Y, cfgs, [0.02, 0.02, 0.01], 400, dict(tol=0.1, record_every=50, chunk=3)
    if name == "zero steps":
        return (*sweep(), 0, {})
    pool = "mean" if name.endswith("pooled") else None   # data per configuration, one diverging with pool
    cfg = ModelConfig(d=6, d_qk=4, m=5, c=2, activation="tanh" if pool else "gelu", pool=pool)
    data = [synthetic_regression(3, 4, 6, 2, seed=s, pooled=pool == "mean") for s in range(4)]
    mus = [0.05, 50.0, 0.05, 0.02] if pool else [0.01] * 4
    params = [init_params(cfg, seed=20 + s) for s in range(4)]
    return params, [X for X, _ in data], [Y for _, Y in data], cfg, mus, 60, dict(rtol=0.3)


SWEEP_CHECKS = {   # a sweep -> what its runs show besides equalling the runs one by one
    **dict.fromkeys(STACKED),
    "separate residuals, another scale": None,
    "configurations of different sizes": None,
    "two diverge at different steps": lambda hs: [h.status for h in hs].count("diverged") == 2
    and [h.status for h in hs].count("max_steps") == 2 and len({h.steps for h in hs if h.diverged}) == 2
    and "mu=10000" in hs[3].message and all(np.isfinite(h.loss).all() for h in hs),
    "a blowup threshold": lambda hs: any("exceeded 2 x the initial loss" in h.message for h in hs),
    "converged at different steps": lambda hs: all(h.status == "converged" for h in hs)
    and len({h.steps for h in hs}) == 3 and all(h.loss[-1] <= 0.1 < h.loss[-2] for h in hs)
    and all(len(h.grad_norm) == h.steps for h in hs),
    "zero steps": lambda hs: all(h.steps == 0 for h in hs),
    **{f"data per configuration{pool}": lambda hs: len({h.steps for h in hs}) > 1
       and "converged" in {h.status for h in hs} for pool in ("", ", pooled")},
}


@pytest.mark.parametrize("name", list(SWEEP_CHECKS))
def test_a_sweep_of_each_kind_equals_its_runs_one_by_one(name):
    params, X, Y, cfg, mu, steps, kw = sweep_case(name)
    runs = run_sweep(params, X, Y, cfg, mu, steps, **kw)
    assert_same(runs, one_by_one(params, X, Y, cfg, mu, steps, **kw))
    check = SWEEP_CHECKS[name]
    assert check is None or check([h for _, h in runs])


def test_callback_sees_every_iterate_of_every_run():
    params, X, Y, cfgs, mus = sweep()
    seen = []

    def cb(step: Step):
        seen.append((step.index, step.t, step.loss, step.grads is None))
        assert step.trace.F.shape == Y.shape and step.trace.H[-1].shape == X.shape
        assert step.params["W_U"].shape == (6, 2)

    runs = run_sweep(params, X, Y, cfgs, mus, 4, callback=cb, chunk=2)
    for i, (_, h) in enumerate(runs):
        mine = [s for s in seen if s[0] == i]
        assert [t for _, t, _, _ in mine] == list(range(5))
        np.testing.assert_allclose([v for _, _, v, _ in mine], h.loss, rtol=1e-15)
        assert [last for *_, last in mine] == [False] * 4 + [True]   # no gradient at the last iterate
    with pytest.raises(ZeroDivisionError, match="division by zero"):   # the callback's own error
        run_sweep(params, X, Y, cfgs, mus, 4, callback=lambda step: 1 / 0)


def test_chunk_size_stacks_small_problems_only():
    cfg = ModelConfig(d=16, d_qk=16, m=16)
    assert chunk_size(cfg, torch.zeros(2, 4, 16), 8) == 8
    assert chunk_size(cfg.replace(d=11, d_qk=11, m=32), torch.zeros(321, 24, 11), 8) == 1


NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("device,dtype", [("cpu", torch.float64), (None, torch.float32),
                                          pytest.param("cuda", torch.float64, marks=NO_CUDA)])
def test_the_device_and_dtype_of_a_sweep(device, dtype):
    params, X, Y, cfgs, mus = sweep()
    cast = [{k: v.to(dtype) for k, v in p.items()} for p in params]
    runs = run_sweep(cast, X.to(dtype), Y.to(dtype), cfgs, mus, 20, device=device)
    assert all(v.device.type == str(device or "cpu") and v.dtype == dtype
               for theta, _ in runs for v in theta.values())
    for (_, ha), (_, hb) in zip(runs, one_by_one(params, X, Y, cfgs, mus, 20)):
        np.testing.assert_allclose(ha.loss, hb.loss, rtol=1e-9 if dtype == torch.float64 else 1e-4)


def test_edge_values_run_as_documented():
    cfg, params, X, Y = instance()
    assert gradient_descent(params, X, Y, cfg, 0.01, 3, record_every=10**9)[1].record_steps.tolist() == [0, 3]
    assert gradient_descent(params, X, Y, cfg, 0.01, 3, tol=float("inf"))[1].status == "converged"
    out, h = gradient_descent(params, X, Y, cfg, 1e6, 50, blowup=float("inf"))
    assert h.status == "diverged" and all(bool(torch.isfinite(v).all()) for v in out.values())
    assert gradient_descent(params, X, Y, cfg, np.float32(0.01), np.int64(3))[1].steps == 3
    assert run_sweep([], X, Y, [], [], 10) == []


P4, X4, Y4, CFGS4, MUS4 = sweep()
BAD_SWEEPS = {   # what is wrong -> (the call, a name its error must say); one argument: PERTURB below
    "lists of other lengths": (lambda: run_sweep(P4, X4, Y4, CFGS4[:2], MUS4, 5), "cfg"),
    "one weight dict": (lambda: run_sweep(P4[0], X4, Y4, CFGS4, MUS4, 5), "weight dicts"),
    "a list to gradient_descent": (lambda: gradient_descent(P4, X4, Y4, CFGS4, MUS4, 5), "convres.sweep"),
    "a bad mu in one": (lambda: run_sweep(P4, X4, Y4, CFGS4, [1e-3, -1.0, 1e-3, 1e-3], 5), "configuration 1"),
    "X a list, Y not": (lambda: run_sweep(P4, [X4] * 4, Y4, CFGS4[0], 0.01, 3), "X"),
    "an unknown device": (lambda: run_sweep(P4, X4, Y4, CFGS4, MUS4, 2, device="gpu"), "device"),
    "chunk=0": (lambda: run_sweep(P4, X4, Y4, CFGS4, MUS4, 3, chunk=0), "chunk"),
}


@pytest.mark.parametrize("case", list(BAD_SWEEPS))
def test_a_bad_sweep_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_SWEEPS[case])


def reference_descent(params, X, Y, cfg, mu, steps):
    """Plain gradient descent with autograd, step after step: the losses and gradient norms."""
    w, losses, norms = {k: v.clone() for k, v in params.items()}, [], []
    for t in range(steps + 1):
        leaves = {k: v.requires_grad_(True) for k, v in w.items()}
        phi = loss(leaves, X, Y, cfg)
        losses.append(float(phi.detach()))
        if t == steps:
            break
        grads = torch.autograd.grad(phi, list(leaves.values()))
        norms.append(float(torch.sqrt(sum(g.pow(2).sum() for g in grads))))
        w = {k: (v - mu * g).detach() for (k, v), g in zip(leaves.items(), grads)}
    return np.array(losses), np.array(norms), w


@pytest.mark.parametrize("L,activation,pool", [(1, "gelu", None), (2, "relu", "mean")])
def test_a_run_equals_plain_gradient_descent_with_autograd_and_descends(L, activation, pool):
    params, X, Y, cfgs, mus = sweep(L, activation, pool)
    for (theta, h), p, c, m in zip(run_sweep(params, X, Y, cfgs, mus, 150), params, cfgs, mus):
        losses, norms, w = reference_descent(p, X, Y, c, m, 150)
        np.testing.assert_allclose(h.loss, losses, rtol=1e-12)
        assert h.status == "max_steps" and np.all(np.diff(h.loss) < 0)     # small steps: a descent
        np.testing.assert_allclose(h.grad_norm, norms, rtol=1e-12)
        assert all(torch.allclose(theta[k], w[k], rtol=1e-12, atol=1e-14) for k in w)


def test_blocks_of_steps_give_the_same_runs_as_step_by_step():
    """Runs stopping inside a block (any status, records off the grid) equal those step by step."""
    params, X, Y, cfgs, _ = sweep(L=2)
    cfgs += cfgs[:2]
    params += [init_params(cfgs[0], seed=s) for s in (5, 6)]
    mus = [1e-3, 0.5, 1e-3, 1e4, 3e-3, 2e-3]
    kw = dict(record_every=7, chunk=6, rtol=0.9)
    blocks = run_sweep(params, X, Y, cfgs, mus, 90, **kw)
    steps = run_sweep(params, X, Y, cfgs, mus, 90, callback=lambda step: None, **kw)
    assert_same(blocks, steps, tol=1e-300)                      # the same arithmetic: equal
    statuses = [h.status for _, h in blocks]
    assert set(statuses) == {"diverged", "converged", "max_steps"}, statuses
    assert any(h.record_steps[-1] % 7 for _, h in blocks)       # a record at a stop off the grid


# --- properties at the entry point: a result, or an error of convres's own naming the argument; never a
# raw PyTorch or Python error, never a silently changed result (an equal value gives the same losses; the
# caller's tensors are never modified) ------------------------------------------------------------------

CFG = ModelConfig(d=4, d_qk=4, m=4)
P0 = init_params(CFG, seed=1)
X0, Y0 = synthetic_regression(2, 3, 4, 1, seed=0)
BASE = gradient_descent(P0, X0, Y0, CFG, 0.01, 3).history.loss


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def nan_in(X, rng):
    X = X.clone()
    X[rng.integers(2), rng.integers(3), rng.integers(4)] = pick(rng, [math.nan, math.inf, -math.inf])
    return X


def in_dtype(dtype):
    return {"p": {k: v.to(dtype) for k, v in P0.items()}, "X": X0.to(dtype), "Y": Y0.to(dtype)}


#: kind -> (the arguments it changes, drawn by ``rng``; the names its error must say, none when the
#: run must equal BASE instead: the same value in another form)
PERTURB = {
    "X dtype": (lambda r: {"X": X0.to(pick(r, [torch.float32, torch.float16, torch.int64, torch.bool,
                                               torch.complex64]))}, ("X",)),
    "Y dtype": (lambda r: {"Y": Y0.to(pick(r, [torch.float32, torch.int32, torch.complex128]))}, ("Y",)),
    "params dtype": (lambda r: in_dtype(pick(r, [torch.float16, torch.bfloat16, torch.int64])),
                     ("dtype", "float", "params", "X")),
    "sparse X": (lambda r: {"X": X0.to_sparse()}, ("X",)),
    "meta X": (lambda r: {"X": X0.to("meta")}, ("X",)),
    "NaN in X": (lambda r: {"X": nan_in(X0, r)}, ("X",)),
    "wrong shape X": (lambda r: {"X": X0[..., :r.integers(1, 4)] if r.random() < 0.5 else X0[None]}, ("X",)),
    "non-contiguous X": (lambda r: {"X": X0.transpose(0, 1).contiguous().transpose(0, 1)}, ()),
    "X requires grad": (lambda r: {"X": X0.clone().requires_grad_(True)}, ()),
    "non-contiguous params": (lambda r: {"p": {k: v.t().contiguous().t() for k, v in P0.items()}}, ()),
    "mu": (lambda r: {"mu": pick(r, [0.0, math.nan, "0.01", None, True, torch.tensor([0.01])])}, ("mu",)),
    "steps": (lambda r: {"steps": pick(r, [-1, 2.0, "3", 10**30, torch.tensor(1.5)])}, ("steps",)),
}   # numbers in other forms: tests/test_values.py


@settings(max_examples=150)
@given(kind=st.sampled_from(list(PERTURB)), seed=st.integers(0, 2**32 - 1), grad_mode=st.sampled_from(
    ["enabled", "no_grad", "inference_mode"]))
def test_gradient_descent_gives_a_result_or_names_the_argument(kind, seed, grad_mode, own_error):
    change, names = PERTURB[kind]
    args = {"p": dict(P0), "X": X0, "Y": Y0, "mu": 0.01, "steps": 3} | change(np.random.default_rng(seed))
    before = {k: v.clone() for k, v in P0.items()}
    modes = {"enabled": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    try:
        with modes[grad_mode]():
            run = gradient_descent(args["p"], args["X"], args["Y"], CFG, args["mu"], args["steps"])
    except Exception as err:
        own_error(err, *names, *(("inference_mode",) if grad_mode == "inference_mode" else ()))
        return
    finally:
        assert all(torch.equal(before[k], P0[k]) for k in P0), "the caller's weights changed"
    assert grad_mode != "inference_mode", "ran under inference_mode"
    assert all(bool(torch.isfinite(v).all()) for v in run.params.values())
    assert not names, f"{kind}: accepted without a word"
    assert np.allclose(run.history.loss, BASE, rtol=1e-12, atol=0), f"{kind} changed the result"


@settings(max_examples=40)
@given(edit=st.sampled_from(["params", "grads", "trace"]), t=st.integers(0, 3))
def test_a_callback_never_changes_the_callers_weights_or_the_run_silently(edit, t, own_error):
    before = {k: v.clone() for k, v in P0.items()}

    def callback(step):
        if step.t != t:
            return
        target = {"params": step.params, "grads": step.grads or {}, "trace": {"F": step.trace.F}}[edit]
        for v in target.values():
            v.mul_(2.0)
    try:
        loss = gradient_descent(P0, X0, Y0, CFG, 0.01, 3, callback=callback).history.loss
    except RuntimeError as err:
        own_error(err, "callback")
    else:
        assert np.allclose(loss, BASE), "the callback changed the run silently"
    assert all(torch.equal(before[k], P0[k]) for k in P0), "the caller's weights changed"
