"""Statistics of the reproduction report: times to a threshold, paired intervals, trends, tuned
steps and the pre-registered verdict rule. Plain numpy on per-run numbers; no model, no torch.

The verdict rule (:func:`claim_verdict`) is written once, here, before any experiment runs, and
every claim of the report is graded by it: ``effect`` is signed so that a positive value is the
paper's direction, ``margin`` is the claim's stated threshold, and the interval comes from a paired
bootstrap over the units (seeds, or seeds x regimes) that share their initial weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["VERDICTS", "steps_to", "censored", "paired_bootstrap", "kendall_tau", "claim_stats",
           "claim_verdict", "ProbeRun", "tune_step", "loglog_slope"]

#: The verdicts, in the report's order. "inconclusive": the setting cannot speak to the claim (the
#: reason is given); "holds a posteriori": a row that checks one of the book's own inequalities
#: along the runs rather than a claim of the paper that could fail on its own.
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "holds a posteriori")


def steps_to(loss: Sequence[float], level: float, *, relative: bool = True) -> int | None:
    """The first step ``t`` with ``Phi_t <= level * Phi_0`` (``relative``) or ``Phi_t <= level``;
    ``None`` when the run never gets there (censored at its horizon ``len(loss) - 1``). A
    non-finite value ends the search (a diverged run never arrives)."""
    v = np.asarray([math.nan if x is None else x for x in loss], dtype=np.float64)
    target = level * v[0] if relative else level
    for t, x in enumerate(v):
        if not math.isfinite(x):
            return None
        if x <= target:
            return t
    return None


def censored(t: int | None, horizon: int) -> tuple[float, bool]:
    """``(steps, is_censored)``: a time that was never reached counts as the horizon, a lower
    bound of the true time (so an effect computed from it is conservative for the slower arm)."""
    return (float(horizon), True) if t is None else (float(t), False)


def paired_bootstrap(effects: Sequence[float], *, level: float = 0.95, draws: int = 10_000,
                     seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of the per-unit ``effects`` and its percentile bootstrap
    interval at ``level``, resampling the paired units with replacement (``draws`` resamples,
    fixed ``seed``). One unit gives a zero-width interval."""
    e = np.asarray(effects, dtype=np.float64)
    if e.size == 0 or not np.all(np.isfinite(e)):
        raise ValueError(f"paired_bootstrap needs finite effects, got {list(e)}.")
    rng = np.random.default_rng(seed)
    means = e[rng.integers(0, e.size, size=(draws, e.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(e.mean()), float(lo), float(hi)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of the pairs ``(x_i, y_i)``: (concordant - discordant) over the square root
    of the pairs untied in x times those untied in y; ``nan`` when either is constant."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(a), k=1)
    sx, sy = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    nx, ny = np.count_nonzero(sx), np.count_nonzero(sy)
    return float((sx * sy).sum() / math.sqrt(nx * ny)) if nx and ny else math.nan


def claim_stats(effects: Sequence[float], margin: float, *, seed: int = 0) -> dict:
    """The numbers a claim's verdict is decided on: ``effect`` (mean over units), ``ci`` [lo, hi]
    (paired bootstrap, 95%), ``margin``, ``units`` and ``agree`` (units with effect > 0, the
    paper's direction)."""
    mean, lo, hi = paired_bootstrap(effects, seed=seed)
    return {"effect": mean, "ci": [lo, hi], "margin": float(margin), "units": len(effects),
            "agree": int(sum(e > 0 for e in effects))}


def claim_verdict(stats: dict, *, some_regimes: bool = False) -> str:
    """The pre-registered rule, applied to :func:`claim_stats`' numbers:

    - *reproduced* iff the interval's lower end is above ``margin`` and at least 80% of the units agree;
    - *not reproduced* iff the interval's upper end is below 0;
    - *partly* iff the lower end is above 0, or at least 50% of the units agree, or the claim holds
      in some regimes only (``some_regimes``, and the caller says which);
    - *inconclusive* otherwise (the caller gives the reason).
    """
    lo, hi = stats["ci"]
    share = stats["agree"] / stats["units"]
    if lo > stats["margin"] and share >= 0.8:
        return VERDICTS[0]
    if hi < 0:
        return VERDICTS[2]
    if lo > 0 or share >= 0.5 or some_regimes:
        return VERDICTS[1]
    return VERDICTS[3]


class ProbeRun(NamedTuple):
    """One probe run of a step-size tuning (:func:`tune_step`): its ``score`` on the measure the arm
    is tuned for (lower is better; a censored run scores its censored value, e.g. the horizon) and
    whether it ``reached`` that measure's target within the probe horizon (``False``: censored)."""

    score: float
    reached: bool


def tune_step(probe: Callable[[list[float], int], Sequence[Sequence[ProbeRun | None]]],
              grid: Sequence[float], *, horizon: int, max_horizon: int | None = None, factor: float = 2.0,
              stable_fraction: float = 0.5, extend: int = 8) -> dict:
    """The step of one arm by the rule of protocol v4, section 2, on a factor-``factor`` grid.

    ``probe(etas, T)`` runs every probe seed (never an evaluation seed) at each step of ``etas`` for
    ``T`` steps and returns, per step, one :class:`ProbeRun` per seed, ``None`` for a run that
    diverged or ended above its start. A step is *stable* when no probe run of it is ``None``, and
    *resolved* when it is stable and at least one of its probe runs ``reached`` the target (its
    score is not made of censored values alone); its score is the mean over the probe seeds.

    - The grid (``grid`` at first) grows by one step of ratio ``factor`` at a time, at most
      ``extend`` times in all: above the largest step while that one is stable (the largest stable
      step must be known), below the smallest while no step is stable, while no stable step is at
      most ``stable_fraction`` times the largest stable one, or while the best resolved step is the
      smallest.
    - When no step is resolved, the probe horizon doubles (every stable step is probed again; a
      diverged probe run stays diverged), up to ``max_horizon`` (protocol: 4x the evaluation
      horizon; default ``horizon``, no doubling); a tuning that stays so is *unresolved*.
    - ``chosen`` is the best resolved step (lowest mean score, the larger step on a tie), capped at
      ``stable_fraction`` (1/2) of the largest stable step: above the cap, the largest stable step
      at most the cap. ``bracketed``: the best resolved step is interior to the grid.

    Returns a JSON-ready dict: ``grid``, ``scores`` (``inf`` for an unstable step), ``stable``,
    ``diverged`` (the probe runs that diverged) and ``resolved`` (per step), ``horizon`` (the probe
    horizon of the scores), ``best``, ``largest_stable``, ``cap``, ``chosen`` (``None`` when no step
    is stable), ``bracketed``, ``unresolved`` and ``capped`` (``chosen`` below ``best``).
    """
    etas = sorted({float(g) for g in grid})
    if len(etas) < 2 or not all(math.isfinite(e) and e > 0 for e in etas):
        raise ValueError(f"tune_step needs a grid of at least two finite steps > 0, got {list(grid)}.")
    if not (math.isfinite(factor) and factor > 1):
        raise ValueError(f"factor must be a number > 1 (the grid's ratio; protocol: 2), got {factor!r}.")
    if not 0 < stable_fraction < 1:
        raise ValueError(f"stable_fraction must lie in (0, 1) (protocol: 0.5), got {stable_fraction!r}.")
    T = int(horizon)
    top = T if max_horizon is None else int(max_horizon)
    if T < 1 or top < T:
        raise ValueError(f"horizon must be >= 1 and max_horizon >= horizon, got {horizon!r} and "
                         f"{max_horizon!r}.")
    runs: dict[float, list] = {}
    budget = extend

    def measure(new: list[float]) -> None:
        out = probe(list(new), T)
        if len(out) != len(new):
            raise ValueError(f"probe returned {len(out)} results for {len(new)} steps; it must return one "
                             "list of probe runs per step.")
        for eta, seeds in zip(new, out):
            runs[eta] = list(seeds)

    def stable(e: float) -> bool:
        return bool(runs[e]) and all(r is not None for r in runs[e])

    def score(e: float) -> float:
        return float(np.mean([r.score for r in runs[e]])) if stable(e) else math.inf

    def resolved(e: float) -> bool:
        return stable(e) and any(r.reached for r in runs[e])

    def best() -> float | None:
        done = [e for e in etas if resolved(e)]
        return min(done, key=lambda e: (score(e), -e)) if done else None

    def cap() -> float | None:
        ok = [e for e in etas if stable(e)]
        return stable_fraction * ok[-1] * (1 + 1e-9) if ok else None

    def wanted() -> float | None:
        """The next step the rule needs, or ``None``."""
        ok = [e for e in etas if stable(e)]
        b = best()
        if not ok or not any(e <= cap() for e in ok) or (b is not None and b == etas[0]):
            return etas[0] / factor
        if ok[-1] == etas[-1]:
            return etas[-1] * factor
        return None

    measure(etas)
    while True:
        while budget > 0 and (new := wanted()) is not None:
            budget -= 1
            etas = sorted(etas + [new])
            measure([new])
        if best() is not None or top < 2 * T:
            break
        T *= 2
        measure([e for e in etas if stable(e)])
    b, c = best(), cap()
    below = [e for e in etas if stable(e) and c is not None and e <= c]
    chosen = b if b is not None and c is not None and b <= c else (below[-1] if below else None)
    return {"grid": etas, "scores": [score(e) for e in etas], "stable": [stable(e) for e in etas],
            "diverged": [sum(r is None for r in runs[e]) for e in etas],
            "resolved": [resolved(e) for e in etas], "horizon": T, "best": b,
            "largest_stable": max((e for e in etas if stable(e)), default=None),
            "cap": None if c is None else c / (1 + 1e-9), "chosen": chosen,
            "bracketed": b is not None and etas[0] < b < etas[-1], "unresolved": b is None,
            "capped": b is not None and chosen is not None and chosen < b}


def loglog_slope(x: Sequence[float], T: Sequence[Sequence[float]], *, level: float = 0.95,
                 draws: int = 2_000, seed: int = 0) -> dict:
    """The power law ``T ~ x^slope``: the least-squares slope of ``log T`` on ``log x`` over every
    unit (row of ``T``, one value per ``x``) and its percentile bootstrap interval over the units.
    Returns ``{"slope", "ci": [lo, hi], "units"}``."""
    lx = np.log(np.asarray(x, dtype=np.float64))
    lT = np.log(np.asarray(T, dtype=np.float64))

    def fit(rows: np.ndarray) -> float:
        xs, ys = np.tile(lx, len(rows)), lT[rows].ravel()
        xc = xs - xs.mean()
        return float((xc * (ys - ys.mean())).sum() / (xc * xc).sum())

    units = np.arange(len(lT))
    rng = np.random.default_rng(seed)
    boot = [fit(rng.choice(units, len(units))) for _ in range(draws)]
    tail = (1.0 - level) / 2 * 100
    return {"slope": fit(units), "ci": [float(np.percentile(boot, tail)),
                                       float(np.percentile(boot, 100 - tail))], "units": len(units)}
