"""Simulations: wide, narrow and near-uniform-attention regimes, beta x d_QK and N n / d.

Book chapter *Simulations* (``book/simulations.md``). Synthetic Gaussian data, the same initial
weights for every beta of a seed, one step size ``mu = eta / (N n)``; three named regimes (one
where the output layer alone can fit, two where a stall can happen) and two sweeps (``d_QK`` at
scale ``1/d_QK``, and the number of sequences ``N``).
"""

from __future__ import annotations

import math

import numpy as np

from ..collapse import rank_one_floor
from ..gd import sweep
from ..instances import synthetic_regression
from ..lemmas import rate_alpha
from ..model import ModelConfig, init_params
from ..plotting import plot_phase_diagram, plot_simulations
from .base import VERDICTS, Experiment, Result, Shape, dtype_of, finite_list, measured_rate, verdict

__all__ = ["EXPERIMENT", "phase_diagram", "phase_figure", "stalled"]


def _sim_cells(s: dict) -> list[tuple]:
    """``(N, d_qk, scale)`` of every cell the simulations run, in order and without repeats: the
    size sweep (``N`` over ``sizes`` at the base ``d_qk`` and scale), the d_QK sweep (``d_qk`` over
    ``d_qks`` at scale ``1/d_qk`` and the base ``N``) and the named regimes."""
    cells = [(N, s["d_qk"], s["scale"]) for N in s["sizes"]]
    cells += [(s["N"], q, "1/d_qk") for q in s["d_qks"]]
    cells += [(r["N"], r["d_qk"], r["scale"]) for r in s["regimes"]]
    return list(dict.fromkeys(cells))


def _run_simulations(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    dtype, n, d = dtype_of(s), s["n"], s["d"]
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
            out = sweep([p0] * len(cfgs), X, Y, cfgs, mu, s["steps"], progress=progress,
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
                    run["loss"] = finite_list(loss)
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
                           "stalled_beta0_runs": sum(stalled(x, s) for x in cell["runs"] if x["beta"] == 0),
                           "diverged_runs": sum(x["status"] == "diverged" for x in cell["runs"])})
    checked = [x for c in regimes.values() for x in c["runs"] if "bound_holds" in x]
    return {"regimes": [r["name"] for r in s["regimes"]], "eta": s["eta"], "per_regime": per_regime,
            "bound_holds_all_runs": all(x["bound_holds"] for x in checked) if checked else None,
            "diverged_runs": sum(x["status"] == "diverged" for c in res.data["cells"] for x in c["runs"])}


def stalled(run: dict, s: dict) -> bool:
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
        values = [med[b] for b in betas]
        grid.append([None if v is None or not math.isfinite(v) else math.log10(max(v, 1e-300))
                     for v in values])
    return {"axis": axis, "x": x, "betas": betas, "log_ratio": grid, "stall": math.log10(s["stall"])}


def phase_figure(res: Result):
    """The figure of both phase diagrams (:func:`phase_diagram` along ``d_qk`` and ``size``)."""
    return plot_phase_diagram(res.settings, {axis: phase_diagram(res, axis) for axis in ("d_qk", "size")})


def _stall_row(name: str, regime: dict, cell: dict, s: dict) -> dict:
    b0 = [x for x in cell["runs"] if x["beta"] == 0]
    b1 = [x for x in cell["runs"] if x["beta"] == max(s["betas"])]
    st0, st1 = [stalled(x, s) for x in b0], [stalled(x, s) for x in b1]
    r0 = [x["ratio"] for x in b0 if x["ratio"] is not None]
    where = (f"{name} regime (N n = {cell['N'] * cell['n']}, d = {cell['d']}, d_QK = {cell['d_qk']}, "
             f"scale {cell['scale']})")
    measurement = (f"{where}: beta = 0 final / initial loss {min(r0):.2g} to {max(r0):.2g}, "
                   f"{sum(st0)} of {len(st0)} seeds stall; beta = {max(s['betas']):g}: "
                   f"{sum(st1)} of {len(st1)} stall") if r0 else f"{where}: every beta = 0 run diverged"
    if all(st1):
        grade, why = VERDICTS[3], "every residual run stalls too: the regime does not train at all"
    elif not any(st0) and not regime.get("stall_possible", True):
        grade, why = VERDICTS[3], regime.get("why", "the regime cannot show a stall")
    else:
        grade, why = verdict(all(st0) and not any(st1), any(st0)), ""
    return dict(claim=f"Without the residual, training stalls ({name} regime).",
                criterion=f"a run stalls when its loss after {s['steps']} steps is above "
                          f"{s['stall']:g} x its start and the second half of the run lowered it by less "
                          f"than {1 - s['plateau']:.0%}; reproduced: every beta = 0 seed stalls and no "
                          f"beta = {max(s['betas']):g} seed does; partly: some beta = 0 seeds stall; "
                          "inconclusive: the residual runs stall too, or a regime in which the output "
                          "layer alone can fit shows no stall" + (f" ({why})" if why else ""),
                measurement=measurement, verdict=grade, figure="fig-sim-regimes",
                evidence=f"{sum(st0)} of {len(st0)} beta = 0 seeds stall, {sum(st1)} of {len(st1)} "
                         f"beta = {max(s['betas']):g}" + (f"; {why}" if why else ""))


