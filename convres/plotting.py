"""Plotting helpers: static matplotlib figures readable on light and dark pages.

Every figure has an opaque white face (so it stays readable under a dark theme) and losses are on
a log scale. Chapters call these functions instead of repeating plotting code.

:func:`figure` detaches the new figure from pyplot's list of open figures, so a notebook shows a
figure exactly once: where the cell returns it (end the cell with ``fig``).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .gd import History

__all__ = ["figure", "figure_png", "plot_loss", "beta_colors", "plot_band", "plot_simulations",
           "plot_phase_diagram", "plot_jena", "plot_sst2", "plot_sst2_summary", "show", "thumbnail_png",
           "plot_speedups", "plot_rank_collapse_gd", "plot_certified_run", "plot_certificate_sweep",
           "MARKERS"]


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 4.2, height: float = 3.2, **kwargs):
    """A figure with an opaque white face and ``nrows x ncols`` axes (constrained layout)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             layout="constrained", facecolor="white", squeeze=False, **kwargs)
    plt.close(fig)  # shown where the cell returns it, never a second time by the inline backend
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(True, which="major", alpha=0.3)
    return fig, (axes[0, 0] if axes.size == 1 else axes.reshape(-1) if min(nrows, ncols) == 1 else axes)


def figure_png(fig, dpi: float = 120) -> bytes:
    """The PNG bytes of a matplotlib figure (white face), which is then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def beta_colors(betas: Sequence[float]) -> list:
    """One colour per residual coefficient, from green (smallest beta) to dark purple (largest),
    spaced evenly by rank (not by value), so that close values such as 0 and 0.1 get distinct
    colours; the lightest is a mid green that stays visible on white."""
    cmap = matplotlib.colormaps["viridis"]
    order = sorted(set(betas))
    rank = {b: i for i, b in enumerate(order)}
    k = len(order)
    return [cmap(0.8 * (1 - rank[b] / (k - 1)) if k > 1 else 0.3) for b in betas]


def plot_loss(ax, histories: Mapping[str, History], *, colors: Sequence | None = None,
              ylabel: str = r"loss $\Phi(\theta_t)$") -> None:
    """Loss curves ``Phi(theta_t)`` against ``t`` on a log scale, one per labelled History."""
    for i, (label, h) in enumerate(histories.items()):
        color = None if colors is None else colors[i]
        loss = np.asarray(h.loss)
        ax.semilogy(np.arange(len(loss)), np.maximum(loss, 1e-300), label=label, color=color)
    ax.set_xlabel("gradient-descent step $t$")
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False)


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
#: Width (CSS pixels) at which the book shows an experiment figure; :func:`show` saves it at twice
#: that many pixels (sharp on high-density screens).
DISPLAY_WIDTH = 560


def show(fig, width: int = DISPLAY_WIDTH):
    """A notebook image of ``fig`` shown ``width`` CSS pixels wide from a PNG of twice that many
    pixels (2x resolution); the figure is closed."""
    from IPython.display import Image

    dpi = 2 * width / fig.get_size_inches()[0]
    return Image(figure_png(fig, dpi=dpi), width=width)


def thumbnail_png(fig, width: int = 160) -> bytes:
    """A small PNG of ``fig``, ``2 x width`` pixels wide (for the reproduction report's rows)."""
    return figure_png(fig, dpi=2 * width / fig.get_size_inches()[0])


def plot_band(ax, curves: Sequence[Sequence[float]], *, x=None, color=None, label=None,
              log: bool = True, linestyle: str = "-", marker: str | None = None,
              markevery=None, markerfacecolor=None) -> None:
    """Median over seeds of several curves with a min-max band (log scale by default).

    ``None`` entries (a run that stopped early, e.g. diverged) are left out of that step's band.
    ``marker`` (with ``markevery``) draws markers on the median so that curves can be told apart
    without colour.
    """
    if len(curves) == 0 or any(len(c) == 0 for c in curves):
        raise ValueError(f"curves must be a non-empty list of non-empty curves, got lengths "
                         f"{[len(c) for c in curves]}.")
    length = max(len(c) for c in curves)
    arr = np.full((len(curves), length), np.nan)
    for i, c in enumerate(curves):
        arr[i, :len(c)] = [np.nan if v is None else v for v in c]
    x = np.arange(length) if x is None else np.asarray(x)[:length]
    if len(x) != length:
        raise ValueError(f"x must have at least as many points as the longest curve ({length}), got "
                         f"{len(x)}.")
    with warnings.catch_warnings():  # a step at which every run has stopped is left empty
        warnings.simplefilter("ignore", RuntimeWarning)
        med, lo, hi = np.nanmedian(arr, 0), np.nanmin(arr, 0), np.nanmax(arr, 0)
    if markevery is None and marker is not None:
        markevery = max(1, length // 6)
    ax.plot(x, med, color=color, label=label, linestyle=linestyle, marker=marker, markevery=markevery,
            markersize=5, markerfacecolor=markerfacecolor or color, markeredgecolor=color)
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
    if log:
        ax.set_yscale("log")


def _legend_on_top(fig, axes, ncol: int = 3, **kwargs) -> None:
    """One legend for the whole figure, above the first axes (outside the data)."""
    handles, labels = axes[0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="outside upper center", ncol=ncol,
               frameon=False, **kwargs)


def _stacked(rows: int, *, width: float = 5.6, height: float = 2.5):
    """A figure of ``rows`` panels stacked vertically (readable on a phone), white face."""
    fig, axes = plt.subplots(rows, 1, figsize=(width, height * rows), layout="constrained",
                             facecolor="white", squeeze=False)
    plt.close(fig)
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(True, which="major", alpha=0.3)
    return fig, list(axes[:, 0])


def _relative(curve):
    first = curve[0]
    return [None if v is None or not first else v / first for v in curve]


def plot_simulations(result):
    """Chapter *Simulations*: the loss relative to its start, ``Phi_t / Phi_0``, per beta (median
    and min-max band over seeds) in each regime of the simulations, one panel per regime
    (``result``: a :class:`convres.experiments.Result`)."""
    s = result.settings
    cells = {c["regime"]: c for c in result.data["cells"] if c["regime"] is not None}
    betas = list(s["betas"])
    fig, axes = _stacked(len(s["regimes"]), height=2.3)
    for ax, regime in zip(axes, s["regimes"]):
        cell = cells[regime["name"]]
        for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
            curves = [_relative(r["loss"]) for r in cell["runs"] if r["beta"] == b]
            plot_band(ax, curves, color=c, label=rf"$\beta={b:g}$", marker=MARKERS[i % len(MARKERS)])
        ax.axhline(s["stall"], color="k", ls=":", lw=1, label=f"stall threshold ({s['stall']:g})")
        ax.set_ylim(max(ax.get_ylim()[0], 1e-22), 3)
        ax.set_title(f"{regime['name']}: $Nn={cell['N'] * cell['n']}$, $d={cell['d']}$, "
                     f"$d_{{QK}}={cell['d_qk']}$, scale {cell['scale']}", fontsize=10)
        ax.set_ylabel(r"$\Phi(\theta_t)/\Phi(\theta_0)$")
    axes[-1].set_xlabel("gradient-descent step $t$")
    _legend_on_top(fig, axes, ncol=3)
    return fig


def plot_phase_diagram(s: Mapping, diagrams: Mapping[str, dict]):
    """Chapter *Simulations*: the phase diagrams, ``log10`` of the median loss ratio
    ``Phi_T / Phi_0`` after all steps, over beta x d_QK (attention scale ``1/d_QK``) and over
    beta x ``N n / d`` (``diagrams["d_qk"]``, ``diagrams["size"]``, as
    :func:`convres.experiments.phase_diagram` computes them from the settings ``s``); cells of the
    named regimes are framed, values are printed in the cells."""
    fig, axes = _stacked(2, height=2.7)
    for ax in axes:
        ax.grid(False)
    regimes = {(r["N"], r["d_qk"], r["scale"]): r["name"] for r in s["regimes"]}
    panels = (("d_qk", r"$d_{QK}$ (attention scale $1/d_{QK}$, " + f"$N n = {s['N'] * s['n']}$, $d = "
                                                                   f"{s['d']}$)",
               lambda x: (s["N"], x, "1/d_qk")),
              ("size", r"$N n / d$ (" + f"$n = {s['n']}$, $d = {s['d']}$, $d_{{QK}} = {s['d_qk']}$, scale "
                                        f"{s['scale']})",
               lambda x: (int(round(x * s["d"] / s["n"])), s["d_qk"], s["scale"])))
    image = None
    for ax, (axis, xlabel, cell_of) in zip(axes, panels):
        pd_ = diagrams[axis]
        z = np.array([[np.nan if v is None else v for v in row] for row in pd_["log_ratio"]]).T
        # blue: converged; red: above the stall threshold (the colour changes there)
        norm = matplotlib.colors.TwoSlopeNorm(vmin=-12, vcenter=pd_["stall"], vmax=0)
        image = ax.imshow(z, origin="lower", aspect="auto", cmap="RdBu_r", norm=norm)
        ax.set_xticks(range(len(pd_["x"])), [f"{x:g}" for x in pd_["x"]])
        ax.set_yticks(range(len(pd_["betas"])), [f"{b:g}" for b in pd_["betas"]])
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel(r"$\beta$")
        for i, row in enumerate(z):
            for j, v in enumerate(row):
                text = "div." if np.isnan(v) else f"{v:.0f}" if v < -9.5 else f"{v:.1f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if not np.isnan(v) and (v < -8 or v > -0.8) else "black")
        for j, x in enumerate(pd_["x"]):
            name = regimes.get(cell_of(x))
            if name:
                ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, -0.5), 1, len(pd_["betas"]), fill=False,
                                                          lw=2.2, ec="black"))
                ax.text(j, len(pd_["betas"]) - 0.45, name, ha="center", va="bottom", fontsize=8)
        ax.set_ylim(-0.5, len(pd_["betas"]) + 0.4)
    bar = fig.colorbar(image, ax=axes, shrink=0.8, extend="min",
                       label=r"$\log_{10}\,\Phi(\theta_T)/\Phi(\theta_0)$")
    bar.set_ticks([-12, -8, -4, -2, -1, 0])
    return fig


