"""The batched engine: equal to one-by-one gradient descent, its hand-written gradient, errors,
devices, and the benchmark's plain loop. No test here asserts a wall-clock time."""

import json

import numpy as np
import pytest
import torch

from convres import ModelConfig, gradient_descent, init_params, synthetic_regression
from convres.bench import PlainTransformer, compare_sweep, plain_sweep, sweep_instance
from convres.cli import main
from convres.engine import _loss_and_grad, batched_loss, gradient_descent_batch, torch_threads
from convres.model import forward

TOL = 1e-10


def assert_same(batch, singles):
    """Every (params, History) of the batch equals the one-by-one run to TOL."""
    assert len(batch) == len(singles)
    for (theta_b, hb), (theta_s, hs) in zip(batch, singles):
        assert hb.status == hs.status and hb.message == hs.message and hb.mu == hs.mu
        assert hb.steps == hs.steps
        np.testing.assert_array_equal(hb.record_steps, hs.record_steps)
        for field in ("loss", "grad_norm", "sigma_min_Z", "sigma_max_Z", "sigma_min_H", "sigma_max_H"):
            a, b = getattr(hb, field), getattr(hs, field)
            assert a.shape == b.shape, field
            np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=field)
        assert list(theta_b) == list(theta_s)
        for k in theta_s:
            assert theta_b[k].shape == theta_s[k].shape
            assert float((theta_b[k] - theta_s[k]).abs().max()) < TOL, k
            assert torch.isfinite(theta_b[k]).all()


def one_by_one(params_list, X, Y, cfgs, mus, steps, **kw):
    return [gradient_descent(p, X, Y, c, m, steps, **kw) for p, c, m in zip(params_list, cfgs, mus)]


def sweep(L=1, activation="relu", pool=None, d=6, N=4, n=3):
    cfg = ModelConfig(d=d, d_qk=d, m=d + 2, c=2, L=L, activation=activation, pool=pool)
    X, Y = synthetic_regression(N, n, d, 2, seed=0, pooled=pool == "mean")
    betas = (0.0, 0.3, 1.0, 1.0)
    cfgs = [cfg.replace(beta=b) for b in betas]
    params = [init_params(cfg, seed=s) for s in (1, 2, 3, 4)]
    mus = [1e-3, 2e-3, 1e-3, 5e-4]
    return params, X, Y, cfgs, mus


@pytest.mark.parametrize("L,activation,pool", [
    (1, "relu", None), (2, "relu", None), (1, "gelu", None), (2, "tanh", None),
    (1, "softplus", None), (1, "relu", "mean"), (2, "gelu", "mean"),
])
def test_batch_equals_one_by_one(L, activation, pool):
    params, X, Y, cfgs, mus = sweep(L, activation, pool)
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 30, record_every=7)
    assert_same(batch, one_by_one(params, X, Y, cfgs, mus, 30, record_every=7))


def test_separate_residual_coefficients_and_other_scales():
    cfg = ModelConfig(d=5, d_qk=3, m=4, c=1, scale="1/d_qk")
    X, Y = synthetic_regression(3, 4, 5, 1, seed=5)
    cfgs = [cfg.replace(beta_attn=0.0, beta_ffn=1.0), cfg.replace(beta_attn=1.0, beta_ffn=0.0),
            cfg.replace(beta=0.5)]
    params = [init_params(cfg, seed=s) for s in (7, 8, 9)]
    batch = gradient_descent_batch(params, X, Y, cfgs, 2e-3, 40)
    assert_same(batch, one_by_one(params, X, Y, cfgs, [2e-3] * 3, 40))


def test_a_diverging_configuration_stops_while_the_others_go_on():
    params, X, Y, cfgs, _ = sweep(L=2)
    mus = [1e-3, 0.5, 1e-3, 1e4]           # two of them blow up, at different steps
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 40, record_every=10)
    singles = one_by_one(params, X, Y, cfgs, mus, 40, record_every=10)
    assert_same(batch, singles)
    statuses = [h.status for _, h in batch]
    assert statuses.count("diverged") == 2 and statuses.count("max_steps") == 2
    assert len({h.steps for _, h in batch if h.diverged}) == 2


def test_blowup_threshold_divergence():
    params, X, Y, cfgs, _ = sweep()
    mus = [1e-3, 1.0, 1e-3, 1e-3]
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 30, blowup=2.0)
    singles = one_by_one(params, X, Y, cfgs, mus, 30, blowup=2.0)
    assert_same(batch, singles)
    assert any("exceeded 2 x the initial loss" in h.message for _, h in batch)


