"""The report's statistics (convres.stats): measures, intervals, the sign test, the verdict rule, the
step-size rule."""

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convres import stats
from convres.protocol import EFFECT_BOUND, GRADES
from convres.stats import ProbeRun, estimate, grade, log_ratio, mean_log_loss, sign_test, steps_to, tune_step

PROPS = settings(max_examples=400)
DRAWS = 400          # bootstrap resamples in the property tests (10,000 in the protocol)


def test_the_measures_steps_to_mean_log_loss_log_ratio_and_kendall_tau():
    loss = [1.0, 0.5, 0.05, 0.009, 1e-7]
    assert steps_to(loss, 1e-2) == 3
    assert steps_to(loss, 1e-6) == 4
    assert steps_to(loss, 1e-9) is None
    assert steps_to([1.0, math.inf, 0.0], 1e-2) is None          # diverged: never arrives
    assert steps_to([2.0, 0.4], 0.5, relative=False) == 1
    assert stats.censored(None, 300) == (300.0, True) and stats.censored(7, 300) == (7.0, False)
    assert stats.largest_rise(loss) == 0.0 and stats.largest_rise([1.0, 1e-3, 0.5, 1e-4]) == math.log10(500)
    assert stats.kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert stats.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(stats.kendall_tau([1, 1, 1], [1, 2, 3]))
    assert mean_log_loss([1.0, 0.1, 0.01], 2) == pytest.approx(-1.5)
    assert mean_log_loss([2.0, 0.2], 3) == pytest.approx((-1 - 12 - 12) / 3)     # stopped at convergence
    assert mean_log_loss([1.0, 0.0, 1e-20], 2) == -12.0                           # the floor
    assert mean_log_loss([1.0, 4.0], 1) == pytest.approx(math.log10(4.0))
    assert mean_log_loss([1.0, math.inf], 1) is None and mean_log_loss([1.0, None], 1) is None
    assert log_ratio(100.0, 10.0, base=10) == pytest.approx(1.0)
    assert log_ratio(2.0, 8.0) == -log_ratio(8.0, 2.0)
    assert log_ratio(math.inf, 3.0) is None and log_ratio(None, 3.0) is None


# --- exact values -----------------------------------------------------------------------------------

def _t_cdf(t: float, df: int) -> float:
    """Student's t CDF at ``t > 0`` by Simpson's rule on its density (an independent computation)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    x = np.linspace(0.0, t, 40_001)
    f = c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = x[1] - x[0]
    return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


def test_t_interval_and_sign_test_exact():
    for df, t in enumerate(stats.T975, start=1):                # the quantiles are Student's
        assert _t_cdf(t, df) == pytest.approx(0.975, abs=2e-7), df
    e = estimate(np.array([1.0, 2.0, 3.0, 4.0]), min_units=2)     # an array is read as a list
    half = 3.182446 * math.sqrt(5 / 3) / 2                    # t_{0.975,3} s / sqrt(n), s^2 = 5/3
    assert (e.effect, e.method, e.units, e.diverged) == (2.5, "t-interval", 4, 0)
    assert e.lo == pytest.approx(2.5 - half, abs=1e-12) and e.hi == pytest.approx(2.5 + half, abs=1e-12)
    assert e.sign_test_p == 2 / 16                            # 4 of 4 positive: 2 (1/2)^4
    assert sign_test([1.0] * 9 + [-1.0]) == 2 * (1 + 10) / 1024
    assert sign_test([1.0] * 6) == 2 / 64
    assert sign_test([0.0, 0.0, 1.0, -1.0]) == 1.0            # zeros carry no sign
    assert sign_test([]) == 1.0 and sign_test([0.0]) == 1.0


def test_a_degenerate_spread_gives_a_finite_interval():
    for n in (5, 25):                                          # t-interval, then BCa: the point
        e = estimate([0.5] * n, min_units=2, draws=DRAWS)
        assert e.lo == e.hi == e.effect == 0.5
    x = [1e-160 * k for k in range(25)]                         # sum d^2 is subnormal: ^1.5 underflows
    with warnings.catch_warnings(action="error"):
        e = estimate(x, min_units=2)
    assert e.lo is not None and e.lo <= e.effect <= e.hi


def test_bca_against_the_normal_theory_skew_strata_and_coverage():
    """BCa: the normal theory's interval on a normal sample, leaning to a long tail, narrower within
    strata, covering about 95%."""
    rng = np.random.default_rng(3)
    x = rng.normal(1.0, 2.0, size=400)
    e = estimate(x.tolist(), min_units=2)
    half = 1.966 * x.std(ddof=1) / math.sqrt(x.size)             # t_{0.975, 399}
    assert e.method == "BCa bootstrap"
    assert e.lo == pytest.approx(x.mean() - half, rel=0.05)
    assert e.hi == pytest.approx(x.mean() + half, rel=0.05)
    skewed = rng.exponential(1.0, size=40)
    s = estimate(skewed.tolist(), min_units=2)
    assert s.hi - s.effect > s.effect - s.lo                     # the interval leans to the long tail
    rng = np.random.default_rng(1)
    effects = np.concatenate([rng.normal(m, 0.1, 10) for m in (0.0, 1.0, 2.0)]).tolist()
    labels = [s for s in "abc" for _ in range(10)]
    pooled = estimate(effects, min_units=2)
    strat = estimate(effects, min_units=2, strata=labels)
    assert strat.method == "BCa bootstrap, stratified" and strat.effect == pooled.effect
    assert strat.hi - strat.lo < 0.5 * (pooled.hi - pooled.lo)
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        e = estimate(rng.exponential(1.0, size=25).tolist(), min_units=2, draws=1000)
        hits += e.lo <= 1.0 <= e.hi
    assert 0.86 <= hits / 200 <= 0.99


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=2, max_size=30))
def test_spearman_is_the_correlation_of_mean_ranks(pairs):
    """The (batched) ranks against their definition: 1 + #smaller + (#equal - 1) / 2."""
    def ranks(v):
        return [1 + sum(w < u for w in v) + (sum(w == u for w in v) - 1) / 2 for u in v]
    x, y = ([p[j] for p in pairs] for j in (0, 1))
    rx, ry = (np.asarray(ranks(v)) - (len(v) + 1) / 2 for v in (x, y))
    den = math.sqrt((rx @ rx) * (ry @ ry))
    rho = stats.spearman_rho(x, y)
    assert math.isnan(rho) if den == 0 else rho == pytest.approx((rx @ ry) / den, abs=1e-12)


