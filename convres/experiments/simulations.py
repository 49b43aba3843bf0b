"""Simulations (``book/simulations.md``, protocol v4, claims S1-S5): beta in three regimes (speed,
mechanism ``sigma_min(Z_0)``) and the escape law, the first step with ``Phi_t < ESCAPE x floor``
against ``d_QK``; every arm at its own tuned step ``mu = eta / (N n)``, rerun at half on divergence."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from ..collapse import rank_one_floor
from ..gd import History, sweep
from ..instances import qk_reduced, simulations_instance
from ..model import forward_trace
from ..plotting import plot_simulations
from ..protocol import (
    CLAIMS,
    LOG_LOSS_FLOOR,
    MIN_UNITS,
    PROBE_HORIZON_MAX,
    PROBE_SEEDS,
    RERUN_FACTOR,
)
from ..rank import extreme_singular_values
from ..stats import (
    Estimate,
    ProbeRun,
    censored,
    estimate,
    kendall_tau,
    linear_rate,
    mean_log_loss,
    power_law,
    seed_spearman,
    steps_to,
)
from .base import (
    Experiment,
    Result,
    Shape,
    claim_record,
    design_check,
    dtype_of,
    finite_list,
    protocol_summary,
    rerun_diverged,
    shared_by_pieces,
    spread_row,
    step_table,
    tune_arms,
)
from .sim_reruns import cell_name, first_pass, halvings, places_run, reruns
from .sim_reruns import second_pass as second_pass  # re-exported

#: Sensitivity measures: the steps to these fractions of the initial loss.
LEVELS = (1e-2, 1e-6)
#: Escape from the rank-one floor: the first step with ``Phi_t < ESCAPE x floor``.
ESCAPE = 0.5
#: The regimes' runs stop at this fraction of their start, the mean log-loss's floor (protocol v4, 4).
STOP = LOG_LOSS_FLOOR
#: The escape-law runs stop at this fraction of their start (long after their escape).
ESCAPE_STOP = 1e-6
#: The linear phase of a run: from ``LINEAR_PHASE[0]`` of its start to ``LINEAR_PHASE[1]`` (or its end).
LINEAR_PHASE = (1e-3, 1e-9)
#: An arm with a diverged evaluation run is rerun at half its step at most this many times.
HALVINGS = 3


def speed(loss, floor: float, horizon: int, *, diverged: bool = False) -> dict:
    """A run's steps to :data:`LEVELS` and to escape (``None``: censored), and its mean log-loss."""
    return {"steps_to": {f"{lv:g}": steps_to(loss, lv) for lv in LEVELS},
            "escape": steps_to(loss, ESCAPE * floor, relative=False), "horizon": horizon,
            "mean_log_loss": None if diverged else mean_log_loss(list(loss), horizon)}


def _steps(run: dict, key: str) -> tuple[float, bool]:
    """``(steps, censored)`` of a run for ``key``: ``"escape"`` or a level of :data:`LEVELS`."""
    t = run["escape"] if key == "escape" else run["steps_to"][key]
    return censored(t, run["horizon"])


def instance(s: dict, N: int, d_qk: int, scale: str, seed: int):
    """:func:`convres.instances.simulations_instance` of ``seed`` in a cell, ``beta = 0``."""
    return simulations_instance(seed, N=N, n=s["n"], d=s["d"], m=s["m"], d_qk=d_qk, scale=scale,
                                activation=s["activation"], beta=0.0, dtype=dtype_of(s))


