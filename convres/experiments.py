"""The book's experiments: one record per experiment, one runner each, cached results.

Book chapters: *Simulations*, *Jena Climate*, *SST-2*, *Rank collapse* and the *Reproduction
report*. Paper: arXiv:2506.05249, its experiments as described in the abstract (v1 and v4): (1)
simulations, (2) Jena Climate with residual coefficients beta from small values to 1, (3) SST-2
with depth L = 2, 6, 10 with and without residuals. Every size, seed, step size and window below is
**the book's choice**: the paper's settings are not known to this project.

An :class:`Experiment` holds everything about one experiment: its settings per profile
(``"book"``: what the chapters show; ``"paper"``: larger, run by hand or on a GPU; ``"smoke"``: unit
tests only), its runner (settings -> JSON data, storing its own axes), its key numbers, its claims
for the reproduction report and its figure. :func:`run_experiment` runs one (or loads its cached
result, :func:`convres.cache.cached_json`) and returns a :class:`Result`.

Step sizes are always written ``mu = eta / R`` with ``R`` the number of output rows the loss sums
over (sequences for a pooled readout, sequences x tokens per token): ``eta`` is the step on the
loss averaged over the rows, and a grid of ``eta`` means the same thing at every size.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import time
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np
import torch

from . import plotting
from .cache import cached_json
from .collapse import gd_attention_stats, gd_instance, rank_one_floor, residual_config
from .data import (JENA_ALL_FEATURES, JENA_FEATURES, DataError, _timestamp, embed_tokens, embed_with,
                   load_jena, load_sst2, ppmi_embeddings, sst2_prefixes, standardize, synthetic_regression)
from .gd import Step, gradient_descent
from .model import ModelConfig, forward, init_params
from .runtime import check_device, torch_threads
from .theory import rate_alpha

__all__ = ["Experiment", "Result", "EXPERIMENTS", "PROFILES", "VERDICTS", "settings", "run_experiment",
           "claims", "measured_rate", "jena_data", "JenaTask", "sst2_data", "SST2Task", "pooled_baseline",
           "SUMMARY_KEYS"]

PROFILES = ("book", "paper", "smoke")
#: Version of the layout of the results; part of the cache key (bump it when a runner changes).
RESULT_FORMAT = 4
#: The verdicts of the reproduction report. "inconclusive": the setting cannot show the effect (a
#: ceiling, or a regime where it cannot appear); "holds a posteriori": a row that checks one of the
#: book's own inequalities along the runs rather than a claim of the paper that could fail on its own.
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "holds a posteriori")
#: The fields every :meth:`Result.summary` starts with (``None`` where one does not apply):
#: training and validation sequences, raw data rows, the simulation regimes, seeds, steps, the
#: wall time of the computation, dtype and device.
SUMMARY_KEYS = ("n_train", "n_val", "rows", "regimes", "seeds", "steps", "wall_seconds", "dtype", "device")
#: Settings that must be non-empty lists.
LIST_SETTINGS = ("betas", "seeds", "depths", "eta_grid", "sizes", "d_qks", "regimes")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment of the book.

    Attributes:
        name, title, chapter: how the command line and the report name it.
        profiles: the settings per profile (see :data:`PROFILES`).
        run: ``run(settings, progress=..., data_dir=..., device=...) -> data``, a JSON-able dict.
        key_numbers: ``key_numbers(result) -> dict``, the figure's numbers.
        claims: ``claims(result) -> [row]``, the rows of the reproduction report.
        plot: ``plot(result) -> Figure``.
    """

    name: str
    title: str
    chapter: str
    profiles: Mapping[str, dict]
    run: Callable[..., dict]
    key_numbers: Callable[["Result"], dict]
    claims: Callable[["Result"], list]
    plot: Callable[["Result"], Any] | None = None


@dataclasses.dataclass
class Result:
    """A finished experiment: its name, profile, settings, the runner's data and its wall time."""

    name: str
    profile: str
    settings: dict
    data: dict
    seconds: float

    @property
    def experiment(self) -> Experiment:
        return EXPERIMENTS[self.name]

    def summary(self) -> dict:
        """The fields of :data:`SUMMARY_KEYS`, then the key numbers, JSON-ready (a non-finite
        number becomes ``None``)."""
        s = self.settings
        head = {k: None for k in SUMMARY_KEYS}
        head.update(seeds=list(s["seeds"]) if "seeds" in s else None, steps=s.get("steps"),
                    wall_seconds=round(float(self.seconds), 1), dtype=s.get("dtype", "float64"),
                    device=self.data.get("device", "cpu"))
        return _json_safe({**head, **self.experiment.key_numbers(self)})

    def claims(self) -> list[dict]:
        """The experiment's rows of the reproduction report."""
        return [dict(experiment=self.name, **row) for row in self.experiment.claims(self)]

    def figure(self):
        """The experiment's figure (matplotlib)."""
        return self.experiment.plot(self)

    def to_json(self) -> dict:
        return {"name": self.name, "profile": self.profile, "settings": self.settings, "data": self.data,
                "seconds": self.seconds}


