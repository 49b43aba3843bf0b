"""The chapters' tables (a ``Styler`` by :func:`convres.show.table`), the report's thumbnails and
the build's versions."""

from __future__ import annotations

import datetime
import functools
import importlib.metadata as md
import math
import operator
import platform
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from . import plotting
from ._version import __version__
from .committed import ROOT
from .experiments import Result
from .experiments.simulations import SCALE_TEX
from .experiments.sst2_arms import ARM_KINDS
from .gd import History
from .protocol import CHECKS, CLAIMS
from .report import effect_text
from .scope import THEOREM_NAMES
from .show import sci, table

_OPS = {"<": "<", "<=": "≤", ">=": "≥", ">": ">"}


def records(columns: Mapping[str, Any], *, order: Callable | None = None) -> Callable:
    """A table builder: ``columns`` maps a header to a key (``"a.b"``: ``row["a"]["b"]``), a function
    of the row, or either paired with a format (:func:`convres.show.table`)."""
    def cell(row, how):
        how = how[0] if isinstance(how, tuple) else how
        return how(row) if callable(how) else functools.reduce(operator.getitem, how.split("."), row)

    def build(rows: Iterable[Mapping]):
        ordered = sorted(rows, key=order) if order else rows
        return table([{h: cell(r, how) for h, how in columns.items()} for r in ordered],
                     {h: how[1] for h, how in columns.items() if isinstance(how, tuple)})
    return build


def _etas(values) -> str:
    return ", ".join(f"{e:g}" for e in values)


def _to(pair, spec: str = ".2f") -> str:
    lo, hi = pair
    return f"{lo:{spec}} to {hi:{spec}}"


#: An experiment's design checks (protocol, section 3): value, threshold, passed.
design_checks_table = records({
    "check": "name", "what it counts": lambda c: CHECKS[c["name"]].tex, "value": ("value", "{:.4g}"),
    "passes if": lambda c: f"{_OPS[CHECKS[c['name']].op]} {c['threshold']:g}",
    "passed": lambda c: bool(c["passed"])})


def place(where: str) -> str:
    """A place of *Simulations* in TeX (``escape, scale 1/d_qk, d_QK = 16``); a regime as it is."""
    if not where.startswith("escape, "):
        return where
    _, scale, d_qk = where.split(", ")
    return f"escape, scale {SCALE_TEX[scale[6:]]}, $d_{{QK}} {d_qk[5:]}$"


def step_sizes_table(step_sizes: Sequence[Mapping]):
    """*Simulations*: the chosen step per place and beta (best probe step, largest stable)."""
    cells: dict = {}
    for t in step_sizes:
        where, beta = t["arm"].rsplit(", beta = ", 1)
        cells.setdefault(where, {"arm": place(where)})[f"β = {beta}"] = \
            f"{t['chosen']:g} ({t['best']:g}, {t['largest_stable']:g})"
    return table(list(cells.values()))


#: *Simulations*: the arms rerun at a smaller step, with the seeds that diverged.
reruns_table = records({
    "where": lambda x: place(x["where"]), "arm": lambda x: f"{x['arm'][0]}, β = {x['beta']:g}",
    "tuned η": ("eta", "{:g}"),
    "diverged seeds": lambda x: ", ".join(map(str, x["diverged_seeds"])) or "none (follows the arm above)",
    "rerun at η": lambda x: _etas(x["rerun_eta"])})


def regime_speeds(per_regime: Sequence[Mapping]) -> list[dict]:
    """*Simulations*: the median speed measures per regime, step protocol and beta."""
    return [{"regime": r["regime"], "step": protocol, "beta": b["beta"], "eta": b["eta"],
             "mean log-loss": b["median_mean_log_loss"], "steps to 1e-2": b["median_steps_0.01"],
             "steps to 1e-6": b["median_steps_1e-06"], "censored": b["censored"],
             "diverged": b["diverged"]}
            for r in per_regime for protocol in ("tuned", "common") for b in r[protocol]]