def _runs(s, N, d_qk, scale, jobs, steps, stop, *, device=None) -> list[tuple]:
    """Every ``(beta, eta, seed)`` of ``jobs`` in one sweep (:func:`~convres.instances.qk_reduced`):
    ``[(beta, eta, seed, X, Y, params_0, cfg, History)]``."""
    drawn = {}
    for seed in sorted({j[2] for j in jobs}):
        p0, X, Y, cfg = instance(s, N, d_qk, scale, seed)
        p0, cfg = qk_reduced(p0, cfg)
        drawn[seed] = (p0, X, Y, cfg)
    cfgs = [drawn[k][3].with_residual(b) for b, _, k in jobs]
    out = sweep([drawn[k][0] for _, _, k in jobs], [drawn[k][1] for _, _, k in jobs],
                [drawn[k][2] for _, _, k in jobs], cfgs, [eta / (N * s["n"]) for _, eta, _ in jobs], steps,
                rtol=stop, device=device)
    return [(b, eta, k, *drawn[k][1:3], drawn[k][0], cfg, h)
            for (b, eta, k), cfg, (_, h) in zip(jobs, cfgs, out)]


# --- step sizes ------------------------------------------------------------------------------------

def _probe_runs(s, N, d_qk, scale, pairs, T, measure, device) -> dict:
    """``{(beta, eta): [ProbeRun | None per probe seed]}``: the mean log-loss or the escape step."""
    stop = STOP if measure == "mean log-loss" else ESCAPE_STOP
    jobs = [(b, e, k) for b, e in pairs for k in s["probe_seeds"]]
    out: dict = {}
    for beta, eta, _seed, _X, Y, _p, _cfg, h in _runs(s, N, d_qk, scale, jobs, T, stop, device=device):
        if h.status == "diverged" or h.loss[-1] > h.loss[0]:
            run = None
        elif measure == "mean log-loss":
            mll = mean_log_loss(list(h.loss), T)
            run = None if mll is None else ProbeRun(mll, steps_to(list(h.loss), LEVELS[0]) is not None)
        else:
            t = steps_to(list(h.loss), ESCAPE * rank_one_floor(Y.double()), relative=False)
            run = ProbeRun(float(T if t is None else t), t is not None)
        out.setdefault((beta, eta), []).append(run)
    return out


# --- evaluation runs with reruns at half the step ------------------------------------------------

def _record(beta, eta, seed, X, Y, p0, cfg, h: History, *, N, s, horizon, curve, mechanism) -> dict:
    floor = rank_one_floor(Y.double())
    diverged = h.status == "diverged"
    run = dict(beta=beta, eta=eta, seed=seed, status=h.status, diverged=diverged,
               diverged_at=h.diverged_at, **speed(h.loss, floor, horizon, diverged=diverged),
               floor_ratio=floor / float(h.loss[0]), loss0=float(h.loss[0]))
    if mechanism:       # sigma_min of the stacked Z_0 = S X W_V + beta X: the smallest of min(N n, d)
        with torch.no_grad():
            Z = forward_trace(p0, X, cfg).Z[0]
        run.update(sigma_min_Z0=float(extreme_singular_values(Z)[0]),
                   rate=None if diverged else linear_rate(h.loss, eta / (N * s["n"]), phase=LINEAR_PHASE))
    if curve:
        run["loss"] = finite_list(h.loss)
    return run


def _evaluate(s, where, N, d_qk, scale, arms: dict, horizon, stop, *, follows=None, halve=None,
              mechanism=False, curves=(), device=None) -> dict:
    """``{key: records}`` of ``arms`` ``{key: (beta, eta)}`` on every seed, with the reruns, started
    lower by ``halve`` (:func:`~convres.experiments.sim_reruns.halvings`)."""
    follows, halve = follows or {}, halve or {}

    def start(key):
        times = max(halve.get((where, *key), 0), halve.get((where, *follows.get(key, key)), 0))
        return arms[key][1] * RERUN_FACTOR ** times

    def run(pending: dict) -> dict:
        pairs = sorted({(arms[key][0], eta) for key, eta in pending.items()})
        runs: dict = {}
        for job in _runs(s, N, d_qk, scale, [(b, e, k) for b, e in pairs for k in s["seeds"]], horizon, stop,
                         device=device):
            runs.setdefault(job[:2], []).append(
                _record(*job, N=N, s=s, horizon=horizon, curve=job[2] in curves, mechanism=mechanism))
        return {key: [dict(r) for r in runs[(arms[key][0], eta)]] for key, eta in pending.items()}

    out, failed = rerun_diverged({key: start(key) for key in arms}, run, HALVINGS, follows=follows,
                                 diverged=lambda r: r["diverged"])
    for key, records in out.items():
        for r in records:
            r.update(tuned_eta=arms[key][1],
                     diverged_before=[e for e, bad in failed[key] if r["seed"] in {x["seed"] for x in bad}])
    return out


