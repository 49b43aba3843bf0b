"""Plotting helpers: static matplotlib figures readable on light and dark pages.

Every figure has an opaque white face (so it stays readable under a dark theme) and losses are on
a log scale. Chapters call these functions instead of repeating plotting code.

:func:`figure` detaches the new figure from pyplot's list of open figures, so a notebook shows a
figure exactly once: where the cell returns it (end the cell with ``fig``).
"""

from __future__ import annotations

import io
import warnings
from typing import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["figure", "figure_png", "plot_loss", "plot_sigma_min", "beta_colors", "plot_band", "plot_simulations",
           "plot_jena", "plot_sst2"]


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
    """One colour per residual coefficient, from light (smallest beta) to dark (largest), spaced
    evenly by rank (not by value), so that close values such as 0 and 0.1 get distinct colours."""
    cmap = matplotlib.colormaps["viridis"]
    order = sorted(set(betas))
    rank = {b: i for i, b in enumerate(order)}
    k = len(order)
    return [cmap(0.85 * (1 - rank[b] / (k - 1)) if k > 1 else 0.3) for b in betas]


def plot_loss(ax, histories: Mapping[str, "object"], *, colors: Sequence | None = None,
              ylabel: str = r"loss $\Phi(\theta_t)$") -> None:
    """Loss curves ``Phi(theta_t)`` against ``t`` on a log scale, one per labelled History."""
    for i, (label, h) in enumerate(histories.items()):
        color = None if colors is None else colors[i]
        loss = np.asarray(h.loss)
        ax.semilogy(np.arange(len(loss)), np.maximum(loss, 1e-300), label=label, color=color)
    ax.set_xlabel("gradient-descent step $t$")
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False)


def plot_sigma_min(ax, histories: Mapping[str, "object"], *, which: str = "Z",
                   colors: Sequence | None = None) -> None:
    """``sigma_min`` of the stacked ``Z`` (or ``H``) along the run, log scale."""
    for i, (label, h) in enumerate(histories.items()):
        color = None if colors is None else colors[i]
        ax.semilogy(h.record_steps, getattr(h, f"sigma_min_{which}"), label=label, color=color)
    ax.set_xlabel("gradient-descent step $t$")
    ax.set_ylabel(rf"$\sigma_{{\min}}({which}_t)$")
    ax.legend(frameon=False)


# --- experiments (book chapters Simulations, Jena Climate, SST-2; convres.experiments) -------------