#: :func:`regime_speeds` as a table.
speeds_table = records({
    "regime": "regime", "step size": lambda r: "own (tuned)" if r["step"] == "tuned" else r["step"],
    "$\\beta$": ("beta", "{:g}"), "$\\eta$": ("eta", "{:g}"),
    "mean log-loss (decades)": ("mean log-loss", "{:.2f}"),
    "steps to $10^{-2}$": ("steps to 1e-2", "{:,.0f}"), "to $10^{-6}$": ("steps to 1e-6", "{:,.0f}"),
    "censored at $10^{-6}$": "censored", "diverged": "diverged"})


def escape_law_table(laws: Sequence[Mapping]):
    """*Simulations*: the escape time per arm and ``d_QK`` (median, quartiles, ``mu t``)."""
    cols = ("d_qk", "eta", "median", "q25", "q75", "median_mu_t", "censored", "diverged")
    return table([{"attention scale": SCALE_TEX[law["scale"]], "$\\beta$": law["beta"],
                   "step": "half" if law["protocol"] == "half" else "own", "$d_{QK}$": q,
                   "$\\eta$": _etas(eta), "median escape": m,
                   "quartiles": f"{lo:,.0f} to {hi:,.0f}", "median $\\mu t$": mt,
                   "censored": c, "diverged": dv}
                  for law in laws for q, eta, m, lo, hi, mt, c, dv in zip(*(law[col] for col in cols))],
                 {"$\\beta$": "{:g}", "median escape": "{:,.0f} steps", "median $\\mu t$": "{:.3g}"})


#: *Simulations*: the escape fit's local slopes between neighbouring ``d_QK``.
local_slopes_table = records({"$d_{QK}$": lambda x: f"{x['d_lo']:,} to {x['d_hi']:,}",
                              "local slope": ("slope", "{:.2f}"),
                              "95% interval": lambda x: _to(x["ci"])})

#: *Simulations*: ``log2`` of the escape at half the step over that at the tuned step.
half_step_table = records({"$d_{QK}$": lambda x: f"{x['d_qk']:,}",
                           "$\\log_2 T(\\eta/2) / T(\\eta)$": ("log2_ratio", "{:.2f}"),
                           "95% interval": lambda x: _to(x["ci"])})

#: *Jena*: every arm's grid of steps, probe scores, largest stable and chosen step.
probe_table = records({
    "arm": lambda t: f"$\\beta = {t['beta']:g}$", "grid of $\\eta$": lambda t: _etas(t["grid"]),
    "probe score (mean log-loss)": lambda t: ", ".join(
        "diverged" if v is None or not math.isfinite(v) else f"{v:.3f}" for v in t["scores"]),
    "largest stable": ("largest_stable", "{:g}"), "chosen $\\eta$": ("chosen", "{:g}"),
    "capped": lambda t: bool(t["capped"])})

#: *Jena*: per beta, the medians over the seeds of the speed measures and the final MSE.
arms_table = records({
    "$\\beta$": lambda r: f"{r['beta']:g}", "$\\eta$": lambda r: _etas(r["eta"]),
    "mean log-loss (median)": ("mean_log_loss.median", "{:.3f}"),
    "training MSE at the end (median)": ("train_mse.median", "{:.4f}"),
    "steps to the level (median)": ("steps_to_level.median", "{:.0f}"),
    "never reached": lambda r: f"{r['censored']} of {r['train_mse']['count']}", "diverged": "diverged"})

#: Every claim's estimate under each measure and step protocol, with its grade.
estimates_table = records({
    "claim": "claim", "measure": "measure", "step": "protocol", "effect": ("effect", "{:.3f}"),
    "95% interval": lambda e: "" if e["ci"] is None else _to(e["ci"], ".3f"),
    "margin": (lambda e: CLAIMS[e["claim"]].margin, "{:g}"), "grade": "verdict"})


def _spread(v: Mapping, f: str = "{:.3f}") -> str:
    return f"{f.format(v['median'])} ({f.format(v['min'])} to {f.format(v['max'])})"


def _arm_order(row: Mapping) -> tuple:
    return row["L"], ARM_KINDS.index(row["arm"])