def _place(s, where, N, d_qk, scale, betas, measure, horizon, stop, *, common: bool, half: bool = False,
           device=None, **kw) -> tuple[list, dict]:
    """A regime or escape-law cell: its step rows and ``{protocol: records}`` of every beta at its tuned
    step, at the smallest one (``common``) and of beta = 0 at half its step, following it (``half``)."""
    s = {k: v for k, v in s.items() if k != "halve"}      # tuned once for every pass of a run in pieces

    def tune():
        probe_runs = functools.partial(_probe_runs, s, N, d_qk, scale, measure=measure, device=device)
        tuned = tune_arms(betas, s["eta_grid"], probe_runs, horizon=horizon,
                          max_horizon=PROBE_HORIZON_MAX * horizon)
        return [[b, t] for b, t in tuned.items()]
    rows = shared_by_pieces("tune-simulations", s, device, tune, shape=[N, d_qk, scale], betas=betas,
                            measure=measure, horizon=horizon, probe_seeds=s["probe_seeds"])
    tuned = {float(b): t for b, t in rows}
    arms = {("tuned", b): (b, t["chosen"]) for b, t in tuned.items()}
    if half:
        arms[("half", 0.0)] = (0.0, tuned[0.0]["chosen"] / 2)
    if common:
        arms.update({("common", b): (b, min(t["chosen"] for t in tuned.values())) for b in betas})
    follows = {("half", 0.0): ("tuned", 0.0)} if half else None
    runs: dict = {}
    for (protocol, _), records in _evaluate(s, where, N, d_qk, scale, arms, horizon, stop, follows=follows,
                                            device=device, **kw).items():
        runs.setdefault(protocol, []).extend(records)
    return [dict(arm=f"{where}, beta = {b:g}", beta=b, **t) for b, t in tuned.items()], runs


