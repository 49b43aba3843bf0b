"""Statistics of protocol v4 (plain numpy): speed measures, a claim's 95% interval and sign test,
the verdict rule (:func:`grade`) and tuned steps. A diverged unit is ``None``; a NaN or an effect
beyond :data:`convres.protocol.EFFECT_BOUND` is a ``ValueError``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from .protocol import (
    BOOTSTRAP_DRAWS,
    EFFECT_BOUND,
    GRID_FACTOR,
    LOG_LOSS_FLOOR,
    STABLE_FRACTION,
    T_INTERVAL_BELOW,
)

#: t_{0.975, df}, the two-sided 95% quantile of Student's t, for df = 1 .. 18 (n = 2 .. 19 units).
T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157,
        2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922)
_N = NormalDist()


def steps_to(loss: Sequence[float], level: float, *, relative: bool = True) -> int | None:
    """The first ``t`` with ``Phi_t <= level Phi_0`` (``relative``) or ``<= level``; ``None`` when
    never (censored), or after a non-finite value (diverged)."""
    v = np.asarray([math.nan if x is None else x for x in loss], dtype=np.float64)
    target = level * v[0] if relative else level
    for t, x in enumerate(v):
        if not math.isfinite(x):
            return None
        if x <= target:
            return t
    return None


def censored(t: int | None, horizon: int) -> tuple[float, bool]:
    """``(steps, is_censored)``: a time never reached counts as the horizon (a lower bound)."""
    return (float(horizon), True) if t is None else (float(t), False)


def mean_log_loss(loss: Sequence[float | None], horizon: int) -> float | None:
    """``(1/T) sum_{t=1}^{T} log10(max(Phi_t / Phi_0, 1e-12))``, ``T = horizon`` (a run stopped
    early counts -12 for its missing steps); ``None`` for a diverged run (a non-finite ``Phi_t``)."""
    v = np.asarray([math.nan if x is None else x for x in loss], dtype=np.float64)
    if not 1 <= v.size <= horizon + 1:
        raise ValueError(f"loss must hold Phi_0 .. Phi_t, t <= horizon = {horizon}; got {v.size} values.")
    if not np.all(np.isfinite(v)):
        return None
    if v[0] <= 0 or np.any(v < 0):
        raise ValueError(f"loss must be >= 0 with Phi_0 > 0 (a ratio to Phi_0), got Phi_0 = {v[0]!r}.")
    logs = np.log10(np.maximum(v[1:] / v[0], LOG_LOSS_FLOOR))
    return float((logs.sum() + (horizon - logs.size) * math.log10(LOG_LOSS_FLOOR)) / horizon)


def linear_rate(loss, mu: float, *, phase: tuple[float, float]) -> float | None:
    """``ln(Phi_a / Phi_b) / (mu (b - a))``, ``a`` and ``b`` the first steps at or below ``phase[0]
    Phi_0`` and ``phase[1] Phi_0`` (``b``: the last step if never); the whole run if ``phase[0]`` is
    never reached; ``None`` for a run of no step."""
    v = [float(x) for x in loss]
    if len(v) < 2:
        return None
    a = steps_to(v, phase[0])
    if a is None or a == len(v) - 1:
        a, b = 0, len(v) - 1
    else:
        hit = steps_to(v, phase[1])
        b = len(v) - 1 if hit is None else hit
    return float(math.log(v[a] / v[b]) / (mu * (b - a)))


def largest_rise(loss: Sequence[float]) -> float:
    """``max_t log10(Phi_t / min_{s <= t} Phi_s)``: the decades a run climbs above its lowest so far."""
    L = np.asarray(loss, dtype=float)
    return float(np.max(np.log10(L / np.minimum.accumulate(L))))


def log_ratio(a: float | None, b: float | None, *, base: float = math.e) -> float | None:
    """``log_base(a / b)``; ``None`` when either is ``None`` or ``+inf`` (a diverged arm)."""
    if a is None or b is None or math.inf in (a, b):
        return None
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
        raise ValueError(f"log_ratio needs positive numbers, got a = {a!r}, b = {b!r}; count a time at "
                         "step 0 as 1, and pass a diverged arm as None.")
    return (math.log(a) - math.log(b)) / math.log(base)


def _spearman_rows(x: np.ndarray, y: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per row, ``sum r_x r_y / sqrt(sum r_x^2 sum r_y^2)`` over the entries ``keep`` marks, ``r`` the
    rank among them (``1 + #smaller + (#equal - 1) / 2``) less its mean; ``nan`` if constant."""
    def centred(v: np.ndarray) -> np.ndarray:
        below = (v[..., None, :] < v[..., :, None]) & keep[..., None, :]    # [v_j < v_i], j marked
        tied = (v[..., None, :] == v[..., :, None]) & keep[..., None, :]
        ranks = below.sum(-1) + (tied.sum(-1) + 1) / 2
        return np.where(keep, ranks - (keep.sum(-1, keepdims=True) + 1) / 2, 0.0)
    rx, ry = centred(x), centred(y)
    den = np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))
    return np.divide((rx * ry).sum(-1), den, out=np.full(den.shape, np.nan), where=den > 0)


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho of ``x`` and ``y`` (ties at their mean rank); ``nan`` when either is constant."""
    xs, ys = (np.asarray(v, dtype=np.float64)[None] for v in (x, y))
    return float(_spearman_rows(xs, ys, np.ones(xs.shape, dtype=bool))[0])


def sign_test(effects: Sequence[float]) -> float:
    """The exact sign test ``p = min(1, 2 P(B <= min(k, n - k)))``, ``B ~ Bin(n, 1/2)``, over the
    ``n`` non-zero effects, ``k`` positive."""
    signs = [e > 0 for e in effects if e != 0]
    n, k = len(signs), sum(signs)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n)


class Estimate(NamedTuple):
    """A claim's ``effect`` and 95% interval ``[lo, hi]``; too few units: ``None``s and a ``reason``."""

    effect: float | None
    lo: float | None
    hi: float | None
    method: str
    units: int
    diverged: int
    sign_test_p: float | None
    reason: str = ""