#: *SST-2*: every arm at its start, relative to the residual arm of its depth.
init_table = records({"$L$": "L", "arm": "arm", "parameters": "params",
                      "std of $F$ / residual's": ("std_ratio", "{:.2g}"),
                      "within": ("within_sentence", "{:.2g}"),
                      "$\\sigma_{\\min}/\\sigma_{\\max}$ / residual's": ("sigma_ratio", "{:.2g}")},
                     order=_arm_order)

#: *SST-2*: every arm's stable steps, the largest and the chosen one.
stable_steps_table = records({
    "arm": "arm", "stable steps": lambda t: _etas(g for g, ok in zip(t["grid"], t["stable"]) if ok),
    "largest stable": ("largest_stable", "{:g}"), "chosen": ("chosen", "{:g}"), "bracketed": "bracketed"})

_per_model = records({"$L$": "L", "arm": "arm", "$\\eta$": ("eta", "{:g}"),
                      "final MSE": lambda m: _spread(m["final_mse"]),
                      "mean log-loss": lambda m: _spread(m["mean_log_loss"]), "diverged": "diverged"},
                     order=_arm_order)


def per_model_table(summary: Mapping):
    """*SST-2*: per depth and arm, final MSE and mean log-loss (median and range)."""
    return _per_model(m for m in summary["per_model"] if m["protocol"] == "tuned")


def sensitivity_table(rows: Sequence[Mapping], graded: Mapping[str, Mapping] | None = None):
    """The claims' grades, at the common step and under the other measure; ``graded`` (id -> row):
    the claims graded with a precondition, ``rows`` without it (in parentheses where they differ)."""
    def grade(g: Mapping, x: Mapping) -> str:
        return g["verdict"] + (f" ({x['verdict']})" if g["verdict"] != x["verdict"] else "")

    def alt(c: Mapping, protocol: str) -> tuple[str, str]:
        x = next(x for x in c["sensitivity"] if x["protocol"] == protocol)
        g = next(y for y in graded[c["id"]]["sensitivity"] if y["measure"] == x["measure"]) if graded else x
        return x["tex"] + "".join(f" at $L = {L}$" for L in g.get("depths", ())), grade(g, x)

    return table([{"": c["id"], "claim (paper)": c["tex"],
                   "effect (95% interval)": f"{c['effect']:+.3f} ({c['ci'][0]:+.3f} to {c['ci'][1]:+.3f})",
                   "margin": c["margin"], "units": c["units"],
                   "grade": grade(graded[c["id"]], c) if graded else c["verdict"],
                   "at the common step": alt(c, "common")[1],
                   "other measure": "{}: {}".format(*alt(c, "tuned"))} for c in rows], {"margin": "{:+.3g}"})


def _points(d: Mapping) -> str:
    lo, hi = (100 * x for x in d["ci"])
    return f"{100 * d['effect']:+.1f} ({lo:+.1f} to {hi:+.1f})"


#: *SST-2*: held-out accuracy against the floor and the bag of words (points).
accuracy_table = records({
    "model": "name", "accuracy": ("accuracy.median", "{:.1%}"),
    "min to max": lambda h: "" if h["accuracy"]["count"] < 2 else
    _to((h["accuracy"]["min"], h["accuracy"]["max"]), ".1%"),
    "vs floor, points (95%)": lambda h: _points(h["vs_floor"]),
    "vs bag of words": lambda h: _points(h["vs_bow"])})


def thumbnails(results: Mapping[str, Result]) -> dict[str, bytes]:
    """The reproduction report's thumbnails (small PNGs) by figure label, from the book's results."""
    sim, k = results["simulations"], results["simulations"].summary()
    figures = {"fig-sim-regimes": plotting.plot_simulations(sim),
               "fig-sim-escape": plotting.plot_escape_law(k["escape_law"], k["escape_fit"]),
               "fig-sim-mechanism": plotting.plot_mechanism(sim),
               "fig-jena-loss": plotting.plot_jena(results["jena"]),
               "fig-sst2-final": plotting.plot_sst2_summary(results["sst2"]),
               "fig-sst2-loss": plotting.plot_sst2(results["sst2"])}
    return {name: plotting.thumbnail_png(fig) for name, fig in figures.items()}