def _run_simulations(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    for r in s["regimes"]:
        if not {"name", "N", "d_qk", "scale"} <= set(r):
            raise ValueError(f"every regime needs 'name', 'N', 'd_qk' and 'scale', got {r!r}.")
    betas, halve = [float(b) for b in s["betas"]], halvings(s)
    regimes, escape, step_sizes = [], [], []
    for r in s["regimes"]:
        steps, runs = _place(s, r["name"], r["N"], r["d_qk"], r["scale"], betas, "mean log-loss", s["steps"],
                             STOP, common=True, halve=halve, mechanism=True, curves=s["curve_seeds"],
                             device=device)
        step_sizes += steps
        regimes.append(dict(name=r["name"], N=r["N"], n=s["n"], d=s["d"], d_qk=r["d_qk"], scale=r["scale"],
                            runs=runs))
        if progress:
            print(f"simulations: regime {r['name']} done", flush=True)
    for scale in s["scales"]:
        for d_qk in s["d_qks"]:
            last = d_qk == max(s["d_qks"])
            steps, runs = _place(s, cell_name(scale, d_qk), s["N"], d_qk, scale, [0.0, 1.0], "escape",
                                 s["escape_steps"], ESCAPE_STOP, common=last and scale == "1/d_qk",
                                 half=scale == "1/d_qk", halve=halve, curves=s["curve_seeds"] if last else (),
                                 device=device)
            step_sizes += steps
            escape.append(dict(d_qk=d_qk, scale=scale, N=s["N"], n=s["n"], runs=dict(sorted(runs.items()))))
        if progress:
            print(f"simulations: escape law at scale {scale} done", flush=True)
    return {"regimes": regimes, "escape": escape, "step_sizes": step_sizes}


def spot_check(res: Result) -> tuple[dict, dict]:
    """``(stored, again)``: the slowest run (beta = 0, scale 1/d_QK, largest d_QK, last seed) rerun."""
    s, seed = res.settings, res.settings["seeds"][-1]
    cell = next(c for c in res.data["escape"] if c["scale"] == "1/d_qk" and c["d_qk"] == max(s["d_qks"]))
    stored = next(r for r in cell["runs"]["tuned"] if r["beta"] == 0.0 and r["seed"] == seed)
    (job,) = _runs(s, s["N"], cell["d_qk"], "1/d_qk", [(0.0, float(stored["eta"]), seed)], s["escape_steps"],
                   ESCAPE_STOP)
    return stored, _record(*job, N=s["N"], s=s, horizon=s["escape_steps"], curve=False, mechanism=False)


# --- what the runs say ---------------------------------------------------------------------------

def _measure(run: dict, measure: str) -> float:
    """A run's ``"mean log-loss"``, or its steps (censored, >= 1) to ``"escape time"``/``"steps to 1e-2"``."""
    if measure == "mean log-loss":
        return float(run["mean_log_loss"])
    key = "escape" if measure == "escape time" else f"{float(measure.removeprefix('steps to ')):g}"
    return max(_steps(run, key)[0], 1.0)


def _cells(res: Result, scale: str, protocol: str) -> list[dict]:
    """The escape-law cells at ``scale`` with runs at step ``protocol``, by ``d_QK``."""
    return sorted((c for c in res.data["escape"] if c["scale"] == scale and protocol in c["runs"]),
                  key=lambda c: c["d_qk"])


def _times(res: Result, scale: str, beta: float, protocol: str, *, mu_units: bool) -> tuple[list, np.ndarray]:
    """``(d_qks, T[seed][d_qk])``: escape times (``nan``: diverged or censored), steps or ``mu t``."""
    cells = _cells(res, scale, protocol)
    T = np.full((len(res.settings["seeds"]), len(cells)), np.nan)
    for j, c in enumerate(cells):
        for r in c["runs"][protocol]:
            if r["beta"] == beta and not r["diverged"] and r["escape"] is not None:
                mu = r["eta"] / (c["N"] * c["n"]) if mu_units else 1.0
                T[res.settings["seeds"].index(r["seed"]), j] = _measure(r, "escape time") * mu
    return [c["d_qk"] for c in cells], T


def escape_law(res: Result, scale: str, beta: float = 0.0, protocol: str = "tuned") -> dict:
    """Per ``d_QK``: the steps, the escape times' quartiles (steps and ``mu t``), censored, diverged."""
    cells = _cells(res, scale, protocol)
    Q = {"median": 50, "q25": 25, "q75": 75}
    keys = [k + tail for tail in ("", "_mu_t") for k in Q]
    out: dict = {"scale": scale, "beta": beta, "protocol": protocol, "d_qk": [c["d_qk"] for c in cells],
                 "eta": [], **{k: [] for k in keys}, "censored": [], "diverged": [],
                 "runs": len(res.settings["seeds"])}
    for c in cells:
        runs = [r for r in c["runs"][protocol] if r["beta"] == beta]
        ok = [r for r in runs if not r["diverged"]]
        T = np.array([_measure(r, "escape time") for r in ok])
        mu_t = T * np.array([r["eta"] / (c["N"] * c["n"]) for r in ok])
        out["eta"].append(sorted({r["eta"] for r in runs}))
        for k in keys:
            v = mu_t if k.endswith("mu_t") else T
            out[k].append(float(np.percentile(v, Q[k.removesuffix("_mu_t")])) if v.size else None)
        out["censored"].append(sum(r["escape"] is None for r in ok))
        out["diverged"].append(len(runs) - len(ok))
    return out


def escape_fit(res: Result, *, draws: int = 1000) -> dict:
    """The fit ``T = a + b d_QK^p`` (in ``mu t``, beta = 0, scale 1/d_QK; reported, not graded) and
    per ``d_QK`` ``log2(T(eta / 2) / T(eta))``."""
    d, T = _times(res, "1/d_qk", 0.0, "tuned", mu_units=True)
    law = power_law(d, T, draws=draws)
    dh, Th = _times(res, "1/d_qk", 0.0, "half", mu_units=False)
    _, Ts = _times(res, "1/d_qk", 0.0, "tuned", mu_units=False)
    halves = []
    for j, q in enumerate(dh):
        v = np.log2(Th[:, j] / Ts[:, d.index(q)])
        est = estimate([float(x) for x in v if np.isfinite(x)], min_units=2)
        halves.append({"d_qk": q, "log2_ratio": est.effect, "ci": [est.lo, est.hi], "units": est.units})
    return {**{k: law[k] for k in ("p", "p_ci", "a", "b")}, "units": "mu t",
            "local_slopes": law["local_slopes"], "half_step": halves, "left_out": law["left_out"]}


def _simulations_numbers(res: Result) -> dict:
    s = res.settings
    per_regime = []
    for c in res.data["regimes"]:
        row = {"regime": c["name"], **{k: c[k] for k in ("N", "n", "d", "d_qk", "scale")}}
        for protocol, runs in c["runs"].items():
            row[protocol] = []
            for b in s["betas"]:
                mine = [r for r in runs if r["beta"] == b]
                ok = [r for r in mine if not r["diverged"]]
                row[protocol].append({
                    "beta": b, "eta": mine[0]["eta"],
                    "median_mean_log_loss": float(np.median([r["mean_log_loss"] for r in ok]))
                    if ok else None,
                    **{f"median_steps_{k}": float(np.median([_steps(r, k)[0] for r in ok])) if ok else None
                       for k in (f"{lv:g}" for lv in LEVELS)},
                    "censored": sum(_steps(r, f"{LEVELS[-1]:g}")[1] for r in ok),
                    "diverged": len(mine) - len(ok)})
        per_regime.append(row)
    laws = [escape_law(res, sc, b, p) for sc in s["scales"] for b in (0.0, 1.0) for p in ("tuned", "half")
            if any(p in c["runs"] and c["scale"] == sc for c in res.data["escape"])
            and not (p == "half" and b == 1.0)]
    runs_all = _all_runs(res)
    steps = res.data["step_sizes"]
    return {"regimes": [r["name"] for r in s["regimes"]], "per_regime": per_regime, "escape_law": laws,
            "escape_fit": escape_fit(res),
            "step_sizes": step_table(steps, ("arm", "grid", "chosen", "best", "largest_stable", "horizon",
                                             "bracketed", "unresolved", "capped")),
            **protocol_summary(_checks(res)), "reruns": reruns(res), "stalled": stalled(res),
            "diverged_before_rerun": sum(len(r["diverged_before"]) for r in runs_all)
            + sum(len(seeds) for h in first_pass(s).values() for _, seeds in h),
            "diverged_at_tuned": diverged_at_tuned(res),
            "diverged_runs": sum(r["diverged"] for r in runs_all), "runs": len(runs_all)}


def _all_runs(res: Result) -> list[dict]:
    return [r for _, runs in places_run(res) for v in runs.values() for r in v]


def _checks(res: Result) -> list:
    """Protocol v4, section 3: every tuning resolves; no run still diverged after the reruns."""
    unresolved = sum(bool(t["unresolved"]) for t in res.data["step_sizes"])
    return [design_check("simulations tuning resolves", unresolved),
            design_check("simulations runs stable", sum(r["diverged"] for r in _all_runs(res)))]


def diverged_at_tuned(res: Result) -> int:
    """The runs that diverged at their tuned step, this pass or the one ``halve`` records."""
    now = sum(r["tuned_eta"] in r["diverged_before"] or (r["diverged"] and r["eta"] == r["tuned_eta"])
              for r in _all_runs(res))
    return now + sum(len(h[0][1]) for h in first_pass(res.settings).values() if h)


def _regime_units(res: Result, protocol: str) -> list[tuple[str, int, dict]]:
    """``(regime, seed, {beta: run})`` for every seed of every regime at step ``protocol``."""
    return [(c["name"], k, {r["beta"]: r for r in c["runs"][protocol] if r["seed"] == k})
            for c in res.data["regimes"] for k in res.settings["seeds"]]


def _s1(res: Result, measure: str, protocol: str) -> list:
    """S1 per seed x regime: minus Kendall's tau of beta against ``measure``."""
    return [None if any(r["diverged"] for r in runs.values()) else
            -kendall_tau(sorted(runs), [_measure(runs[b], measure) for b in sorted(runs)], tied=0.0)
            for _, _, runs in _regime_units(res, protocol)]


def _gap(a: dict, b: dict, measure: str) -> float | None:
    """Run ``a`` against run ``b`` in decades, ``None`` if one diverged: the mean log-losses' difference or
    ``log10`` of the steps' ratio."""
    if a["diverged"] or b["diverged"]:
        return None
    if measure == "mean log-loss":
        return _measure(a, measure) - _measure(b, measure)
    return math.log10(_measure(a, measure) / _measure(b, measure))


def _s2(res: Result, measure: str, protocol: str) -> list:
    """S2 per seed x regime, in decades: beta = 0 against beta = 0.1."""
    small = min(b for b in res.settings["betas"] if b > 0)
    return [_gap(runs[0.0], runs[small], measure) for _, _, runs in _regime_units(res, protocol)]


def _s3(res: Result, measure: str, protocol: str) -> list:
    """S3 per seed (scale 1/d_QK, largest d_QK): ``log10(T(beta = 0) / T(beta = 1))``."""
    cell = max((c for c in res.data["escape"] if c["scale"] == "1/d_qk"), key=lambda c: c["d_qk"])
    run = {(r["seed"], r["beta"]): r for r in cell["runs"][protocol]}
    return [_gap(run[(k, 0.0)], run[(k, 1.0)], measure) for k in res.settings["seeds"]]


def _s4(res: Result, measure: str, protocol: str) -> list:
    """S4 per seed: Kendall's tau of d_QK against beta = 0's escape time in ``mu t`` (scale 1/d_QK)."""
    protocol = "half" if protocol == "half step" else protocol
    cells = _cells(res, "1/d_qk", protocol)
    run = [{r["seed"]: r for r in c["runs"][protocol] if r["beta"] == 0} for c in cells]
    out: list[float | None] = []
    for runs in ([x[k] for x in run] for k in res.settings["seeds"]):
        mu_t = [_measure(r, "escape time") * r["eta"] / (c["N"] * c["n"]) for r, c in zip(runs, cells)]
        out.append(None if any(r["diverged"] for r in runs) else
                   kendall_tau([c["d_qk"] for c in cells], mu_t, tied=0.0))
    return out


def _s5(res: Result, measure: str) -> tuple[Estimate, dict]:
    """S5 (a deviation): the mean over regime x beta of Spearman's rho across seeds of ``sigma_min(Z_0)``
    against the rate (or ``-mean log-loss``); overall and per regime."""
    seeds, betas = res.settings["seeds"], res.settings["betas"]
    x, y, keep, names = [], [], [], []
    for c in res.data["regimes"]:
        for b in betas:
            runs = {r["seed"]: r for r in c["runs"]["tuned"] if r["beta"] == b}
            v = [None if runs[k]["diverged"] else runs[k]["rate" if measure == "rate" else "mean_log_loss"]
                 for k in seeds]
            x.append([runs[k]["sigma_min_Z0"] for k in seeds])
            y.append([np.nan if u is None else u if measure == "rate" else -u for u in v])
            keep.append([u is not None for u in v])
            names.append(c["name"])
    X, Y, K, lab = np.asarray(x), np.asarray(y), np.asarray(keep), np.asarray(names)

    def est(rows: np.ndarray) -> Estimate:
        return seed_spearman(X[rows], Y[rows], K[rows], min_units=MIN_UNITS[res.profile])
    return est(np.arange(len(lab))), {r: est(np.flatnonzero(lab == r)) for r in dict.fromkeys(names)}


def stalled(res: Result) -> int:
    """The runs of beta = 0 at scale 1/d_QK that neither escaped within the horizon nor diverged."""
    return sum(r["escape"] is None and not r["diverged"] for c in res.data["escape"] if c["scale"] == "1/d_qk"
               for v in c["runs"].values() for r in v if r["beta"] == 0)


def claim_records(res: Result) -> list:
    """The claims S1-S5 graded by protocol v4, with their alternatives."""
    checks, regimes = _checks(res), [c["name"] for c in res.data["regimes"] for _ in res.settings["seeds"]]
    mll, esc = ("mean log-loss", "tuned"), ("escape time", "tuned")
    units = {"S1": (_s1, mll, regimes), "S2": (_s2, mll, regimes), "S3": (_s3, esc, None),
             "S4": (_s4, esc, None)}
    return [claim_record(c, f(res, *primary), profile=res.profile, checks=checks, strata=strata,
                         sensitivity={k: f(res, *k) for k in CLAIMS[c].alternatives})
            for c, (f, primary, strata) in units.items()] + [
        claim_record("S5", "rate", profile=res.profile, checks=checks, estimator=lambda m: _s5(res, m),
                     sensitivity={k: k[0] for k in CLAIMS["S5"].alternatives})]


_FIGURES = {"S1": "fig-sim-regimes", "S2": "fig-sim-regimes", "S3": "fig-sim-escape", "S4": "fig-sim-escape",
            "S5": "fig-sim-mechanism"}


def _simulations_claims(res: Result) -> list[dict]:
    rows = []
    for rec in claim_records(res):
        e = rec.estimate
        evidence = (f"effect {e.effect:.2f} (95% interval {e.lo:.2f} to {e.hi:.2f}, {e.method}), margin "
                    f"{rec.claim.margin:g}; {e.units} units" if e.effect is not None else rec.reason)
        rows.append(rec.row(figure=_FIGURES[rec.id], criterion=f"{rec.claim.measure}; per {rec.claim.unit}; "
                            f"margin {rec.claim.margin:g}", measurement=evidence, evidence=evidence))
    return rows


def _shapes(s: dict) -> list[Shape]:
    cfgs = [instance(s, 1, r["d_qk"], r["scale"], 0)[3].with_residual(1.0) for r in s["regimes"]]
    return [Shape(f"simulations ({r['name']})", cfg, r["N"], s["n"]) for r, cfg in zip(s["regimes"], cfgs)]


#: The attention scales' TeX, by their setting's name.
SCALE_TEX = {"1/sqrt(d_qk)": r"$1/\sqrt{d_{QK}}$", "1/d_qk": r"$1/d_{QK}$"}


def _report(res: Result) -> dict:
    s = res.settings
    regimes = "; ".join(f"{r['name']}: $N = {r['N']}$, $d_{{QK}} = {r['d_qk']}$, "
                        f"scale {SCALE_TEX[r['scale']]}" for r in s["regimes"])
    spread_rows = [spread_row(f"{c['name']}, $\\beta = {b:g}$", "mean log-loss (decades, tuned step)",
                              [r["mean_log_loss"] for r in c["runs"]["tuned"] if r["beta"] == b
                               and not r["diverged"]], "{:.2f}")
                   for c in res.data["regimes"] for b in (0.0, max(s["betas"]))]
    return {
        "settings": {"book": f"Gaussian $X$, $Y$; $n = {s['n']}$, $d = {s['d']}$, $m = {s['m']}$, "
                             f"{s['activation']}; {regimes}; $\\beta$ in {s['betas']}; each arm at its own "
                             f"tuned step (the smallest tuned step second); {s['steps']} steps; escape law "
                             f"over $d_{{QK}}$ in {s['d_qks']}, {s['escape_steps']} steps, a step tuned "
                             f"at every $d_{{QK}}$; {len(s['seeds'])} seeds",
                     "why": "one regime where the output layer alone can fit, two where a plateau can "
                            "happen, and the escape time against $d_{QK}$"},
        "spread": spread_rows,
        "runs": len(_all_runs(res)),
        "deviations": [{"what": "simulation regimes", "paper": "not stated",
                        "book": ", ".join(r["name"] for r in s["regimes"]) + "; attention scale "
                                "$1/d_{QK}$ in the near-uniform one",
                        "why": "a plateau cannot appear where the output layer alone can fit"}],
    }


_WIDE_REGIME = dict(name="wide", N=4, d_qk=32, scale="1/sqrt(d_qk)")
_SIM = dict(N=4, n=4, d=32, m=32, activation="gelu", betas=[0.0, 0.1, 0.25, 0.5, 1.0],
            eta_grid=[0.032, 0.064, 0.128, 0.256, 0.512], floor=1e-20, dtype="float64", halve=[],
            probe_seeds=list(PROBE_SEEDS), scales=["1/d_qk", "1/sqrt(d_qk)"],
            regimes=[_WIDE_REGIME, dict(name="narrow", N=32, d_qk=32, scale="1/sqrt(d_qk)"),
                     dict(name="uniform attention", N=4, d_qk=1024, scale="1/d_qk")])

#: The paper profile's second pass (``second_pass`` of the first, commit fc94993): d_QK = 64, beta = 0,
#: scale 1/d_QK at a quarter of its step, with the seeds that diverged in the first pass.
_AT_64 = "escape, scale 1/d_qk, d_QK = 64"
_PAPER_HALVE = [[_AT_64, "tuned", 0.0, 2, [[0.256, [1, 2, 9, 15, 17]], [0.128, [2]]]],
                [_AT_64, "half", 0.0, 2, [[0.128, [2]]]]]
#: The same for the book's 10 seeds.
_BOOK_HALVE = [[_AT_64, "tuned", 0.0, 2, [[0.256, [1, 2, 9]], [0.128, [2]]]],
               [_AT_64, "half", 0.0, 2, [[0.128, [2]]]]]

EXPERIMENT = Experiment(
    "simulations", "Simulations: the escape from the rank-one floor against d_QK, and beta in three regimes",
    "book/simulations.md",
    {"book": dict(_SIM, seeds=list(range(10)), curve_seeds=list(range(10)), steps=3000,
                  d_qks=[16, 64, 256, 1024], escape_steps=4000, halve=_BOOK_HALVE),
     "paper": dict(_SIM, seeds=list(range(20)), curve_seeds=[0, 1, 2], steps=10_000,
                   d_qks=[16, 64, 256, 1024, 4096, 8192], escape_steps=10_000, halve=_PAPER_HALVE),
     "smoke": dict(_SIM, betas=[0.0, 1.0], seeds=[0, 1], curve_seeds=[0, 1], steps=60, d_qks=[16, 64],
                   escape_steps=60, eta_grid=[0.064, 0.128],
                   regimes=[_WIDE_REGIME, dict(name="narrow", N=16, d_qk=32, scale="1/sqrt(d_qk)"),
                            dict(name="uniform attention", N=4, d_qk=64, scale="1/d_qk")])},
    _run_simulations, _simulations_numbers, _simulations_claims, lambda res: plot_simulations(res),
    shapes=_shapes, report=_report, piece_seeds=2, committed=("book", "paper"),
    paper=r"synthetic data, several values of $\beta$; sizes, steps and step sizes not stated")