def plot_jena(result):
    """Chapter *Jena Climate*: training MSE against the step per beta, each beta at its own tuned
    step (median and min-max band over seeds), with the speed level (dotted) and the training MSE of
    persistence and of the linear AR (dashed); below, the held-out skill against persistence,
    ``1 - MSE / MSE_persistence``, per beta (one dot per seed, a bar at the median) with the linear
    AR's skill and persistence (0) as lines."""
    runs, data = result.data["runs"], result.data
    betas = sorted({r["beta"] for r in runs})
    pv = data["persistence"]["val"]
    fig, (ax1, ax2) = _stacked(2, height=2.6)
    for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
        sel = [r for r in runs if r["beta"] == b and "best" in r["protocols"]]
        mk = MARKERS[i % len(MARKERS)]
        plot_band(ax1, [r["train_mse"] for r in sel], color=c, label=rf"$\beta={b:g}$", marker=mk)
        skill = [1 - r["val_mse"][-1] / pv for r in sel
                 if r["status"] != "diverged" and r["val_mse"] and r["val_mse"][-1] is not None]
        jitter = np.linspace(-0.15, 0.15, len(skill)) if len(skill) > 1 else np.zeros(len(skill))
        ax2.scatter(i + jitter, skill, color=c, marker=mk, s=16, alpha=0.8)
        if skill:
            ax2.hlines(float(np.median(skill)), i - 0.3, i + 0.3, color=c, lw=2.5)
    ax1.axhline(result.summary()["level"], color="k", ls=":", lw=1.2, label="speed level")
    ax1.axhline(data["persistence"]["train"], color="k", ls="--", lw=1.0, label="persistence")
    ax1.axhline(data["linear_ar"]["train"], color="0.45", ls="-.", lw=1.0, label="linear AR")
    ax2.axhline(0.0, color="k", ls="--", lw=1.0)
    ax2.axhline(1 - data["linear_ar"]["val"] / pv, color="0.45", ls="-.", lw=1.0)
    ax2.set_xticks(range(len(betas)), [rf"$\beta={b:g}$" for b in betas])
    ax1.set_ylabel("training MSE")
    ax1.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel("held-out skill")
    _legend_on_top(fig, [ax1, ax2], ncol=4)
    return fig