def environment() -> str:
    """The versions this book was built with, one ``name  version`` a line, then when and where."""
    rows = [("Python", platform.python_version()), ("torch", torch.__version__),
            ("numpy", np.__version__), ("convres", __version__)]
    rows += [(name, md.version(name))
             for name in ("matplotlib", "jupyter-book", "sphinx", "myst-nb")]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {version}" for name, version in rows) + (
        f"\n\nbuilt {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on "
        f"{platform.system()} {platform.machine()}, {torch.get_num_threads()} torch threads")


#: *Width*: per shape ``(N, n)`` the proven ``d_min`` and its certificate numbers.
width_shapes_table = records({
    "$N$": "N", "$n$": "n", "$d_{\\min}$": "d_min", "ratio at $d_{\\min}$": ("ratio", "{:.4f}"),
    "ratio at $d_{\\min} - 1$": ("ratio_below", "{:.4f}"), "$\\underline\\sigma_0$": "sigma_0",
    "$\\bar R_0$": "R0", "$\\mu\\alpha$": "mu_alpha", "events $K$": "K"})

#: *Width*: fresh seeds at a fraction of ``d_min``: how many certified, their ratios.
width_seeds_table = records({
    "$N$": "N", "$n$": "n", "$d/d_{\\min}$": ("fraction", "{:g}"), "$d$": "d",
    "certified / seeds": lambda r: f"{r['certified']} / {r['seeds']}",
    "median ratio": (lambda r: float(np.median(r["ratios"])), "{:.2f}"),
    "largest ratio": (lambda r: max(r["ratios"]), "{:.2f}")})


def _d_min_at(N, n) -> str:
    return f"$d_{{\\min}}$ at $(N, n) = ({N}, {n})$"


def width_delta_table(by_delta: Sequence[Mapping]):
    """*Width*: ``d_min`` per confidence ``delta`` (rows) and shape (columns)."""
    deltas = sorted({r["delta"] for r in by_delta}, reverse=True)
    shapes = sorted({(r["N"], r["n"]) for r in by_delta})
    d_min = {(r["delta"], r["N"], r["n"]): r["d_min"] for r in by_delta}
    return table([{"": f"$\\delta = {v:g}$", **{_d_min_at(*s): d_min[(v, *s)] for s in shapes}}
                  for v in deltas])


def width_regimes_table(regimes: Sequence[Mapping]):
    """*Width*: ``d_min`` per regime (a setting changed from the book's) and shape."""
    names = {"beta": "$\\beta$"}
    out: dict = {}
    for r in sorted(regimes, key=lambda r: (r["N"], r["n"])):
        regime = ", ".join(f"{names.get(k, k.replace('_', ' '))} = {v}" for k, v in r["regime"].items())
        out.setdefault(regime, {"regime": regime})[_d_min_at(r["N"], r["n"])] = r["d_min"]
    return table(sorted(out.values(), key=lambda row: row["regime"]))


def variants_table(variants: Mapping[str, Mapping]):
    """*FFN*: per regime, the FFN ratio as it stands and the certified variant's seeds."""
    rows = []
    for name, e in variants.items():
        as_is = [r["ffn"][1] for r in e["as_it_stands"]]
        ratios, rates = [v["ratio"] for v in e["seeds"]], [v["mu_alpha"] for v in e["seeds"]]
        rows.append({"regime": name, "$Nn/d$": f"{e['regime']['N'] * 4} / 32",
                     "as it stands: FFN ratio": _to((min(as_is), max(as_is)), ".3g")
                     if None not in as_is else "none: $m < Nn$",
                     "variant: certified":
                         f"{sum(bool(v['certified']) for v in e['seeds'])} of {len(e['seeds'])} seeds",
                     "variant: ratio": _to((min(ratios), max(ratios))),
                     "variant: $\\mu\\alpha'$": f"{sci(min(rates))} to {sci(max(rates))}"})
    return table(rows)


