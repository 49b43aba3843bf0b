"""Jena Climate: residual-coefficient sweep, temperature one hour ahead, a held-out week.

Book chapter *Jena Climate* (``book/jena.md``). The rows of the offline slice of the station's
2009-2016 series at 10-minute resolution, standardized over the training rows; windows of
``window`` rows; the target of a position is the temperature ``horizon`` rows later.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..data import JENA_ALL_FEATURES, JENA_FEATURES, DataError, load_jena, standardize, timestamp
from ..gd import Step, sweep
from ..model import ModelConfig, forward, init_params
from ..plotting import plot_jena
from ..runtime import check_device
from .base import (
    Experiment,
    Result,
    Shape,
    dtype_of,
    final,
    finite_list,
    median_by,
    positive_int,
    spread,
    stable,
    verdict,
)

__all__ = ["EXPERIMENT", "JenaTask", "jena_data", "window_count"]


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
    window, stride, horizon = (positive_int(s, k) for k in ("window", "stride", "horizon"))
    if s.get("target") not in JENA_FEATURES:
        raise ValueError(f"setting 'target' must be one of {JENA_FEATURES}, got {s.get('target')!r}.")
    split = timestamp("setting 'train_end'", s["train_end"])
    if not timestamp("setting 'start'", s["start"]) < split < timestamp("setting 'end'", s["end"]):
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
    task = jena_data(s, data_dir, dtype_of(s))
    X, Y, Xv, Yv = task.X, task.Y, task.X_val, task.Y_val
    (N, n, d), every, steps = X.shape, positive_int(s, "eval_every"), s["steps"]
    cfgs = [ModelConfig(d=d, d_qk=s["d_qk"], m=s["m"], c=1, beta=b, activation=s["activation"])
            for b in s["betas"]]
    # step-size protocol: ONE mu = eta / N for every beta, eta the largest of the grid at which every
    # beta (first seed) is stable over probe_steps (not diverged, loss not above its start).
    probe, mu = [], None
    for eta in sorted(s["eta_grid"], reverse=True):
        out = sweep([init_params(c, seed=s["seeds"][0], dtype=X.dtype) for c in cfgs], X, Y, cfgs,
                               eta / N, s["probe_steps"], record_every=s["probe_steps"], progress=progress,
                               device=device)
        probe.append({"eta": eta, "stable": [stable(h) for _, h in out],
                      "status": [h.status for _, h in out]})
        if all(stable(h) for _, h in out):
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
    out = sweep(params, X, Y, [cfgs[s["betas"].index(b)] for b, _ in meta], mu, steps,
                           record_every=steps, progress=progress, callback=evaluate, device=device)
    runs = []
    for (b, sd), (_, h), vm in zip(meta, out, val_mse):
        runs.append(dict(beta=b, seed=sd, status=h.status, loss=finite_list(h.loss),
                         train_mse=finite_list(2 * h.loss / (N * n)), val_mse=finite_list(vm),
                         sigma_min_Z0=float(h.sigma_min_Z[0]), sigma_min_H0=float(h.sigma_min_H[0])))
    return {"N": int(N), "N_val": int(Xv.shape[0]), "n": int(n), "d": int(d), "rows": task.rows,
            "train_rows": task.train_rows, "val_rows": task.val_rows, "target_std": task.target_std,
            "persistence": task.persistence, "mu": mu, "eta": mu * N, "probe": probe, "runs": runs,
            "eval_steps": [t for t in range(steps + 1) if t % every == 0 or t == steps]}


def _jenafinal(runs, field):
    return {b: spread([r[field][-1] if r["status"] != "diverged" else None for r in runs if r["beta"] == b])
            for b in sorted({r["beta"] for r in runs})}


def _jena_numbers(res: Result) -> dict:
    data, runs = res.data, res.data["runs"]
    train, val = _jenafinal(runs, "train_mse"), _jenafinal(runs, "val_mse")
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
    fin = {k[0]: v for k, v in median_by(runs, ["beta"], final).items()}
    betas = sorted(fin)
    dec = [fin[b] < fin[a] for a, b in zip(betas, betas[1:])]
    small = min(b for b in betas if b > 0)
    by_seed = {(r["beta"], r["seed"]): final(r) for r in runs}
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
             verdict=verdict(all(dec), fin[betas[-1]] < fin[betas[0]]), figure="fig-jena-loss",
             evidence=f"median training MSE {2 * fin[betas[0]] / (N * n):.3g} at beta = 0, "
                      f"{2 * fin[betas[-1]] / (N * n):.3g} at beta = {betas[-1]:g}; lower at "
                      f"{sum(dec)} of {len(dec)} steps of the sweep"),
        dict(claim="Even a small beta converges faster than no residual.",
             criterion=where + f"the smallest beta ({small:g}) ends below beta = 0 for every seed "
                       "(partly: some seeds)",
             measurement=f"beta={small:g} below beta=0 in {sum(wins)} of {len(wins)} seeds (median "
                         f"training MSE {2 * fin[small] / (N * n):.3g} vs {2 * fin[0.0] / (N * n):.3g})",
             verdict=verdict(all(wins), any(wins)), figure="fig-jena-loss",
             evidence=f"beta = {small:g} below beta = 0 in {sum(wins)} of {len(wins)} seeds"),
    ]


def window_count(s: dict) -> tuple[int, int]:
    """``(N, n)``: the number of training windows of the Jena task and their length, counted on the
    regular time grid of ``start .. train_end`` at ``freq`` (no data loaded), as :func:`jena_data`
    cuts them."""
    import pandas as pd

    rows = len(pd.date_range(s["start"], s["train_end"], freq=s["freq"]))
    w, stride, horizon = (positive_int(s, k) for k in ("window", "stride", "horizon"))
    return len(range(0, rows - w - horizon + 1, stride)), w


def _shapes(s: dict) -> list[Shape]:
    N, n = window_count(s)
    d = len(JENA_FEATURES)
    return [Shape("jena", ModelConfig(d=d, d_qk=s["d_qk"], m=s["m"], c=1, activation=s["activation"]), N, n,
                  f"{N} training windows of {n} rows, counted on the {s['freq']} grid "
                  f"{s['start']} .. {s['train_end']} (no data loaded)")]


def _report(res: Result) -> dict:
    s, d, k = res.settings, res.data, res.summary()
    spread_rows = [{"configuration": f"beta = {r['beta']:g}", "measurement": "held-out MSE",
                    "median": r["val_mse"]["median"], "min": r["val_mse"]["min"], "max": r["val_mse"]["max"],
                    "seeds": r["val_mse"]["count"], "format": "{:.4f}"} for r in k["per_beta"]]
    spread_rows.append({"configuration": "persistence", "measurement": "held-out MSE",
                        "median": k["persistence_val_mse"], "min": None, "max": None, "seeds": None,
                        "format": "{:.4f}"})
    return {
        "settings": {"book": f"{d['rows']:,} rows every {s['freq']} ({s['start'][:10]} to {s['end'][:10]}), "
                             f"{len(JENA_FEATURES)} features; train to {s['train_end'][:10]}, rest held "
                             f"out; windows of {s['window']} rows, target {s['horizon']} rows ahead; "
                             f"N = {d['N']}; d_QK = {s['d_qk']}, m = {s['m']}; one common eta = "
                             f"{d['eta']:g}; {s['steps']} steps; {len(s['seeds'])} seeds",
                     "why": "every row of the offline slice; a held-out week and persistence make the "
                            "errors readable"},
        "spread": spread_rows,
        "runs": len(d["runs"]) + len(d["probe"]) * len(s["betas"]),
        "deviations": [{"what": "Jena data", "paper": f"the 2009-2016 series ({len(JENA_ALL_FEATURES)} "
                                                      "features)",
                        "book": f"the {d['rows']:,} rows of January 2009 of the offline copy, "
                                f"{len(JENA_FEATURES)} features",
                        "why": "the full file cannot be fetched here; the loader reads it when present"}],
    }


_JENA = dict(start="2009-01-01 00:10", train_end="2009-01-22 00:00", end="2009-01-28 18:40", freq="10min",
             window=24, horizon=6, target="T (degC)", d_qk=11, activation="gelu",
             betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta_grid=[0.03, 0.01, 0.003, 0.001], eval_every=10,
             dtype="float64")

EXPERIMENT = Experiment(
    "jena", "Jena Climate: residual-coefficient sweep, temperature one hour ahead, a held-out week",
    "book/jena.md",
    {"book": dict(_JENA, stride=24, m=16, seeds=[0, 1, 2, 3, 4], probe_steps=20, steps=200),
     "paper": dict(_JENA, stride=2, m=16, seeds=[0, 1, 2, 3, 4], probe_steps=20, steps=400),
     "smoke": dict(_JENA, train_end="2009-01-03 00:00", end="2009-01-04 00:00", stride=24, m=8,
                   betas=[0.0, 0.5, 1.0], seeds=[0], probe_steps=5, steps=10, eval_every=5)},
    _run_jena, _jena_numbers, _jena_claims, plot_jena, shapes=_shapes, report=_report,
    paper="Jena Climate, beta from small values up to 1; task, window, split and steps not stated")
