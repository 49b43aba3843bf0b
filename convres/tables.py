"""The chapters' tables of one experiment's summary (*Simulations*, *Jena*, *SST-2*: a ``Styler`` by
:func:`convres.show.table`), the reproduction report's thumbnails and the build's versions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from . import plotting
from .experiments import Result
from .experiments.simulations import SCALE_TEX
from .experiments.sst2 import ARM_KINDS
from .protocol import CHECKS, CLAIMS
from .show import table

__all__ = ["design_checks_table", "place", "step_sizes_table", "reruns_table", "regime_speeds",
           "speeds_table", "escape_law_table", "local_slopes_table", "half_step_table",
           "probe_table", "arms_table", "estimates_table", "init_table", "stable_steps_table",
           "per_model_table", "sensitivity_table", "accuracy_table", "thumbnails", "environment"]


# --- the chapters' tables of one experiment's summary ----------------------------------------

_OPS = {"<": "<", "<=": "≤", ">=": "≥", ">": ">"}


def design_checks_table(checks: Sequence[Mapping]):
    """An experiment's design checks (protocol, section 3): what each counts, its value, the
    threshold it must meet and whether it passed."""
    return table([{"check": c["name"], "what it counts": CHECKS[c["name"]].tex, "value": c["value"],
                   "passes if": f"{_OPS[CHECKS[c['name']].op]} {c['threshold']:g}",
                   "passed": bool(c["passed"])} for c in checks], {"value": "{:.4g}"})


def place(where: str) -> str:
    """A run's place in *Simulations* in TeX: ``"escape, scale 1/d_qk, d_QK = 16"`` reads
    ``escape, scale $1/d_{QK}$, $d_{QK} = 16$``; a regime's name is returned as it is."""
    if not where.startswith("escape, "):
        return where
    _, scale, d_qk = where.split(", ")
    return f"escape, scale {SCALE_TEX[scale[6:]]}, $d_{{QK}} {d_qk[5:]}$"


def step_sizes_table(step_sizes: Sequence[Mapping]):
    """*Simulations*: the chosen step of every arm, one row per place and a column per beta, with
    the best probe step and the largest stable one in brackets."""
    cells: dict = {}
    for t in step_sizes:
        where, beta = t["arm"].rsplit(", beta = ", 1)
        cells.setdefault(where, {"arm": place(where)})[f"β = {beta}"] = \
            f"{t['chosen']:g} ({t['best']:g}, {t['largest_stable']:g})"
    return table(list(cells.values()))


def reruns_table(reruns: Sequence[Mapping]):
    """*Simulations*: the arms run again at a smaller step (the protocol's rerun), with the seeds
    that diverged at the tuned step."""
    return table([{"where": place(x["where"]), "arm": f"{x['arm'][0]}, β = {x['beta']:g}",
                   "tuned η": x["eta"],
                   "diverged seeds": ", ".join(map(str, x["diverged_seeds"]))
                   or "none (follows the arm above)",
                   "rerun at η": ", ".join(f"{e:g}" for e in x["rerun_eta"])} for x in reruns],
                 {"tuned η": "{:g}"})


def regime_speeds(per_regime: Sequence[Mapping]) -> list[dict]:
    """*Simulations*: one row per regime, step protocol and beta with the median speed measures."""
    return [{"regime": r["regime"], "step": protocol, "beta": b["beta"], "eta": b["eta"],
             "mean log-loss": b["median_mean_log_loss"], "steps to 1e-2": b["median_steps_0.01"],
             "steps to 1e-6": b["median_steps_1e-06"], "censored": b["censored"],
             "diverged": b["diverged"]}
            for r in per_regime for protocol in ("tuned", "common") for b in r[protocol]]


def speeds_table(rows: Sequence[Mapping]):
    """The rows of :func:`regime_speeds` as a table."""
    steps = "{:,.0f}"
    return table([{"regime": r["regime"], "step size": "own (tuned)" if r["step"] == "tuned"
                   else r["step"], "$\\beta$": r["beta"], "$\\eta$": r["eta"],
                   "mean log-loss (decades)": r["mean log-loss"],
                   "steps to $10^{-2}$": r["steps to 1e-2"], "to $10^{-6}$": r["steps to 1e-6"],
                   "censored at $10^{-6}$": r["censored"], "diverged": r["diverged"]} for r in rows],
                 {"$\\beta$": "{:g}", "$\\eta$": "{:g}", "mean log-loss (decades)": "{:.2f}",
                  "steps to $10^{-2}$": steps, "to $10^{-6}$": steps})