def ffn_hypotheses_table(runs: Mapping[str, Mapping]):
    """*FFN*: per run (column) each hypothesis of the FFN theorem, its value and verdict (rows)."""
    return table(pd.DataFrame({name: {h["tex"]: f"{h['value']:.3g} ({'holds' if h['holds'] else 'fails'})"
                                      for h in o["hypotheses"].values()} for name, o in runs.items()}),
                 index=True)


def ffn_grid_table(grid):
    """*FFN*: the certificate ratio per ``W_1`` gain (rows) and FFN width ``m`` (columns)."""
    shown = grid.rename(index=lambda a: f"$W_1$ gain {a:g}", columns=lambda m: f"$m = {m}$")
    return table(shown.rename_axis(index=None, columns=None), dict.fromkeys(shown.columns, "{:.3f}"),
                 index=True)


def variant_betas_table(variants: Mapping[str, Mapping]):
    """*FFN*: per regime and residual ``beta``, the seeds certified and their ratios."""
    rows = []
    for name in ("wide", "uniform attention"):
        for b in variants[name]["betas"]:
            ratios = [x["ratio"] for x in b["seeds"]]
            rows.append({"regime": name, "$\\beta$": b["beta"],
                         "certified": sum(x["certified"] for x in b["seeds"]),
                         "ratios": _to((min(ratios), max(ratios)), ".3g")})
    return table(rows, {"$\\beta$": "{:g}"})


def scope_verdicts_table(scope: Sequence[Mapping]):
    """:func:`convres.scope.certified_scope` per model and theorem: certified, or what fails."""
    out: dict = {}
    for r in scope:
        out.setdefault(r["experiment"], {})[THEOREM_NAMES[r["theorem"]]] = \
            "certified" if r["certified"] else r["failing_hypothesis"]
    columns = sorted(THEOREM_NAMES.values())
    return table([{"": name, **{c: row.get(c) for c in columns}} for name, row in out.items()])


def lazy_table(lazy: Mapping):
    """:func:`convres.theory.lazy_report` per weight block: shares of ``K_0`` and displacement."""
    blocks = lazy["tangent_kernel"]["blocks"]
    return table([{"block": f"${name.split('.')[-1]}$",
                   "share of $\\lambda_{\\min}(K_0)$": blocks[name.split(".")[-1]]["lambda_min_share"],
                   "share of $\\operatorname{tr} K_0$": blocks[name.split(".")[-1]]["trace_share"],
                   "moved $\\|W_T - W_0\\|_F$": lazy["displacement"][name],
                   "share of $\\|\\theta_T - \\theta_0\\|^2$": lazy["displacement_share"][name]}
                  for name in lazy["displacement"]])


def theorem_chapters(folder: str | Path = ROOT / "book") -> list[str]:
    """The chapters in ``folder`` (the book's, by default) that state a ``{prf:theorem}``, by name."""
    return sorted(p.stem for p in Path(folder).glob("*.md")
                  for line in p.read_text(encoding="utf-8").splitlines()
                  if re.fullmatch(r"`{3,}\{prf:theorem\}.*", line))


def heldout_table(heldout: Sequence[Mapping], baselines: Mapping):
    """*Jena*: the held-out week per beta (medians, log ratios to the baselines) and the baselines."""
    def cmp(c):
        return f"{effect_text(c)}: {c['says']}"

    pers, ar, blind = baselines["persistence"], baselines["linear_ar"], baselines["order_blind"]
    mse, skill = "held-out MSE (median)", "skill (median)"
    models = [{"model": f"$\\beta = {r['beta']:g}$", mse: r["val_mse"]["median"],
               skill: r["skill"]["median"],
               "skill, min to max": _to((r["skill"]["min"], r["skill"]["max"]), ".3f"),
               "ln(persistence / model)": cmp(r["persistence"]), "ln(AR / model)": cmp(r["linear AR"])}
              for r in heldout]
    others = [{"model": "persistence", mse: pers["val_mse"], skill: 0.0},
              {"model": f"linear AR (ridge {ar['ridge']:g})", mse: ar["val_mse"], skill: ar["skill"]},
              {"model": "order-blind ridge", mse: blind["val_mse"], skill: blind["skill"]}]
    return table(models + others, {mse: "{:.4f}", skill: "{:.3f}"})


