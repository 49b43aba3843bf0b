"""The book's static figures (matplotlib): an opaque white face (readable under a dark theme),
losses on a log scale; :func:`figure` detaches a figure from pyplot, so a notebook shows it once."""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .gd import History


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 4.2, height: float = 3.2):
    """A figure with an opaque white face and ``nrows x ncols`` axes (constrained layout)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             layout="constrained", facecolor="white", squeeze=False)
    plt.close(fig)  # shown where the cell returns it, never a second time by the inline backend
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(True, which="major", alpha=0.3)
    return fig, (axes[0, 0] if axes.size == 1 else axes.reshape(-1) if min(nrows, ncols) == 1 else axes)


def _stacked(rows: int, *, width: float = 5.6, height: float = 2.5):
    """A :func:`figure` of ``rows`` panels stacked vertically (readable on a phone), as a list."""
    fig, axes = figure(1, rows, width=width, height=height)
    return fig, list(np.atleast_1d(axes))


def legend_on_top(fig, ncol: int = 3, **kwargs) -> None:
    """One legend for the whole figure above its axes, each label once (the first handle)."""
    seen: dict = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="outside upper center", ncol=ncol,
               frameon=False, **kwargs)


def figure_png(fig, dpi: float = 120) -> bytes:
    """The PNG bytes of a matplotlib figure (white face), which is then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def beta_colors(betas: Sequence[float]) -> list:
    """One viridis colour per beta, green (smallest) to dark purple, spaced by rank, not value."""
    cmap = matplotlib.colormaps["viridis"]
    order = sorted(set(betas))
    k = len(order)
    return [cmap(0.8 * (1 - order.index(b) / (k - 1)) if k > 1 else 0.3) for b in betas]


MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def show(fig, width: int = 560):
    """A notebook image of ``fig``, ``width`` CSS pixels wide from a PNG of twice as many pixels."""
    from IPython.display import Image

    return Image(thumbnail_png(fig, width), width=width)


def thumbnail_png(fig, width: int = 160) -> bytes:
    """A PNG of ``fig``, ``2 x width`` pixels wide (the reproduction report's rows, :func:`show`)."""
    return figure_png(fig, dpi=2 * width / fig.get_size_inches()[0])


