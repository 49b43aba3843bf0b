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

import numpy as np

__all__ = ["VERDICTS", "steps_to", "censored", "paired_bootstrap", "kendall_tau", "claim_stats",
           "claim_verdict", "tune_step", "loglog_slope"]

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


def tune_step(score: Callable[[float], float], grid: Sequence[float], *, factor: float = 2.0,
              extend: int = 6) -> dict:
    """The best step on a factor-``factor`` grid, bracketed: ``score(eta)`` (lower is better, ``inf``
    for a diverged run; computed on probe seeds, never the evaluation seeds) is evaluated on
    ``grid``, and while the best value sits at an edge the grid grows past that edge, at most
    ``extend`` times; while every step diverges it grows below the smallest (only a smaller step can
    be stable). Returns ``{"grid", "scores", "chosen", "bracketed"}``; ``bracketed`` is false when
    the budget ran out with the best step still at an edge, or with no stable step (the caller must
    say so)."""
    etas = sorted({float(g) for g in grid})
    if len(etas) < 2:
        raise ValueError(f"tune_step needs a grid of at least two steps, got {list(grid)}.")
    scores = {eta: float(score(eta)) for eta in etas}
    for _ in range(extend):
        best = min(etas, key=lambda e: (scores[e], -e))
        if best == etas[0] or math.isinf(scores[best]):
            new = etas[0] / factor
            etas.insert(0, new)
        elif best == etas[-1]:
            new = etas[-1] * factor
            etas.append(new)
        else:
            break
        scores[new] = float(score(new))
    best = min(etas, key=lambda e: (scores[e], -e))
    return {"grid": etas, "scores": [scores[e] for e in etas], "chosen": best,
            "bracketed": etas[0] < best < etas[-1] and not math.isinf(scores[best])}


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