def collapse_sweep_table(d_qks: Sequence[int], betas: Sequence[float], med: Mapping):
    """*Rank collapse*: per ``d_QK``, medians of :func:`convres.collapse.dqk_sweep_seeds`."""
    return table({"$d_{QK}$": d_qks, "$\\sigma_{\\min}(A)$": med["attn_sigma_min"],
                  "$\\sigma_{\\max}(A)$": med["attn_sigma_max"],
                  "effective rank of $A$": med["attn_effective_rank"], "$\\|S - U\\|_2$": med["dist_uniform"],
                  **{f"$\\sigma_{{\\min}}(Z)$, $\\beta = {b:g}$": med["Z_sigma_min"][:, j]
                     for j, b in enumerate(betas)}})


def saturated_table(scales, sweep: Mapping, at: Sequence[int]):
    """*Rank collapse*: :func:`convres.collapse.scale_sweep` at the scales ``scales[at]``."""
    return table({"scale $s$": scales[at], "$\\|S - U\\|_2$": sweep["dist_uniform"][at],
                  "$\\|S - \\mathbf{1} e_0^\\top\\|_2$": sweep["dist_one_hot"][at],
                  "$\\sigma_{\\min}(A)$": sweep["attn_sigma_min"][at],
                  "$\\sigma_{\\min}(Z)$, $\\beta = 0.1$": sweep["Z_sigma_min"][at, 0],
                  "$\\sigma_{\\min}(Z)$, $\\beta = 1$": sweep["Z_sigma_min"][at, 1]})


def collapse_runs_table(result: Result):
    """*Rank collapse under GD*: per run, loss / floor at four steps, range of ``sigma_min(Z_t)``."""
    floor = result.data["floor"]

    def label(r):
        a, f = r["residual"]
        what = f"$\\beta = {a:g}$" if a == f else f"{'attention' if a else 'FFN'} residual only"
        return f"{what}, $d_{{QK}} = {r['d_qk']}$"

    rows = []
    for r in result.data["runs"]:
        h = History.from_dict(r["history"])
        at = {f"loss / floor at $t = {t}$": h.loss[t] / floor for t in (0, 300, 1000, 2000)}
        rows.append({"run": label(r), **at, "range of $\\sigma_{\\min}(Z_t)$":
                     f"{sci(h.sigma_min_Z.min())} to {sci(h.sigma_min_Z.max())}"})
    return table(rows)


def separation_rows(rows: Sequence[Mapping]):
    """*Separation*: a ``DataFrame``, one row per draw, with ``ratio`` = escape / ``T_lb``."""
    keys = ("d_qk", "seed", "T_lb", "escape", "min_ratio", "T_lb_small", "control_T_lb", "control_escape",
            "control_eps")
    frame = pd.DataFrame([{k: r[k] for k in keys} | {
        "res": r["report"]["with_residual"]["certified"], "res_ratio": r["report"]["with_residual"]["ratio"],
        "steps_to": r["report"]["with_residual"]["steps_to"], "sep": r["report"]["separation"]["certified"]}
        for r in rows])
    return frame.assign(ratio=frame.escape / frame.T_lb)


def separation_hypotheses_table(hyp):
    """*Separation*: per ``d_QK`` (``hyp``'s index) the plateau theorem's largest scaled hypotheses."""
    names = {"eps_scaled": "$\\sqrt{d_{QK}}\\max_i\\varepsilon_i^0$",
             "sk_scaled": "$\\sqrt{d_{QK}}\\,s\\max_i(k_i+q_i)$", "par": "$R^\\parallel_0$"}
    return table(hyp.rename(columns=names).rename_axis("$d_{QK}$").reset_index(),
                 {names["eps_scaled"]: "{:.2f}", names["sk_scaled"]: "{:.2f}", names["par"]: "{:.1e}"})


