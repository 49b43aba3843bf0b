"""Interactive exploration of rank collapse with ipywidgets (sliders for beta, d_qk and n).

Book chapter: *Rank collapse and the residual* (``book/rank_collapse.md``), section "Explore it".
Everything is computed by :mod:`convres.collapse` and drawn by :func:`explorer_figure`; the widget
only wires sliders to :func:`explorer_data`. The figure is shown in an ``ipywidgets.Image`` (a PNG
drawn at twice its display resolution, :data:`DISPLAY_WIDTH_PX` wide on the page), so the executed
page keeps the last picture, sharp, in its saved widget state: the static site shows it without a
kernel. The numbers under the sliders are plain text (no colours of their own, readable in light and
dark themes). The update can be tested without a browser (:func:`update_image`).
"""

from __future__ import annotations

import io

import numpy as np
import torch

from . import plotting
from .collapse import attention_output, collapse_measures, gaussian_instance, gd_collapse_runs

__all__ = ["BETA_RANGE", "D_QK_CHOICES", "DISPLAY_WIDTH_PX", "explorer_data", "explorer_figure", "figure_png",
           "summary_text", "update_image", "rank_collapse_explorer"]

#: The values of the ``d_qk`` slider (powers of two).
D_QK_CHOICES = tuple(2 ** k for k in range(0, 15))

#: The range of the ``beta`` slider (the explorer refuses values outside it instead of clamping).
BETA_RANGE = (0.0, 2.0)

#: The explorer's figure: its width in inches, the largest width it is shown at on the page (CSS
#: pixels; the book's content column is about 560 px wide) and the PNG resolution (2 image pixels
#: per CSS pixel, so the picture stays sharp on high-density screens and is never upscaled).
FIGURE_WIDTH_IN = 5.6
DISPLAY_WIDTH_PX = 560
EXPLORER_DPI = 2 * DISPLAY_WIDTH_PX / FIGURE_WIDTH_IN