def test_seed_spearman_is_the_mean_over_strata_of_rho_across_the_seeds():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 12))
    y = x + 0.3 * rng.normal(size=(3, 12))
    keep = np.ones(x.shape, dtype=bool)
    keep[1, 4], y[1, 4] = False, np.nan                          # a diverged run, left out of its stratum
    e = stats.seed_spearman(x, y, keep, min_units=10, draws=DRAWS)
    per = [stats.spearman_rho(x[j][keep[j]], y[j][keep[j]]) for j in range(3)]
    assert e.effect == pytest.approx(np.mean(per), abs=1e-12) and (e.units, e.diverged) == (12, 1)
    assert e.method == "BCa bootstrap over seeds" and e.sign_test_p is None
    assert 0.6 < e.lo <= e.effect <= e.hi <= 1
    few = stats.seed_spearman(x, y, keep, min_units=12)
    flat = stats.seed_spearman(np.ones((1, 10)), y[:1, :10], np.ones((1, 10), dtype=bool), min_units=2)
    assert few.effect is flat.effect is None and few.reason and flat.reason


# --- the verdict rule -------------------------------------------------------------------------------

def _est(lo, hi):
    return stats.Estimate((lo + hi) / 2, lo, hi, "t-interval", 10, 0, 0.5)


@pytest.mark.parametrize("ci,subsets,every,verdict", [
    ((-2.0, -0.1), [(0.5, 1.0)], False, "reversed"),          # the whole interval below zero
    ((0.5, 1.0), [], False, "reproduced"),                    # above the margin 0.4
    ((0.5, 1.0), [(0.5, 1.0), (0.45, 0.9)], True, "reproduced"),
    ((0.5, 1.0), [(0.5, 1.0), (0.1, 0.9)], True, "partly"),   # every subset must win: one did not
    ((0.1, 1.0), [], False, "partly"),                        # above zero, not the margin
    ((-0.1, 1.0), [(0.5, 1.0)], False, "partly"),             # a subset won
    ((-0.1, 0.3), [], False, "not reproduced"),               # below the margin, not below zero
    ((-0.1, 1.0), [], False, "inconclusive"),
])
def test_grade_on_known_intervals(ci, subsets, every, verdict):
    """Section 1 of PROTOCOL.md, one interval per branch of the rule (margin 0.4)."""
    g = grade(_est(*ci), 0.4, subsets={f"s{i}": _est(*c) for i, c in enumerate(subsets)}, every=every)
    assert g.verdict == verdict


