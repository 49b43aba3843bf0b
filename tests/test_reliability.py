"""The reliability review's rows (``shared/reviews/reliability.md``), one small test per row that can
be automated; each test names its row(s). Rows already tested elsewhere are listed at their place in
this file with the test that covers them, instead of being tested twice.

Verdict wanted for every row: a clear error that names the problem and the fix (or correct handling),
never a wrong answer, a raw traceback, a hang or lost work.
"""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from convres import (
    ModelConfig,
    collapse,
    experiments,
    forward,
    gradient_descent,
    init_params,
    instances,
    lemmas,
    loss,
    sweep,
    synthetic_regression,
    theory,
)

CFG = ModelConfig(d=4, d_qk=4, m=4)


@pytest.fixture
def inst():
    X, Y = synthetic_regression(3, 4, 4)
    return init_params(CFG), X, Y


def one_line_error(err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines, err
    for needle in needles:
        assert needle in lines[-1], lines[-1]


# --- API: shapes, dtypes, values (rows 1-23) --------------------------------------------------------

def _with(P, **changes):
    return {**P, **changes}


API_ERRORS = [  # (row, call(P, X, Y), exception, message that names the problem and the fix)
    ("row01-rank2", lambda P, X, Y: forward(P, X[0], CFG), ValueError, r"got \(4, 4\).*X\.unsqueeze\(0\)"),
    ("row01-rank4", lambda P, X, Y: forward(P, X.unsqueeze(0), CFG), ValueError, r"\(N sequences, n tokens, "
                                                                                 r"d features\)"),
    ("row02-X-float32", lambda P, X, Y: forward(P, X.float(), CFG), TypeError, r"torch\.float32.*torch\.float64.*X\.to"),
    ("row02-mixed-weights", lambda P, X, Y: forward(_with(P, W_U=P["W_U"].float()), X, CFG), TypeError,
     r"mix dtypes.*w\.double\(\)"),
    ("row03-int", lambda P, X, Y: forward(P, X.long(), CFG), TypeError, r"real floating-point.*int64.*X\.to\(torch\.float64\)"),
    ("row03-complex", lambda P, X, Y: forward(P, X.to(torch.complex128), CFG), TypeError, r"complex128"),
    ("row04-int-weights", lambda P, X, Y: forward({k: v.long() for k, v in P.items()}, X, CFG), TypeError,
     r"real floating-point tensor, got dtype torch.int64.*\.to\(torch.float64\)"),
    ("row05-Y-float32", lambda P, X, Y: loss(P, X, Y.float(), CFG), TypeError, r"Y has dtype torch\.float32"),
    ("row05-Y-shape", lambda P, X, Y: loss(P, X, Y[..., 0], CFG), ValueError, r"Y must have shape \(N=3, "
                                                                              r"n=4, c=1\)"),
    ("row06-nan-X", lambda P, X, Y: forward(P, X * float("nan"), CFG), ValueError, "X contains NaN or "
                                                                                   "infinite"),
    ("row06-inf-Y", lambda P, X, Y: loss(P, X, Y * float("inf"), CFG), ValueError, "Y contains NaN or "
                                                                                   "infinite"),
    ("row06-nan-weight", lambda P, X, Y: forward(_with(P, **{"layer1.W_Q": P["layer1.W_Q"] * float("nan")}), X, CFG),
     ValueError, r"params\['layer1\.W_Q'\] contains NaN"),
    ("row07-huge-X", lambda P, X, Y: forward(P, X * 1e200, CFG), ValueError, "overflowed.*standardize X or "
                                                                             "use a smaller beta"),
    ("row07-huge-loss", lambda P, X, Y: loss(P, X * 1e160, Y, CFG), ValueError, "overflowed"),
    ("row08-N0", lambda P, X, Y: forward(P, X[:0], CFG), ValueError, "at least one sequence and one token"),
    ("row09-gd-N0", lambda P, X, Y: gradient_descent(P, X[:0], Y[:0], CFG, 0.01, 3), ValueError, "at least one sequence"),
    ("row09-gd-n0", lambda P, X, Y: gradient_descent(P, X[:, :0], Y[:, :0], CFG, 0.01, 3), ValueError, "one token"),
    ("row10-sweep-N0", lambda P, X, Y: sweep([P, P], X[:0], Y[:0], CFG, 0.01, 3), ValueError,
     "configuration 0: X has shape"),
    ("row11-d5", lambda P, X, Y: forward(P, torch.randn(3, 4, 5, dtype=torch.float64), CFG), ValueError, r"got \(3, 4, 5\)"),
    ("row12-numpy-X", lambda P, X, Y: forward(P, X.numpy(), CFG), TypeError, r"got ndarray.*torch\.as_tensor"),
    ("row12-list-X", lambda P, X, Y: forward(P, X.tolist(), CFG), TypeError, "got list"),
    ("row12-numpy-weights", lambda P, X, Y: forward({k: v.numpy() for k, v in P.items()}, X, CFG), TypeError,
     "must be a torch.Tensor"),
    ("row12-params-list", lambda P, X, Y: forward(list(P.values()), X, CFG), TypeError, r"dict of tensors.*init_params"),
    ("row13-missing", lambda P, X, Y: forward({k: v for k, v in P.items() if k != "W_U"}, X, CFG), ValueError,
     r"missing \['W_U'\].*init_params"),
    ("row13-extra", lambda P, X, Y: forward(_with(P, bias=P["W_U"]), X, CFG), ValueError, r"unexpected \['bias'\]"),
    ("row13-shape", lambda P, X, Y: forward(_with(P, **{"layer1.W_V": torch.zeros(4, 5, dtype=torch.float64)}), X, CFG),
     ValueError, r"\(4, 5\), expected \(4, 4\)"),
    ("row16-half", lambda P, X, Y: gradient_descent({k: v.half() for k, v in P.items()}, X.half(), Y.half(), CFG, 0.01, 3),
     TypeError, r"float64 or torch\.float32.*float16.*\.double\(\)"),
    ("row16-bf16-sweep", lambda P, X, Y: sweep([{k: v.bfloat16() for k, v in P.items()}] * 2, X.bfloat16(),
                                               Y.bfloat16(), CFG, 0.01, 3), TypeError, "configuration 0: .*bfloat16"),
    ("row18-gpu", lambda P, X, Y: init_params(CFG, device="gpu"), ValueError, r"unknown device 'gpu': use "
                                                                              r"'cpu'"),
    ("row19-meta", lambda P, X, Y: gradient_descent(P, X, Y, CFG, 0.01, 3, device="meta"), ValueError,
     "'meta' is not supported by convres; use 'cpu'"),
    ("row20-int-dtype", lambda P, X, Y: init_params(CFG, dtype=torch.int64), TypeError, "real floating-point "
                                                                                        "torch dtype"),
    ("row21-branch-nan", lambda P, X, Y: init_params(CFG, branch_scale=float("nan")), ValueError,
     "branch_scale must be a positive finite number"),
    ("row22-seed-2**70", lambda P, X, Y: init_params(CFG, seed=2**70), ValueError,
     r"seed must be an integer in 0 \.\. 2\*\*63 - 1"),
]


@pytest.mark.parametrize("call, exc, message", [c[1:] for c in API_ERRORS], ids=[c[0] for c in API_ERRORS])
def test_bad_model_inputs_name_the_problem_and_the_fix(inst, call, exc, message):
    with pytest.raises(exc, match=message):
        call(*inst)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_row17_row19_cuda_without_a_gpu_is_a_clear_error(inst):
    with pytest.raises(ValueError, match="device 'cuda'.*use device 'cpu'"):
        init_params(CFG, device="cuda")
    with pytest.raises(ValueError, match="device 'cuda:7'"):
        gradient_descent(*inst, CFG, 0.01, 3, device="cuda:7")


def test_row08_empty_batch_of_forward_is_refused_not_a_zero_loss(inst):
    P, X, Y = inst
    with pytest.raises(ValueError, match="one token"):
        loss(P, X[:, :0], Y[:, :0], CFG)


def test_row14_inputs_that_require_grad_are_left_unchanged(inst):
    P, X, Y = inst
    Pg = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    out, h = gradient_descent(Pg, X.clone().requires_grad_(True), Y, CFG, 0.01, 3)
    assert all(torch.equal(Pg[k].detach(), P[k]) for k in P)
    assert h.status == "max_steps" and not any(v.requires_grad for v in out.values())


def test_row15_non_contiguous_inputs_give_the_same_losses(inst):
    cfg = ModelConfig(d=4, d_qk=4, m=4, L=2)
    P = init_params(cfg, seed=3)
    _, X, Y = inst
    Pt = {k: v.t().contiguous().t() for k, v in P.items()}
    Xt = X.transpose(1, 2).contiguous().transpose(1, 2)
    assert not Xt.is_contiguous() and not Pt["layer1.W_Q"].is_contiguous()
    a = gradient_descent(P, X, Y, cfg, 0.01, 10)[1].loss
    b = gradient_descent(Pt, Xt, Y, cfg, 0.01, 10)[1].loss
    assert np.allclose(a, b, rtol=1e-12, atol=0)


def test_row23_numpy_scalars_are_accepted(inst):
    P, X, Y = inst
    assert ModelConfig(d=np.int64(4), d_qk=4, m=4).d == 4
    assert gradient_descent(P, X, Y, CFG, np.float32(0.01), np.int64(3))[1].steps == 3
    assert synthetic_regression(np.int64(2), 3, 4)[0].shape == (2, 3, 4)


# --- API: ModelConfig and GD arguments (rows 24-38) ------------------------------------------------

CONFIG_ERRORS = [
    ("row24-L0", dict(L=0), ValueError, r"ModelConfig\.L must be a positive integer, got 0; pass e\.g\. L=4"),
    ("row24-d-neg", dict(d=-3), ValueError, "ModelConfig.d must be a positive integer"),
    ("row24-d-float", dict(d=4.0), ValueError, "got 4.0"),
    ("row25-beta-neg", dict(beta=-1), ValueError, "must be a finite number >= 0, got -1 .0 removes the "
                                                  "residual"),
    ("row25-beta-nan", dict(beta=float("nan")), ValueError, "finite number >= 0, got nan"),
    ("row25-beta-inf", dict(beta=float("inf")), ValueError, "finite number >= 0, got inf"),
    ("row26-activation", dict(activation="sigmoid"), ValueError, r"choose one of \['gelu', 'relu'"),
    ("row26-activation-none", dict(activation=None), ValueError, "unknown activation None"),
    ("row26-scale-name", dict(scale="1/sqrt(d)"), ValueError, "unknown attention scale"),
    ("row26-scale-zero", dict(scale=0), ValueError, "positive finite number, got 0"),
    ("row26-scale-nan", dict(scale=float("nan")), ValueError, "positive finite number, got nan"),
    ("row26-pool", dict(pool="max"), ValueError, "choose None .per token. or 'mean'"),
    ("row27-unhashable", dict(activation=["relu"]), ValueError, r"unknown activation \['relu'\]"),
]


@pytest.mark.parametrize("changes, exc, message", [c[1:] for c in CONFIG_ERRORS], ids=[c[0] for c in CONFIG_ERRORS])
def test_bad_config_fields_are_named(changes, exc, message):
    with pytest.raises(exc, match=message):
        ModelConfig(**{"d": 4, "d_qk": 4, "m": 4, **changes})


def test_row28_huge_finite_beta_blames_beta_not_the_step_size(inst):
    P, X, Y = inst
    cfg = CFG.replace(beta=1e300)
    with pytest.raises(ValueError, match="overflowed.*smaller beta"):
        forward(P, X, cfg)
    _, h = gradient_descent(P, X, Y, cfg, 0.01, 3)
    assert h.status == "diverged" and h.steps == 0
    assert "initial loss" in h.message and "beta" in h.message and "mu=" not in h.message


GD_ERRORS = [
    ("row29-mu0", dict(mu=0), "step size mu must be a positive finite number, got 0"),
    ("row29-mu-neg", dict(mu=-1), "got -1"),
    ("row29-mu-inf", dict(mu=float("inf")), "got inf"),
    ("row29-mu-nan", dict(mu=float("nan")), "got nan"),
    ("row31-steps-neg", dict(steps=-1), "steps must be a non-negative integer"),
    ("row31-steps-float", dict(steps=3.0), "got 3.0"),
    ("row32-record0", dict(record_every=0), "record_every must be a positive integer"),
    ("row33-tol-nan", dict(tol=float("nan")), "tol must be a number >= 0"),
    ("row33-tol-neg", dict(tol=-1), "tol must be a number >= 0"),
    ("row33-blowup-nan", dict(blowup=float("nan")), "blowup must be a number > 1"),
]


@pytest.mark.parametrize("kwargs, message", [c[1:] for c in GD_ERRORS], ids=[c[0] for c in GD_ERRORS])
def test_bad_gradient_descent_arguments_are_named(inst, kwargs, message):
    args = {"mu": 0.01, "steps": 3, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        gradient_descent(*inst, CFG, args.pop("mu"), args.pop("steps"), **args)


@pytest.mark.parametrize("mu", [2.0, 1e6, 1e300])
def test_row30_divergence_is_reported_and_the_weights_stay_finite(inst, mu):
    out, h = gradient_descent(*inst, CFG, mu, 50)
    assert h.status == "diverged" and "too large" in h.message and f"mu={mu:g}" in h.message
    assert all(bool(torch.isfinite(v).all()) for v in out.values()) and np.isfinite(h.loss).all()


def test_row31_row32_row33_edge_values_run_as_documented(inst):
    h = gradient_descent(*inst, CFG, 0.01, 0)[1]
    assert (h.status, h.message, len(h.loss)) == ("max_steps", "ran all 0 steps", 1)
    assert gradient_descent(*inst, CFG, 0.01, 3, record_every=10**9)[1].record_steps.tolist() == [0, 3]
    assert gradient_descent(*inst, CFG, 0.01, 3, tol=float("inf"))[1].status == "converged"
    out, h = gradient_descent(*inst, CFG, 1e6, 50, blowup=float("inf"))
    assert h.status == "diverged" and all(bool(torch.isfinite(v).all()) for v in out.values())


def test_row34_a_failing_callback_passes_its_error_through(inst):
    def callback(step):
        raise ZeroDivisionError("the user's own error")
    with pytest.raises(ZeroDivisionError, match="the user's own error"):
        gradient_descent(*inst, CFG, 0.01, 3, callback=callback)


def test_row35_sweep_arguments(inst):
    P, X, Y = inst
    assert sweep([], X, Y, CFG, 0.01, 3) == []
    with pytest.raises(TypeError, match="cfg must be a convres.ModelConfig"):
        gradient_descent(P, X, Y, [CFG], [0.01], 3)
    with pytest.raises(ValueError, match="same length, got 2, 2, 3"):
        sweep([P, P], X, Y, CFG, [0.01] * 3, 3)
    with pytest.raises(ValueError, match="configuration 1: the step size mu"):
        sweep([P, P], X, Y, CFG, [0.01, float("nan")], 3)
    with pytest.raises(TypeError, match="got ModelConfig and Tensor"):
        sweep([P, P], X, Y, CFG, torch.tensor([0.01, 0.01]), 3)
    other = CFG.replace(d_qk=8)  # mixed sizes: run in separate stacks
    runs = sweep([P, init_params(other)], X, Y, [CFG, other], 0.01, 3)
    assert [h.status for _, h in runs] == ["max_steps", "max_steps"]


def test_row36_one_diverging_run_does_not_stop_the_others(inst):
    P, X, Y = inst
    (_, a), (_, b) = sweep([P, P], X, Y, CFG, [0.01, 1e6], 50)
    assert (a.status, a.steps, b.status) == ("max_steps", 50, "diverged") and np.isfinite(b.loss).all()


def test_row37_theory_arguments_are_checked_before_any_work():
    P, X, Y, cfg = instances.theorem_instance(0)
    for kwargs, message in [(dict(steps=0), "steps must be a positive integer"),
                            (dict(mu=float("inf")), "mu must be a positive finite number"),
                            (dict(safety=float("nan")), "safety must be a finite number >= 1")]:
        with pytest.raises(ValueError, match=message):
            theory.theorem_run(P, X, Y, cfg, **kwargs)
    with pytest.raises(ValueError, match=r"layer must be an integer in 1 \.\. 1, got 2"):
        lemmas.residual_lemma(P, X, cfg, layer=2)
    with pytest.raises(ValueError, match="iters must be a positive integer"):
        theory.hessian_norm(P, X, Y, cfg, iters=0)
    with pytest.raises(ValueError, match="need n <= d.*use more features or fewer tokens"):
        collapse.spiked_instance(n=9, d=4, d_qk=4)
    with pytest.raises(ValueError, match="strength must be a finite number"):
        collapse.spiked_instance(n=6, d=8, d_qk=4, strength=float("inf"))


def test_row38_a_diverged_theorem_run_verifies_nothing():
    s = theory.theorem_run(*instances.theorem_instance(0), mu=1e3, steps=20).summary()
    assert s["status"] == "diverged" and s["violations"] is None and s["max_excess"] is None


def test_theorem_at_the_beta_cap_with_deep_stacks_is_a_clear_error():
    """Found in the re-run (rows 50/51 at the new cap): ``theorem --beta 1000 --layers 20`` raised a raw
    ZeroDivisionError, because the Hessian-vector product's norm overflowed and the power iteration
    then returned 0."""
    inst = instances.theorem_instance(0, beta=1000.0, layers=20)
    assert theory.hessian_norm(*inst, iters=3) == math.inf
    with pytest.raises(ValueError, match="Hessian of the loss is not finite.*scale of beta"):
        theory.theorem_run(*inst, steps=2)


# --- rows 39-40: settings of run_experiment, and the Jena loader's window -------------------------

@pytest.mark.parametrize("name, overrides, message", [
    ("simulations", {"betas": []}, "setting 'betas' of 'simulations' must be a non-empty list"),
    ("jena", {"seeds": []}, "setting 'seeds' of 'jena' must be a non-empty list"),
    ("jena", {"freq": "bogus"}, r"freq 'bogus' is not a .*duration.*use e\.g\. '10min', '1h'"),
    ("jena", {"start": "not a date"}, r"start'? 'not a date' is not a timestamp .*'2009-01-01 01:00'"),
    ("jena", {"end": "not a date"}, r"end'? 'not a date' is not a timestamp"),
    ("simulations", {"seeds": []}, "setting 'seeds' of 'simulations' must be a non-empty list"),  # row 40
], ids=["row39-betas", "row39-seeds", "row39-freq", "row39-start", "row39-end", "row40-sim-seeds"])
def test_row39_row40_settings_that_run_nothing_or_cannot_parse_are_refused(tmp_path, monkeypatch, name,
                                                                           overrides, message):
    monkeypatch.setenv("CONVRES_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=message):
        experiments.run_experiment(name, "smoke", overrides=overrides, data_dir=tmp_path / "no-data")
    assert not list((tmp_path / "cache").glob("*.json"))  # nothing was cached


# --- security (rows 99-100) ------------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parent.parent / "convres"


def test_row99_the_package_uses_no_unsafe_loader_or_shell():
    unsafe = re.compile(r"\bpickle\b|torch\.load\(|\beval\(|\bexec\(|shell=True|os\.system\(|os\.popen\(|"
                        r"yaml\.load\(|allow_pickle|extractall\(|\bmarshal\b|trust_remote_code")
    found = [f"{p.name}:{i}: {line.strip()}" for p in sorted(PACKAGE.rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if unsafe.search(line) and "no pickle" not in line]
    assert found == []


# --- settings of an experiment and the benchmark's arguments (found while re-running the rows) ------

def test_experiment_setting_that_is_not_a_timestamp_is_named():
    """Row 40's neighbour: an experiment override ``train_end="nope"`` names the setting."""
    s = {**experiments.settings("jena", "smoke"), "train_end": "nope"}
    with pytest.raises(ValueError, match=r"setting 'train_end' 'nope' is not a timestamp.*2009-01-01 01:00"):
        experiments.jena_data(s)


def test_benchmark_threads_that_are_not_a_number(capsys):
    """Row 27's neighbour: ``gd_speed.py --threads abc`` says what it expects."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import gd_speed
    finally:
        sys.path.pop(0)
    with pytest.raises(SystemExit) as done:
        gd_speed.main(["--threads", "abc"])
    assert done.value.code == 2
    one_line_error(capsys.readouterr().err, "--threads: must be an integer, got 'abc'")