def _depth_styles(depths):
    cmap = matplotlib.colormaps["plasma"]
    return {L: (cmap(0.05 + 0.65 * i / max(1, len(depths) - 1)), MARKERS[i % len(MARKERS)])
            for i, L in enumerate(depths)}


def plot_sst2(result, protocol: str = "best"):
    """Chapter *SST-2*: training error (top) and GLUE validation accuracy (bottom) against the step,
    per depth, with residuals (solid, filled markers) and without (dashed, open markers), each
    configuration at its ``protocol`` step (``"best"`` or ``"common"``); median and min-max band
    over seeds; the floor baseline's validation accuracy as a dotted line."""
    runs = [r for r in result.data["runs"] if protocol in r.get("protocols", [protocol])]
    depths = sorted({r["L"] for r in runs})
    styles = _depth_styles(depths)
    fig, (ax1, ax2) = _stacked(2, height=2.5)
    for L in depths:
        color, mk = styles[L]
        for beta, ls in ((1.0, "-"), (0.0, "--")):
            sel = [r for r in runs if r["L"] == L and r["beta"] == beta]
            if not sel:
                continue
            name = f"L={L}, " + ("residual" if beta else "no residual")
            xs = result.data.get("eval_steps") or max((r["error_steps"] for r in sel), key=len)
            face = color if beta else "white"
            plot_band(ax1, [r["error"] for r in sel], x=xs, color=color, label=name, log=False,
                      linestyle=ls, marker=mk, markerfacecolor=face)
            if "val_accuracy" in sel[0]:
                plot_band(ax2, [r["val_accuracy"] for r in sel], x=xs, color=color, label=name, log=False,
                          linestyle=ls, marker=mk, markerfacecolor=face)
    base = result.data.get("baselines", {}).get("ppmi")
    if base:
        ax2.axhline(base["val_accuracy"], color="k", ls=":", lw=1.4, label="floor baseline (validation)")
    ax1.set_ylabel("training error")
    ax2.set_ylabel("validation accuracy")
    ax2.set_xlabel("gradient-descent step $t$")
    _legend_on_top(fig, [ax1, ax2], ncol=3, fontsize=8)
    return fig


