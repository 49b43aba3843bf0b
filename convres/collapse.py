"""Rank collapse of softmax attention, and what the residual does about it.

Uniform rows ``S -> 1 1^T / n`` (:func:`dqk_sweep`) or rows saturated on one token ``S -> 1 e_j^T``
(:func:`scale_sweep`) make ``Attn(X) = S X W_V`` rank one; the residual keeps
``sigma_min(Attn(X) + beta X)`` positive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .gd import loss_and_grad
from .instances import collapse_instance
from .model import ModelConfig, attention, attention_logits, attention_scale
from .rank import rank_one_residual, singular_value_measures, singular_values, spectral_norm
from .runtime import torch_threads
from .values import as_real, checked

__all__ = ["attention_output", "collapse_measures", "gaussian_instance", "logit_margins", "spiked_instance",
           "dqk_sweep", "dqk_sweep_seeds", "scale_sweep", "value_counterexample", "rank_one_floor",
           "gd_attention_stats", "sigma_min_table", "TABLE_D_QKS"]

DTYPE = torch.float64


def _matrix(name: str, v) -> torch.Tensor:
    if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() >= 2:
        return v
    got = f"{v.dtype} of shape {tuple(v.shape)}" if isinstance(v, torch.Tensor) else f"{v!r:.60}"
    raise TypeError(f"{name} must be a real floating-point tensor of 2 or more dimensions, got {got}.")


def _instance(name: str, v) -> dict:
    if not isinstance(v, Mapping):
        raise TypeError(f"{name} must be a dict of X, W_Q, W_K, W_V (a gaussian_instance), got {v!r:.60}.")
    return {**v, **{k: _matrix(f"{name}[{k!r}]", v.get(k)) for k in ("X", "W_Q", "W_K", "W_V")}}


@checked(X=_matrix, W_Q=_matrix, W_K=_matrix, W_V=_matrix, s="positive", beta="beta")
def attention_output(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor,
                     s: float, beta: float = 0.0):
    """``(S, Attn(X), Z)`` (book equations (1), (2)) for ``X`` ``(n, d)`` or ``(N, n, d)``."""
    S, A = attention(X, W_Q, W_K, W_V, s)
    return S, A, A + beta * X


def collapse_measures(M: torch.Tensor) -> dict[str, float | np.ndarray]:
    """:func:`convres.rank.singular_value_measures` of ``M`` and ``min_x ||M - 1 x^T||_F / ||M||_F``."""
    measures = singular_value_measures(singular_values(M, "M"))
    measures["rank_one_residual"] = rank_one_residual(M, relative=True)
    out: dict[str, Any] = {k: v.detach().cpu().numpy() for k, v in measures.items()}
    return {k: float(v) for k, v in out.items()} if M.dim() == 2 else out


@checked(n="size", d="size", d_qk="size", seed="seed")
def gaussian_instance(n: int, d: int, d_qk: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``X`` (``n x d``, ``N(0, 1)``), ``W_Q, W_K, W_V`` (``N(0, 1/d)``), drawn so that a smaller ``n``
    or ``d_qk`` gives a sub-instance of the same draw."""
    if n > d:
        raise ValueError(f"the book's collapse measures need n <= d (so that X can have full row rank n), "
                         f"got n={n}, d={d}; use more features or fewer tokens.")
    seed_X, seed_W = (int(ss.generate_state(1, np.uint64)[0]) for ss in np.random.SeedSequence(seed).spawn(2))
    gen_X, gen_W = torch.Generator().manual_seed(seed_X), torch.Generator().manual_seed(seed_W)
    X = torch.stack([torch.randn(d, generator=gen_X, dtype=DTYPE) for _ in range(n)])  # token by token
    W_V = torch.randn(d, d, generator=gen_W, dtype=DTYPE) / math.sqrt(d)
    QK = torch.randn(d_qk, 2, d, generator=gen_W, dtype=DTYPE) / math.sqrt(d)  # column by column
    return {"X": X, "W_Q": QK[:, 0, :].T.contiguous(), "W_K": QK[:, 1, :].T.contiguous(), "W_V": W_V}


@checked(X=_matrix, W_Q=_matrix, W_K=_matrix, token="index")
def logit_margins(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, token: int) -> torch.Tensor:
    """``L_{i,token} - max_{j != token} L_{ij}`` per row of ``L = X W_Q W_K^T X^T``."""
    L = (X @ W_Q) @ (X @ W_K).T
    others = torch.cat([L[:, :token], L[:, token + 1:]], dim=1)
    return L[:, token] - others.max(dim=1).values


