"""Singular values and the measures of rank collapse (definition ``rc-def-measures``), for a matrix
``(n, k)`` or a batch ``(..., n, k)``; a non-finite matrix is refused (:class:`NonFiniteError`).
"""

from __future__ import annotations

import math

import torch

__all__ = ["NonFiniteError", "stacked", "singular_values", "extreme_singular_values", "sigma_nn",
           "sigma_k", "spectral_norm", "singular_value_measures", "weyl_lower_bounds",
           "rank_one_residual"]


class NonFiniteError(ValueError):
    """A matrix holds NaN or infinite entries where its singular values are asked for."""


def stacked(M: torch.Tensor) -> torch.Tensor:
    """``(..., N, n, k)`` stacked into ``(..., N n, k)``, as the theory's ``Z`` and ``H``."""
    return M.reshape(*M.shape[:-3], -1, M.shape[-1]) if M.dim() >= 3 else M


def _finite(M: torch.Tensor, name: str) -> torch.Tensor:
    """``M`` detached; a :class:`NonFiniteError` if it has NaN or infinite entries."""
    M = M.detach()
    if not bool(torch.isfinite(M).all()):
        raise NonFiniteError(f"{name} has NaN or infinite entries, so it has no singular values; the "
                             "computation that produced it overflowed (check beta, the step size and "
                             "the scale of the data).")
    return M


def singular_values(M: torch.Tensor, name: str = "the matrix") -> torch.Tensor:
    """Singular values ``sigma_1 >= ... >= sigma_r`` of ``M`` (of each matrix of a batch)."""
    if not isinstance(M, torch.Tensor) or M.dim() < 2:
        raise ValueError(f"expected a matrix or a batch of matrices, got {getattr(M, 'shape', type(M))}.")
    return torch.linalg.svdvals(_finite(M, name))


def extreme_singular_values(M: torch.Tensor) -> torch.Tensor:
    """``(sigma_min, sigma_max)`` of the stacked ``M`` (``(B, 2)`` for ``(B, N, n, k)``)."""
    s = singular_values(stacked(M))
    return torch.stack([s[..., -1], s[..., 0]], dim=-1)


def sigma_nn(M: torch.Tensor) -> float:
    """``sigma_{Nn}`` of the stacked ``M`` (``(N, n, d)`` or ``(N n, d)``); 0 when ``N n > d``."""
    A = stacked(M)
    rows, cols = A.shape
    return 0.0 if rows > cols else float(singular_values(A)[rows - 1])


def sigma_k(M: torch.Tensor, k: int | None = None) -> float:
    """``sigma_k(M)`` in float64 (``k``: the number of rows by default; 0 past the smaller side)."""
    M = M.detach().to(torch.float64)
    rows, cols = M.shape
    k = rows if k is None else k
    if k > min(rows, cols):
        return 0.0
    M = _finite(M, "the matrix")
    if rows <= 256 or 4 * rows > 3 * cols or k != rows:
        return float(torch.linalg.svdvals(M)[k - 1])
    return math.sqrt(max(float(torch.linalg.eigvalsh(M @ M.T)[0]), 0.0))


def spectral_norm(W: torch.Tensor) -> float:
    """``||W||_2`` in float64: an SVD for small matrices, else from the smaller Gram matrix."""
    W = _finite(W, "the matrix").to(torch.float64)
    if min(W.shape) <= 128:
        return float(torch.linalg.svdvals(W)[0])
    G = W.T @ W if W.shape[1] <= W.shape[0] else W @ W.T
    return math.sqrt(max(float(torch.linalg.eigvalsh(G)[-1]), 0.0))


def singular_value_measures(sv: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sigma_min``, ``sigma_max``, ``condition``, effective rank ``exp(H(p))``, ``p_i = sigma_i /
    sum_j sigma_j`` (Roy & Vetterli 2007), stable rank ``sum_i sigma_i^2 / sigma_max^2``."""
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


def weyl_lower_bounds(X: torch.Tensor, A: torch.Tensor, beta: float) -> torch.Tensor:
    """``b_k = beta sigma_min(X) - sigma_{k+1}(A) <= sigma_{r-k}(A + beta X)`` (Weyl, lemma
    ``thm-lem-residual``)."""
    return beta * singular_values(X, "X")[-1] - singular_values(A, "A")


def rank_one_residual(M: torch.Tensor, *, relative: bool = False) -> torch.Tensor:
    """``res(M) = min_x ||M - 1 x^T||_F`` (Dong, Cordonnier & Loukas 2021), over ``||M||_F`` if
    ``relative``."""
    res = torch.linalg.matrix_norm(M - M.mean(dim=-2, keepdim=True))
    return res / torch.linalg.matrix_norm(M) if relative else res
