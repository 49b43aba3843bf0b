"""The report's statistics: thresholds, censoring, paired intervals, Kendall's tau, the verdict rule
(the step-size rule: ``tests/test_tune_step.py``)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convres.stats import (
    VERDICTS,
    censored,
    claim_stats,
    claim_verdict,
    kendall_tau,
    paired_bootstrap,
    steps_to,
)


def test_steps_to_first_crossing_and_censoring():
    loss = [1.0, 0.5, 0.05, 0.009, 1e-7]
    assert steps_to(loss, 1e-2) == 3
    assert steps_to(loss, 1e-6) == 4
    assert steps_to(loss, 1e-9) is None
    assert steps_to([1.0, math.inf, 0.0], 1e-2) is None          # diverged: never arrives
    assert steps_to([2.0, 0.4], 0.5, relative=False) == 1
    assert censored(None, 300) == (300.0, True) and censored(7, 300) == (7.0, False)


def test_paired_bootstrap_and_tau():
    mean, lo, hi = paired_bootstrap([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and 1.0 <= lo < mean < hi <= 4.0
    assert paired_bootstrap([0.3]) == (0.3, 0.3, 0.3)
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([1.0, math.nan])
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=30), st.floats(0, 1))
def test_verdict_rule_is_the_written_one(effects, margin):
    s = claim_stats(effects, margin)
    v = claim_verdict(s)
    lo, hi = s["ci"]
    share = s["agree"] / s["units"]
    assert lo <= s["effect"] + 1e-12 and s["effect"] <= hi + 1e-12
    if lo > margin and share >= 0.8:
        assert v == VERDICTS[0]
    elif hi < 0:
        assert v == VERDICTS[2]
    elif lo > 0 or share >= 0.5:
        assert v == VERDICTS[1]
    else:
        assert v == VERDICTS[3] and claim_verdict(s, some_regimes=True) == VERDICTS[1]