def escape_law_table(laws: Sequence[Mapping]):
    """*Simulations*: the escape time of every arm and ``d_QK`` (median, quartiles, ``mu t``)."""
    cols = ("d_qk", "eta", "median", "q25", "q75", "median_mu_t", "censored", "diverged")
    return table([{"attention scale": SCALE_TEX[law["scale"]], "$\\beta$": law["beta"],
                   "step": "half" if law["protocol"] == "half" else "own", "$d_{QK}$": q,
                   "$\\eta$": ", ".join(f"{e:g}" for e in eta), "median escape": m,
                   "quartiles": f"{lo:,.0f} to {hi:,.0f}", "median $\\mu t$": mt,
                   "censored": c, "diverged": dv}
                  for law in laws for q, eta, m, lo, hi, mt, c, dv in zip(*(law[col] for col in cols))],
                 {"$\\beta$": "{:g}", "median escape": "{:,.0f} steps", "median $\\mu t$": "{:.3g}"})


def local_slopes_table(fit: Mapping):
    """*Simulations*: the escape fit's local slopes between neighbouring ``d_QK`` with intervals."""
    return table([{"$d_{QK}$": f"{x['d_lo']:,} to {x['d_hi']:,}", "local slope": x["slope"],
                   "95% interval": f"{x['ci'][0]:.2f} to {x['ci'][1]:.2f}"}
                  for x in fit["local_slopes"]], {"local slope": "{:.2f}"})


def half_step_table(fit: Mapping):
    """*Simulations*: ``log2`` of the escape at half the step over the escape at the tuned step."""
    ratio = "$\\log_2 T(\\eta/2) / T(\\eta)$"
    return table([{"$d_{QK}$": f"{x['d_qk']:,}", ratio: x["log2_ratio"],
                   "95% interval": f"{x['ci'][0]:.2f} to {x['ci'][1]:.2f}"}
                  for x in fit["half_step"]], {ratio: "{:.2f}"})


def probe_table(step_sizes: Sequence[Mapping]):
    """*Jena*: every arm's grid of steps, its probe scores, the largest stable and the chosen step."""
    def scores(t):
        return ", ".join("diverged" if v is None or not math.isfinite(v) else f"{v:.3f}"
                         for v in t["scores"])

    return table([{"arm": f"$\\beta = {t['beta']:g}$",
                   "grid of $\\eta$": ", ".join(f"{e:g}" for e in t["grid"]),
                   "probe score (mean log-loss)": scores(t), "largest stable": t["largest_stable"],
                   "chosen $\\eta$": t["chosen"], "capped": bool(t["capped"])} for t in step_sizes],
                 {"chosen $\\eta$": "{:g}", "largest stable": "{:g}"})


def arms_table(per_beta: Sequence[Mapping]):
    """*Jena*: per beta, the medians over the seeds of the speed measures and the final MSE."""
    return table([{"$\\beta$": f"{r['beta']:g}", "$\\eta$": ", ".join(f"{e:g}" for e in r["eta"]),
                   "mean log-loss (median)": r["mean_log_loss"]["median"],
                   "training MSE at the end (median)": r["train_mse"]["median"],
                   "steps to the level (median)": r["steps_to_level"]["median"],
                   "never reached": f"{r['censored']} of {r['train_mse']['count']}",
                   "diverged": r["diverged"]} for r in per_beta],
                 {"mean log-loss (median)": "{:.3f}", "training MSE at the end (median)": "{:.4f}",
                  "steps to the level (median)": "{:.0f}"})


def estimates_table(estimates: Mapping[str, Mapping]):
    """Every claim's estimate under each measure and step protocol, with its grade."""
    return table([{"claim": e["claim"], "measure": e["measure"], "step": e["protocol"],
                   "effect": e["effect"],
                   "95% interval": "" if e["ci"] is None else f"{e['ci'][0]:.3f} to {e['ci'][1]:.3f}",
                   "margin": CLAIMS[e["claim"]].margin, "grade": e["verdict"]}
                  for e in estimates.values()], {"effect": "{:.3f}", "margin": "{:g}"})


def _spread(v: Mapping, f: str = "{:.3f}") -> str:
    return f"{f.format(v['median'])} ({f.format(v['min'])} to {f.format(v['max'])})"


def _arm_order(row: Mapping) -> tuple:
    return row["L"], ARM_KINDS.index(row["arm"])


