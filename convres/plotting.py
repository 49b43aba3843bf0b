"""Plotting helpers: static matplotlib figures readable on light and dark pages.

Every figure has an opaque white face (so it stays readable under a dark theme) and losses are on
a log scale. Chapters call these functions instead of repeating plotting code.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["figure", "plot_loss", "plot_sigma_min", "beta_colors"]


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 4.2, height: float = 3.2, **kwargs):
    """A figure with an opaque white face and ``nrows x ncols`` axes (constrained layout)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             layout="constrained", facecolor="white", squeeze=False, **kwargs)
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(True, which="major", alpha=0.3)
    return fig, (axes[0, 0] if axes.size == 1 else axes.reshape(-1) if min(nrows, ncols) == 1 else axes)


def beta_colors(betas: Sequence[float]) -> list:
    """One colour per residual coefficient, from light (small beta) to dark (beta = 1)."""
    cmap = matplotlib.colormaps["viridis"]
    hi = max(max(betas), 1e-12)
    return [cmap(0.85 - 0.75 * (b / hi)) for b in betas]


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