def width_narrow_table(narrow):
    """*Width*: ``d_min`` per ``Nn`` for the narrow shapes, and ``d_min / (Nn)``."""
    names = {"Nn": "$Nn$", "d_min": "$d_{\\min}$", "d_min / (N n)": "$d_{\\min}/(Nn)$"}
    return table(narrow.assign(**{"d_min / (N n)": narrow.d_min / narrow.Nn}).rename(columns=names),
                 {names["d_min / (N n)"]: "{:.0f}"})


def separation_table(rows):
    """*Separation*: per ``d_QK``, median (min-max) of ``T_lb``, escape, ratio, and the control's."""
    def med_range(v, f="{:.0f}"):
        return f"{f.format(v.median())} ({f.format(v.min())}-{f.format(v.max())})"

    by = rows.groupby("d_qk")
    summary = {"$T_{\\mathrm{lb}}$": by.T_lb.agg(med_range), "escape": by.escape.agg(med_range),
               "escape / $T_{\\mathrm{lb}}$": by.ratio.agg(med_range),
               "both certified": by.sep.agg(lambda v: f"{v.sum()} / {len(v)}"),
               "control: $T_{\\mathrm{lb}}$": by.control_T_lb.agg(med_range),
               "control: escape": by.control_escape.agg(med_range)}
    return table([{"$d_{QK}$": d, **{k: v[d] for k, v in summary.items()}} for d in by.groups])


def width_fixed_table(proven, y: float):
    """*Width*, data of fixed norm ``||Y||_F = y``: limits, ``d_min``, ``d*``, parameters."""
    at_y = f"$\\lVert Y\\rVert_F={y:g}$"
    names = {"Nn": "$Nn$", "limit_unit": "$\\mathcal R_\\infty$, unit targets",
             "limit": f"$\\mathcal R_\\infty$, {at_y}", "d_min": f"$d_{{\\min}}$, {at_y}",
             "measured $d^*$": "measured $d^*$", "params at $d_{\\min}$": "params at $d_{\\min}$"}
    return table(proven[list(names)].rename(columns=names),
                 {names["limit_unit"]: "{:.1f}", names["limit"]: "{:.3f}", "measured $d^*$": "{:.0f}",
                  "params at $d_{\\min}$": "{:.3g}"})


def tightness_table(cert: Mapping, est: Mapping):
    """*The certificate*: each certified upper bound against its sampled estimate, and their ratio."""
    bounds = [("$L_B$ (smoothness)", cert["L_upper"], max(est["L_hat"], est["L_lower"])),
              ("$J_B$ (Jacobian)", cert["J_upper"], est["J_hat"]),
              ("$\\|H - H_0\\|_2$ on the ball", est["delta_H_bound"], est["delta_H_hat"])]
    return table([{"bounded quantity": q, "certified upper bound": b, "sampled estimate": e,
                   "bound / estimate": b / e} for q, b, e in bounds])


def _observed(run: Mapping) -> float:
    return run["observed_decrease"] / run["mu_alpha"]


#: *The certificate*: per seed, the book's and the sharper rate and observed / certified.
sharper_table = records({
    "seed": "seed", "book: $\\mu\\alpha$": "book.mu_alpha",
    "book: observed / certified": lambda r: _observed(r["book"]), "$\\varepsilon$": "sharp.eps",
    "sharp: $\\mu\\alpha$": "sharp.mu_alpha", "sharp: observed / certified": lambda r: _observed(r["sharp"])})


def logit_steps_table(dist_uniform: Mapping[int, Sequence[float]],
                      logit_steps: Mapping[int, Sequence[float]]):
    """*Rank collapse under GD*: per ``d_QK``, ``||S_i - U||_2`` at 0, first logit change x ``d_QK/mu``."""
    return table({"$d_{QK}$": list(dist_uniform),
                  "$\\|S_i - U\\|_2$ at $t = 0$ (seed 0)": [_to((min(v), max(v)), ".3f")
                                                           for v in dist_uniform.values()],
                  "logit change $/\\,\\mu \\cdot d_{QK}$ (8 seeds)": [
                      f"{min(v) * k:.0f} to {max(v) * k:.0f}" for k, v in logit_steps.items()]})