def _simulations_claims(res: Result) -> list[dict]:
    s, regimes = res.settings, _sim_regime_cells(res)
    rows = []
    parts, mono, faster = [], [], []
    for r in s["regimes"]:
        rate = _sim_table(regimes[r["name"]], "rate")
        betas = sorted(rate)
        vals = [float(rate[b] or 0.0) for b in betas]
        mono.append(all(a < b for a, b in zip(vals, vals[1:])))
        faster.append(vals[-1] > vals[0])
        parts.append(f"{r['name']}: " + ", ".join(f"{b:g}: {v:.2g}" for b, v in zip(betas, vals)))
    rows.append(dict(
        claim="The stronger the residual, the faster gradient descent descends.",
        criterion="in every regime, the median measured linear rate (to the float floor) increases "
                  "with beta at every step of the sweep (partly: the largest beta is faster than "
                  "beta = 0 in every regime, or the rate is monotone in some regimes)",
        measurement="median rate per step by beta; " + "; ".join(parts),
        verdict=verdict(all(mono), all(faster) or any(mono)), figure="fig-sim-regimes",
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
            verdict=VERDICTS[4] if all(holds) else verdict(False, any(holds)), figure="fig-sim-regimes",
            evidence=f"holds at every step in {sum(holds)} of {len(holds)} runs, loose by at least "
                     f"{min(slack):.2g}x"))
    return rows


def _shapes(s: dict) -> list[Shape]:
    return [Shape(f"simulations ({r['name']})", ModelConfig(d=s["d"], d_qk=r["d_qk"], m=s["m"], c=1,
                  activation=s["activation"], scale=r["scale"]), r["N"], s["n"]) for r in s["regimes"]]


def _report(res: Result) -> dict:
    s = res.settings
    regimes = "; ".join(f"{r['name']}: N = {r['N']}, d_QK = {r['d_qk']}, scale {r['scale']}"
                        for r in s["regimes"])
    spread_rows = []
    for c in res.data["cells"]:
        if c["regime"] is None:
            continue
        for b in (0.0, max(s["betas"])):
            v = [r["ratio"] for r in c["runs"] if r["beta"] == b and r["ratio"] is not None]
            spread_rows.append({"configuration": f"{c['regime']}, beta = {b:g}",
                                "measurement": "loss ratio Phi_T / Phi_0", "median": float(np.median(v)),
                                "min": min(v), "max": max(v), "seeds": len(v), "format": "{:.2g}"})
    return {
        "settings": {"book": f"Gaussian X, Y; n = {s['n']}, d = {s['d']}, m = {s['m']}, {s['activation']}; "
                             f"{regimes}; beta in {s['betas']}; mu = {s['eta']:g} / (N n); "
                             f"{s['steps']} steps; {len(s['seeds'])} seeds",
                     "why": "one regime where the output layer alone can fit, two where a stall can happen"},
        "spread": spread_rows,
        "runs": sum(len(c["runs"]) for c in res.data["cells"]),
        "deviations": [{"what": "simulation regimes", "paper": "not stated",
                        "book": ", ".join(r["name"] for r in s["regimes"]) + "; attention scale 1/d_QK in "
                                "the near-uniform one",
                        "why": "a stall cannot appear where the output layer alone can fit"}],
    }


_WIDE_REGIME = dict(name="wide", N=4, d_qk=32, scale="1/sqrt(d_qk)", stall_possible=False,
                    why="N n <= d: the output layer alone can fit the targets while H_t keeps full row rank")
_SIM = dict(N=4, n=4, d=32, m=32, d_qk=32, scale="1/sqrt(d_qk)", activation="gelu",
            betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta=0.032, floor=1e-20, stall=0.01, plateau=0.9,
            dtype="float64", sizes=[1, 2, 4, 8, 16, 32], d_qks=[1, 4, 16, 64, 256, 1024],
            regimes=[_WIDE_REGIME, dict(name="narrow", N=32, d_qk=32, scale="1/sqrt(d_qk)"),
                     dict(name="uniform attention", N=4, d_qk=1024, scale="1/d_qk")])

EXPERIMENT = Experiment(
    "simulations", "Simulations: wide, narrow and near-uniform-attention regimes, beta x d_QK and N n / d",
    "book/simulations.md",
    {"book": dict(_SIM, seeds=[0, 1, 2, 3, 4], steps=300),
     "paper": dict(_SIM, seeds=list(range(10)), steps=600, sizes=[1, 2, 4, 8, 16, 32, 64],
                   d_qks=[1, 4, 16, 64, 256, 1024, 4096]),
     "smoke": dict(_SIM, betas=[0.0, 1.0], seeds=[0], steps=20, sizes=[4, 16], d_qks=[1, 256],
                   regimes=[_WIDE_REGIME, dict(name="narrow", N=16, d_qk=32, scale="1/sqrt(d_qk)"),
                            dict(name="uniform attention", N=4, d_qk=256, scale="1/d_qk")])},
    _run_simulations, _simulations_numbers, _simulations_claims, plot_simulations,
    shapes=_shapes, report=_report,
    paper="synthetic data, several beta; sizes, steps and step sizes not stated")