def plot_band(ax, curves: Sequence[Sequence[float]], *, x=None, color=None, label=None,
              log: bool = True, linestyle: str = "-") -> None:
    """Median over seeds of several curves with a min-max band (log scale by default).

    ``None`` entries (a run that stopped early, e.g. diverged) are left out of that step's band.
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
        raise ValueError(f"x must have at least as many points as the longest curve ({length}), got {len(x)}.")
    with warnings.catch_warnings():  # a step at which every run has stopped is left empty
        warnings.simplefilter("ignore", RuntimeWarning)
        med, lo, hi = np.nanmedian(arr, 0), np.nanmin(arr, 0), np.nanmax(arr, 0)
    ax.plot(x, med, color=color, label=label, linestyle=linestyle)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
    if log:
        ax.set_yscale("log")


def plot_simulations(result):
    """Chapter *Simulations*: loss curves per beta (median and band over seeds) and the measured
    rate against the book's ``mu * sigma_min(H_0)^2`` (``result``: a
    :class:`convres.experiments.Result`)."""
    runs, s = result.data["runs"], result.settings
    betas = sorted({r["beta"] for r in runs})
    colors = beta_colors(betas)
    fig, (ax1, ax2) = figure(2)
    for b, c in zip(betas, colors):
        plot_band(ax1, [r["loss"] for r in runs if r["beta"] == b], color=c, label=rf"$\beta={b:g}$")
        pts = [(s["mu"] * r["alpha0"], r["rate"]) for r in runs if r["beta"] == b]
        ax2.scatter(*zip(*pts), color=c, label=rf"$\beta={b:g}$")
    ax1.set_xlabel("gradient-descent step $t$")
    ax1.set_ylabel(r"loss $\Phi(\theta_t)$")
    ax1.legend(frameon=False)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    lim = np.array(ax2.get_xlim())
    ax2.plot(lim, lim, "k--", lw=0.8, label="rate = $\\mu\\,\\sigma_{\\min}(H_0)^2$")
    ax2.set_xlabel(r"$\mu\,\sigma_{\min}(H_0)^2$ (the book's $\mu\alpha$ at $t=0$)")
    ax2.set_ylabel("measured rate per step")
    ax2.legend(frameon=False, fontsize=8)
    return fig


def plot_jena(result):
    """Chapter *Jena Climate*: training loss per beta (median and min-max band over seeds)."""
    runs, data = result.data["runs"], result.data
    betas = sorted({r["beta"] for r in runs})
    fig, ax = figure(1, width=5.5, height=3.6)
    styles = ("-", "--", "-.", ":")
    for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
        plot_band(ax, [r["loss"] for r in runs if r["beta"] == b], color=c, label=rf"$\beta={b:g}$",
                  linestyle=styles[i % len(styles)])
    ax.set_xlabel("gradient-descent step $t$")
    ax.set_ylabel(r"training loss $\Phi(\theta_t)$")
    ax.set_title(rf"Jena Climate, $N={data['N']}$ windows, $\mu={data['mu'] * 1e5:.3g}\times 10^{{-5}}$")
    ax.legend(frameon=False)
    return fig


def plot_sst2(result):
    """Chapter *SST-2*: training loss and training error per depth, with (solid) and without
    (dashed) residual connections, median and band over seeds."""
    runs = result.data["runs"]
    depths = sorted({r["L"] for r in runs})
    cmap = matplotlib.colormaps["plasma"]
    fig, (ax1, ax2) = figure(2)
    for i, L in enumerate(depths):
        color = cmap(0.1 + 0.7 * i / max(1, len(depths) - 1))
        for beta, style in ((1.0, "-"), (0.0, "--")):
            sel = [r for r in runs if r["L"] == L and r["beta"] == beta]
            name = f"L={L}, " + ("residual" if beta else "no residual")
            plot_band(ax1, [r["loss"] for r in sel], color=color, label=name, linestyle=style)
            xs = max((r["error_steps"] for r in sel), key=len)
            plot_band(ax2, [r["error"] for r in sel], x=xs, color=color, label=name, log=False,
                      linestyle=style)
    ax1.set_xlabel("gradient-descent step $t$")
    ax1.set_ylabel(r"training loss $\Phi(\theta_t)$")
    ax2.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel("training error (misclassified fraction)")
    ax2.set_ylim(-0.02, 0.75)
    ax2.legend(frameon=False, fontsize=7)
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


def plot_rank_collapse_gd(result):
    """Chapter *Rank collapse*: loss (top, with the rank-one floor) and ``sigma_min`` of the stacked
    ``Z_t`` (bottom) of the gradient-descent runs with and without residual connections."""
    from .gd import History
    colors = ["tab:olive", "tab:orange", "tab:blue", "tab:cyan", "tab:red"]
    styles = ["-", "-", "-", "--", ":"]
    fig, (ax1, ax2) = figure(1, 2, width=6.0, height=3.3)
    for r, c, ls in zip(result.data["runs"], colors, styles):
        h = History.from_dict(r["history"])
        ax1.semilogy(np.arange(len(h.loss)), h.loss, color=c, ls=ls, label=r["name"])
        ax2.semilogy(h.record_steps, h.sigma_min_Z, "o", ls=ls, ms=3, color=c, label=r["name"])
    ax1.axhline(result.data["floor"], color="k", ls=":", lw=1, label="rank-one floor")
    ax1.set_xlabel("gradient-descent step $t$")
    ax1.set_ylabel(r"loss $\Phi(\theta_t)$")
    ax2.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel(r"$\sigma_{\min}(Z_t)$, $Z_t$ stacked")
    ax1.legend(frameon=False, fontsize=9)
    return fig