def settings(name: str, profile: str = "book") -> dict:
    """A copy of the settings of experiment ``name`` under ``profile``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}.")
    if profile not in EXPERIMENTS[name].profiles:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(EXPERIMENTS[name].profiles)}.")
    return copy.deepcopy(EXPERIMENTS[name].profiles[profile])


def _stored_ok(stored) -> bool:
    return isinstance(stored, dict) and {"name", "profile", "settings", "data", "seconds"} <= set(stored) \
        and isinstance(stored["data"], dict)


def _check_settings(name: str, s: dict) -> None:
    """Refuse settings that would run nothing or silently mean something else."""
    for key in LIST_SETTINGS:
        if key in s and (not isinstance(s[key], list) or not s[key]):
            raise ValueError(f"setting {key!r} of {name!r} must be a non-empty list, got {s[key]!r}.")
    for seed in s.get("seeds", []):
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"setting 'seeds' of {name!r} must hold non-negative integers, got {seed!r}.")
    for key in ("betas", "eta_grid"):
        for v in s.get(key, []):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0 \
                    or (key == "eta_grid" and v == 0):
                raise ValueError(f"setting {key!r} of {name!r} must hold finite numbers "
                                 f"{'> 0' if key == 'eta_grid' else '>= 0'}, got {v!r}.")
        if key in s and len(set(s[key])) != len(s[key]):
            raise ValueError(f"setting {key!r} of {name!r} has repeated values: {s[key]!r}.")
    if len(set(s.get("seeds", []))) != len(s.get("seeds", [])):
        raise ValueError(f"setting 'seeds' of {name!r} has repeated values: {s['seeds']!r}.")


def run_experiment(name: str, profile: str = "book", *, progress: bool = False, refresh: bool = False,
                   data_dir=None, overrides: dict | None = None, device=None) -> Result:
    """Run experiment ``name`` under ``profile`` (or load its cached result); return a :class:`Result`.

    ``overrides`` replaces some settings (a different configuration, hence a different cache key).
    ``device`` (e.g. ``"cuda"``) runs the gradient descent there; it is part of the cache key
    (a result computed on another device may differ in round-off).
    """
    s = settings(name, profile)
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of settings or None, got {type(overrides).__name__}.")
    if overrides:
        unknown = sorted(set(overrides) - set(s))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown} for {name!r}; known: {sorted(s)}.")
        s.update(copy.deepcopy(overrides))
    _check_settings(name, s)
    dev = check_device(device)
    key = {"experiment": name, "settings": s, "format": RESULT_FORMAT}
    if dev.type != "cpu":
        key["device"] = str(dev)

    def compute():
        t0 = time.perf_counter()
        with torch_threads(1):  # small models: one thread is fastest (appendix Performance)
            data = EXPERIMENTS[name].run(s, progress=progress, data_dir=data_dir, device=dev)
        data["device"] = str(dev)
        return Result(name, profile, s, data, time.perf_counter() - t0).to_json()

    return Result(**cached_json(f"experiment-{name}", key, compute, refresh=refresh, check=_stored_ok))


def claims(results: Mapping[str, Result]) -> list[dict]:
    """Every row of the reproduction report, from ``results`` (name -> :class:`Result`)."""
    unknown = sorted(set(results) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"results has unknown experiment(s) {unknown}; expected keys among {sorted(EXPERIMENTS)}.")
    return [row for name in EXPERIMENTS if name in results for row in results[name].claims()]


# --- helpers ---------------------------------------------------------------------------------------

def measured_rate(loss, floor: float = 1e-20) -> float:
    """Average per-step linear rate ``r`` with ``Phi_t ~ Phi_0 (1 - r)^t``, measured from ``t = 0``
    to the last step before the loss first reaches ``floor`` (float64 round-off): ``r = 1 -
    (Phi_T / Phi_0)^(1/T)``."""
    loss = np.asarray(loss, dtype=np.float64)
    below = np.nonzero(loss <= floor)[0]
    T = (int(below[0]) if len(below) else len(loss)) - 1
    if T < 1:
        return float("nan")
    return float(1.0 - (loss[T] / loss[0]) ** (1.0 / T))


def _finite(x):
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _dtype(s: dict, key: str = "dtype") -> torch.dtype:
    name = s.get(key, "float64")
    if name not in ("float64", "float32"):
        raise ValueError(f"setting {key!r} must be 'float64' or 'float32', got {name!r}.")
    return getattr(torch, name)


def _stable(h) -> bool:
    """Not diverged and the loss at the end of the run not above its start."""
    return bool(h.status != "diverged" and len(h.loss) > 1 and h.loss[-1] <= h.loss[0])


def _median_by(runs, keys, value):
    groups: dict[tuple, list] = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in keys), []).append(value(r))
    return {k: float(np.median(v)) for k, v in groups.items()}


def _spread(values) -> dict:
    """Median, min and max of ``values`` (``None`` entries dropped), with their count."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if len(v) == 0:
        return {"median": None, "min": None, "max": None, "count": 0}
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()), "count": int(len(v))}


def _final(r, field="loss"):
    v = r[field][-1]
    return math.inf if v is None or r["status"] == "diverged" else float(v)


def _verdict(all_ok: bool, some_ok: bool) -> str:
    return VERDICTS[0] if all_ok else VERDICTS[1] if some_ok else VERDICTS[2]


def _positive_int(s: dict, key: str) -> int:
    v = s.get(key)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"setting {key!r} must be a positive integer, got {v!r}.")
    return int(v)


# --- simulations -----------------------------------------------------------------------------------

def _sim_cells(s: dict) -> list[tuple]:
    """``(N, d_qk, scale)`` of every cell the simulations run, in order and without repeats: the
    size sweep (``N`` over ``sizes`` at the base ``d_qk`` and scale), the d_QK sweep (``d_qk`` over
    ``d_qks`` at scale ``1/d_qk`` and the base ``N``) and the named regimes."""
    cells = [(N, s["d_qk"], s["scale"]) for N in s["sizes"]]
    cells += [(s["N"], q, "1/d_qk") for q in s["d_qks"]]
    cells += [(r["N"], r["d_qk"], r["scale"]) for r in s["regimes"]]
    return list(dict.fromkeys(cells))