def plot_band(ax, curves: Sequence[Sequence[float]], *, x=None, color=None, label=None,
              linestyle: str = "-", marker: str | None = None, markevery=None,
              markerfacecolor=None) -> None:
    """The median over seeds of ``curves`` with a min-max band, log scale; ``None`` is left out."""
    length = max(len(c) for c in curves)
    arr = np.full((len(curves), length), np.nan)
    for i, c in enumerate(curves):
        arr[i, :len(c)] = [np.nan if v is None else v for v in c]
    x = np.arange(length) if x is None else np.asarray(x)[:length]
    with warnings.catch_warnings():  # a step at which every run has stopped is left empty
        warnings.simplefilter("ignore", RuntimeWarning)
        med, lo, hi = np.nanmedian(arr, 0), np.nanmin(arr, 0), np.nanmax(arr, 0)
    if markevery is None and marker is not None:
        markevery = max(1, length // 6)
    ax.plot(x, med, color=color, label=label, linestyle=linestyle, marker=marker, markevery=markevery,
            markersize=5, markerfacecolor=markerfacecolor or color, markeredgecolor=color)
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
    ax.set_yscale("log")


def _relative(curve):
    first = curve[0]
    return [None if v is None or not first else v / first for v in curve]


def plot_simulations(result):
    """*Simulations*: ``Phi_t / Phi_0`` per beta at its tuned step, one panel per regime."""
    s = result.settings
    betas = list(s["betas"])
    cells = result.data["regimes"]
    fig, axes = _stacked(len(cells), height=2.3)
    for ax, cell in zip(axes, cells):
        for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
            runs = [r for r in cell["runs"]["tuned"] if r["beta"] == b and "loss" in r]
            length = max(len(r["loss"]) for r in runs)
            # a run stopped at convergence stays at its last value (as the mean log-loss counts it)
            curves = [_relative(r["loss"] + ([r["loss"][-1]] * (length - len(r["loss"]))
                                             if r["status"] == "converged" else [])) for r in runs]
            plot_band(ax, curves, x=np.arange(1, length + 1), color=c,
                      label=rf"$\beta={b:g}$", marker=MARKERS[i % len(MARKERS)])
        ax.set_xscale("log")
        ax.set_ylim(max(ax.get_ylim()[0], 1e-13), 3)
        scale = "1/d_{QK}" if cell["scale"] == "1/d_qk" else r"1/\sqrt{d_{QK}}"
        ax.set_title(f"{cell['name']}: $Nn={cell['N'] * cell['n']}$, $d={cell['d']}$, "
                     f"$d_{{QK}}={cell['d_qk']}$, scale ${scale}$", fontsize=10)
        ax.set_ylabel(r"$\Phi(\theta_t)/\Phi(\theta_0)$")
    axes[-1].set_xlabel("gradient-descent step $t + 1$ (log scale)")
    legend_on_top(fig, ncol=3)
    return fig


def plot_escape_law(laws: Sequence[Mapping], fit: Mapping):
    """*Simulations*: the escape time ``mu t`` against ``d_QK`` per arm, and the fit ``a + b d_QK^p``."""
    fig, (ax,) = _stacked(1, height=3.6)
    styles = {("1/d_qk", 0.0): ("tab:red", "o"), ("1/sqrt(d_qk)", 0.0): ("tab:orange", "s"),
              ("1/d_qk", 1.0): ("tab:blue", "^"), ("1/sqrt(d_qk)", 1.0): ("tab:cyan", "v")}
    for law in laws:
        color, marker = styles.get((law["scale"], law["beta"]), ("k", "x"))
        half = law.get("protocol") == "half"
        x, med = np.asarray(law["d_qk"], dtype=float), np.asarray(law["median_mu_t"], dtype=float)
        err = [med - np.asarray(law["q25_mu_t"], dtype=float), np.asarray(law["q75_mu_t"], dtype=float) - med]
        scale = "1/d_{QK}" if law["scale"] == "1/d_qk" else r"1/\sqrt{d_{QK}}"
        label = rf"$\beta={law['beta']:g}$, scale ${scale}$" + (", half the step" if half else "")
        ax.errorbar(x, med, yerr=err, color=color, marker=marker, linestyle="--" if half else "-", capsize=3,
                    label=label, markerfacecolor="white" if half else color)
    d = np.geomspace(min(min(law["d_qk"]) for law in laws), max(max(law["d_qk"]) for law in laws), 100)
    ax.plot(d, fit["a"] + fit["b"] * d ** fit["p"], color="k", ls=":", lw=1.5,
            label=rf"fit $a + b\,d_{{QK}}^{{\,p}}$, $p = {fit['p']:.2f}$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$d_{QK}$")
    ax.set_ylabel(r"escape time $\mu t$")
    legend_on_top(fig, ncol=2, fontsize=8)
    return fig


def plot_mechanism(result):
    """*Simulations*: each run's rate against ``sigma_min(Z_0)``, one panel per regime."""
    from .stats import spearman_rho

    betas = list(result.settings["betas"])
    cells = result.data["regimes"]
    fig, axes = _stacked(len(cells), height=2.4)
    for ax, cell in zip(axes, cells):
        runs = [r for r in cell["runs"]["tuned"] if not r["diverged"] and r["rate"] is not None]
        for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
            sel = [r for r in runs if r["beta"] == b]
            ax.scatter([r["sigma_min_Z0"] for r in sel], [r["rate"] for r in sel], color=c, s=18,
                       marker=MARKERS[i % len(MARKERS)], label=rf"$\beta={b:g}$")
        rho = spearman_rho([r["sigma_min_Z0"] for r in runs], [r["rate"] for r in runs])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(rf"{cell['name']}: Spearman $\rho = {rho:.2f}$", fontsize=10)
        ax.set_ylabel(r"rate per unit $\mu t$")
    axes[-1].set_xlabel(r"$\sigma_{\min}(Z_0)$, the attention output at initialization")
    legend_on_top(fig, ncol=5)
    return fig


def plot_jena(result):
    """*Jena Climate*: training MSE per beta with the baselines; below, each seed's held-out skill."""
    data = result.data
    runs = [r for r in data["runs"] if r["protocol"] == "tuned"]
    betas = sorted({r["beta"] for r in runs})
    pv = data["persistence"]["val"]
    fig, (ax1, ax2) = _stacked(2, height=2.6)
    for i, (b, c) in enumerate(zip(betas, beta_colors(betas))):
        sel = [r for r in runs if r["beta"] == b]
        mk = MARKERS[i % len(MARKERS)]
        curves = [r["train_mse"][1:] for r in sel]
        plot_band(ax1, curves, x=np.arange(1, max(len(v) for v in curves) + 1), color=c,
                  label=rf"$\beta={b:g}$", marker=mk, markevery=0.12)
        skill = [1 - r["val_mse"] / pv for r in sel if r["status"] != "diverged" and r["val_mse"] is not None]
        jitter = np.linspace(-0.15, 0.15, len(skill)) if len(skill) > 1 else np.zeros(len(skill))
        ax2.scatter(i + jitter, skill, color=c, marker=mk, s=16, alpha=0.8)
        if skill:
            ax2.hlines(float(np.median(skill)), i - 0.3, i + 0.3, color=c, lw=2.5)
    ax1.set_xscale("log")
    ax1.set_ylim(0.8 * data["linear_ar"]["train"], 2 * data["order_blind"]["train"])
    ax1.axhline(result.summary()["level"], color="k", ls=":", lw=1.2, label="speed level")
    ax1.axhline(data["persistence"]["train"], color="k", ls="--", lw=1.0, label="persistence")
    ax1.axhline(data["linear_ar"]["train"], color="0.45", ls="-.", lw=1.0, label="linear AR")
    ax1.axhline(data["order_blind"]["train"], color="0.3", ls=(0, (8, 3)), lw=1.0, label="order-blind ridge")
    ax2.axhline(0.0, color="k", ls="--", lw=1.0)
    ax2.axhline(1 - data["linear_ar"]["val"] / pv, color="0.45", ls="-.", lw=1.0)
    ax2.set_xticks(range(len(betas)), [rf"$\beta={b:g}$" for b in betas])
    ax1.set_ylabel("training MSE")
    ax1.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel("held-out skill")
    legend_on_top(fig, ncol=4)
    return fig


#: The SST-2 arms: label, colour, line style, marker.
SST2_ARMS = {"residual": ("residual", "tab:blue", "-", "D"),
             "isometric": ("no residual, isometric init", "tab:red", "--", "o"),
             "norm-preserving": ("no residual, norm-preserving init", "0.45", ":", "s"),
             "matched": ("residual, matched width", "tab:green", "-.", "^")}


def plot_sst2(result, protocol: str = "tuned"):
    """*SST-2*: training MSE against the step, one panel per depth, one curve per arm."""
    data = result.data
    runs = [r for r in data["runs"] if r["status"] != "diverged" and r["protocol"] == protocol]
    depths = sorted({r["L"] for r in runs})
    every = result.settings["record_every"]
    fig, axes = _stacked(len(depths), height=1.9)
    for ax, L in zip(axes, depths):
        for kind, (label, color, ls, mk) in SST2_ARMS.items():
            sel = [r["mse"] for r in runs if r["L"] == L and r["arm"] == kind]
            if sel:
                x = [min(i * every, result.settings["steps"]) for i in range(max(map(len, sel)))]
                plot_band(ax, sel, x=x, color=color, linestyle=ls, label=label, marker=mk,
                          markerfacecolor="white" if kind != "residual" else None)
        ax.axhline(data["level"], color="k", ls=":", lw=1.0, label="floor baseline")
        ax.set_ylabel(f"training MSE\n$L = {L}$")
    axes[-1].set_xlabel("gradient-descent step $t$")
    legend_on_top(fig, ncol=2, fontsize=8)
    return fig


def plot_sst2_summary(result):
    """*SST-2*: per depth and seed, every arm's final training MSE and validation accuracy."""
    data = result.data
    runs = [r for r in data["runs"] if r["status"] != "diverged" and r["protocol"] == "tuned"]
    depths = sorted({r["L"] for r in runs})
    kinds = [k for k in SST2_ARMS if any(r["arm"] == k for r in runs)]
    fig, (ax1, ax2) = _stacked(2, height=2.3)
    width = 0.6 / max(1, len(kinds) - 1)
    for i, L in enumerate(depths):
        by = {(r["arm"], r["seed"]): r for r in runs if r["L"] == L}
        here = [k for k in kinds if any(a == k for a, _ in by)]
        xs = {k: i - 0.3 + j * width for j, k in enumerate(here)}
        seeds = sorted({s for _, s in by})
        for ax, value in ((ax1, lambda r: r["final_mse"]),
                          (ax2, lambda r: r["val_correct"].count("1") / len(r["val_correct"]))):
            for s in seeds:
                pts = [(xs[k], value(by[(k, s)])) for k in here if (k, s) in by]
                ax.plot(*zip(*pts), color="0.8", lw=0.6, zorder=1)
            for k in here:
                label, color, _, mk = SST2_ARMS[k]
                v = [value(by[(k, s)]) for s in seeds if (k, s) in by]
                ax.scatter([xs[k]] * len(v), v, s=16, marker=mk, color=color, zorder=2,
                           label=label if ax is ax1 else None)
    b = data["baselines"]
    ax1.axhline(b["floor"]["train_mse"], color="k", ls=":", lw=1.2, label="floor baseline")
    ax2.axhline(b["floor"]["val_accuracy"], color="k", ls=":", lw=1.2)
    if b.get("bow"):
        ax2.axhline(b["bow"]["val_accuracy"], color="k", ls="--", lw=1.0, label="bag of words")
    ax1.set_yscale("log")
    ax1.set_ylabel("final training MSE")
    ax2.set_ylabel("validation accuracy")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(depths)), [f"$L = {L}$" for L in depths])
    legend_on_top(fig, ncol=2, fontsize=8)
    return fig