def _bca(stat: Callable[[np.ndarray], np.ndarray], strata: np.ndarray, draws: int) -> tuple[float, float]:
    """The BCa interval of ``stat`` (index arrays ``(k, n)`` -> ``k`` values) resampled within each
    stratum (seed 0): quantiles ``Phi(z0 + w / (1 - a w))``, ``w = z0 + z_{0.025}, z0 + z_{0.975}``,
    ``a = sum d^3 / (6 (sum d^2)^1.5)`` (jackknife)."""
    n, rng = strata.size, np.random.default_rng(0)
    idx = np.empty((draws, n), dtype=np.intp)
    for s in np.unique(strata):
        where = np.flatnonzero(strata == s)
        idx[:, where] = rng.choice(where, size=(draws, where.size))
    theta = float(stat(np.arange(n)[None])[0])
    boot = stat(idx)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0 or np.ptp(boot) == 0:      # no spread: the point
        return theta, theta
    jack = stat(np.array([np.delete(np.arange(n), i) for i in range(n)]))
    d = np.nanmean(jack) - jack[np.isfinite(jack)]
    scale = 6 * (d**2).sum() ** 1.5                     # may underflow to 0 for a tiny spread
    a = float((d**3).sum() / scale) if scale > 0 else 0.0
    share = ((boot < theta).sum() + 0.5 * (boot == theta).sum()) / boot.size
    z0 = _N.inv_cdf(min(max(share, 0.5 / boot.size), 1 - 0.5 / boot.size))
    q = [_N.cdf(z0 + w / (1 - a * w)) if 1 - a * w > 0 else float(w > 0)
         for w in (z0 + _N.inv_cdf(0.025), z0 + _N.inv_cdf(0.975))]
    lo, hi = np.quantile(boot, sorted(q))
    return float(lo), float(hi)


def _number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) \
        and bool(abs(float(x)) <= EFFECT_BOUND)


def estimate(effects: Sequence, *, min_units: int, strata: Sequence | None = None,
             draws: int = BOOTSTRAP_DRAWS, bound: float | None = None) -> Estimate:
    """A claim's effect and 95% interval (protocol v4, section 1) from one effect per unit (``None``:
    diverged, counted apart): for ``n < 20`` the t-interval ``e +- t_{0.975, n-1} s / sqrt(n)``, else
    the BCa bootstrap stratified by ``strata``; the sign test beside it. Too few units: no interval, a
    reason. ``bound``: the interval cut to ``[-bound, bound]``."""
    labels = ["all"] * len(effects) if strata is None else [str(s) for s in strata]
    if len(labels) != len(effects):
        raise ValueError(f"strata must give one label per effect: {len(labels)} labels, "
                         f"{len(effects)} effects.")
    bad = [i for i, e in enumerate(effects) if e is not None and not _number(e)]
    if bad:
        raise ValueError(f"effects[{bad[0]}] = {effects[bad[0]]!r} is not a finite number within "
                         f"+-{EFFECT_BOUND:g} (a log ratio or a rank correlation): pass a diverged unit as "
                         "None; decide a tau of tied values before grading.")
    keep = [i for i, e in enumerate(effects) if e is not None]
    lab, n, out = np.asarray([labels[i] for i in keep]), len(keep), len(effects) - len(keep)
    if n < min_units:
        fix = "rerun the diverged arms at half their step" if out else "run more seeds"
        return Estimate(None, None, None, "none", n, out, None, f"{n} finite units ({out} diverged), "
                        f"fewer than the {min_units} the protocol needs: {fix}")
    e = np.asarray([effects[i] for i in keep], dtype=np.float64)
    mean, p = float(e.mean()), sign_test(e.tolist())
    if n < T_INTERVAL_BELOW:
        half = T975[n - 2] * float(e.std(ddof=1)) / math.sqrt(n)
        lo, hi, method = mean - half, mean + half, "t-interval"
    else:
        lo, hi = _bca(lambda idx: e[idx].mean(axis=-1), lab, draws)
        method = "BCa bootstrap" + (", stratified" if len(set(lab)) > 1 else "")
    if bound is not None:
        lo, hi = max(lo, -bound), min(hi, bound)
    return Estimate(mean, lo, hi, method, n, out, p)