def plot_sst2_summary(result):
    """Chapter *SST-2*: the final training error (top) and validation accuracy (bottom) of every
    seed (small marks) and their median (large marks), per depth, with and without residuals, under
    both step-size protocols; the floor baseline as a dotted line."""
    runs = result.data["runs"]
    depths = sorted({r["L"] for r in runs})
    fig, (ax1, ax2) = _stacked(2, height=2.4)
    groups = [(p, b) for p in ("best", "common") for b in (1.0, 0.0)]
    colors = {1.0: "tab:blue", 0.0: "tab:red"}
    offsets = np.linspace(-0.3, 0.3, len(groups))
    for k, (p, b) in enumerate(groups):
        for i, L in enumerate(depths):
            sel = [r for r in runs if p in r["protocols"] and r["L"] == L and r["beta"] == b]
            for ax, field in ((ax1, "error"), (ax2, "val_accuracy")):
                v = [r[field][-1] for r in sel]
                x = i + offsets[k]
                face = colors[b] if p == "best" else "white"
                ax.scatter([x] * len(v), v, s=12, color=colors[b], alpha=0.6)
                ax.scatter([x], [np.median(v)], s=60, marker="D" if b else "o", facecolors=face,
                           edgecolors=colors[b], linewidths=1.5, zorder=3,
                           label=f"{'residual' if b else 'no residual'}, "
                                 f"{'best step' if p == 'best' else 'common step'}" if i == 0 else None)
    base = result.data["baselines"]["ppmi"]
    ax1.axhline(1 - base["train_accuracy"], color="k", ls=":", lw=1.4, label="floor baseline")
    ax2.axhline(base["val_accuracy"], color="k", ls=":", lw=1.4)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(depths)), [f"L = {L}" for L in depths])
    ax1.set_ylabel("final training error")
    ax2.set_ylabel("validation accuracy")
    _legend_on_top(fig, [ax1, ax2], ncol=3, fontsize=8)
    return fig