interval = st.tuples(st.floats(-3, 3), st.floats(0, 3)).map(lambda t: (t[0], t[0] + t[1]))


@PROPS
@given(interval, st.floats(0.01, 2), st.lists(interval, max_size=3), st.booleans(),
       st.lists(st.sampled_from(["a", "b"]), max_size=2))
def test_a_grade_says_why_and_which_subsets_won(ci, margin, subs, every, failed):
    """not testable names the failed checks; inconclusive has a reason; partly names the subsets won."""
    subsets = {f"s{i}": _est(*c) for i, c in enumerate(subs)}
    g = grade(_est(*ci), margin, subsets=subsets, every=every, failed=failed)
    if failed:
        assert g.verdict == "not testable" and all(f in g.reason for f in failed)
        return
    won = tuple(k for k, (lo, _) in zip(subsets, subs) if lo > margin)
    assert (g.verdict == "inconclusive") == bool(g.reason)
    assert g.subset == (won if g.verdict == "partly" else ())
    assert (g.verdict == "reversed") == (ci[1] < 0)


@pytest.mark.parametrize("ci,verdict", [((-0.1, 0.5), "reproduced"), ((-1.0, -0.3), "reversed"),
                                        ((-0.5, 0.5), "inconclusive"), ((-0.1, -0.05), "reproduced")])
def test_non_inferiority_on_known_intervals(ci, verdict):
    """T3's rule (margin -0.2): reproduced iff lo > margin, reversed iff hi < margin."""
    assert grade(_est(*ci), -0.2, rule="non-inferiority").verdict == verdict


# --- degenerate input: every input gives a grade or a ValueError of convres's own -------------------

element = st.one_of(st.none(), st.booleans(), st.floats(-5, 5), st.sampled_from([0.0, 1.0, -1.0]),
                    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, EFFECT_BOUND, 2e4]),
                    st.integers(-3, 3))


@PROPS
@given(st.one_of(st.lists(element, max_size=45),
                 st.tuples(st.floats(-5, 5), st.integers(0, 45)).map(lambda t: [t[0]] * t[1])),
       st.integers(2, 12), st.booleans(), st.floats(0.01, 1))
def test_estimate_and_grade_on_any_input(own_error, effects, min_units, stratify, margin):
    strata = [i % 3 for i in range(len(effects))] if stratify else None
    bad = [e for e in effects if isinstance(e, bool)
           or e is not None and not (math.isfinite(e) and abs(e) <= EFFECT_BOUND)]
    try:
        e = estimate(effects, min_units=min_units, strata=strata, draws=DRAWS)
    except ValueError as err:
        assert bad
        own_error(err, "effects[")
        return
    assert not bad
    finite = [float(x) for x in effects if x is not None]
    assert e.units == len(finite) and e.diverged == len(effects) - len(finite)
    if len(finite) < min_units:
        assert e.effect is None and e.lo is None and str(min_units) in e.reason
    else:
        assert all(math.isfinite(v) for v in (e.effect, e.lo, e.hi)) and e.lo <= e.hi
        assert min(finite) - 1e-9 <= e.lo and e.hi <= max(finite) + 1e-9 or e.method == "t-interval"
        assert e.method != "t-interval" or e.lo <= e.effect <= e.hi
        assert 0 < e.sign_test_p <= 1
    g = grade(e, margin)
    assert g.verdict in GRADES and (g.verdict not in ("inconclusive", "not testable") or g.reason)
    assert g.verdict == "inconclusive" or len(finite) >= min_units        # too few units
    json.dumps([e.effect, e.lo, e.hi, e.sign_test_p, g.verdict, g.reason], allow_nan=False)


@PROPS
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=30), st.floats(0.01, 0.9))
def test_a_bounded_effect_keeps_its_interval_in_range_and_its_grade(taus, margin):
    """Kendall's tau lies in [-1, 1]: its interval is cut there, and the cut never changes a grade."""
    free, cut = (estimate(taus, min_units=2, draws=200, bound=b) for b in (None, 1.0))
    assert -1 <= cut.lo <= cut.effect <= cut.hi <= 1
    assert (cut.lo, cut.hi) == (max(free.lo, -1), min(free.hi, 1))
    assert grade(cut, margin).verdict == grade(free, margin).verdict


# --- the step-size rule of protocol v4 ----------------------------------------------------------------