def seed_spearman(x: np.ndarray, y: np.ndarray, keep: np.ndarray, *, min_units: int,
                  draws: int = BOOTSTRAP_DRAWS) -> Estimate:
    """The mean over strata (rows) of Spearman's rho of ``x`` against ``y`` across the seeds (columns;
    ``keep`` false: a diverged run, left out), with the BCa interval resampling whole seeds (a seed's
    runs share their weights); fewer than ``min_units`` kept runs in a stratum: no estimate."""
    n, out, fewest = x.shape[1], int((~keep).sum()), int(keep.sum(1).min())
    if fewest < min_units:
        return Estimate(None, None, None, "none", n, out, None, f"{fewest} finite runs in a stratum "
                        f"({out} diverged), fewer than the {min_units} the protocol needs: rerun the "
                        "diverged arms at half their step")

    def rho(idx):   # per row of idx (seeds): the mean over the strata of rho
        return np.mean([_spearman_rows(x[j][idx], y[j][idx], keep[j][idx]) for j in range(len(x))], axis=0)
    effect = float(rho(np.arange(n)[None])[0])
    if not math.isfinite(effect):
        return Estimate(None, None, None, "none", n, out, None, "no rank correlation: x or y is constant "
                        "within a stratum")
    return Estimate(effect, *_bca(rho, np.zeros(n), draws), "BCa bootstrap over seeds", n, out, None)


class Grade(NamedTuple):
    """A verdict of :data:`GRADES`, its ``reason`` and the pre-named ``subset`` where reproduced."""

    verdict: str
    reason: str = ""
    subset: tuple[str, ...] = ()


def grade(est: Estimate, margin: float, *, rule: str = "superiority",
          failed: Sequence[str] = (), subsets: Mapping[str, Estimate] | None = None,
          every: bool = False) -> Grade:
    """The verdict of protocol v4, section 1, in this order: *not testable* (``failed``), *reversed*
    (hi < 0), *reproduced* (lo > margin; with ``every``, in every subset), *partly* (lo > 0, or a
    subset reproduced), *not reproduced* (hi < margin), else *inconclusive*. ``non-inferiority``
    (margin <= 0): *reproduced* iff lo > margin, *reversed* iff hi < margin, else *inconclusive*."""
    if rule not in ("superiority", "non-inferiority") or not math.isfinite(margin) \
            or (margin > 0) != (rule == "superiority"):
        raise ValueError(f"rule {rule!r} with margin {margin!r}: 'superiority' takes a "
                         "margin > 0, 'non-inferiority' one <= 0.")
    if failed:
        return Grade("not testable", "design check failed: " + ", ".join(failed))
    if est.effect is None or est.lo is None or est.hi is None:
        return Grade("inconclusive", est.reason)
    lo, hi, subsets = est.lo, est.hi, subsets or {}
    holds = f"the interval [{lo:.3g}, {hi:.3g}] holds"
    if rule == "non-inferiority":
        if lo > margin:
            return Grade("reproduced")
        if hi < margin:
            return Grade("reversed")
        return Grade("inconclusive", f"{holds} the margin {margin:.3g}")
    won = tuple(k for k, s in subsets.items()
                if grade(s, margin).verdict == "reproduced")
    if hi < 0:
        return Grade("reversed")
    if lo > margin and (not every or len(won) == len(subsets)):
        return Grade("reproduced")
    if lo > 0 or won:
        return Grade("partly", subset=won)
    if hi < margin:
        return Grade("not reproduced")
    return Grade("inconclusive", f"{holds} both 0 and the margin {margin:.3g}")