def plot_speedups(result: Mapping):
    """Appendix *Performance*: grouped bars of the speed of ``convres.gradient_descent`` relative to
    the plain loop and to the stacked graph, per benchmark row (``benchmarks/gd_speed.py``)."""
    rows = result["rows"]
    labels = [f"{r['size']}\n{r['dtype']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = figure(1, width=5.6, height=3.2)
    for k, (key, name, hatch) in enumerate((("convres_vs_plain", "vs plain loop", ""),
                                            ("convres_vs_stacked", "vs stacked graph", "//"))):
        vals = [r[key] for r in rows]
        bars = ax.bar(x + (k - 0.5) * 0.38, vals, 0.38, label=name, hatch=hatch,
                      color=("tab:blue", "tab:orange")[k], edgecolor="black", linewidth=0.6)
        ax.bar_label(bars, labels=[f"{v:.2g}x" for v in vals], fontsize=8, padding=2)
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("speed relative to the other loop")
    ax.set_ylim(0, 1.2 * max(max(r["convres_vs_plain"], r["convres_vs_stacked"]) for r in rows))
    ax.legend(frameon=False, loc="upper right")
    return fig


def _math_label(name: str) -> str:
    """A run name such as ``"beta = 0, d_QK = 64"`` with its symbols typeset."""
    return name.replace("beta", r"$\beta$").replace("d_QK", r"$d_{QK}$")


def plot_rank_collapse_gd(result):
    """Chapter *Rank collapse under gradient descent*: loss (top, with the rank-one floor) and
    ``sigma_min`` of the stacked ``Z_t`` (bottom) of the gradient-descent runs with and without
    residual connections. Two panels stacked, one legend above them (outside the data), each run
    with its own colour, line style and marker (readable in grey and on a 390 px screen)."""
    colors = ["#1b9e77", "#d95f02", "#2c3e9e", "#7570b3", "#c2185b"]
    styles = ["-", "-", "-", "--", ":"]
    fig, (ax1, ax2) = _stacked(2, width=4.8, height=2.3)
    for r, c, ls, mk in zip(result.data["runs"], colors, styles, MARKERS):
        h = History.from_dict(r["history"])
        t = np.arange(len(h.loss))
        ax1.semilogy(t, h.loss, color=c, ls=ls, marker=mk, ms=4, markevery=max(1, len(t) // 6),
                     label=_math_label(r["name"]))
        ax2.semilogy(h.record_steps, h.sigma_min_Z, color=c, ls=ls, marker=mk, ms=4,
                     markevery=max(1, len(h.record_steps) // 6), label=_math_label(r["name"]))
    ax1.axhline(result.data["floor"], color="k", ls=(0, (1, 1)), lw=1.2, label="rank-one floor")
    ax1.set_ylabel(r"loss $\Phi(\theta_t)$")
    ax2.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel(r"$\sigma_{\min}(Z_t)$")
    _legend_on_top(fig, [ax1, ax2], ncol=2, fontsize=8)
    return fig


# --- theory (chapter The theorem: convres.certify, convres.theory) ------------------------------

def plot_certified_run(run: Mapping):
    """Chapter *The theorem*: a run on a certified instance (``run``: the dict of
    :meth:`convres.certify.CertifiedRun.to_dict`), three panels stacked: the loss against the
    certified envelope ``(1 - mu alpha)^t Phi_0``; the distance ``||theta_t - theta_0||`` and the
    path length against the certified radius ``rho``; ``sigma_Nn(H_t) / sigma_0`` against 1/2."""
    c = run["certificate"]
    loss, env = np.asarray(run["loss"]), np.asarray(run["envelope"])
    t = np.arange(len(loss))
    every = max(1, len(t) // 12)
    fig, (ax1, ax2, ax3) = _stacked(3, height=2.2)
    ax1.semilogy(t, np.maximum(loss, 1e-300), "o-", ms=4, markevery=every, color="tab:blue",
                 label=r"loss $\Phi(\theta_t)$")
    ax1.semilogy(t, env, "s--", ms=4, markevery=every, color="k",
                 label=r"certified envelope $(1-\mu\alpha)^t\,\Phi(\theta_0)$")
    ax1.set_ylabel("loss")
    ax2.plot(t, run["path"], "^-", ms=4, markevery=every, color="tab:orange",
             label=r"path length $\sum_{s<t}\mu\|g_s\|$")
    ax2.plot(t, run["distance"], "o:", ms=4, markevery=every, color="tab:green",
             label=r"distance $\|\theta_t-\theta_0\|$")
    ax2.axhline(c["rho"], color="k", ls="--", lw=1.2, label=r"certified radius $\rho$")
    ax2.set_ylim(0, 1.15 * c["rho"])
    ax2.set_ylabel("distance")
    ax3.plot(t, np.asarray(run["sigma"]) / c["sigma_0"], "D-", ms=4, markevery=every, color="tab:purple",
             label=r"$\sigma_{Nn}(H_t)/\sigma_0$")
    ax3.axhline(0.5, color="0.35", ls="-.", lw=1.4, label="certified lower bound 1/2")
    ax3.set_ylim(0.4, 1.1)
    ax3.set_ylabel(r"$\sigma_{Nn}(H_t)/\sigma_0$")
    ax3.set_xlabel("gradient-descent step $t$")
    _legend_on_top(fig, [ax1, ax2, ax3], ncol=2, fontsize=8)
    return fig


def plot_certificate_sweep(rows: Sequence[Mapping], crossings: Mapping[int, float]):
    """Chapter *The theorem*: the certificate ratio ``rho / r_sigma_lower`` against the width
    ``d`` (log-log), per ``N n`` (median and min-max band over seeds, markers), the line ratio = 1
    below which the instance is certified, and the crossings ``d*`` (``crossings``: ``N n -> d*``)."""
    fig, ax = figure(1, width=5.6, height=3.4)
    shapes = sorted({r["Nn"] for r in rows})
    colors = ("tab:blue", "tab:red", "tab:green", "tab:purple")
    for i, Nn in enumerate(shapes):
        widths = sorted({r["d"] for r in rows if r["Nn"] == Nn})
        curves = [[r["ratio"] for r in rows if r["Nn"] == Nn and r["d"] == d] for d in widths]
        color, mk = colors[i % len(colors)], MARKERS[i % len(MARKERS)]
        ax.plot(widths, [np.median(c) for c in curves], marker=mk, color=color, label=f"$Nn = {Nn}$")
        ax.fill_between(widths, [min(c) for c in curves], [max(c) for c in curves], color=color,
                        alpha=0.18, linewidth=0)
        d_star = crossings.get(Nn)
        if d_star is not None and np.isfinite(d_star):
            ax.axvline(d_star, color=color, ls=":", lw=1.2, label=rf"$d^* \approx {d_star:.0f}$ ($Nn={Nn}$)")
    ax.axhline(1.0, color="k", lw=1.0, ls="--", label="ratio 1: certified below")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    widths = sorted({r["d"] for r in rows})
    ax.set_xticks(widths, [str(d) for d in widths])
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("width $d$ ($d_{QK} = d$, $m = d/4$)")
    ax.set_ylabel(r"$\rho\,/\,r_\sigma^{\mathrm{lo}}$")
    fig.legend(loc="outside upper center", ncol=3, frameon=False, fontsize=8)
    return fig
