"""Property-based tests of the reliability policies (issue 22), with ``hypothesis``.

One property for every public entry point tried here: *a result, or an error of convres's own
making (TypeError/ValueError/RuntimeError raised in convres, or argparse's usage exit) whose
message names the argument; never a raw PyTorch or Python error, never a silently changed
result*. "Silently changed" is checked where an equal value exists: the same number as a float,
a NumPy scalar or a 0-d tensor must give the same answer; a non-contiguous or grad-requiring copy
of ``X`` must give the same losses; the caller's tensors are never modified.

The examples are derandomized (the same on every run) so that CI is reproducible; the numbers of
examples are in ``settings(max_examples=...)`` below.
"""

import math
import os
import traceback

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convres import ModelConfig, gradient_descent, init_params, synthetic_regression, values

PROPS = settings(derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

CFG = ModelConfig(d=4, d_qk=4, m=4)
P0 = init_params(CFG, seed=1)
X0, Y0 = synthetic_regression(2, 3, 4, 1, seed=0)
BASE = gradient_descent(P0, X0, Y0, CFG, 0.01, 3).history.loss


def raised_in_convres(err: BaseException) -> bool:
    """The innermost frame of ``err`` lies in the convres package (not in torch or the stdlib)."""
    tb = traceback.extract_tb(err.__traceback__)
    return bool(tb) and f"{os.sep}convres{os.sep}" in tb[-1].filename


def own_error(err: BaseException, *names: str) -> None:
    assert isinstance(err, (TypeError, ValueError, RuntimeError)), f"raw {type(err).__name__}: {err}"
    assert raised_in_convres(err), f"raised outside convres: {type(err).__name__}: {err}"
    assert any(n in str(err) for n in names), f"names none of {names}: {err}"


# --- values: one coercion per kind --------------------------------------------------------------

odd_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
    [0.0, -0.0, 1e-320, 1e308, -1.0, 0.5, 1e3, 1e3 + 1e-9]))
anything = st.one_of(
    odd_floats, st.integers(min_value=-2**70, max_value=2**70), st.booleans(), st.none(), st.text(max_size=5),
    st.complex_numbers(max_magnitude=10), odd_floats.map(np.float64), st.floats(width=32).map(np.float32),
    st.integers(-100, 100).map(np.int64), st.booleans().map(np.bool_),
    odd_floats.map(lambda x: torch.tensor(x, dtype=torch.float64)),
    st.integers(-100, 100).map(torch.tensor), st.booleans().map(torch.tensor),
    odd_floats.map(lambda x: torch.tensor([x])), st.just(torch.tensor(0.5, device="meta")),
    st.just(torch.tensor(1 + 1j)), st.lists(st.floats(0, 1), max_size=2))


@settings(PROPS, max_examples=400)
@given(v=anything, minimum=st.sampled_from([None, 0.0, 1.0]), above=st.booleans())
def test_as_real_gives_a_number_in_range_or_names_the_argument(v, minimum, above):
    try:
        got = values.as_real("the_arg", v, minimum=minimum, above=above)
    except (TypeError, ValueError) as err:
        assert "the_arg" in str(err)
        return
    assert isinstance(got, float) and math.isfinite(got)
    assert minimum is None or (got > minimum if above else got >= minimum)
    assert not isinstance(v, (bool, np.bool_, str, complex))


@settings(PROPS, max_examples=300)
@given(x=odd_floats, minimum=st.sampled_from([None, 0.0]))
def test_the_same_real_number_gets_the_same_answer_whatever_its_type(x, minimum):
    forms = [x, np.float64(x), torch.tensor(x, dtype=torch.float64), np.array(x)]
    outcomes = []
    for v in forms:
        try:
            outcomes.append(values.as_real("beta", v, minimum=minimum))
        except (TypeError, ValueError) as err:
            outcomes.append(type(err))
    assert len({repr(o) for o in outcomes}) == 1, outcomes


@settings(PROPS, max_examples=300)
@given(v=anything)
def test_as_int_accepts_integers_only(v):
    try:
        got = values.as_int("count", v, minimum=1, maximum=10**6)
    except (TypeError, ValueError) as err:
        assert "count" in str(err)
        return
    assert type(got) is int and 1 <= got <= 10**6 and not isinstance(v, (bool, np.bool_, float))


# --- tensors at the entry point: dtype, layout, device, grad mode, values ----------------------