def spiked_instance(n: int, d: int, d_qk: int, seed: int = 0, *, strength: float = 6.0,
                    token: int = 0) -> dict[str, torch.Tensor]:
    """The saturated counterexample: ``+ s strength^2`` on ``token``'s logit, the largest of every row."""
    if d < 3:
        raise ValueError("spiked_instance needs d >= 3 (two structured features and "
                         f"Gaussian ones), got d={d}.")
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < n:
        raise ValueError(f"token must be an index in [0, n) = [0, {n}), got {token!r}.")
    strength = as_real("strength", strength)
    inst = gaussian_instance(n, d, d_qk, seed)
    X = inst["X"].clone()
    X[:, 0] = 1.0
    X[:, 1] = 0.0
    X[token, 1] = 1.0
    W_Q, W_K = inst["W_Q"].clone(), inst["W_K"].clone()
    W_Q[:, 0] = 0.0
    W_K[:, 0] = 0.0
    W_Q[0, 0] = strength
    W_K[1, 0] = strength
    margins = logit_margins(X, W_Q, W_K, token)
    if not bool((margins > 0).all()):
        bad = [int(i) for i in torch.nonzero(margins <= 0).flatten()]
        raise ValueError(
            f"spiked_instance(n={n}, d={d}, d_qk={d_qk}, seed={seed}, "
            f"strength={strength}): rows {bad} do not put their largest logit on token "
            f"{token}; use a larger strength or another seed.")
    return {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": inst["W_V"], "margins": margins}


# The chapter shows these two functions' source: the policy wraps them after their definitions.
collapse_measures = checked(M=_matrix)(collapse_measures)
spiked_instance = checked(n="size", d="size", d_qk="size", seed="seed")(spiked_instance)


@torch_threads(1)  # many tiny matrices: one PyTorch thread is faster than several
def _sweep(inst_at, points: Sequence, betas: Sequence[float]) -> dict[str, np.ndarray]:
    S_all, A_all, Z_all, rows = [], [], [], []
    for p in points:
        X, W_Q, W_K, W_V, s = inst_at(p)
        S, A = attention(X, W_Q, W_K, W_V, s)      # checked at the entry point, not per point
        S_all.append(S)
        A_all.append(A)
        Z_all.append(torch.stack([A + b * X for b in betas]))
        sv_X = singular_values(X, "X")
        logits = attention_logits(X, W_Q, W_K, s)
        norms = float(sv_X[0]) * spectral_norm(W_V)
        rows.append((float(sv_X[-1]), float(sv_X[0]), norms, 0.5 * float(torch.linalg.matrix_norm(logits))))
    S, A, Z = torch.stack(S_all), torch.stack(A_all), torch.stack(Z_all)
    n = S.shape[-1]
    uniform = torch.full_like(S, 1.0 / n)
    out: dict[str, Any] = {f"attn_{k}": v for k, v in collapse_measures(A).items()}
    out.update({f"Z_{k}": v for k, v in collapse_measures(Z).items()})  # (points, betas)
    sv_A, sv_Z = singular_values(A, "Attn(X)"), singular_values(Z, "Z")
    out["attn_sv"] = sv_A.numpy()                                        # (points, n)
    out["Z_sv"] = sv_Z.numpy()                                           # (points, betas, n)
    out["dist_uniform"] = torch.linalg.matrix_norm(S - uniform, ord=2).numpy()
    out["S_rank_one_residual"] = rank_one_residual(S, relative=True).numpy()   # rows of S identical?
    top = S.mean(dim=-2).argmax(dim=-1)                                  # most attended token
    one_hot = torch.nn.functional.one_hot(top, n).to(S.dtype).unsqueeze(-2).expand_as(S)
    out["dist_one_hot"] = torch.linalg.matrix_norm(S - one_hot, ord=2).numpy()
    table = np.array(rows)
    out["sigma_min_X"], out["sigma_max_X"] = table[:, 0], table[:, 1]
    # the book's lemma on nearly uniform attention:
    # sigma_2(Attn) <= ||S - U||_2 ||X||_2 ||W_V||_2 <= (1/2)||sL||_F ||X||_2 ||W_V||_2
    out["uniform_bound"] = out["dist_uniform"] * table[:, 2]
    out["logit_bound"] = table[:, 3] * table[:, 2]
    out["betas"] = np.asarray(betas, dtype=np.float64)
    return out


@checked(d_qks="sizes", betas="betas", n="size", d="size", seed="seed")
def dqk_sweep(d_qks: Sequence[int], betas: Sequence[float] = (0.1, 1.0), *, n: int = 8, d: int = 16,
              seed: int = 0, scale: str = "1/d_qk") -> dict[str, np.ndarray]:
    """The collapse measures of ``Attn(X)`` and ``Z = Attn(X) + beta X`` as ``d_qk`` grows, ``||S -
    U||_2`` and the bounds of lemma rc-lem-uniform on ``sigma_2(Attn(X))``."""
    inst = gaussian_instance(n, d, max(d_qks), seed)

    def at(k):
        s = attention_scale(ModelConfig(d=d, d_qk=k, m=1, scale=scale))
        return inst["X"], inst["W_Q"][:, :k], inst["W_K"][:, :k], inst["W_V"], s

    out = _sweep(at, list(d_qks), betas)
    out["d_qk"] = np.asarray(d_qks, dtype=np.int64)
    return out


@checked(d_qks="sizes", betas="betas", seeds="seeds")
def dqk_sweep_seeds(d_qks: Sequence[int], betas: Sequence[float] = (0.1, 1.0), *,
                    seeds: Sequence[int] = tuple(range(16)), **kwargs) -> dict[str, np.ndarray]:
    """:func:`dqk_sweep` per seed, stacked along a leading axis."""
    runs = [dqk_sweep(d_qks, betas, seed=s, **kwargs) for s in seeds]
    out = {k: np.stack([r[k] for r in runs]) for k in runs[0] if k not in ("d_qk", "betas")}
    out["d_qk"], out["betas"] = runs[0]["d_qk"], runs[0]["betas"]
    return out


@checked(scales="positives", betas="betas", instance=_instance)
def scale_sweep(scales: Sequence[float], betas: Sequence[float] = (0.1, 1.0), *,
                instance: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """:func:`dqk_sweep`'s measures as the attention scale ``s`` varies on one ``instance``."""
    out = _sweep(lambda s: (instance["X"], instance["W_Q"], instance["W_K"], instance["W_V"], s),
                 scales, betas)
    out["scale"] = np.asarray(scales, dtype=np.float64)
    return out


@checked(n="size", d="size", beta="beta", seed="seed", scale="positive")
def value_counterexample(n: int = 6, d: int = 8, *, beta: float = 1.0, seed: int = 0,
                         scale: float = 1.0, identity_attention: bool = False) -> dict[str, torch.Tensor]:
    """``W_V = -beta I`` gives ``Z = beta (I - S) X``, ``rank Z <= n - 1`` (``Z -> 0`` as ``S -> I``)."""
    inst = gaussian_instance(n, d, d, seed)
    X, W_Q, W_K = inst["X"], inst["W_Q"], inst["W_K"]
    if identity_attention:
        X = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True) * math.sqrt(d)
        W_Q = W_K = torch.eye(d, dtype=DTYPE)
    W_V = -beta * torch.eye(d, dtype=DTYPE)
    S, A, Z = attention_output(X, W_Q, W_K, W_V, scale, beta)
    return {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V, "S": S, "A": A, "Z": Z}


@checked(Y=_matrix)
def rank_one_floor(Y: torch.Tensor) -> float:
    """``1/2 sum_i ||Y_i - 1 ybar_i^T||_F^2``: the least loss (5) of rows equal within a sequence."""
    return 0.5 * float(rank_one_residual(Y).pow(2).sum())


@checked(beta="beta", mu="positive")
def gd_attention_stats(beta=0.0, *, mu: float = 0.002, **instance) -> dict[str, np.ndarray | float]:
    """``||S_i - U||_2`` at ``theta_0`` and the logits' change in one step over ``mu``."""
    params, X, Y, cfg = collapse_instance(**instance)
    cfg = cfg.with_residual(beta)
    s = attention_scale(cfg)
    _, grads, tr = loss_and_grad(params, X, Y, cfg)
    W_Q, W_K = (params[k] - mu * grads[k] for k in ("layer1.W_Q", "layer1.W_K"))
    dist = torch.linalg.matrix_norm(tr.S[0] - 1.0 / X.shape[1], ord=2)
    step = torch.linalg.vector_norm(attention_logits(X, W_Q, W_K, s) - tr.logits[0]) / mu
    return {"dist_uniform": dist.numpy(), "logit_step": float(step)}


#: The ``d_qk`` values of the ``rank-collapse`` command (from 16 on, uniform rows dominate).
TABLE_D_QKS = (16, 64, 256, 1024, 4096, 16384)


@checked(beta="beta", d_qks="sizes", n="size", d="size", seed="seed", seeds="size")
def sigma_min_table(beta: float = 1.0, d_qks: Sequence[int] = TABLE_D_QKS, *, n: int = 8, d: int = 16,
                    seed: int = 0, seeds: int = 16) -> list[dict[str, float]]:
    """Per ``d_qk``, medians of ``sigma_min(Attn(X))`` and ``sigma_min(Attn(X) + beta X)`` over seeds."""
    sw = dqk_sweep_seeds(list(d_qks), [beta], seeds=list(range(seed, seed + seeds)), n=n, d=d)
    a, z = sw["attn_sigma_min"], sw["Z_sigma_min"][:, :, 0]
    med_a, med_z = np.median(a, axis=0), np.median(z, axis=0)
    q10, q90 = np.quantile(a, 0.1, axis=0), np.quantile(a, 0.9, axis=0)
    return [{"d_qk": int(k), "sigma_min_attn": float(ma), "sigma_min_residual": float(mz),
             "sigma_min_attn_q10": float(lo), "sigma_min_attn_q90": float(hi), "instances": int(seeds)}
            for k, ma, mz, lo, hi in zip(sw["d_qk"], med_a, med_z, q10, q90)]
