"""The step-size rule of protocol v4 (:func:`convres.stats.tune_step`)."""

import math

import pytest

from convres.stats import ProbeRun, tune_step


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


def test_an_interior_optimum_is_chosen_and_bracketed():
    out = tune_step(_probe(edge=8.0, best=0.3), [1.0, 2.0], horizon=100)
    assert out["best"] == out["chosen"] and out["bracketed"] and not out["unresolved"]
    assert abs(math.log2(out["chosen"] / 0.3)) <= 0.5 + 1e-9
    assert out["largest_stable"] == 8.0 and out["cap"] == 4.0 and not out["capped"]
    assert out["grid"][-1] == 16.0 and not out["stable"][-1]      # the grid found the stability edge


def test_the_chosen_step_is_at_most_half_the_largest_stable_one():
    # faster with every larger step up to the edge 4: the best resolved step is 4, the chosen 2
    out = tune_step(_probe(edge=4.0), [1.0, 2.0], horizon=100)
    assert out["best"] == 4.0 and out["largest_stable"] == 4.0 and out["chosen"] == 2.0
    assert out["capped"] and out["grid"] == [1.0, 2.0, 4.0, 8.0]
    assert out["stable"] == [True, True, True, False]


def test_every_step_unstable_grows_the_grid_downwards():
    out = tune_step(_probe(edge=0.3), [1.0, 2.0], horizon=100)
    assert out["grid"] == [0.125, 0.25, 0.5, 1.0, 2.0]
    assert out["largest_stable"] == 0.25 and out["chosen"] == 0.125 and out["capped"]
    out = tune_step(_probe(edge=0.0), [1.0, 2.0], horizon=100, extend=2)
    assert out["chosen"] is None and out["unresolved"] and not any(out["stable"])


def test_an_unresolved_score_doubles_the_probe_horizon_up_to_its_limit():
    calls: list = []
    # a step eta arrives only within T >= 1600 / eta steps: at T = 100 no stable step arrives
    probe = _probe(edge=8.0, reach=lambda eta, T: 1600 / eta <= T, calls=calls)
    out = tune_step(probe, [1.0, 2.0], horizon=100, max_horizon=400)
    assert out["horizon"] == 200 and not out["unresolved"] and out["grid"] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert out["resolved"] == [False, False, False, True, False] and out["chosen"] == 4.0
    assert calls[-1] == ([1.0, 2.0, 4.0, 8.0], 200)         # a diverged step is not probed again
    # with no doubling allowed it stays unresolved, and says so
    out = tune_step(_probe(edge=8.0, reach=lambda eta, T: 1600 / eta <= T), [1.0, 2.0], horizon=100)
    assert out["unresolved"] and out["best"] is None and not out["bracketed"]
    assert out["chosen"] == 4.0 and out["horizon"] == 100              # half the largest stable step


def test_one_unstable_probe_seed_makes_the_step_unstable():
    def probe(etas, T):
        return [[ProbeRun(1.0 / e, True), None if e >= 4 else ProbeRun(1.0 / e, True)] for e in etas]
    out = tune_step(probe, [1.0, 2.0], horizon=10)
    assert out["largest_stable"] == 2.0 and out["chosen"] == 1.0
    assert out["diverged"] == [0, 0, 1] and out["stable"] == [True, True, False]


@pytest.mark.parametrize("call,name", [
    (lambda: tune_step(_probe(), [1.0], horizon=10), "two finite steps"),
    (lambda: tune_step(_probe(), [1.0, 2.0], horizon=10, max_horizon=5), "max_horizon"),
    (lambda: tune_step(lambda etas, T: [], [1.0, 2.0], horizon=10), "one list of probe runs per step"),
    (lambda: tune_step(_probe(), [1.0, 2.0], horizon=10, stable_fraction=1.0), "stable_fraction"),
], ids=["one step", "max_horizon", "probe", "stable_fraction"])
def test_a_bad_argument_is_a_clear_error_naming_it(call, name, clear_error):
    clear_error(call, name)