def init_table(rows: Sequence[Mapping]):
    """*SST-2*: every arm at its start, relative to the residual arm of its depth."""
    names = {"L": "$L$", "arm": "arm", "params": "parameters",
             "std_ratio": "std of $F$ / residual's", "within_sentence": "within",
             "sigma_ratio": "$\\sigma_{\\min}/\\sigma_{\\max}$ / residual's"}
    return table([{names[c]: r[c] for c in names} for r in sorted(rows, key=_arm_order)],
                 {names[c]: "{:.2g}" for c in ("std_ratio", "within_sentence", "sigma_ratio")})


def stable_steps_table(step_sizes: Sequence[Mapping]):
    """*SST-2*: every arm's stable steps on its grid, the largest one and the chosen one."""
    return table([{"arm": t["arm"],
                   "stable steps": ", ".join(f"{g:g}" for g, ok in zip(t["grid"], t["stable"]) if ok),
                   "largest stable": t["largest_stable"], "chosen": t["chosen"],
                   "bracketed": t["bracketed"]} for t in step_sizes],
                 {"largest stable": "{:g}", "chosen": "{:g}"})


def per_model_table(summary: Mapping, protocol: str = "tuned"):
    """*SST-2*: per depth and arm, the final MSE and mean log-loss over the seeds (median, range)."""
    ms = sorted((m for m in summary["per_model"] if m["protocol"] == protocol), key=_arm_order)
    return table([{"$L$": m["L"], "arm": m["arm"], "$\\eta$": m["eta"],
                   "final MSE": _spread(m["final_mse"]), "mean log-loss": _spread(m["mean_log_loss"]),
                   "diverged": m["diverged"]} for m in ms], {"$\\eta$": "{:g}"})


def sensitivity_table(rows: Sequence[Mapping]):
    """The claims with their grade at the common step and under the other measure beside it."""
    return table([{"": c["id"], "claim (paper)": c["tex"],
                   "effect (95% interval)": f"{c['effect']:+.3f} ({c['ci'][0]:+.3f} to {c['ci'][1]:+.3f})",
                   "margin": c["margin"], "units": c["units"], "grade": c["verdict"],
                   "at the common step": next(x["verdict"] for x in c["sensitivity"]
                                              if x["protocol"] == "common"),
                   "other measure": next(f"{x['verdict']} ({x['tex']})" for x in c["sensitivity"]
                                         if x["protocol"] == "tuned")} for c in rows],
                 {"margin": "{:+.3g}"})


def accuracy_table(heldout: Sequence[Mapping]):
    """*SST-2*: held-out accuracy of every model, against the floor and the bag of words (points)."""
    def ci(d):
        lo, hi = (100 * x for x in d["ci"])
        return f"{100 * d['effect']:+.1f} ({lo:+.1f} to {hi:+.1f})"

    return table([{"model": h["name"], "accuracy": h["accuracy"]["median"],
                   "min to max": "" if h["accuracy"]["count"] < 2 else
                   f"{h['accuracy']['min']:.1%} to {h['accuracy']['max']:.1%}",
                   "vs floor, points (95%)": ci(h["vs_floor"]), "vs bag of words": ci(h["vs_bow"])}
                  for h in heldout], {"accuracy": "{:.1%}"})


def thumbnails(results: Mapping[str, Result]) -> dict[str, bytes]:
    """The reproduction report's thumbnails: each claim's figure (by its name in the chapter) as a
    small PNG, from the book's results of *Simulations*, *Jena* and *SST-2*."""
    sim, k = results["simulations"], results["simulations"].summary()
    figures = {"fig-sim-regimes": plotting.plot_simulations(sim),
               "fig-sim-escape": plotting.plot_escape_law(k["escape_law"], k["escape_fit"]),
               "fig-sim-mechanism": plotting.plot_mechanism(sim),
               "fig-jena-loss": plotting.plot_jena(results["jena"]),
               "fig-sst2-final": plotting.plot_sst2_summary(results["sst2"]),
               "fig-sst2-loss": plotting.plot_sst2(results["sst2"])}
    return {name: plotting.thumbnail_png(fig) for name, fig in figures.items()}


def environment() -> str:
    """The versions this book was built with (Python, torch, numpy, convres and the book's tools),
    one ``name  version`` a line, then when and on what it was built."""
    import datetime
    import importlib.metadata as md
    import platform

    import numpy
    import torch

    from ._version import __version__

    rows = [("Python", platform.python_version()), ("torch", torch.__version__),
            ("numpy", numpy.__version__), ("convres", __version__)]
    rows += [(name, md.version(name))
             for name in ("matplotlib", "ipywidgets", "jupyter-book", "sphinx", "myst-nb")]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {version}" for name, version in rows) + (
        f"\n\nbuilt {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on "
        f"{platform.system()} {platform.machine()}, {torch.get_num_threads()} torch threads")
