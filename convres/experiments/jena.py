"""Jena Climate (``book/jena.md``): a sweep of beta, the temperature ``h`` rows after a window of the
past, a held-out week. Each row carries its age, so the mean-pooled readout can represent persistence;
``W_U`` starts at ``readout_scale`` (0) times its draw, so every beta of a seed starts at one ``Phi_0``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from ..data import JENA_ALL_FEATURES, JENA_FEATURES, timestamp
from ..data.jena import JenaTask, jena_data, window_count
from ..gd import chunk_size, sweep
from ..model import ModelConfig, attention_scale, forward_trace, init_params, param_shapes
from ..plotting import plot_jena
from ..protocol import (
    CLAIMS,
    EVALUATION_SEEDS,
    MIN_UNITS,
    PILOT_SEEDS,
    PROBE_HORIZON_MAX,
    PROBE_SEEDS,
)
from ..runtime import check_device
from ..stats import ProbeRun, estimate, grade, kendall_tau, log_ratio, mean_log_loss, steps_to
from ..values import positive_int
from .base import (
    CheckResult,
    ClaimRecord,
    Experiment,
    Result,
    Shape,
    claim_record,
    design_check,
    dtype_of,
    finite_list,
    level_steps,
    probe_count,
    protocol_summary,
    rerun_diverged,
    shared_by_pieces,
    spread,
    spread_row,
    step_table,
    tune_arms,
)


# --- baselines ---------------------------------------------------------------------------------
def _ridge(A: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """``argmin_c ||A c - y||^2 + lam ||c_{:-1}||^2`` (the intercept, last column, not penalized)."""
    P = np.eye(A.shape[1]) * lam
    P[-1, -1] = 0.0
    return np.linalg.lstsq(A.T @ A + P, A.T @ y, rcond=None)[0]


def _ridge_baseline(features, X, y, X_val, yv, inner, ridge_grid) -> dict:
    """Ridge on ``features(X)`` and an intercept, ``lam`` chosen on the training windows' split
    ``inner``, refit on all; with the least-squares training MSE."""
    A, Av = (np.hstack([*features(np.asarray(x, dtype=np.float64)), np.ones((len(x), 1))])
             for x in (X, X_val))
    y, yv = np.asarray(y, dtype=np.float64), np.asarray(yv, dtype=np.float64)
    inner = np.asarray(inner, dtype=bool)
    if inner.all() or not inner.any():
        raise ValueError("the inner split of the training windows must leave windows on both sides; "
                         "move 'inner_end'.")
    split = [float(np.mean((A[~inner] @ _ridge(A[inner], y[inner], lam) - y[~inner]) ** 2))
             for lam in ridge_grid]
    lam = float(ridge_grid[int(np.argmin(split))])
    c = _ridge(A, y, lam)
    ls = _ridge(A, y, 0.0)
    return {"ridge": lam, "ridge_grid": [float(v) for v in ridge_grid], "inner_mse": split,
            "inner_best": float(min(split)), "train": float(np.mean((A @ c - y) ** 2)),
            "val": float(np.mean((Av @ c - yv) ** 2)), "parameters": int(A.shape[1]),
            "train_least_squares": float(np.mean((A @ ls - y) ** 2))}


def linear_ar(X, Y, X_val, Y_val, inner: np.ndarray, ridge_grid) -> dict:
    """The causal linear autoregressive baseline ``y_hat = vec(X) c + c_0``, a ridge."""
    return _ridge_baseline(lambda x: [x.reshape(len(x), -1)], X, Y, X_val, Y_val, inner, ridge_grid)


def order_blind(X, Y, X_val, Y_val, inner: np.ndarray, ridge_grid) -> dict:
    """The order-blind baseline: a ridge on each feature's mean, std, min and max over the window."""
    return _ridge_baseline(lambda x: [x.mean(1), x.std(1), x.min(1), x.max(1)], X, Y, X_val, Y_val, inner,
                           ridge_grid)


