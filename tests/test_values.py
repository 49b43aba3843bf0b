"""Numbers at the entry points: in range or an error naming the argument, whatever their type."""

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import ModelConfig, values

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


@settings(max_examples=400)
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


@settings(max_examples=300)
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


@settings(max_examples=300)
@given(v=anything)
def test_as_int_accepts_integers_only(v):
    try:
        got = values.as_int("count", v, minimum=1, maximum=10**6)
    except (TypeError, ValueError) as err:
        assert "count" in str(err)
        return
    assert type(got) is int and 1 <= got <= 10**6 and not isinstance(v, (bool, np.bool_, float))


@settings(max_examples=200)
@given(field=st.sampled_from(["d", "L", "beta", "beta_attn", "scale"]), v=anything)
def test_model_config_fields_are_coerced_or_named(field, v, own_error):
    try:
        cfg = ModelConfig(**{"d": 4, "d_qk": 4, "m": 4, field: v})
    except (TypeError, ValueError) as err:
        own_error(err, field, "scale")
        return
    got = getattr(cfg, field)
    if got is None:
        assert field == "beta_attn" and v is None
        return
    assert isinstance(got, (int, float, str)) or field == "scale", f"{field} kept a {type(got).__name__}"