def _probe(edge=math.inf, best=None, reach=lambda eta, T: True, seeds=3, calls=None):
    """A probe on ``seeds`` seeds diverging above ``edge``, scored ``1 / eta`` or interior."""
    def probe(etas, T):
        if calls is not None:
            calls.append((list(etas), T))
        out = []
        for eta in etas:
            if eta > edge:
                out.append([None] * seeds)
                continue
            value = 1.0 / eta if best is None else math.log(eta / best) ** 2
            out.append([ProbeRun(value, True) if reach(eta, T) else ProbeRun(float(T), False)] * seeds)
        return out
    return probe


UNRESOLVED = dict(edge=8.0, reach=lambda eta, T: 1600 / eta <= T)   # arrives within T >= 1600 / eta steps


@pytest.mark.parametrize("probe,kw,expect", [
    # an interior optimum 0.3: chosen within half an octave, bracketed; the edge 8 found by growing the grid
    (dict(edge=8.0, best=0.3), {}, dict(chosen=0.25, best=0.25, bracketed=True, unresolved=False,
                                        largest_stable=8.0, cap=4.0, capped=False)),
    # faster with every larger step up to the edge 4: the best resolved step is 4, the chosen at most half
    (dict(edge=4.0), {}, dict(best=4.0, largest_stable=4.0, chosen=2.0, capped=True,
                              grid=[1.0, 2.0, 4.0, 8.0], stable=[True, True, True, False])),
    # every step unstable: the grid grows downwards
    (dict(edge=0.3), {}, dict(grid=[0.125, 0.25, 0.5, 1.0, 2.0], largest_stable=0.25, chosen=0.125)),
    (dict(edge=0.0), dict(extend=2), dict(chosen=None, unresolved=True, stable=[False] * 4)),
    # no step arrives at T = 100: the probe horizon doubles up to its limit; without doubling, unresolved
    (UNRESOLVED, dict(max_horizon=400), dict(horizon=200, unresolved=False, chosen=4.0,
                                             resolved=[False, False, False, True, False])),
    (UNRESOLVED, {}, dict(horizon=100, unresolved=True, best=None, bracketed=False, chosen=4.0)),
], ids=["interior", "capped", "downwards", "none stable", "doubled", "unresolved"])
def test_the_step_size_rule_on_known_probes(probe, kw, expect):
    out = tune_step(_probe(**probe), [1.0, 2.0], horizon=100, **kw)
    assert {k: out[k] for k in expect} == expect


def test_a_diverged_step_is_not_probed_again_and_one_unstable_probe_seed_makes_a_step_unstable():
    calls: list = []
    tune_step(_probe(**UNRESOLVED, calls=calls), [1.0, 2.0], horizon=100, max_horizon=400)
    assert calls[-1] == ([1.0, 2.0, 4.0, 8.0], 200)

    def probe(etas, T):
        return [[ProbeRun(1.0 / e, True), None if e >= 4 else ProbeRun(1.0 / e, True)] for e in etas]
    out = tune_step(probe, [1.0, 2.0], horizon=10)
    assert out["largest_stable"] == 2.0 and out["chosen"] == 1.0
    assert out["diverged"] == [0, 0, 1] and out["stable"] == [True, True, False]


# --- a bad argument: one per policy (bad effects: test_estimate_and_grade_on_any_input) ---------------

BAD_ARGUMENTS = {   # what is wrong -> (the call, a name its error must say)
    "a loss past the horizon": (lambda: mean_log_loss([1.0, 0.5, 0.2], 1), "loss"),
    "Phi_0 = 0": (lambda: mean_log_loss([0.0, 0.0], 1), "Phi_0"),
    "log_ratio of 0": (lambda: log_ratio(0.0, 1.0), "log_ratio"),
    "a margin of the wrong sign": (lambda: grade(_est(0, 1), 0.1, rule="non-inferiority"), "margin"),
    "strata of another length": (lambda: estimate([0.1, 0.2], min_units=2, strata=["a"]), "strata"),
    "tune_step, one step": (lambda: tune_step(_probe(), [1.0], horizon=10), "two finite steps"),
    "tune_step, max_horizon": (lambda: tune_step(_probe(), [1.0, 2.0], horizon=10, max_horizon=5),
                               "max_horizon"),
    "tune_step, a probe": (lambda: tune_step(lambda etas, T: [], [1.0, 2.0], horizon=10),
                           "one list of probe runs"),
    "tune_step, stable_fraction": (lambda: tune_step(_probe(), [1.0, 2.0], horizon=10, stable_fraction=1.0),
                                   "stable_fraction"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_is_a_clear_error_naming_it(case, clear_error):
    clear_error(*BAD_ARGUMENTS[case])
