"""Many gradient-descent runs at once (sweeps over beta, seeds and step sizes).

Book chapter: *Performance*. Every experiment and widget runs its sweeps through
:func:`gradient_descent_batch`, which returns exactly what :func:`convres.gd.gradient_descent`
returns for each configuration on its own.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from .gd import History, gradient_descent
from .model import ModelConfig

__all__ = ["gradient_descent_batch"]


def gradient_descent_batch(params_list: Sequence[Mapping[str, torch.Tensor]], X: torch.Tensor,
                           Y: torch.Tensor, cfgs: Sequence[ModelConfig] | ModelConfig,
                           mus: Sequence[float] | float, steps: int, *, record_every: int = 1,
                           tol: float = 0.0, blowup: float = 1e6, progress: bool = False,
                           device=None) -> list[tuple[dict[str, torch.Tensor], History]]:
    """Run :func:`convres.gd.gradient_descent` for every ``(params, cfg, mu)`` on the same data.

    The configurations may differ in ``beta`` (``beta_attn``, ``beta_ffn``), initial weights and
    step size; sizes and options must be equal. Returns ``[(params_final, History), ...]`` in the
    order of ``params_list``, equal to running them one by one.
    """
    n = len(params_list)
    cfgs = [cfgs] * n if isinstance(cfgs, ModelConfig) else list(cfgs)
    mus = [mus] * n if isinstance(mus, (int, float)) else list(mus)
    if len(cfgs) != n or len(mus) != n:
        raise ValueError(f"params_list, cfgs and mus must have the same length, got {n}, {len(cfgs)}, {len(mus)}.")
    out = []
    for params, cfg, mu in zip(params_list, cfgs, mus):
        if device is not None:
            params = {k: v.to(device) for k, v in params.items()}
        out.append(gradient_descent(params, X.to(params["W_U"].device), Y.to(params["W_U"].device), cfg, mu,
                                    steps, record_every=record_every, tol=tol, blowup=blowup,
                                    progress=progress))
    return out
