"""Measures of (near) rank collapse of a matrix such as the attention output ``Attn(X)``.

Book chapters: *Rank collapse* (definition ``rc-def-measures``) and *Multi-layer*. All functions
accept one matrix ``(n, k)`` or a batch ``(..., n, k)`` and return one value per matrix. The
measures that depend only on the singular values are computed in one place,
:func:`singular_value_measures`, which also accepts singular values computed once beforehand.
"""

from __future__ import annotations

import torch

__all__ = ["singular_values", "singular_value_measures", "condition_number", "effective_rank",
           "stable_rank", "rank_one_residual"]


def singular_values(M: torch.Tensor) -> torch.Tensor:
    """Singular values ``sigma_1 >= ... >= sigma_r`` of ``M`` (of each matrix of a batch)."""
    if not isinstance(M, torch.Tensor) or M.dim() < 2:
        raise ValueError(f"expected a matrix or a batch of matrices, got {getattr(M, 'shape', type(M))}.")
    return torch.linalg.svdvals(M)


def singular_value_measures(sv: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every spectral collapse measure from the singular values ``sv`` (last dimension, in
    decreasing order, as :func:`singular_values` returns them) of a matrix or a batch.

    Returns ``sigma_min``, ``sigma_max``, the condition number ``sigma_max / sigma_min`` (infinite
    when ``sigma_min = 0``), the effective rank ``exp(H(p))`` with ``p_i = sigma_i / sum_j sigma_j``
    and ``H`` the Shannon entropy (between 1 and ``r``; Roy & Vetterli 2007), and the stable rank
    ``sum_i sigma_i^2 / sigma_max^2 = ||M||_F^2 / ||M||_2^2``.
    """
    if not isinstance(sv, torch.Tensor) or sv.dim() < 1 or sv.shape[-1] == 0:
        raise ValueError("sv must be a non-empty tensor of singular values (last dimension), got "
                         f"{getattr(sv, 'shape', type(sv).__name__)}; compute it with singular_values(M).")
    s_max, s_min = sv[..., 0], sv[..., -1]
    p = sv / sv.sum(-1, keepdim=True)
    entropy = -(torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))).sum(-1)
    return {
        "sigma_min": s_min,
        "sigma_max": s_max,
        "condition": s_max / s_min,
        "effective_rank": torch.exp(entropy),
        "stable_rank": (sv ** 2).sum(-1) / s_max ** 2,
    }


def condition_number(M: torch.Tensor) -> torch.Tensor:
    """``sigma_max / sigma_min`` (infinite when ``sigma_min = 0``)."""
    return singular_value_measures(singular_values(M))["condition"]


def effective_rank(M: torch.Tensor) -> torch.Tensor:
    """``exp(H(p))`` with ``p_i = sigma_i / sum_j sigma_j`` and ``H`` the Shannon entropy.

    Between 1 (rank one) and ``min(n, k)`` (all singular values equal); Roy & Vetterli (2007).
    """
    return singular_value_measures(singular_values(M))["effective_rank"]


def stable_rank(M: torch.Tensor) -> torch.Tensor:
    """``||M||_F^2 / ||M||_2^2``, a continuous lower bound of the rank."""
    return singular_value_measures(singular_values(M))["stable_rank"]


def rank_one_residual(M: torch.Tensor, *, relative: bool = False) -> torch.Tensor:
    """Distance ``min_x ||M - 1 x^T||_F`` from ``M`` to the matrices with identical rows.

    The minimizer is ``x`` = the mean row of ``M``, so this is the Frobenius norm of ``M`` minus its
    mean row: the quantity ``res(M)`` of Dong, Cordonnier & Loukas (2021), measured in the
    Frobenius norm instead of their composite l1/l-infinity norm. With ``relative=True`` it is
    divided by ``||M||_F``.
    """
    if not isinstance(M, torch.Tensor) or M.dim() < 2:
        raise ValueError(f"expected a matrix or a batch of matrices, got {getattr(M, 'shape', type(M))}.")
    res = torch.linalg.matrix_norm(M - M.mean(dim=-2, keepdim=True))
    return res / torch.linalg.matrix_norm(M) if relative else res