def explorer_data(beta: float = 1.0, d_qk: int = 64, n: int = 8, *, d: int = 16, seed: int = 0,
                  gd_steps: int = 0, mu: float = 0.002) -> dict:
    """What the explorer shows for one position of the sliders.

    The singular values of ``Attn(X)`` and of ``Z = Attn(X) + beta X`` on the
    :func:`convres.collapse.gaussian_instance` with ``n`` tokens, ``d`` features, ``d_qk`` query/key
    features and scale ``1/d_qk``, with their collapse measures. The weights do not depend on ``n``:
    changing ``n`` adds or removes rows of ``X`` and keeps everything else; with ``gd_steps > 0`` also two short
    gradient-descent runs (:func:`convres.collapse.gd_collapse_runs`, ``N = 4`` sequences of ``n``
    tokens, ``d = 32``) for ``beta = 0`` and the chosen ``beta``.
    """
    if isinstance(gd_steps, bool) or not isinstance(gd_steps, int) or gd_steps < 0:
        raise ValueError(f"gd_steps must be an integer >= 0 (0: no gradient descent), got {gd_steps!r}.")
    inst = gaussian_instance(n, d, d_qk, seed)
    X, W_Q, W_K, W_V = inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"]
    _, A, Z = attention_output(X, W_Q, W_K, W_V, 1.0 / d_qk, beta)
    out = {
        "beta": float(beta), "d_qk": int(d_qk), "n": int(n), "d": int(d),
        "sv_X": torch.linalg.svdvals(X).numpy(),
        "sv_attn": torch.linalg.svdvals(A).numpy(),
        "sv_Z": torch.linalg.svdvals(Z).numpy(),
        "attn": collapse_measures(A),
        "Z": collapse_measures(Z),
        "runs": {},
    }
    if gd_steps:
        betas = (0.0,) if beta == 0 else (0.0, float(beta))
        out["runs"] = gd_collapse_runs(betas, mu=mu, steps=gd_steps, record_every=max(1, gd_steps // 20),
                                       n=n, d_qk=d_qk, seed=seed)
    return out


def explorer_figure(data: dict):
    """The explorer's picture: the singular-value spectra of ``X``, ``Attn(X)`` and ``Z`` (log
    scale), and, when ``data`` holds runs, their loss curves below (one column: the page is narrow)."""
    from .plotting import figure
    nrows = 2 if data["runs"] else 1
    fig, axes = figure(1, nrows, width=FIGURE_WIDTH_IN, height=3.4)
    ax = axes[0] if nrows == 2 else axes
    k = np.arange(1, len(data["sv_attn"]) + 1)
    floor = 1e-17
    ax.semilogy(k, data["sv_X"], "s:", color="0.5", label=r"$X$")
    ax.semilogy(k, np.maximum(data["sv_attn"], floor), "o-", color="tab:orange", label=r"$\mathrm{Attn}(X)$")
    ax.semilogy(k, np.maximum(data["sv_Z"], floor), "^-", color="tab:blue",
                label=rf"$Z$, $\beta={data['beta']:g}$")
    ax.set_xlabel(r"index $i$")
    ax.set_ylabel(r"singular value $\sigma_i$")
    ax.set_title(rf"$d_{{QK}}={data['d_qk']}$, $n={data['n']}$, scale $1/d_{{QK}}$", fontsize=11)
    ax.set_ylim(bottom=max(floor, 0.3 * float(np.min(np.maximum(data["sv_attn"], floor)))))
    ax.legend(frameon=False, fontsize=10)
    if data["runs"]:
        ax2 = axes[1]
        for b, h in data["runs"].items():
            ax2.semilogy(np.arange(len(h.loss)), np.maximum(h.loss, 1e-300),
                         color="tab:orange" if b == 0 else "tab:blue", label=rf"$\beta={b:g}$")
        ax2.set_xlabel("gradient-descent step $t$")
        ax2.set_ylabel(r"loss $\Phi(\theta_t)$")
        ax2.set_title("gradient descent, same data and init", fontsize=11)
        ax2.legend(frameon=False, fontsize=10)
    return fig


def figure_png(fig, dpi: float = EXPLORER_DPI) -> bytes:
    """:func:`convres.plotting.figure_png` at the explorer's resolution (sharp at its display width)."""
    return plotting.figure_png(fig, dpi=dpi)


def summary_text(data: dict) -> str:
    """The explorer's readout: plain text, no markup or colours of its own (it takes the page's
    text colour, so it is readable in light and dark themes)."""
    a, z = data["attn"], data["Z"]
    return (f"σ_min(Attn(X)) = {a['sigma_min']:.2e}, effective rank {a['effective_rank']:.2f};  "
            f"σ_min(Z) = {z['sigma_min']:.2e}, effective rank {z['effective_rank']:.2f}")


def update_image(image, label, beta: float, d_qk: int, n: int, gd_steps: int = 0, **kwargs) -> dict:
    """Recompute :func:`explorer_data` and put its figure into ``image`` (an ``ipywidgets.Image``)
    and its numbers into ``label`` (an ``ipywidgets.HTML``). Returns the data."""
    data = explorer_data(beta, d_qk, n, gd_steps=gd_steps, **kwargs)
    image.value = figure_png(explorer_figure(data))
    label.value = summary_text(data)
    return data


def rank_collapse_explorer(beta: float = 1.0, d_qk: int = 64, n: int = 8, *, gd_steps: int = 60,
                           run_gd: bool = False, d: int = 16, seed: int = 0):
    """The widget: sliders for ``beta`` (in :data:`BETA_RANGE`, steps of 0.05), ``d_qk`` (one of
    :data:`D_QK_CHOICES`, scale ``1/d_qk``) and the number of tokens ``n`` (2 to ``d``), and a
    checkbox that re-runs ``gd_steps`` steps of gradient descent on every change (slower: about a
    second per update on a laptop CPU). Initial values outside these ranges raise ``ValueError``
    (a slider would silently clamp them)."""
    import ipywidgets as w
    lo, hi = BETA_RANGE
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not lo <= beta <= hi:
        raise ValueError(f"beta must be a number in [{lo:g}, {hi:g}] (the slider's range), got {beta!r}; "
                         "for other values call explorer_data(beta, d_qk, n) directly.")
    if d_qk not in D_QK_CHOICES:
        raise ValueError(f"d_qk must be one of {D_QK_CHOICES}, got {d_qk!r}.")
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= d:
        raise ValueError(f"n must be an integer in [2, d={d}], got {n!r}.")
    style = {"description_width": "initial"}
    s_beta = w.FloatSlider(value=beta, min=lo, max=hi, step=0.05, description="beta", style=style,
                           continuous_update=False)
    s_dqk = w.SelectionSlider(options=list(D_QK_CHOICES), value=d_qk, description="d_QK", style=style,
                              continuous_update=False)
    s_n = w.IntSlider(value=n, min=2, max=d, description="tokens n", style=style, continuous_update=False)
    c_gd = w.Checkbox(value=run_gd, description=f"re-run {gd_steps} GD steps", indent=False)
    image = w.Image(format="png", layout=w.Layout(width="100%", max_width=f"{DISPLAY_WIDTH_PX}px", height="auto"))
    label = w.HTML()

    def refresh(_change=None):
        update_image(image, label, s_beta.value, s_dqk.value, s_n.value,
                     gd_steps=gd_steps if c_gd.value else 0, d=d, seed=seed)

    for ctrl in (s_beta, s_dqk, s_n, c_gd):
        ctrl.observe(refresh, names="value")
    refresh()
    return w.VBox([w.HBox([s_beta, s_dqk]), w.HBox([s_n, c_gd]), label, image])