def test_tolerance_stops_each_configuration_at_its_own_step():
    cfg = ModelConfig(d=6, d_qk=6, m=6, c=1)
    X, Y = synthetic_regression(4, 3, 6, 1, seed=0)
    cfgs = [cfg.replace(beta=b) for b in (0.5, 1.0, 1.0)]
    params = [init_params(cfg, seed=s) for s in (1, 1, 2)]
    mus = [0.02, 0.02, 0.01]
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 400, tol=0.1, record_every=50)
    singles = one_by_one(params, X, Y, cfgs, mus, 400, tol=0.1, record_every=50)
    assert_same(batch, singles)
    steps = [h.steps for _, h in batch]
    assert all(h.status == "converged" for _, h in batch) and len(set(steps)) == 3


def test_zero_steps_and_single_configuration():
    params, X, Y, cfgs, mus = sweep()
    assert_same(gradient_descent_batch(params, X, Y, cfgs, mus, 0),
                one_by_one(params, X, Y, cfgs, mus, 0))
    assert_same(gradient_descent_batch(params[:1], X, Y, cfgs[0], mus[0], 25),
                one_by_one(params[:1], X, Y, cfgs[:1], mus[:1], 25))
    assert gradient_descent_batch([], X, Y, [], [], 10) == []


@pytest.mark.parametrize("L,activation,pool", [(2, "relu", None), (1, "gelu", "mean"),
                                               (2, "tanh", None), (1, "softplus", None)])
def test_hand_written_gradient_equals_autograd(L, activation, pool):
    params, X, Y, cfgs, _ = sweep(L, activation, pool)
    theta = {k: torch.stack([p[k] for p in params]) for k in params[0]}
    b_attn = torch.tensor([c.b_attn for c in cfgs], dtype=torch.float64)
    b_ffn = torch.tensor([c.b_ffn for c in cfgs], dtype=torch.float64)
    w = {k: v.clone().requires_grad_(True) for k, v in theta.items()}
    phi = batched_loss(w, X, Y, cfgs[0], b_attn, b_ffn)
    auto = torch.autograd.grad(phi.sum(), list(w.values()))
    phi2, grads, _, _ = _loss_and_grad(theta, X, Y, cfgs[0], b_attn, b_ffn)
    assert torch.allclose(phi, phi2, rtol=1e-13, atol=0)
    for (k, g_hand), g_auto in zip(grads.items(), auto):
        assert torch.allclose(g_hand, g_auto, rtol=1e-11, atol=1e-12), k


def test_inputs_are_not_modified_and_outputs_are_independent():
    params, X, Y, cfgs, mus = sweep()
    before = [{k: v.clone() for k, v in p.items()} for p in params]
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 5)
    for p, b in zip(params, before):
        assert all(torch.equal(p[k], b[k]) for k in p)
    theta0 = batch[0][0]["W_U"]
    theta0 += 1.0
    assert not torch.equal(batch[1][0]["W_U"], theta0)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), None])
def test_device_argument_cpu(device):
    params, X, Y, cfgs, mus = sweep()
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 5, device=device)
    assert all(v.device.type == "cpu" for theta, _ in batch for v in theta.values())
    assert_same(batch, one_by_one(params, X, Y, cfgs, mus, 5))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_device_argument_cuda():  # pragma: no cover (no GPU on the CI machine)
    params, X, Y, cfgs, mus = sweep()
    batch = gradient_descent_batch(params, X, Y, cfgs, mus, 20, device="cuda")
    assert all(v.device.type == "cuda" for theta, _ in batch for v in theta.values())
    for (_, hb), (_, hs) in zip(batch, one_by_one(params, X, Y, cfgs, mus, 20)):
        np.testing.assert_allclose(hb.loss, hs.loss, rtol=1e-9)


def test_float32_runs_and_matches_roughly():
    params, X, Y, cfgs, mus = sweep()
    p32 = [{k: v.float() for k, v in p.items()} for p in params]
    batch = gradient_descent_batch(p32, X.float(), Y.float(), cfgs, mus, 20)
    for (theta, hb), (_, hs) in zip(batch, one_by_one(params, X, Y, cfgs, mus, 20)):
        assert theta["W_U"].dtype == torch.float32
        np.testing.assert_allclose(hb.loss, hs.loss, rtol=1e-4)


def test_bad_input_gives_clear_errors():
    params, X, Y, cfgs, mus = sweep()
    with pytest.raises(ValueError, match="same length"):
        gradient_descent_batch(params, X, Y, cfgs[:2], mus, 5)
    with pytest.raises(ValueError, match="beta/beta_attn/beta_ffn"):
        gradient_descent_batch(params[:2], X, Y, [cfgs[0], cfgs[1].replace(activation="tanh")], 1e-3, 5)
    with pytest.raises(TypeError, match="list of parameter dicts"):
        gradient_descent_batch(params[0], X, Y, cfgs[0], 1e-3, 5)
    with pytest.raises(ValueError, match=r"params_list\[1\]"):
        bad = dict(params[1], W_U=torch.zeros(3, 3, dtype=torch.float64))
        gradient_descent_batch([params[0], bad], X, Y, cfgs[0], 1e-3, 5)
    with pytest.raises(ValueError, match="step size mu"):
        gradient_descent_batch(params, X, Y, cfgs, [1e-3, -1.0, 1e-3, 1e-3], 5)
    with pytest.raises(TypeError, match="cfgs"):
        gradient_descent_batch(params, X, Y, "relu", mus, 5)
    with pytest.raises(ValueError, match="Y has shape"):
        gradient_descent_batch(params, X, Y[:, :, :1], cfgs, mus, 5)


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with torch_threads(0):
            pass