def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def perturbed(kind, rng):
    """``(params, X, Y, mu, steps, names, same)``: the instance with one perturbation ``kind``;
    ``names`` are the words an error must contain, ``same`` whether a result must equal BASE."""
    p, X, Y, mu, steps = dict(P0), X0.clone(), Y0.clone(), 0.01, 3
    same = False
    if kind == "X dtype":
        X = X.to(pick(rng, [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64]))
        names = ("X",)
    elif kind == "Y dtype":
        Y = Y.to(pick(rng, [torch.float32, torch.int32, torch.complex128]))
        names = ("Y",)
    elif kind == "params dtype":
        p = {k: v.to(pick(rng, [torch.float16, torch.bfloat16, torch.int64])) for k, v in p.items()}
        X, Y = X.to(p["W_U"].dtype), Y.to(p["W_U"].dtype)
        names = ("dtype", "float", "params", "X")
    elif kind == "sparse X":
        X = X.to_sparse()
        names = ("X",)
    elif kind == "meta X":
        X = X.to("meta")
        names = ("X",)
    elif kind == "NaN in X":
        X[rng.integers(2), rng.integers(3), rng.integers(4)] = pick(rng, [math.nan, math.inf, -math.inf])
        names = ("X",)
    elif kind == "wrong shape X":
        X = X[..., : rng.integers(1, 4)] if rng.random() < 0.5 else X[None]
        names = ("X",)
    elif kind == "non-contiguous X":
        X = X.transpose(0, 1).contiguous().transpose(0, 1)
        same = True
        names = ()
    elif kind == "X requires grad":
        X = X.requires_grad_(True)
        same = True
        names = ()
    elif kind == "mu":
        mu = pick(rng, [0.0, -0.01, math.nan, math.inf, "0.01", None, True, 1j, torch.tensor([0.01])])
        names = ("mu",)
    elif kind == "mu as another number type":
        mu = pick(rng, [np.float64(0.01), torch.tensor(0.01, dtype=torch.float64), np.array(0.01)])
        same = True
        names = ()
    elif kind == "steps":
        steps = pick(rng, [-1, 2.0, True, "3", None, 10**30, torch.tensor(1.5)])
        names = ("steps",)
    elif kind == "steps as another integer type":
        steps = pick(rng, [np.int64(3), torch.tensor(3)])
        same = True
        names = ()
    else:  # pragma: no cover
        raise AssertionError(kind)
    return p, X, Y, mu, steps, names, same


KINDS = ["X dtype", "Y dtype", "params dtype", "sparse X", "meta X", "NaN in X", "wrong shape X",
         "non-contiguous X", "X requires grad", "mu", "mu as another number type", "steps",
         "steps as another integer type"]


@settings(PROPS, max_examples=150)
@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1), grad_mode=st.sampled_from(
    ["enabled", "no_grad", "inference_mode"]))
def test_gradient_descent_gives_a_result_or_names_the_argument(kind, seed, grad_mode):
    rng = np.random.default_rng(seed)
    p, X, Y, mu, steps, names, same = perturbed(kind, rng)
    before = {k: v.clone() for k, v in P0.items()}
    modes = {"enabled": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    try:
        with modes[grad_mode]():
            run = gradient_descent(p, X, Y, CFG, mu, steps)
    except Exception as err:
        own_error(err, *(names or ("?",)), *(("inference_mode",) if grad_mode == "inference_mode" else ()))
        return
    finally:
        assert all(torch.equal(before[k], P0[k]) for k in P0), "the caller's weights changed"
    assert grad_mode != "inference_mode", "ran under inference_mode"
    assert all(bool(torch.isfinite(v).all()) for v in run.params.values())
    if same:
        assert np.allclose(run.history.loss, BASE, rtol=1e-12, atol=0), f"{kind} changed the result"
    else:
        assert not names, f"{kind}: accepted without a word"


@settings(PROPS, max_examples=40)
@given(edit=st.sampled_from(["params", "grads", "trace"]), t=st.integers(0, 3))
def test_a_callback_never_changes_the_callers_weights_or_the_run_silently(edit, t):
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


@settings(PROPS, max_examples=200)
@given(field=st.sampled_from(["d", "L", "beta", "beta_attn", "scale"]), v=anything)
def test_model_config_fields_are_coerced_or_named(field, v):
    try:
        cfg = ModelConfig(**{"d": 4, "d_qk": 4, "m": 4, field: v})
    except (TypeError, ValueError) as err:
        assert raised_in_convres(err) and (field in str(err) or "scale" in str(err)), str(err)
        return
    got = getattr(cfg, field)
    if got is None:
        assert field == "beta_attn" and v is None
        return
    assert isinstance(got, (int, float, str)) or field == "scale", f"{field} kept a {type(got).__name__}"