def plot_speedups(result: Mapping):
    """*Performance*: the speed of ``convres.sweep`` relative to each other way, log scale."""
    rows = result["rows"]
    ways = list(rows[0]["speedup"])
    x, w = np.arange(len(rows)), 0.8 / len(ways)
    fig, ax = figure(1, width=6.4, height=3.4)
    for k, way in enumerate(ways):
        vals = [r["speedup"][way] for r in rows]
        bars = ax.bar(x + (k - (len(ways) - 1) / 2) * w, vals, w, label=f"vs {way}", edgecolor="black",
                      hatch=("", "//", "..")[k % 3], color=("tab:blue", "tab:orange", "tab:green")[k % 3],
                      linewidth=0.6)
        ax.bar_label(bars, labels=[f"{v:.2g}x" for v in vals], fontsize=7, padding=2)
    ax.axhline(1, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r['size']}\n{r['dtype']}" for r in rows])
    ax.set_ylabel("speed of convres, relative")
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def plot_rank_collapse_gd(result):
    """*Rank collapse under GD*: each run's loss (and the floor) and ``sigma_min(Z_t)``."""
    colors = ["#1b9e77", "#d95f02", "#2c3e9e", "#7570b3", "#c2185b"]
    styles = ["-", "-", "-", "--", ":"]
    fig, (ax1, ax2) = _stacked(2, width=4.8, height=2.3)
    for r, c, ls, mk in zip(result.data["runs"], colors, styles, MARKERS):
        h = History.from_dict(r["history"])
        label = r["name"].replace("beta", r"$\beta$").replace("d_QK", r"$d_{QK}$")
        for ax, x, y in ((ax1, np.arange(len(h.loss)), h.loss), (ax2, h.record_steps, h.sigma_min_Z)):
            ax.semilogy(x, y, color=c, ls=ls, marker=mk, ms=4, markevery=max(1, len(x) // 6),
                        label=label)
    ax1.axhline(result.data["floor"], color="k", ls=(0, (1, 1)), lw=1.2, label="rank-one floor")
    ax1.set_ylabel(r"loss $\Phi(\theta_t)$")
    ax2.set_xlabel("gradient-descent step $t$")
    ax2.set_ylabel(r"$\sigma_{\min}(Z_t)$")
    legend_on_top(fig, ncol=2, fontsize=8)
    return fig


def plot_certified_run(run: Mapping):
    """*The theorem*, *FFN*: a certified run's loss against its envelope, distance against ``rho``,
    singular-value ratios against 1/2 (:meth:`convres.certify.CertifiedRun.to_dict`)."""
    c = run["certificate"]
    ffn = "sigma_M0" in c
    prime = "'" if ffn else ""
    if ffn:
        ratios = [(run["sigma"], c["sigma_M0"], r"$\sigma_{Nn}(M_t)/\sigma_M$", "D-", "tab:purple"),
                  (run["sigma_U"], c["sigma_U0"], r"$\sigma_1(W_{U,t})/\sigma_U$", "s:", "tab:brown")]
    else:
        ratios = [(run["sigma"], c["sigma_0"], r"$\sigma_{Nn}(H_t)/\sigma_0$", "D-", "tab:purple")]
    loss, env = np.asarray(run["loss"]), np.asarray(run["envelope"])
    t = np.arange(len(loss))
    every = max(1, len(t) // 12)
    fig, (ax1, ax2, ax3) = _stacked(3, height=2.2)
    ax1.semilogy(t, np.maximum(loss, 1e-300), "o-", ms=4, markevery=every, color="tab:blue",
                 label=r"loss $\Phi(\theta_t)$")
    ax1.semilogy(t, env, "s--", ms=4, markevery=every, color="k",
                 label=rf"certified envelope $(1-\mu\alpha{prime})^t\,\Phi(\theta_0)$")
    ax1.set_ylabel("loss")
    ax2.plot(t, run["path"], "^-", ms=4, markevery=every, color="tab:orange",
             label=r"path length $\sum_{s<t}\mu\|g_s\|$")
    ax2.plot(t, run["distance"], "o:", ms=4, markevery=every, color="tab:green",
             label=r"distance $\|\theta_t-\theta_0\|$")
    ax2.axhline(c["rho"], color="k", ls="--", lw=1.2, label=rf"certified radius $\rho{prime}$")
    ax2.set_ylim(0, 1.15 * c["rho"])
    ax2.set_ylabel("distance")
    for sigma, sigma_0, label, style, color in ratios:
        ax3.plot(t, np.asarray(sigma) / sigma_0, style, ms=4, markevery=every, color=color, label=label)
    ax3.axhline(0.5, color="0.35", ls="-.", lw=1.4, label="certified lower bound 1/2")
    ax3.set_ylim(0.4, 1.1)
    ax3.set_ylabel(ratios[0][2] if len(ratios) == 1 else "singular-value ratio")
    ax3.set_xlabel("gradient-descent step $t$")
    legend_on_top(fig, ncol=2, fontsize=8)
    return fig


def plot_certificate_sweep(rows: Sequence[Mapping], crossings: Mapping[int, float]):
    """*The theorem*: ``rho / r_sigma_lower`` against ``d`` per ``N n``, and the crossings ``d*``."""
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