# --- the model and its runs ---------------------------------------------------------------------
def speed(mse, status: str, horizon: int) -> float | None:
    """A run's mean log-loss (decades) from its training MSE; ``None`` for a diverged run."""
    return None if status == "diverged" else mean_log_loss(list(mse), horizon)


def persistence_weights(cfg: ModelConfig, window: int, target: int, age: int, *, gate: float = 100.0,
                        dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Weights with which the one-block model ``cfg`` (mean-pooled, GELU, ``m >= 4``) computes
    persistence ``F(X) = x_{w-1, target}`` from inputs with an ``age`` column, at every beta, up to
    ``e^{-gate}``-small tails; uses ``gelu(u) - gelu(-u) = u`` and ``gelu(u + gate a) ~ 0``, ``a <= -1``.

    - ``beta > 0``: ``W_V = 0``, so ``Z = beta X``; two FFN units ``gelu(+-Z_target + gate Z_age)``
      pass the latest row's target and block the others, two more cancel the residual ``beta Z`` in
      the output column 0; ``W_U = w / beta``.
    - ``beta = 0``: the attention logits ``-s lam a_i a_j`` send every row but the latest to the
      latest; ``W_V`` copies the target to column 0 and the age to column ``age``, the two gating
      units drop the latest row's own (uniform) mixture; ``W_U = w / (w - 1)``.
    """
    if cfg.activation != "gelu" or cfg.pool != "mean" or cfg.L != 1 or cfg.m < 4 or cfg.c != 1:
        raise ValueError("persistence_weights needs a one-block, mean-pooled GELU model with m >= 4 and "
                         f"c = 1, got {cfg}.")
    beta_attn, beta_ffn = cfg.residual
    if beta_attn != beta_ffn:
        raise ValueError("persistence_weights needs equal residual coefficients (cfg.beta).")
    beta = float(beta_attn)
    W = {k: torch.zeros(v, dtype=dtype) for k, v in param_shapes(cfg).items()}
    W1, W2 = W["layer1.W_1"], W["layer1.W_2"]
    if beta > 0:
        value, gate_col = target, age                      # Z = beta X: the rows' own values and ages
        W1[0, 2], W1[0, 3], W2[2, 0], W2[3, 0] = 1.0, -1.0, -beta, beta   # - beta Z_0 (cancel the residual)
    else:
        lam = gate / attention_scale(cfg)                  # every row but the latest attends to the latest
        W["layer1.W_Q"][age, 0], W["layer1.W_K"][age, 0] = -lam, 1.0
        W["layer1.W_V"][target, 0], W["layer1.W_V"][age, age] = 1.0, 1.0
        value, gate_col = 0, age
    W1[value, 0], W1[gate_col, 0], W1[value, 1], W1[gate_col, 1] = 1.0, gate, -1.0, gate
    W2[0, 0], W2[1, 0] = 1.0, -1.0
    W["W_U"][0, 0] = window / beta if beta > 0 else window / (window - 1)
    return W


def _config(s: dict, d: int, beta: float) -> ModelConfig:
    return ModelConfig(d=d, d_qk=s["d_qk"], m=s["m"], c=1, beta=beta, activation=s["activation"], pool="mean")


def _init(s: dict, d: int, seed: int, dtype) -> dict:
    """The initial weights of ``seed``, the same for every beta, ``W_U`` times ``readout_scale``."""
    params = init_params(_config(s, d, 1.0), seed=seed, dtype=dtype)
    params["W_U"] = params["W_U"] * float(s["readout_scale"])
    return params


#: Jena's stacks (:func:`convres.gd.chunk_size`'s ``most`` and ``limit``): the book's windows ran 10%
#: faster in stacks of 5 to 30; every window (815,000 entries) 1.4 times slower in a stack of 9.
STACK, STACK_ENTRIES = 16, 200_000


def _runs(s: dict, X, Y, arms, steps: int, *, progress=False, device=None) -> list[dict]:
    """``arms`` ``[(beta, seed, eta), ...]`` in one sweep, ``mu = eta / N``: MSE ``2 Phi_t / N``, weights."""
    N, _, d = X.shape
    if not arms:
        return []
    cfgs = [_config(s, d, b) for b, _, _ in arms]
    chunk = chunk_size(cfgs[0], X, len(arms), limit=STACK_ENTRIES, most=STACK)
    out = sweep([_init(s, d, sd, X.dtype) for _, sd, _ in arms], X, Y, cfgs, [eta / N for *_, eta in arms],
                steps, progress=progress, device=device, chunk=chunk)
    return [{"beta": b, "seed": sd, "eta": eta, "status": h.status, "mse": 2 * h.loss / N, "params": p}
            for (b, sd, eta), (p, h) in zip(arms, out)]


def _tune(s: dict, X, Y, *, progress=False, device=None) -> list[dict]:
    """Per beta, the tuned step ``eta`` on ``eta_grid`` (probe runs scored by their mean log-loss)."""
    T = positive_int(s, "probe_steps")

    def probe_runs(pairs: list, horizon: int) -> dict:
        out: dict = {}
        for r in _runs(s, X, Y, [(b, sd, e) for b, e in pairs for sd in s["probe_seeds"]], horizon,
                       progress=progress, device=device):
            v = None if r["mse"][-1] > r["mse"][0] else speed(r["mse"], r["status"], horizon)
            out.setdefault((r["beta"], r["eta"]), []).append(None if v is None else ProbeRun(v, True))
        return out

    tuned = tune_arms(s["betas"], s["eta_grid"], probe_runs, horizon=T, max_horizon=T * PROBE_HORIZON_MAX)
    return [{"arm": f"beta={b:g}", "beta": b, **t} for b, t in tuned.items()]


def _pilots(s: dict, X, Y, X_blind, tuned: dict, *, device=None) -> dict:
    """The pilot runs of the final design, and the order-blind model (no age) at the end betas."""
    T, ends = positive_int(s, "steps"), (min(s["betas"]), max(s["betas"]))
    runs, blind = (_runs(s, x, Y, [(b, sd, tuned[b]) for sd in s["pilot_seeds"] for b in betas], T,
                         device=device) for x, betas in ((X, s["betas"]), (X_blind, ends)))
    return {"runs": [_record(r, T) for r in runs], "order_blind_model": [_record(r, T) for r in blind]}


def _record(r: dict, T: int, *keys: str, **extra) -> dict:
    """A run as the data holds it: its arm, ``keys``, status, training MSE, mean log-loss, ``extra``."""
    return {**{k: r[k] for k in ("beta", "seed", "eta", *keys, "status")}, "train_mse": finite_list(r["mse"]),
            "mean_log_loss": speed(r["mse"], r["status"], T), **extra}


def _level(s: dict, pilots: dict, persistence_train: float) -> dict:
    """The speed level: the smallest ``f`` of the ladder 1, 1 + ``level_factor_step``, ... such that
    every pilot reaches ``f`` x persistence's training MSE within half the horizon (else the largest)."""
    half = positive_int(s, "steps") // 2
    worst = max(math.inf if r["status"] == "diverged" or len(r["train_mse"]) <= half
                or r["train_mse"][half] is None else min(r["train_mse"][:half + 1]) for r in pilots["runs"])
    step, top = float(s["level_factor_step"]), float(s["level_factor_max"])
    ladder = [round(1.0 + k * step, 10) for k in range(int(round((top - 1.0) / step)) + 1)]
    factor = next((f for f in ladder if f * persistence_train >= worst), None)
    used = ladder[-1] if factor is None else factor
    return {"factor": used, "found": factor is not None, "level": used * persistence_train,
            "slowest_at_half": None if math.isinf(worst) else worst, "half": half}


def _checks(s: dict, data: dict) -> list[CheckResult]:
    """Protocol v4, section 3: (a) *informative* (the best order-blind training MSE over the level),
    (b) *reachable*, (c) *equal start* and *order-aware* (a deviation), from the stored design."""
    pilots, level = data["pilots"], data["level"]
    half, lev = level["half"], level["level"]
    late = sum(r["status"] == "diverged" or steps_to(r["train_mse"][:half + 1], lev, relative=False) is None
               for r in pilots["runs"])
    starts = [[r["train_mse"][0] for r in pilots["runs"] if r["seed"] == sd] for sd in s["pilot_seeds"]]
    spread_0 = max((max(v) - min(v)) / min(v) for v in starts)
    no_age = [v for r in pilots["order_blind_model"] for v in r["train_mse"] if v is not None]
    blind = min([data["order_blind"]["train_least_squares"], *no_age])
    ends = min((r["train_mse"][-1] for r in pilots["order_blind_model"] if r["status"] != "diverged"),
               default=-math.inf)
    above = sum(r["status"] == "diverged" or not r["train_mse"][-1] < ends for r in pilots["runs"])
    values = {"jena informative": blind / lev, "jena reachable": late, "jena equal start": spread_0,
              "jena order-aware": above}
    return [design_check(n, v) for n, v in values.items()]


def _heldout(s: dict, r: dict, X_val, Y_val) -> float | None:
    """The held-out MSE of a run's final weights (``None`` for a diverged run)."""
    if r["status"] == "diverged":
        return None
    with torch.no_grad():
        p = {k: w.to(X_val.device) for k, w in r["params"].items()}
        v = float((forward_trace(p, X_val, _config(s, X_val.shape[-1], r["beta"])).F - Y_val).pow(2).mean())
    return v if math.isfinite(v) else None


def _evaluate(s: dict, X, Y, steps_of: dict, *, progress=False, device=None) -> list[dict]:
    """Every arm ``{(protocol, beta): eta}`` on every seed with the reruns, a run two arms share made once."""
    done: dict = {}

    def run(pending: dict) -> dict:
        arms = [(b, sd, pending[(p, b)]) for p in ("tuned", "common") for sd in s["seeds"] for b in s["betas"]
                if (p, b) in pending]
        made = _runs(s, X, Y, [a for a in dict.fromkeys(arms) if a not in done], positive_int(s, "steps"),
                     progress=progress, device=device)
        done.update({(r["beta"], r["seed"], r["eta"]): r for r in made})
        return {(p, b): [done[(b, sd, e)] for sd in s["seeds"]] for (p, b), e in pending.items()}

    out, failed = rerun_diverged(steps_of, run, int(s["max_halvings"]))
    return [{**out[(p, b)][i], "protocol": p, "rerun": len(failed[(p, b)]), "tuned_eta": steps_of[(p, b)]}
            for p in ("tuned", "common") for i in range(len(s["seeds"])) for b in s["betas"]]


def _design_part(s: dict, task: JenaTask, *, progress=False, device=None) -> dict:
    """Everything before the evaluation runs: baselines, tuned steps, pilots and level."""
    X, Y = task.X, task.Y
    inner = task.target_times <= np.datetime64(timestamp("setting 'inner_end'", s["inner_end"]))
    ar, blind = (f(X, Y, task.X_val, task.Y_val, inner, s["ridge_grid"]) for f in (linear_ar, order_blind))
    X_noage = X[..., :-1] if s["age"] else X
    tuned_steps = shared_by_pieces("tune-jena", s, device,
                                   lambda: _tune(s, X, Y, progress=progress, device=device))
    tuned = {t["beta"]: t["chosen"] for t in tuned_steps}
    unstable = [b for b, e in tuned.items() if e is None]
    if unstable:
        raise ValueError(f"no step of the grid is stable for beta in {unstable}: put smaller steps in the "
                         "setting 'eta_grid'.")
    pilots = shared_by_pieces("pilots-jena", s, device,
                              lambda: _pilots(s, X, Y, X_noage, tuned, device=device))
    level = _level(s, pilots, task.persistence["train"])
    return {"inner_windows": int(inner.sum()), "linear_ar": ar, "order_blind": blind,
            "step_sizes": tuned_steps, "common_eta": min(tuned.values()), "pilots": pilots, "level": level}


def _run_jena(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    task = jena_data(s, data_dir, dtype_of(s))
    (N, n, d), T, dev = task.X.shape, positive_int(s, "steps"), check_device(device)
    design = _design_part(s, task, progress=progress, device=device)
    steps_of = {**{("tuned", t["beta"]): t["chosen"] for t in design["step_sizes"]},
                **{("common", b): design["common_eta"] for b in s["betas"]}}
    level, X_val, Y_val = design["level"]["level"], task.X_val.to(dev), task.Y_val.to(dev)

    def record(r: dict) -> dict:
        reached = None if r["status"] == "diverged" else steps_to(r["mse"], level, relative=False)
        return _record(r, T, "tuned_eta", "protocol", "rerun", steps_to_level=reached,
                       val_mse=_heldout(s, r, X_val, Y_val))
    runs = _evaluate(s, task.X, task.Y, steps_of, progress=progress, device=device)
    return {"N": int(N), "N_val": int(X_val.shape[0]), "n": int(n), "d": int(d),
            "features": list(task.features), "rows": task.rows, "train_rows": task.train_rows,
            "val_rows": task.val_rows, "target_std": task.target_std, "persistence": task.persistence,
            **design, "runs": [record(r) for r in runs]}


def rerun(s: dict, beta: float, seed: int, eta: float, steps: int, *, data_dir=None) -> list[float | None]:
    """The training MSE of one run of :func:`_run_jena`, computed alone (a committed result's spot check)."""
    task = jena_data(s, data_dir, dtype_of(s))
    [r] = _runs(s, task.X, task.Y, [(beta, seed, eta)], steps)
    return finite_list(r["mse"])


def _shapes(s: dict) -> list[Shape]:
    N, n = window_count(s)
    d = len(JENA_FEATURES) + 2 * bool(s["time_of_day"]) + bool(s["age"])     # the features of jena_data
    return [Shape("jena", _config(s, d, 1.0), N, n,
                  f"{N} training windows of {n} rows, counted on the {s['freq']} grid "
                  f"{s['start']} .. {s['train_end']} (no data loaded)")]


_JENA = dict(start="2009-01-01 00:10", train_end="2009-01-22 00:00", end="2009-01-28 18:40", freq="10min",
             inner_end="2009-01-15 00:00", window=6, horizon=6, val_stride=1, target="T (degC)",
             time_of_day=False, age=True, readout_scale=0.0, d_qk=11, m=16, activation="gelu",
             betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta_grid=[0.05, 0.1, 0.2, 0.4], probe_seeds=list(PROBE_SEEDS),
             pilot_seeds=list(PILOT_SEEDS), level_factor_step=0.01, level_factor_max=1.5, max_halvings=1,
             ridge_grid=[0.0, 0.01, 0.1, 1.0, 10.0, 100.0], dtype="float32")


# --- measures, claims and the report -------------------------------------------------------------
def _by(res: Result, protocol: str) -> dict:
    """``{(beta, seed): run}`` of the evaluation runs of ``protocol`` (``"tuned"`` or ``"common"``)."""
    return {(r["beta"], r["seed"]): r for r in res.data["runs"] if r["protocol"] == protocol}


def _seeds(res: Result) -> list[int]:
    return sorted({r["seed"] for r in res.data["runs"]})


def _effects(res: Result, claim: str, measure: str, protocol: str,
             betas: Sequence[float] | None = None) -> list[float | None]:
    """Per seed: J1 ``-tau`` of beta against ``measure``; J2 beta = 0 against the smallest positive
    beta, in decades."""
    runs, T = _by(res, protocol), res.settings["steps"]
    betas = sorted(res.settings["betas"] if betas is None else betas)
    value = (lambda r: r["mean_log_loss"]) if measure == "mean log-loss" else (lambda r: level_steps(r, T))
    small = min(b for b in betas if b > 0)
    out: list[float | None] = []
    for sd in _seeds(res):
        v: dict = {b: value(runs[(b, sd)]) for b in betas}
        none, low = v[0.0], v[small]
        if claim == "J1":  # minus Kendall's tau, 0 where every value is tied
            out.append(None if None in v.values() else -kendall_tau(betas, [v[b] for b in betas], tied=-0.0))
        elif none is None or low is None:
            out.append(None)
        else:
            out.append(none - low if measure == "mean log-loss" else log_ratio(none, low, base=10))
    return out


def _level_gated(verdict: str, measure: str, checks: list[CheckResult]) -> str:
    """*not testable* for the steps to the level when check (a) failed, else ``verdict``."""
    informative = next(c for c in checks if c.name == "jena informative")
    return "not testable" if measure == "steps to the level" and not informative.passed else verdict


def claim_records(res: Result) -> list[ClaimRecord]:
    """J1 and J2 graded by protocol v4 on the mean log-loss at the tuned steps, with their alternatives."""
    checks = _checks(res.settings, res.data)
    out = []
    for c in ("J1", "J2"):
        rec = claim_record(c, _effects(res, c, "mean log-loss", "tuned"), profile=res.profile, checks=checks,
                           sensitivity={(m, p): _effects(res, c, m, p) for m, p in CLAIMS[c].alternatives})
        sens = tuple({**x, "verdict": _level_gated(x["verdict"], x["measure"], checks)}
                     for x in rec.sensitivity)
        out.append(dataclasses.replace(rec, sensitivity=sens))
    return out


def _estimates(res: Result) -> dict:
    """Every claim's effect and interval under each measure (the chapter's sensitivity table)."""
    out, checks = {}, _checks(res.settings, res.data)
    for c in ("J1", "J2"):
        for m, p in (("mean log-loss", "tuned"), *CLAIMS[c].alternatives):
            e = estimate(_effects(res, c, m, p), min_units=MIN_UNITS[res.profile])
            out[f"{c}|{m}|{p}"] = {"claim": c, "measure": m, "protocol": p, "effect": e.effect,
                                   "ci": None if e.lo is None else [e.lo, e.hi], "units": e.units,
                                   "diverged": e.diverged, "sign_test_p": e.sign_test_p,
                                   "verdict": _level_gated(grade(e, CLAIMS[c].margin).verdict, m, checks)}
    return out


def _heldout_table(res: Result, protocol: str = "tuned") -> list[dict]:
    """Per beta: held-out MSE, skill ``1 - MSE / MSE_persistence`` and, against persistence and the
    linear AR, ``ln(MSE_baseline / MSE_model)`` per seed with its interval."""
    base = {"persistence": res.data["persistence"]["val"], "linear AR": res.data["linear_ar"]["val"]}
    runs = _by(res, protocol)
    out = []
    for b in sorted(res.settings["betas"]):
        val = [runs[(b, sd)]["val_mse"] for sd in _seeds(res)]
        row: dict = {"beta": b, "val_mse": spread(val),
                     "skill": spread(None if v is None else 1 - v / base["persistence"] for v in val)}
        for name, v0 in base.items():
            e = estimate([None if v is None else log_ratio(v0, v) for v in val],
                         min_units=MIN_UNITS[res.profile])
            says = ("better" if e.lo is not None and e.lo > 0 else "worse" if e.hi is not None and e.hi < 0
                    else "not distinguishable")
            row[name] = {"effect": e.effect, "ci": None if e.lo is None else [e.lo, e.hi], "units": e.units,
                         "sign_test_p": e.sign_test_p, "says": says}
        out.append(row)
    return out


def _per_beta(res: Result, protocol: str) -> list[dict]:
    runs, T = _by(res, protocol), res.settings["steps"]
    out = []
    for b in sorted(res.settings["betas"]):
        sel = [runs[(b, sd)] for sd in _seeds(res)]
        ok = [r for r in sel if r["status"] != "diverged"]
        out.append({"beta": b, "eta": sorted({r["eta"] for r in sel}), "tuned_eta": sel[0]["tuned_eta"],
                    "reruns": sum(r["rerun"] > 0 for r in sel), "diverged": len(sel) - len(ok),
                    "mean_log_loss": spread(r["mean_log_loss"] for r in sel),
                    "train_mse": spread(r["train_mse"][-1] for r in ok),
                    "steps_to_level": spread(level_steps(r, T) for r in ok),
                    "censored": sum(r["steps_to_level"] is None for r in ok)})
    return out


_STEP_KEYS = ("arm", "beta", "grid", "scores", "chosen", "bracketed", "capped", "largest_stable",
              "unresolved")


def _jena_numbers(res: Result) -> dict:
    data = res.data
    pers, ar, blind = data["persistence"], data["linear_ar"], data["order_blind"]
    recs = claim_records(res)
    return {"n_train": data["N"], "n_val": data["N_val"], "rows": data["rows"],
            "train_rows": data["train_rows"], "val_rows": data["val_rows"], "causal": True, "d": data["d"],
            "baselines": {"persistence": {"train_mse": pers["train"], "val_mse": pers["val"], "skill": 0.0},
                          "linear_ar": {"train_mse": ar["train"], "val_mse": ar["val"], "ridge": ar["ridge"],
                                        "skill": 1 - ar["val"] / pers["val"]},
                          "order_blind": {"train_mse": blind["train"], "val_mse": blind["val"],
                                          "ridge": blind["ridge"], "skill": 1 - blind["val"] / pers["val"],
                                          "train_least_squares": blind["train_least_squares"]}},
            "level": data["level"]["level"], "level_factor": data["level"]["factor"],
            "step_sizes": step_table(data["step_sizes"], _STEP_KEYS),
            "common_eta": data["common_eta"],
            "per_beta": _per_beta(res, "tuned"), "per_beta_common": _per_beta(res, "common"),
            "heldout": _heldout_table(res), "claims": [r.to_json() for r in recs],
            "estimates": _estimates(res),
            "diverged_runs": sum(r["status"] == "diverged" for r in data["runs"]),
            "reruns": sorted({(r["beta"], r["protocol"], r["eta"]) for r in data["runs"] if r["rerun"]}),
            **protocol_summary(_checks(res.settings, data))}


def _jena_claims(res: Result) -> list[dict]:
    st, data = res.settings, res.data
    where = (f"on the offline slice: {data['rows']:,} rows every {_every(st['freq'])} from {st['start']} to "
             f"{st['end']} ({len(JENA_FEATURES)} of the {len(JENA_ALL_FEATURES)} features, no wind, and each "
             f"row's age), past-only windows of {st['window']} rows, the temperature {st['horizon']} rows "
             f"after the last one; {data['N']:,} training windows; {len(_seeds(res))} paired seeds, "
             f"{st['steps']} steps, each $\\beta$ at its own tuned step; ")
    rows = []
    for rec in claim_records(res):
        e = rec.estimate
        measurement = ("too few units" if e.effect is None else
                       f"{e.effect:.3g}, 95% CI [{e.lo:.3g}, {e.hi:.3g}] ({e.method}, {e.units} seeds, "
                       f"{e.diverged} diverged)")
        rows.append(rec.row(figure="fig-jena-loss", criterion=where + rec.claim.measure,
                            measurement=measurement, evidence=measurement))
    return rows


def _every(freq: str) -> str:
    """A pandas frequency as the prose writes it: ``"10min"`` -> ``"10 min"``."""
    return freq.replace("min", " min") if freq[:1].isdigit() else freq


def _report(res: Result) -> dict:
    s, d, k = res.settings, res.data, res.summary()
    spread_rows = [spread_row(f"$\\beta = {r['beta']:g}$ ($\\eta = {r['tuned_eta']:g}$)",
                              "mean log-loss (decades)", r["mean_log_loss"], "{:.3f}") for r in k["per_beta"]]
    spread_rows += [spread_row(f"$\\beta = {r['beta']:g}$", "held-out MSE", r["val_mse"], "{:.4f}")
                    for r in k["heldout"]]
    for name, v in (("persistence", d["persistence"]["val"]), ("linear AR", d["linear_ar"]["val"])):
        spread_rows.append({"configuration": name, "measurement": "held-out MSE", "median": v, "min": None,
                            "max": None, "seeds": None, "format": "{:.4f}"})
    etas = ", ".join(f"{t['chosen']:g}" for t in d["step_sizes"])
    pilots = len(d["pilots"]["runs"]) + len(d["pilots"]["order_blind_model"])
    return {
        "settings": {"book": f"{d['rows']:,} rows every {_every(s['freq'])} "
                             f"({s['start'][:10]} to {s['end'][:10]}), "
                             f"{d['d']} features (11 measured, each row's age); train to "
                             f"{s['train_end'][:10]}, rest held out; past-only windows of {s['window']} "
                             f"rows, target {s['horizon']} rows after the last; $N = {d['N']}$; "
                             f"$d_{{QK}} = {s['d_qk']}$, $m = {s['m']}$, mean-pooled readout, $W_U$ at 0; "
                             f"$\\eta$ per $\\beta$ ({etas}); {s['steps']} steps; {len(_seeds(res))} seeds",
                     "why": "every row of the offline slice; the age makes persistence representable; a "
                            "held-out week, persistence and a linear AR make the errors readable"},
        "spread": spread_rows,
        "runs": len(d["runs"]) + probe_count(s, d["step_sizes"]) + pilots,
        "deviations": [{"what": "Jena data", "paper": f"the 2009-2016 series ({len(JENA_ALL_FEATURES)} "
                                                      "features)",
                        "book": f"the {d['rows']:,} rows of January 2009 of the offline copy, "
                                f"{len(JENA_FEATURES)} features",
                        "why": "only this slice is available offline; the loader reads the full file when "
                               "present"},
                       {"what": "Jena inputs", "paper": "not stated",
                        "book": "each row's age as one more feature; $W_U$ starts at 0",
                        "why": "without positions a mean-pooled model cannot tell the latest row and cannot "
                               "represent persistence; $W_U = 0$ gives every $\\beta$ the same start"}],
    }


EXPERIMENT = Experiment(
    "jena", "Jena Climate: residual-coefficient sweep, the temperature one hour ahead from the past only",
    "book/jena.md",
    {"book": dict(_JENA, stride=6, seeds=list(EVALUATION_SEEDS["book"]), probe_steps=500, steps=1000),
     "paper": dict(_JENA, stride=1, seeds=list(EVALUATION_SEEDS["paper"]), probe_steps=2000, steps=4000),
     "smoke": dict(_JENA, train_end="2009-01-03 00:00", end="2009-01-04 00:00",
                   inner_end="2009-01-02 12:00", stride=6, m=8, betas=[0.0, 0.1, 1.0], seeds=[0, 1],
                   probe_steps=10, steps=10)},
    _run_jena, _jena_numbers, _jena_claims, plot_jena, shapes=_shapes, report=_report, piece_seeds=2,
    paper=r"Jena Climate, $\beta$ from small values up to 1; task, window, split and steps not stated")