def _run_simulations(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    dtype, n, d = _dtype(s), s["n"], s["d"]
    for r in s["regimes"]:
        if not {"name", "N", "d_qk", "scale"} <= set(r):
            raise ValueError(f"every regime needs 'name', 'N', 'd_qk' and 'scale', got {r!r}.")
    named = {(r["N"], r["d_qk"], r["scale"]): r["name"] for r in s["regimes"]}
    cells = []
    for N, d_qk, scale in _sim_cells(s):
        regime = named.get((N, d_qk, scale))
        check = regime is not None and N * n <= d      # the per-step bound through W_U applies
        mu = s["eta"] / (N * n)
        cfgs = [ModelConfig(d=d, d_qk=d_qk, m=s["m"], c=1, beta=b, activation=s["activation"], scale=scale)
                for b in s["betas"]]
        runs = []
        for seed in s["seeds"]:
            X, Y = synthetic_regression(N, n, d, 1, seed=seed, dtype=dtype)
            p0 = init_params(cfgs[0], seed=1000 + seed, dtype=dtype)  # the same weights for every beta
            out = gradient_descent([p0] * len(cfgs), X, Y, cfgs, mu, s["steps"], progress=progress,
                                   record_every=1 if check else s["steps"], device=device)
            floor = rank_one_floor(Y.double())
            for beta, cfg, (_, h) in zip(s["betas"], cfgs, out):
                loss = h.loss
                half = loss[len(loss) // 2]
                run = dict(beta=beta, seed=seed, status=h.status,
                           ratio=float(loss[-1] / loss[0]) if h.status != "diverged" else None,
                           last_half=float(loss[-1] / half) if h.status != "diverged" and half > 0 else None,
                           rate=measured_rate(loss, s["floor"]), floor_ratio=floor / float(loss[0]),
                           sigma_min_Z0=float(h.sigma_min_Z[0]), sigma_min_H0=float(h.sigma_min_H[0]))
                if regime is not None:
                    run["loss"] = _finite(loss)
                if check:
                    # the book's PL-type bound through W_U: Phi_{t+1} <= (1 - mu sigma_min(H_t)^2) Phi_t
                    active = loss[:-1] > s["floor"]
                    bound = 1.0 - mu * h.sigma_min_H[:-1] ** 2
                    excess = h.ratio[active] - bound[active]
                    run.update(alpha0=float(h.sigma_min_H[0] ** 2), alpha_theorem=rate_alpha(p0, X, cfg),
                               bound_holds=bool(np.all(excess <= 0)) if active.any() else True,
                               bound_excess=float(excess.max()) if active.any() else None,
                               bound_violations=int((excess > 0).sum()))
                runs.append(run)
        cells.append(dict(N=N, n=n, d=d, d_qk=d_qk, scale=scale, regime=regime, mu=mu,
                          rows_per_dim=N * n / d, runs=runs))
    return {"cells": cells, "steps": s["steps"]}


def _sim_regime_cells(res: Result) -> dict[str, dict]:
    return {c["regime"]: c for c in res.data["cells"] if c["regime"] is not None}


def _sim_table(cell: dict, field: str) -> dict[float, float | None]:
    """Median of ``field`` per beta over the seeds of one cell (a diverged run counts as ``inf``
    for the loss ratio)."""
    out = {}
    for b in sorted({r["beta"] for r in cell["runs"]}):
        vals = [r[field] for r in cell["runs"] if r["beta"] == b]
        if field == "ratio":
            vals = [math.inf if v is None else v for v in vals]
        vals = [v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
        out[b] = float(np.median(vals)) if vals else None
    return out


def _simulations_numbers(res: Result) -> dict:
    s, regimes = res.settings, _sim_regime_cells(res)
    per_regime = []
    for r in s["regimes"]:
        cell = regimes[r["name"]]
        ratio, rate = _sim_table(cell, "ratio"), _sim_table(cell, "rate")
        per_regime.append({"regime": r["name"], "N": cell["N"], "n": cell["n"], "d": cell["d"],
                           "d_qk": cell["d_qk"], "scale": cell["scale"], "mu": cell["mu"],
                           "per_beta": [{"beta": b, "median_loss_ratio": ratio[b], "median_rate": rate[b]}
                                        for b in ratio],
                           "stalled_beta0_runs": sum(_stalled(x, s) for x in cell["runs"] if x["beta"] == 0),
                           "diverged_runs": sum(x["status"] == "diverged" for x in cell["runs"])})
    checked = [x for c in regimes.values() for x in c["runs"] if "bound_holds" in x]
    return {"regimes": [r["name"] for r in s["regimes"]], "eta": s["eta"], "per_regime": per_regime,
            "bound_holds_all_runs": all(x["bound_holds"] for x in checked) if checked else None,
            "diverged_runs": sum(x["status"] == "diverged" for c in res.data["cells"] for x in c["runs"])}


def _stalled(run: dict, s: dict) -> bool:
    """A run stalls when, after all steps, its loss is still above ``stall`` times its start and
    the second half of the run lowered it by less than the fraction ``1 - plateau`` (a plateau, not a
    slow descent). A diverged run counts as stalled."""
    if run["ratio"] is None or run["last_half"] is None:
        return True
    return run["ratio"] > s["stall"] and run["last_half"] > s["plateau"]


def phase_diagram(res: Result, axis: str) -> dict:
    """The simulations' phase diagram along ``axis`` (``"d_qk"``: the d_QK sweep at scale
    ``1/d_qk``; ``"size"``: the sweep of ``N n / d``): ``{"x": [...], "betas": [...], "log_ratio":
    rows x betas}`` with ``log10`` of the median loss ratio ``Phi_T / Phi_0`` over the seeds (``None``
    where the median run diverged)."""
    s = res.settings
    if axis == "d_qk":
        keys, x = [(s["N"], q, "1/d_qk") for q in s["d_qks"]], list(s["d_qks"])
    elif axis == "size":
        keys = [(N, s["d_qk"], s["scale"]) for N in s["sizes"]]
        x = [N * s["n"] / s["d"] for N in s["sizes"]]
    else:
        raise ValueError(f"axis must be 'd_qk' or 'size', got {axis!r}.")
    cells = {(c["N"], c["d_qk"], c["scale"]): c for c in res.data["cells"]}
    betas = list(s["betas"])
    grid = []
    for k in keys:
        med = _sim_table(cells[k], "ratio")
        grid.append([None if med[b] is None or not math.isfinite(med[b]) else math.log10(max(med[b], 1e-300))
                     for b in betas])
    return {"axis": axis, "x": x, "betas": betas, "log_ratio": grid, "stall": math.log10(s["stall"])}


def _stall_row(name: str, regime: dict, cell: dict, s: dict) -> dict:
    b0 = [x for x in cell["runs"] if x["beta"] == 0]
    b1 = [x for x in cell["runs"] if x["beta"] == max(s["betas"])]
    st0, st1 = [_stalled(x, s) for x in b0], [_stalled(x, s) for x in b1]
    r0 = [x["ratio"] for x in b0 if x["ratio"] is not None]
    where = (f"{name} regime (N n = {cell['N'] * cell['n']}, d = {cell['d']}, d_QK = {cell['d_qk']}, "
             f"scale {cell['scale']})")
    measurement = (f"{where}: beta = 0 final / initial loss {min(r0):.2g} to {max(r0):.2g}, "
                   f"{sum(st0)} of {len(st0)} seeds stall; beta = {max(s['betas']):g}: "
                   f"{sum(st1)} of {len(st1)} stall") if r0 else f"{where}: every beta = 0 run diverged"
    if all(st1):
        verdict, why = VERDICTS[3], "every residual run stalls too: the regime does not train at all"
    elif not any(st0) and not regime.get("stall_possible", True):
        verdict, why = VERDICTS[3], regime.get("why", "the regime cannot show a stall")
    else:
        verdict, why = _verdict(all(st0) and not any(st1), any(st0)), ""
    return dict(claim=f"Without the residual, training stalls ({name} regime).",
                criterion=f"a run stalls when its loss after {s['steps']} steps is above "
                          f"{s['stall']:g} x its start and the second half of the run lowered it by less "
                          f"than {1 - s['plateau']:.0%}; reproduced: every beta = 0 seed stalls and no "
                          f"beta = {max(s['betas']):g} seed does; partly: some beta = 0 seeds stall; "
                          "inconclusive: the residual runs stall too, or a regime in which the output "
                          "layer alone can fit shows no stall" + (f" ({why})" if why else ""),
                measurement=measurement, verdict=verdict, figure="fig-sim-regimes",
                evidence=f"{sum(st0)} of {len(st0)} beta = 0 seeds stall, {sum(st1)} of {len(st1)} "
                         f"beta = {max(s['betas']):g}" + (f"; {why}" if why else ""))


def _simulations_claims(res: Result) -> list[dict]:
    s, regimes = res.settings, _sim_regime_cells(res)
    rows = []
    parts, mono, faster = [], [], []
    for r in s["regimes"]:
        rate = _sim_table(regimes[r["name"]], "rate")
        betas = sorted(rate)
        vals = [rate[b] if rate[b] is not None else 0.0 for b in betas]
        mono.append(all(a < b for a, b in zip(vals, vals[1:])))
        faster.append(vals[-1] > vals[0])
        parts.append(f"{r['name']}: " + ", ".join(f"{b:g}: {v:.2g}" for b, v in zip(betas, vals)))
    rows.append(dict(
        claim="The stronger the residual, the faster gradient descent descends.",
        criterion="in every regime, the median measured linear rate (to the float floor) increases "
                  "with beta at every step of the sweep (partly: the largest beta is faster than "
                  "beta = 0 in every regime, or the rate is monotone in some regimes)",
        measurement="median rate per step by beta; " + "; ".join(parts),
        verdict=_verdict(all(mono), all(faster) or any(mono)), figure="fig-sim-regimes",
        evidence=f"largest beta faster than beta = 0 in {sum(faster)} of {len(faster)} regimes; rate "
                 f"monotone in beta in {sum(mono)} ("
                 + (", ".join(r["name"] for r, m in zip(s["regimes"], mono) if m) or "none") + ")"))
    for r in s["regimes"]:
        rows.append(_stall_row(r["name"], r, regimes[r["name"]], s))
    checked = [(r["name"], x) for r in s["regimes"] for x in regimes[r["name"]]["runs"] if "bound_holds" in x]
    if checked:
        holds = [x["bound_holds"] for _, x in checked]
        slack = [x["rate"] / (regimes[name]["mu"] * x["alpha0"]) for name, x in checked]
        names = sorted({name for name, _ in checked})
        rows.append(dict(
            claim="Gradient descent converges linearly, at a rate set by smallest singular values "
                  "(checked with the book's per-step bound; the paper's rate is not known to us).",
            criterion="a posteriori check, not a test of the paper's alpha: the per-step inequality of "
                      "part (a) of the book's theorem, Phi_{t+1} <= (1 - mu sigma_min(H_t)^2) Phi_t, with "
                      "sigma_min(H_t) measured along each run, at every step above the float floor, in the "
                      f"regime(s) where N n <= d ({', '.join(names)}); the step size is not checked "
                      "against the theorem's condition",
            measurement=f"holds at every step in {sum(holds)} of {len(holds)} runs; loose: measured rate "
                        f"{min(slack):.3g}x to {max(slack):.3g}x mu sigma_min(H_0)^2",
            verdict=VERDICTS[4] if all(holds) else _verdict(False, any(holds)), figure="fig-sim-regimes",
            evidence=f"holds at every step in {sum(holds)} of {len(holds)} runs, loose by at least "
                     f"{min(slack):.2g}x"))
    return rows


# --- Jena Climate ----------------------------------------------------------------------------------

class JenaTask(NamedTuple):
    """The book's Jena task (chapter *Jena Climate*): training and held-out windows.

    ``X``, ``Y``: training windows ``(N, window, 11)`` and targets ``(N, window, 1)``; ``X_val``,
    ``Y_val``: the same for the held-out rows. ``rows``, ``train_rows``, ``val_rows``: raw rows used;
    ``target_std``: the standard deviation of the target over the training rows (in its unit), to
    turn a standardized MSE into the unit squared; ``persistence``: the MSE of the persistence
    forecast (the target ``horizon`` rows later predicted by its current value) on the training
    and on the held-out windows, standardized units.
    """

    X: torch.Tensor
    Y: torch.Tensor
    X_val: torch.Tensor
    Y_val: torch.Tensor
    rows: int
    train_rows: int
    val_rows: int
    target_std: float
    persistence: dict


def _windows(z: np.ndarray, target: np.ndarray, window: int, horizon: int, stride: int):
    """Windows of ``window`` rows starting every ``stride`` rows; the target of position ``t`` is
    ``target`` ``horizon`` rows later (so a window needs ``window + horizon`` rows)."""
    starts = range(0, len(z) - window - horizon + 1, stride)
    X = np.stack([z[i:i + window] for i in starts])
    Y = np.stack([target[i + horizon:i + horizon + window] for i in starts])[..., None]
    return X, Y


def jena_data(s: dict, data_dir=None, dtype=torch.float64) -> JenaTask:
    """Training and held-out windows of the book's Jena task (chapter *Jena Climate*).

    The rows of ``[start, end]`` at ``freq`` (selected by timestamp, every row of the grid required),
    split at ``train_end``: rows up to it train, the later ones are held out. Every feature is
    standardized by its mean and standard deviation **over the training rows** (the held-out rows
    with the same numbers). Sequences are windows of ``window`` rows starting every ``stride`` rows,
    inside one part; the target of position ``t`` is the standardized ``target`` ``horizon`` rows
    later. Returns a :class:`JenaTask`.
    """
    window, stride, horizon = (_positive_int(s, k) for k in ("window", "stride", "horizon"))
    if s.get("target") not in JENA_FEATURES:
        raise ValueError(f"setting 'target' must be one of {JENA_FEATURES}, got {s.get('target')!r}.")
    split = _timestamp("setting 'train_end'", s["train_end"])
    if not _timestamp("setting 'start'", s["start"]) < split < _timestamp("setting 'end'", s["end"]):
        raise ValueError(f"setting 'train_end' ({s['train_end']}) must lie strictly between start "
                         f"({s['start']}) and end ({s['end']}).")
    df = load_jena(s["start"], s["end"], data_dir=data_dir, columns=JENA_FEATURES, freq=s["freq"])
    train, val = df[df.index <= split], df[df.index > split]
    need = window + horizon
    for part, rows in (("training", train), ("held-out", val)):
        if len(rows) < need:
            raise DataError(f"{len(rows)} {part} rows, but a window of {window} rows with a target "
                            f"{horizon} rows later needs {need}; move 'train_end' or shorten the window.")
    values = train.to_numpy(dtype=np.float64)
    z = standardize(values, df.columns, context=f" over the training rows {s['start']} .. {s['train_end']}")
    mean, std = values.mean(0), values.std(0)
    zv = (val.to_numpy(dtype=np.float64) - mean) / std
    t = list(JENA_FEATURES).index(s["target"])
    X, Y = _windows(z, z[:, t], window, horizon, stride)
    Xv, Yv = _windows(zv, zv[:, t], window, horizon, stride)
    persistence = {part: float(np.mean((x[..., t] - y[..., 0]) ** 2))
                   for part, x, y in (("train", X, Y), ("val", Xv, Yv))}
    as_t = lambda a: torch.tensor(a, dtype=dtype)  # noqa: E731
    return JenaTask(as_t(X), as_t(Y), as_t(Xv), as_t(Yv), len(df), len(train), len(val), float(std[t]),
                    persistence)


def _run_jena(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    task = jena_data(s, data_dir, _dtype(s))
    X, Y, Xv, Yv = task.X, task.Y, task.X_val, task.Y_val
    (N, n, d), every, steps = X.shape, _positive_int(s, "eval_every"), s["steps"]
    cfgs = [ModelConfig(d=d, d_qk=s["d_qk"], m=s["m"], c=1, beta=b, activation=s["activation"])
            for b in s["betas"]]
    # step-size protocol: ONE mu = eta / N for every beta, eta the largest of the grid at which every
    # beta (first seed) is stable over probe_steps (not diverged, loss not above its start).
    probe, mu = [], None
    for eta in sorted(s["eta_grid"], reverse=True):
        out = gradient_descent([init_params(c, seed=s["seeds"][0], dtype=X.dtype) for c in cfgs], X, Y, cfgs,
                               eta / N, s["probe_steps"], record_every=s["probe_steps"], progress=progress,
                               device=device)
        probe.append({"eta": eta, "stable": [_stable(h) for _, h in out], "status": [h.status for _, h in out]})
        if all(_stable(h) for _, h in out):
            mu = eta / N
            break
    if mu is None:
        raise RuntimeError(f"no step size eta / N with eta in {s['eta_grid']} is stable for every beta "
                           "on the Jena task.")
    meta = [(beta, seed) for seed in s["seeds"] for beta in s["betas"]]
    val_mse: list[list[float]] = [[] for _ in meta]
    Xv_d, Yv_d = (t.to(check_device(device)) for t in (Xv, Yv))

    def evaluate(step: Step):  # held-out MSE per position, standardized units
        if step.t % every == 0 or step.t == steps:
            with torch.no_grad():
                F = forward(step.params, Xv_d, cfgs[s["betas"].index(meta[step.index][0])])
            val_mse[step.index].append(float((F - Yv_d).pow(2).mean()))

    params = [init_params(cfgs[0], seed=seed, dtype=X.dtype) for _, seed in meta]  # same weights per seed
    out = gradient_descent(params, X, Y, [cfgs[s["betas"].index(b)] for b, _ in meta], mu, steps,
                           record_every=steps, progress=progress, callback=evaluate, device=device)
    runs = []
    for (b, sd), (_, h), vm in zip(meta, out, val_mse):
        runs.append(dict(beta=b, seed=sd, status=h.status, loss=_finite(h.loss),
                         train_mse=_finite(2 * h.loss / (N * n)), val_mse=_finite(vm),
                         sigma_min_Z0=float(h.sigma_min_Z[0]), sigma_min_H0=float(h.sigma_min_H[0])))
    return {"N": int(N), "N_val": int(Xv.shape[0]), "n": int(n), "d": int(d), "rows": task.rows,
            "train_rows": task.train_rows, "val_rows": task.val_rows, "target_std": task.target_std,
            "persistence": task.persistence, "mu": mu, "eta": mu * N, "probe": probe, "runs": runs,
            "eval_steps": [t for t in range(steps + 1) if t % every == 0 or t == steps]}


def _jena_final(runs, field):
    return {b: _spread([r[field][-1] if r["status"] != "diverged" else None for r in runs if r["beta"] == b])
            for b in sorted({r["beta"] for r in runs})}


def _jena_numbers(res: Result) -> dict:
    data, runs = res.data, res.data["runs"]
    train, val = _jena_final(runs, "train_mse"), _jena_final(runs, "val_mse")
    return {"n_train": data["N"], "n_val": data["N_val"], "rows": data["rows"],
            "train_rows": data["train_rows"], "val_rows": data["val_rows"], "mu": data["mu"],
            "eta": data["eta"], "persistence_val_mse": data["persistence"]["val"],
            "persistence_train_mse": data["persistence"]["train"],
            "per_beta": [{"beta": b, "train_mse": train[b], "val_mse": val[b]} for b in train],
            "diverged_runs": sum(r["status"] == "diverged" for r in runs)}


def _jena_claims(res: Result) -> list[dict]:
    st, data, runs = res.settings, res.data, res.data["runs"]
    where = (f"on the offline slice: {data['rows']:,} rows every {st['freq']} from {st['start']} to "
             f"{st['end']} ({len(JENA_FEATURES)} of the {len(JENA_ALL_FEATURES)} features, no wind), "
             f"training loss on the {data['train_rows']:,} rows up to {st['train_end']}; ")
    fin = {k[0]: v for k, v in _median_by(runs, ["beta"], _final).items()}
    betas = sorted(fin)
    dec = [fin[b] < fin[a] for a, b in zip(betas, betas[1:])]
    small = min(b for b in betas if b > 0)
    by_seed = {(r["beta"], r["seed"]): _final(r) for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    wins = [by_seed[(small, sd)] < by_seed[(0.0, sd)] for sd in seeds]
    N, n = data["N"], data["n"]
    return [
        dict(claim="Larger beta converges faster.",
             criterion=where + f"median final training loss after {st['steps']} steps at one common mu "
                       "decreases with beta at every step of the sweep (partly: the largest beta below "
                       "beta = 0 only)",
             measurement="median final training MSE: " + ", ".join(
                 f"beta={b:g}: {2 * fin[b] / (N * n):.3g}" for b in betas),
             verdict=_verdict(all(dec), fin[betas[-1]] < fin[betas[0]]), figure="fig-jena-loss",
             evidence=f"median training MSE {2 * fin[betas[0]] / (N * n):.3g} at beta = 0, "
                      f"{2 * fin[betas[-1]] / (N * n):.3g} at beta = {betas[-1]:g}; lower at "
                      f"{sum(dec)} of {len(dec)} steps of the sweep"),
        dict(claim="Even a small beta converges faster than no residual.",
             criterion=where + f"the smallest beta ({small:g}) ends below beta = 0 for every seed "
                       "(partly: some seeds)",
             measurement=f"beta={small:g} below beta=0 in {sum(wins)} of {len(wins)} seeds (median "
                         f"training MSE {2 * fin[small] / (N * n):.3g} vs {2 * fin[0.0] / (N * n):.3g})",
             verdict=_verdict(all(wins), any(wins)), figure="fig-jena-loss",
             evidence=f"beta = {small:g} below beta = 0 in {sum(wins)} of {len(wins)} seeds"),
    ]


# --- SST-2 -----------------------------------------------------------------------------------------

#: Words whose nearest neighbours the SST-2 chapter shows (a look at what the embeddings carry).
SST2_PROBE_WORDS = ("good", "bad", "funny", "boring")


class SST2Task(NamedTuple):
    """The book's SST-2 task (chapter *SST-2*).

    ``X`` ``(N, n, d)``, ``Y`` ``(N, 1)`` (``+1`` positive, ``-1`` negative) and ``labels`` (0/1)
    for the training sentences; ``X_val``, ``Y_val``, ``labels_val`` for the GLUE validation split;
    ``tokens``, ``tokens_val``: the token lists; ``info``: the vocabulary size, the fraction of tokens
    outside the vocabulary and a few nearest neighbours.
    """

    X: torch.Tensor
    Y: torch.Tensor
    labels: np.ndarray
    X_val: torch.Tensor
    Y_val: torch.Tensor
    labels_val: np.ndarray
    tokens: list
    tokens_val: list
    info: dict


def _neighbours(vocab, vectors, words, k: int = 5) -> dict:
    index = {t: i for i, t in enumerate(vocab)}
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-300)
    out = {}
    for w in words:
        if w in index:
            sim = unit @ unit[index[w]]
            out[w] = [vocab[j] for j in np.argsort(-sim, kind="stable") if j != index[w]][:k]
    return out


def sst2_data(s: dict, data_dir=None, dtype=torch.float32) -> SST2Task:
    """The book's SST-2 task (chapter *SST-2*): sentences, embeddings, targets.

    Training: the first ``n_train / 2`` negative and ``n_train / 2`` positive sentences (file order)
    of the GLUE training split with at least ``n_tokens`` tokens, cut to their first ``n_tokens``
    (:func:`convres.data.sst2_prefixes`). Validation: every sentence of the GLUE validation split
    with at least ``n_tokens`` tokens, cut the same way. Embeddings: frozen PPMI-SVD word vectors
    of dimension ``d`` computed from the text of the whole training split (no labels;
    :func:`convres.data.ppmi_embeddings`), each coordinate standardized over the training tokens
    (:func:`convres.data.embed_with`).
    """
    n_tokens, n_train = _positive_int(s, "n_tokens"), _positive_int(s, "n_train")
    train, val = load_sst2("train", data_dir=data_dir), load_sst2("validation", data_dir=data_dir)
    tokens, labels, _ = sst2_prefixes(train, n_tokens, n_train)
    tokens_val, labels_val, _ = sst2_prefixes(val, n_tokens, s.get("n_val"))
    if s.get("embedding", "ppmi") != "ppmi":
        raise ValueError(f"setting 'embedding' must be 'ppmi', got {s.get('embedding')!r}.")
    vocab, vectors = ppmi_embeddings(train["sentence"].str.split().tolist(), s["d"],
                                     vocab_size=s["vocab_size"], seed=s["emb_seed"])
    X, (mean, std), oov = embed_with(tokens, vocab, vectors, dtype=dtype)
    Xv, _, oov_val = embed_with(tokens_val, vocab, vectors, mean=mean, std=std, dtype=dtype)
    target = lambda y: torch.tensor(2.0 * y - 1.0, dtype=dtype)[:, None]  # noqa: E731
    info = {"vocab_size": len(vocab), "oov_train": oov, "oov_val": oov_val,
            "neighbours": _neighbours(vocab, vectors, SST2_PROBE_WORDS),
            "examples": [{"label": int(y), "tokens": t} for t, y in zip(tokens[:4], labels[:4])],
            "train_sentences": int(len(train)), "val_sentences": int(len(val))}
    return SST2Task(X, target(labels), labels, Xv, target(labels_val), labels_val, tokens, tokens_val, info)


def pooled_baseline(X: torch.Tensor, labels: np.ndarray, X_val: torch.Tensor, labels_val: np.ndarray) -> dict:
    """The floor baseline of the SST-2 chapter: least squares from the mean-pooled token vectors
    (with an intercept) to the targets ``+-1``; returns training and validation accuracy."""
    A = np.c_[X.double().mean(1).cpu().numpy(), np.ones(len(labels))]
    B = np.c_[X_val.double().mean(1).cpu().numpy(), np.ones(len(labels_val))]
    w = np.linalg.lstsq(A, 2.0 * labels - 1.0, rcond=None)[0]
    return {"train_accuracy": float(((A @ w > 0) == labels).mean()),
            "val_accuracy": float(((B @ w > 0) == labels_val).mean())}


def _sst2_cfg(s: dict, L: int, beta: float, **changes) -> ModelConfig:
    return ModelConfig(**{**dict(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, L=L, beta=beta, pool="mean",
                                 activation=s["activation"]), **changes})


def _choose_etas(s: dict, probe_runs: dict) -> tuple[float, dict]:
    """The two step-size protocols from the probe (every seed, ``probe_steps`` steps);
    ``probe_runs[(config, eta)]`` is the list of the seeds' histories.

    A step is *stable* for a configuration when no seed diverged and every seed's loss ended no
    higher than it started. ``common``: the largest ``eta`` of the grid stable for every
    configuration. ``best[config]``: the stable ``eta`` with the lowest median probe training loss
    over the seeds; losses within a relative ``tie`` of the lowest are ties, resolved in favour of
    the common step if it is among them, else of the larger step."""
    grid = sorted(s["eta_grid"], reverse=True)
    configs = list(dict.fromkeys(c for c, _ in probe_runs))
    stable = {k: all(_stable(h) for h in hs) for k, hs in probe_runs.items()}
    ok = [e for e in grid if all(stable[(c, e)] for c in configs)]
    if not ok:
        raise RuntimeError(f"no step size eta / N with eta in {grid} is stable for every SST-2 "
                           "configuration in the probe.")
    common, best = ok[0], {}
    for c in configs:
        scores = {e: float(np.median([h.loss[-1] for h in probe_runs[(c, e)]])) for e in grid if stable[(c, e)]}
        low = min(scores.values())
        ties = [e for e, v in scores.items() if v <= low + s["tie"] * abs(low)]
        best[c] = common if common in ties else max(ties)
    return common, best


def _run_sst2(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    dtype = _dtype(s)
    task = sst2_data(s, data_dir, dtype)
    X, Y, Xv, Yv = task.X, task.Y, task.X_val, task.Y_val
    N, every, steps = X.shape[0], _positive_int(s, "eval_every"), s["steps"]
    configs = [(L, b) for L in s["depths"] for b in s["betas"]]
    # 1. the probe: every configuration at every step of the grid and every seed, probe_steps steps
    trials = [(c, eta, seed) for c in configs for eta in s["eta_grid"] for seed in s["seeds"]]
    out = gradient_descent([init_params(_sst2_cfg(s, *c), seed=seed, dtype=dtype) for c, _, seed in trials],
                           X, Y, [_sst2_cfg(s, *c) for c, _, _ in trials], [eta / N for _, eta, _ in trials],
                           s["probe_steps"], record_every=s["probe_steps"], progress=progress, device=device)
    probe_runs: dict = {}
    for (c, eta, _), (_, h) in zip(trials, out):
        probe_runs.setdefault((c, eta), []).append(h)
    common, best = _choose_etas(s, probe_runs)
    probe = [{"L": c[0], "beta": c[1], "eta": eta, "diverged": sum(h.status == "diverged" for h in hs),
              "stable": all(_stable(h) for h in hs),
              "median_loss": None if any(h.status == "diverged" for h in hs) else
              float(np.median([h.loss[-1] for h in hs])) / N}
             for (c, eta), hs in probe_runs.items()]
    # 2. every configuration at the common step and at its best step (one run when they agree), all seeds
    meta = [(c, eta, seed) for c in configs for eta in dict.fromkeys([common, best[c]]) for seed in s["seeds"]]
    cfgs = [_sst2_cfg(s, *c) for c, _, _ in meta]
    Xv_d, Yv_d = (t.to(check_device(device)) for t in (Xv, Yv))
    errors, accs = [[] for _ in meta], [[] for _ in meta]

    def evaluate(step: Step):  # training error from the step's own forward pass; validation accuracy
        if step.t % every == 0 or step.t == steps:
            errors[step.index].append(float((torch.sign(step.F) != Y.to(step.F.device)).double().mean()))
            with torch.no_grad():
                F = forward(step.params, Xv_d, cfgs[step.index])
            accs[step.index].append(float((torch.sign(F) == Yv_d).double().mean()))

    out = gradient_descent([init_params(cfg, seed=seed, dtype=dtype) for cfg, (_, _, seed) in zip(cfgs, meta)],
                           X, Y, cfgs, [eta / N for _, eta, _ in meta], steps, record_every=steps,
                           progress=progress, callback=evaluate, device=device)
    runs = []
    for (c, eta, seed), (_, h), er, acc in zip(meta, out, errors, accs):
        runs.append(dict(L=c[0], beta=c[1], seed=seed, eta=eta, mu=eta / N, status=h.status,
                         protocols=[p for p, e in (("common", common), ("best", best[c])) if e == eta],
                         loss=_finite(h.loss / N), error=er, val_accuracy=acc))
    # 3. float32 against float64: one configuration, the same inputs and initial weights
    check = _precision_check(s, X, Y, common, device)
    # 4. floor baselines on the same sentences: the PPMI vectors, and hashed Gaussian vectors
    hashed = pooled_baseline(embed_tokens(task.tokens, s["d"], seed=s["emb_seed"]), task.labels,
                             embed_tokens(task.tokens_val, s["d"], seed=s["emb_seed"]), task.labels_val)
    baselines = {"ppmi": pooled_baseline(X, task.labels, Xv, task.labels_val), "hashed": hashed,
                 "majority_val_accuracy": float(max(task.labels_val.mean(), 1 - task.labels_val.mean()))}
    wide = _run_sst2_wide(s, task, device) if s.get("wide") else None
    return {"N": int(N), "N_val": int(Xv.shape[0]), "n": int(X.shape[1]), "embedding": task.info,
            "eta_common": common, "eta_best": [{"L": c[0], "beta": c[1], "eta": best[c]} for c in configs],
            "probe": probe, "runs": runs, "eval_steps": [t for t in range(steps + 1) if t % every == 0 or t == steps],
            "float64_check": check, "baselines": baselines, "wide": wide}


def _precision_check(s: dict, X, Y, eta: float, device) -> dict | None:
    """The float32 run of the first configuration and seed against the same run in float64, over
    ``check_steps`` steps: the largest relative difference of the loss."""
    if s.get("dtype", "float64") == "float64" or not s.get("check_steps"):
        return None
    L, b = s["depths"][0], max(s["betas"])
    cfg, N = _sst2_cfg(s, L, b), X.shape[0]
    p32 = init_params(cfg, seed=s["seeds"][0], dtype=torch.float32)
    curves = {}
    for name, dt in (("float32", torch.float32), ("float64", torch.float64)):
        p = {k: v.to(dt) for k, v in p32.items()}   # the same (float32-rounded) weights and inputs
        _, h = gradient_descent(p, X.to(dt), Y.to(dt), cfg, eta / N, s["check_steps"],
                                record_every=s["check_steps"], device=device)
        curves[name] = h.loss
    a, b64 = curves["float32"], curves["float64"]
    k = min(len(a), len(b64))
    return {"L": L, "beta": b, "eta": eta, "steps": s["check_steps"],
            "max_rel_diff": float(np.max(np.abs(a[:k] - b64[:k]) / np.abs(b64[:k]))),
            "final_float32": float(a[k - 1] / N), "final_float64": float(b64[k - 1] / N)}


def _run_sst2_wide(s: dict, task: SST2Task, device) -> dict:
    """The wide-FFN configuration, run through the FFN theorem's check
    (:func:`convres.theory.ffn_theorem_run`): the first ``n_train`` training sentences of the
    experiment (balanced), width ``m``, depth ``L``, step ``mu = 1 / (safety L_hat_0)`` with
    ``L_hat_0`` the power-iteration estimate of the Hessian norm at the initialization."""
    from .theory import ffn_theorem_run, hessian_norm

    w = s["wide"]
    dtype, half = _dtype(w), w["n_train"] // 2
    pos, neg = np.nonzero(task.labels == 1)[0][:half], np.nonzero(task.labels == 0)[0][:half]
    if len(pos) < half or len(neg) < half:
        raise ValueError(f"wide: n_train = {w['n_train']} needs {half} sentences of each label among the "
                         f"{len(task.labels)} of the experiment.")
    rows = np.sort(np.concatenate([pos, neg]))
    X, Y = task.X[rows].to(dtype), task.Y[rows].to(dtype)
    cfg = _sst2_cfg(s, w["L"], w["beta"], m=w["m"], activation=w["activation"])
    out = []
    for seed in w["seeds"]:
        p = init_params(cfg, seed=seed, dtype=dtype, device=device)
        Xd, Yd = X.to(p["W_U"].device), Y.to(p["W_U"].device)
        L_hat = hessian_norm(p, Xd, Yd, cfg, iters=w["power_iters"], seed=seed)
        mu = 1.0 / (w["safety"] * L_hat)
        r = ffn_theorem_run(p, Xd, Yd, cfg, mu=mu, steps=w["steps"], record_every=w["record_every"],
                            seed=seed, smoothness_iters=w["power_iters"])
        with torch.no_grad():
            Fv = forward(r.params_final, task.X_val.to(dtype).to(Xd.device), cfg)
            F = forward(r.params_final, Xd, cfg)
        out.append({"seed": seed, "L_hat0": L_hat, "mu": mu, "summary": _json_safe(r.summary()),
                    "loss": _finite(r.history.loss / len(rows)),
                    "train_error": float((torch.sign(F) != Yd).double().mean()),
                    "val_accuracy": float((torch.sign(Fv) == task.Y_val.to(Fv)).double().mean())})
    return {"N": int(len(rows)), "m": w["m"], "L": w["L"], "runs": out}


def _residual_name(beta) -> str:
    return "residual" if beta else "no residual"


def _sst2_select(runs, protocol: str):
    return [r for r in runs if protocol in r["protocols"]]


def _sst2_stats(runs, protocol: str) -> dict:
    """Per (L, beta) under one protocol: final training error, validation accuracy and loss (median,
    min, max over the seeds) and the step."""
    sel = _sst2_select(runs, protocol)
    out = {}
    for key in dict.fromkeys((r["L"], r["beta"]) for r in sel):
        rs = [r for r in sel if (r["L"], r["beta"]) == key]
        out[key] = {"eta": rs[0]["eta"], "train_error": _spread([r["error"][-1] for r in rs]),
                    "val_accuracy": _spread([r["val_accuracy"][-1] for r in rs]),
                    "loss": _spread([None if r["status"] == "diverged" else r["loss"][-1] for r in rs]),
                    "diverged": sum(r["status"] == "diverged" for r in rs)}
    return out


def _sst2_numbers(res: Result) -> dict:
    data, runs = res.data, res.data["runs"]
    per = {p: _sst2_stats(runs, p) for p in ("common", "best")}
    wide = data.get("wide")
    return {"n_train": data["N"], "n_val": data["N_val"], "d": res.settings["d"],
            "eta_common": data["eta_common"],
            "per_model": [{"protocol": p, "L": k[0], "residual": bool(k[1]), **v}
                          for p, table in per.items() for k, v in table.items()],
            "baselines": data["baselines"], "float64_check": data["float64_check"],
            "wide": None if wide is None else {"N": wide["N"], "m": wide["m"], "L": wide["L"],
                                               "runs": [{k: r[k] for k in ("seed", "mu", "train_error",
                                                                          "val_accuracy", "summary")}
                                                        for r in wide["runs"]]}}


def _sst2_claims(res: Result) -> list[dict]:
    runs = res.data["runs"]
    depths = sorted({r["L"] for r in runs})
    per = {p: _sst2_stats(runs, p) for p in ("best", "common")}
    err = {p: {k: v["train_error"]["median"] for k, v in t.items()} for p, t in per.items()}
    proto = {"best": "each at its best step", "common": "one common step"}

    def both(test):
        ok = {p: test(err[p]) for p in err}
        return ok, "; ".join(f"{proto[p]}: " + ("yes" if ok[p] else "no") for p in err)

    lower = {p: [e[(L, 1.0)] < e[(L, 0.0)] for L in depths] for p, e in err.items()}
    rows = [dict(
        claim="With residual connections the training error is consistently lower.",
        criterion="median final training error over the seeds with residuals below without, at every "
                  "depth, under both step-size protocols (partly: at some depths or under one protocol)",
        measurement="; ".join(f"{proto[p]}: " + ", ".join(
            f"L={L} {err[p][(L, 1.0)]:.1%} vs {err[p][(L, 0.0)]:.1%}" for L in depths) for p in err),
        verdict=_verdict(all(all(v) for v in lower.values()), any(any(v) for v in lower.values())),
        figure="fig-sst2-final",
        evidence="training error without minus with residuals, best step: " + ", ".join(
            f"L={L} {100 * (err['best'][(L, 0.0)] - err['best'][(L, 1.0)]):+.1f} points" for L in depths))]
    ceiling = {p: all(e[(L, 1.0)] == 0 for L in depths) for p, e in err.items()}

    def improves(e):
        r = [e[(L, 1.0)] for L in depths]
        return all(b <= a for a, b in zip(r, r[1:])) and r[-1] < r[0]
    ok, said = both(improves)
    rows.append(dict(
        claim="With residuals, the training error improves with depth.",
        criterion="with residuals, median final training error non-increasing in L and lower at the "
                  "largest L than at the smallest, under both protocols (partly: under one); "
                  "inconclusive when every residual depth is at 0% training error (a ceiling)",
        measurement="; ".join(f"{proto[p]}: " + ", ".join(f"L={L} {err[p][(L, 1.0)]:.1%}" for L in depths)
                              for p in err) + f" ({said})",
        verdict=VERDICTS[3] if all(ceiling.values()) else _verdict(all(ok.values()), any(ok.values())),
        figure="fig-sst2-final",
        evidence="residual training error by L: " + "; ".join(
            f"{p} step " + "/".join(f"{err[p][(L, 1.0)]:.1%}" for L in depths) for p in err)))
    ok, said = both(lambda e: e[(depths[-1], 0.0)] >= e[(depths[0], 0.0)])
    rows.append(dict(
        claim="Without residuals, depth does not help.",
        criterion="without residuals, median final training error at the largest L not below the "
                  "smallest L, under both protocols (partly: under one)",
        measurement="; ".join(f"{proto[p]}: " + ", ".join(f"L={L} {err[p][(L, 0.0)]:.1%}" for L in depths)
                              for p in err),
        verdict=_verdict(all(ok.values()), any(ok.values())), figure="fig-sst2-final",
        evidence="no-residual training error by L: " + "; ".join(
            f"{p} step " + "/".join(f"{err[p][(L, 0.0)]:.1%}" for L in depths) for p in err)))
    return rows


# --- rank collapse: gradient descent with and without residuals (chapter Rank collapse) -----------

def _run_rank_collapse_gd(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    inst = {k: s[k] for k in ("N", "n", "d", "m", "scale")}
    runs = []
    for r in s["runs"]:
        params, X, Y, cfg = gd_instance(d_qk=r["d_qk"], seed=s["seed"], **inst)
        (_, h), = gradient_descent([params], X, Y, [residual_config(cfg, r["residual"])], s["mu"], s["steps"],
                                   record_every=s["record_every"], progress=progress)
        runs.append({**r, "history": h.to_dict()})
    stats = [{"d_qk": d_qk, "seed": seed, **{k: np.asarray(v).tolist() for k, v in
                                            gd_attention_stats(0.0, mu=s["mu"], d_qk=d_qk, seed=seed, **inst).items()}}
             for d_qk in s["stat_d_qks"] for seed in s["stat_seeds"]]
    _, _, Y, _ = gd_instance(seed=s["seed"], **{k: s[k] for k in ("N", "n", "d", "m")})
    return {"runs": runs, "stats": stats, "floor": rank_one_floor(Y)}


def _rank_collapse_numbers(res: Result) -> dict:
    return {"floor": res.data["floor"],
            "final_loss": [{"name": r["name"], "loss": r["history"]["loss"][-1]} for r in res.data["runs"]]}




# --- the registry ----------------------------------------------------------------------------------

_WIDE_REGIME = dict(name="wide", N=4, d_qk=32, scale="1/sqrt(d_qk)", stall_possible=False,
                    why="N n <= d: the output layer alone can fit the targets while H_t keeps full row rank")
_SIM = dict(N=4, n=4, d=32, m=32, d_qk=32, scale="1/sqrt(d_qk)", activation="gelu",
            betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta=0.032, floor=1e-20, stall=0.01, plateau=0.9,
            dtype="float64", sizes=[1, 2, 4, 8, 16, 32], d_qks=[1, 4, 16, 64, 256, 1024],
            regimes=[_WIDE_REGIME, dict(name="narrow", N=32, d_qk=32, scale="1/sqrt(d_qk)"),
                     dict(name="uniform attention", N=4, d_qk=1024, scale="1/d_qk")])
_JENA = dict(start="2009-01-01 00:10", train_end="2009-01-22 00:00", end="2009-01-28 18:40", freq="10min",
             window=24, horizon=6, target="T (degC)", d_qk=11, activation="gelu",
             betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta_grid=[0.03, 0.01, 0.003, 0.001], eval_every=10,
             dtype="float64")
_WIDE = dict(n_train=256, m=1024, L=2, beta=1.0, activation="gelu", seeds=[0], steps=60, record_every=20,
             power_iters=5, safety=2.0, dtype="float64")
_SST2 = dict(n_tokens=10, n_val=None, embedding="ppmi", vocab_size=5000, emb_seed=0, d=16, d_qk=16, m=16,
             activation="gelu", betas=[0.0, 1.0], eta_grid=[1.0, 0.3, 0.1, 0.03], tie=1e-4, eval_every=10,
             check_steps=20, dtype="float32")
_RC = dict(mu=0.002, steps=300, record_every=10, N=4, n=4, d=32, m=32, seed=0, scale="1/d_qk",
           runs=[{"name": "beta = 0, d_QK = 64", "d_qk": 64, "residual": [0.0, 0.0]},
                 {"name": "beta = 0, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 0.0]},
                 {"name": "beta = 1, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 1.0]},
                 {"name": "attention residual only, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 0.0]},
                 {"name": "FFN residual only, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 1.0]}],
           stat_seeds=list(range(8)), stat_d_qks=[64, 1024])

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [
    Experiment(
        "simulations", "Simulations: wide, narrow and near-uniform-attention regimes, beta x d_QK and N n / d",
        "book/simulations.md",
        {"book": dict(_SIM, seeds=[0, 1, 2, 3, 4], steps=300),
         "paper": dict(_SIM, seeds=list(range(10)), steps=600, sizes=[1, 2, 4, 8, 16, 32, 64],
                       d_qks=[1, 4, 16, 64, 256, 1024, 4096]),
         "smoke": dict(_SIM, betas=[0.0, 1.0], seeds=[0], steps=20, sizes=[4, 16], d_qks=[1, 256],
                       regimes=[_WIDE_REGIME, dict(name="narrow", N=16, d_qk=32, scale="1/sqrt(d_qk)"),
                                dict(name="uniform attention", N=4, d_qk=256, scale="1/d_qk")])},
        _run_simulations, _simulations_numbers, _simulations_claims, plotting.plot_simulations),
    Experiment(
        "jena", "Jena Climate: residual-coefficient sweep, temperature one hour ahead, a held-out week",
        "book/jena.md",
        {"book": dict(_JENA, stride=24, m=16, seeds=[0, 1, 2, 3, 4], probe_steps=20, steps=200),
         "paper": dict(_JENA, stride=2, m=16, seeds=[0, 1, 2, 3, 4], probe_steps=20, steps=400),
         "smoke": dict(_JENA, train_end="2009-01-03 00:00", end="2009-01-04 00:00", stride=24, m=8,
                       betas=[0.0, 0.5, 1.0], seeds=[0], probe_steps=5, steps=10, eval_every=5)},
        _run_jena, _jena_numbers, _jena_claims, plotting.plot_jena),
    Experiment(
        "sst2", "SST-2: depth L = 2, 6, 10 with and without residual connections, GLUE validation accuracy",
        "book/sst2.md",
        {"book": dict(_SST2, n_train=2048, depths=[2, 6, 10], seeds=[0, 1, 2], probe_steps=10, steps=80,
                      wide=_WIDE),
         "paper": dict(_SST2, n_train=8192, depths=[2, 6, 10], seeds=[0, 1, 2], probe_steps=10, steps=120,
                       wide=dict(_WIDE, n_train=1024, m=2048, steps=200)),
         "smoke": dict(_SST2, n_train=16, depths=[1, 2], seeds=[0], eta_grid=[0.1, 0.01], probe_steps=3,
                       steps=10, eval_every=5, check_steps=3, vocab_size=300,
                       wide=dict(_WIDE, n_train=8, m=16, L=1, steps=5, record_every=5, power_iters=3))},
        _run_sst2, _sst2_numbers, _sst2_claims, plotting.plot_sst2),
    Experiment(
        "rank_collapse_gd", "Rank collapse: gradient descent with and without residuals at d_QK = 64, 1024",
        "book/rank_collapse_gd.md",
        {"book": _RC, "paper": _RC,
         "smoke": dict(_RC, steps=10, stat_seeds=[0], runs=_RC["runs"][1:3])},
        _run_rank_collapse_gd, _rank_collapse_numbers, lambda res: [], plotting.plot_rank_collapse_gd),
]}
