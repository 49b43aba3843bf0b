"""Measures of (near) rank collapse of a matrix such as the attention output ``Attn(X)``.

Book chapters: *Rank collapse* and *Multi-layer*. All functions accept one matrix ``(n, k)`` or a
batch ``(..., n, k)`` and return one value per matrix.
"""

from __future__ import annotations

import torch

__all__ = ["singular_values", "condition_number", "effective_rank", "stable_rank", "rank_one_residual"]


def singular_values(M: torch.Tensor) -> torch.Tensor:
    """Singular values ``sigma_1 >= ... >= sigma_r`` of ``M`` (of each matrix of a batch)."""
    if not isinstance(M, torch.Tensor) or M.dim() < 2:
        raise ValueError(f"expected a matrix or a batch of matrices, got {getattr(M, 'shape', type(M))}.")
    return torch.linalg.svdvals(M)


def condition_number(M: torch.Tensor) -> torch.Tensor:
    """``sigma_max / sigma_min`` (infinite when ``sigma_min = 0``)."""
    s = singular_values(M)
    return s[..., 0] / s[..., -1]


def effective_rank(M: torch.Tensor) -> torch.Tensor:
    """``exp(H(p))`` with ``p_i = sigma_i / sum_j sigma_j`` and ``H`` the Shannon entropy.

    Between 1 (rank one) and ``min(n, k)`` (all singular values equal); Roy & Vetterli (2007).
    """
    s = singular_values(M)
    p = s / s.sum(-1, keepdim=True)
    entropy = -(torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))).sum(-1)
    return torch.exp(entropy)


def stable_rank(M: torch.Tensor) -> torch.Tensor:
    """``||M||_F^2 / ||M||_2^2``, a continuous lower bound of the rank."""
    s = singular_values(M)
    return (s ** 2).sum(-1) / s[..., 0] ** 2


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