def kendall_tau(x: Sequence[float], y: Sequence[float], *, tied: float = math.nan) -> float:
    """Kendall's tau-b, ``(concordant - discordant) / sqrt(untied_x untied_y)``; ``tied`` if constant."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(a), k=1)
    sx, sy = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    nx, ny = np.count_nonzero(sx), np.count_nonzero(sy)
    return float((sx * sy).sum() / math.sqrt(nx * ny)) if nx and ny else tied


class ProbeRun(NamedTuple):
    """A probe run of :func:`tune_step`: its ``score`` (lower is better) and whether it ``reached``
    the target (``False``: censored)."""

    score: float
    reached: bool


def tune_step(probe: Callable[[list[float], int], Sequence[Sequence[ProbeRun | None]]],
              grid: Sequence[float], *, horizon: int, max_horizon: int | None = None,
              factor: float = GRID_FACTOR, stable_fraction: float = STABLE_FRACTION, extend: int = 8) -> dict:
    """The step of one arm by protocol v4, section 2. ``probe(etas, T)`` gives per step one
    :class:`ProbeRun` per probe seed (``None``: diverged or ended above its start). A step is *stable*
    when no run is ``None``, *resolved* when stable and one run ``reached``; its score is the mean.
    The grid grows by ``factor``, at most ``extend`` times: above while the largest step is stable,
    below while no stable step is at most ``stable_fraction`` of the largest stable one or the best
    is the smallest. With nothing resolved the horizon doubles up to ``max_horizon``. ``chosen``:
    the best resolved step (the larger on a tie), capped at ``stable_fraction`` of the largest
    stable step. Returns the grid and the choice as a JSON-ready dict."""
    etas = sorted({float(g) for g in grid})
    if len(etas) < 2 or not all(math.isfinite(e) and e > 0 for e in etas):
        raise ValueError(f"tune_step needs a grid of at least two finite steps > 0, got {list(grid)}.")
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

    def wanted() -> float | None:       # the next step the rule needs
        ok = [e for e in etas if stable(e)]
        b, c = best(), cap()
        if c is None or not any(e <= c for e in ok) or (b is not None and b == etas[0]):
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


def power_fit(d, T, *, fine: bool = True) -> dict:
    """The fit ``T = a + b d^p`` (``a, b >= 0``) to the times ``T[i][j]`` of unit ``i`` at ``d[j]``
    (``nan``: left out), least squares on ``log T``: with ``a = rho b d_min^p``, on a grid of ``(p,
    rho)``, ``log b`` the mean of ``log T - log(rho d_min^p + d^p)``; then finer grids (``fine``:
    0.001 in ``p``) until the best stays. Returns ``{"a", "b", "p"}``."""
    x = np.tile(np.asarray(d, dtype=np.float64), (len(T), 1)).ravel()
    y = np.asarray(T, dtype=np.float64).ravel()
    keep = np.isfinite(y)
    x, ly = x[keep], np.log(y[keep])
    lx = np.log(x)

    def best(ps, rhos):
        P, R = ps[:, None, None], rhos[None, :, None]
        g = np.log(R * x.min() ** P + np.exp(P * lx))             # (p, rho, unit)
        lb = (ly - g).mean(axis=-1)
        err = ((ly - g - lb[..., None]) ** 2).sum(axis=-1)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(ps[i]), float(rhos[j]), float(lb[i, j])

    rhos = np.concatenate([[0.0], np.logspace(-3, 3, 25)])
    p, rho, lb = best(np.arange(0.0, 3.0001, 0.02), rhos)
    dp, n_rho = (0.001, 201) if fine else (0.005, 41)
    for _ in range(8):                                # down the valley where a and p trade off
        near = rho * np.logspace(-0.5, 0.5, n_rho) if rho > 0 else np.array([0.0, 1e-4, 1e-3])
        step = best(np.arange(max(p - 0.03, 0.0), min(p + 0.03, 3.0) + dp / 2, dp), near)
        if step[:2] == (p, rho):
            break
        p, rho, lb = step
    b = math.exp(lb)
    return {"a": rho * b * float(x.min()) ** p, "b": b, "p": p}


def power_law(d, T, *, draws: int = 1000) -> dict:
    """:func:`power_fit` with a bootstrap ``p_ci`` over the units (``draws``, seed 0, coarse grid),
    the ``local_slopes`` ``log(T_hi / T_lo) / log(d_hi / d_lo)`` between neighbours of ``d``
    (:func:`estimate`), and the count of times ``left_out``."""
    T = np.asarray(T, dtype=np.float64)
    fit = power_fit(d, T)
    rng = np.random.default_rng(0)
    boot = [power_fit(d, T[rng.integers(0, len(T), len(T))], fine=False)["p"] for _ in range(draws)]
    slopes = []
    for j in range(len(d) - 1):
        v = np.log(T[:, j + 1] / T[:, j]) / math.log(d[j + 1] / d[j])
        est = estimate([float(x) for x in v if np.isfinite(x)], min_units=2)
        slopes.append({"d_lo": d[j], "d_hi": d[j + 1], "slope": est.effect, "ci": [est.lo, est.hi],
                       "units": est.units, "method": est.method})
    return {"p": fit["p"], "p_ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "a": fit["a"], "b": fit["b"], "local_slopes": slopes, "left_out": int(np.isnan(T).sum())}