# --- the benchmark ---------------------------------------------------------------------------------

def test_plain_module_is_the_same_model():
    params, X, Y, cfgs, _ = sweep(L=2, activation="gelu", pool="mean")
    for p, cfg in zip(params, cfgs):
        assert torch.allclose(PlainTransformer(cfg, p)(X), forward(p, X, cfg), rtol=0, atol=1e-13)


def test_plain_loop_gives_the_engines_losses():
    params, X, Y, cfgs, mus = sweep_instance("theorem", 4)
    plain = plain_sweep(params, X, Y, cfgs, mus, 30)
    for a, (_, h) in zip(plain, gradient_descent_batch(params, X, Y, cfgs, mus, 30)):
        np.testing.assert_allclose(a, h.loss, rtol=1e-12, atol=1e-12)


def test_compare_sweep_reports_consistent_fields():
    r = compare_sweep("theorem", 2, 5, 2)
    assert r["max_abs_loss_diff"] < TOL and len(r["plain_seconds"]) == len(r["engine_seconds"]) == 2
    assert r["speedup"] > 0 and r["plain_steps_per_s"] > 0 and r["engine_steps_per_s"] > 0
    with pytest.raises(ValueError, match="size"):
        sweep_instance("huge", 2)


def test_cli_bench_json(capsys):
    assert main(["bench", "--profile", "tiny", "--no-memory", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("speedup", "single_run_seconds", "max_abs_loss_diff", "peak_memory_mb"):
        assert isinstance(result[key], float), key
    assert result["max_abs_loss_diff"] < TOL and result["peak_memory_mb"] > 0
    assert set(result["sweeps"]) == {"theorem", "jena"}
    # each top-level field says which sweep(s) it comes from
    assert result["speedup_sweep"] == "theorem" and result["speedup"] == result["sweeps"]["theorem"]["speedup"]
    assert result["max_abs_loss_diff_sweeps"] == ["theorem", "jena"]
    assert result["max_abs_loss_diff"] == max(s["max_abs_loss_diff"] for s in result["sweeps"].values())
    assert set(result["fields"]) == {"speedup", "single_run_seconds", "max_abs_loss_diff", "peak_memory_mb"}


def test_check_device():
    from convres.engine import check_device
    assert check_device("cpu") == torch.device("cpu") and check_device(None) == torch.device("cpu")
    assert check_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu'.*'cuda'"):
        check_device("gpu")
    with pytest.raises(TypeError, match="device must be a str"):
        check_device(0.5)
    with pytest.raises(ValueError, match="not supported by convres"):
        check_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda'.*(no CUDA support|no CUDA device)"):
            check_device("cuda")


def test_engine_and_bench_reject_bad_devices_clearly(capsys):
    params, X, Y, cfgs, mus = sweep_instance("theorem", 2)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        gradient_descent_batch(params, X, Y, cfgs, mus, 2, device="gpu")
    assert main(["bench", "--profile", "tiny", "--device", "gpu"]) == 2
    assert "unknown device 'gpu'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["bench", "--profile", "tiny", "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert "device 'cuda'" in err and "use device 'cpu'" in err and "Traceback" not in err


def test_cached_benchmark_computes_when_missing_then_reads(monkeypatch, tmp_path):
    import convres.bench as bench
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(bench, "run_benchmark", lambda *a, **k: calls.append(1) or {"speedup": 2.0})
    assert bench.cached_benchmark("tiny") == ({"speedup": 2.0}, False) and len(calls) == 1
    assert bench.cached_benchmark("tiny") == ({"speedup": 2.0}, True) and len(calls) == 1
    assert bench.cache_path("tiny").parent == tmp_path
    assert bench.cached_benchmark("tiny", refresh=True)[1] is False and len(calls) == 2
    with pytest.raises(ValueError, match="profile"):
        bench.cached_benchmark("huge")


def test_speed_figure_has_labelled_axes():
    from convres.bench import plot_speed
    from convres.plotting import figure

    sweep_ = {"configs": 8, "plain_steps_per_s": 10.0, "engine_steps_per_s": 20.0, "speedup": 2.0}
    fig, ax = figure(1)
    plot_speed(ax, {"sweeps": {"theorem": sweep_, "jena": {**sweep_, "speedup": 0.5}}})
    assert ax.get_xlabel() and ax.get_ylabel() and [t.get_text() for t in ax.texts] == ["2.0x", "0.5x"]
