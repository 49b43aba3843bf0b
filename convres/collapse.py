"""Rank collapse of softmax attention, the counterexamples, and what the residual does about it.

Book chapters: *Rank collapse and what the residual does about it* (``book/rank_collapse.md``) and
*Rank collapse under gradient descent* (``book/rank_collapse_gd.md``). Paper: arXiv:2506.05249,
as its abstract and summary put it (v1 and v4; the book has not read the full text): softmax
attention can degenerate towards a rank-one output, ``sigma_min(Attn(X)) -> 0``; with the residual
``Z = Attn(X) + beta X`` the smallest singular value stays positive.

For one sequence ``X`` (``n x d``, ``n <= d``) and weights ``W_Q, W_K`` (``d x d_qk``), ``W_V``
(``d x d``) and an attention scale ``s``::

    S       = softmax_rows( s X W_Q W_K^T X^T )      (book equation (1))
    Attn(X) = S X W_V
    Z       = Attn(X) + beta X                        (book equation (2))

Two ways ``S`` degenerates, both built here on explicit instances:

* **uniform rows**, ``S -> 1 1^T / n``: the logits go to zero, e.g. the scale ``s = 1/d_qk`` with
  Gaussian ``W_Q, W_K`` and growing ``d_qk`` (:func:`gaussian_instance`, :func:`dqk_sweep`), or a small
  scale ``s``. Then ``Attn(X) -> (1/n) 1 1^T X W_V``, a rank-one matrix.
* **saturated rows that pick the same token**, ``S -> 1 e_j^T``: one token ``j`` is every query's
  favourite key and the scale is large (:func:`spiked_instance`, :func:`scale_sweep`). Then
  ``Attn(X) -> 1 x_j^T W_V``, again rank one.

All functions work in float64 and draw randomness only from explicit seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .gd import loss_and_grad
from .instances import collapse_instance
from .model import SCALES, ModelConfig, attention, attention_logits, attention_scale
from .rank import rank_one_residual, singular_value_measures, singular_values, spectral_norm
from .runtime import torch_threads
from .values import as_int, as_real

__all__ = [
    "MEASURES",
    "attention_output",
    "collapse_measures",
    "gaussian_instance",
    "logit_margins",
    "spiked_instance",
    "dqk_sweep",
    "dqk_sweep_seeds",
    "scale_sweep",
    "value_counterexample",
    "rank_one_floor",
    "gd_attention_stats",
    "sigma_min_table",
    "TABLE_D_QKS",
]

#: The measures of :func:`collapse_measures`, in the order the book reports them.
MEASURES = ("sigma_min", "sigma_max", "condition", "effective_rank", "stable_rank", "rank_one_residual")

DTYPE = torch.float64


def _check_int(name: str, value, minimum: int = 1) -> int:
    return as_int(name, value, minimum=minimum)


def _check_beta(name: str, value) -> float:
    return as_real(f"{name} (0 removes the residual)", value, minimum=0.0)


def _check_scale(value) -> float:
    return as_real("the attention scale s", value, minimum=0.0, above=True)


def _check_matrix(name: str, M, ndim=(2, 3)) -> None:
    if not isinstance(M, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(M).__name__}.")
    if M.dim() not in ndim:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dimensions, got shape "
                         f"{tuple(M.shape)}.")


def attention_output(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor,
                     s: float, beta: float = 0.0):
    """``(S, Attn(X), Z)`` with ``S = softmax_rows(s X W_Q W_K^T X^T)``, ``Attn(X) = S X W_V`` and
    ``Z = Attn(X) + beta X`` (book equations (1) and (2)), from the model's own
    :func:`convres.model.attention`. ``X`` is one sequence ``(n, d)`` or a batch ``(N, n, d)``; the
    results have the same leading dimensions.
    """
    _check_matrix("X", X)
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        _check_matrix(name, W, ndim=(2,))
        if W.shape[0] != X.shape[-1]:
            raise ValueError(f"{name} has {W.shape[0]} rows but X has d={X.shape[-1]} features; "
                             f"{name} must be (d x ...).")
    if W_Q.shape != W_K.shape:
        raise ValueError(f"W_Q and W_K must have the same shape (d x d_qk), got {tuple(W_Q.shape)} and "
                         f"{tuple(W_K.shape)}.")
    if W_V.shape[1] != X.shape[-1]:
        raise ValueError(f"W_V must be (d x d) = ({X.shape[-1]} x {X.shape[-1]}) for the residual, got "
                         f"{tuple(W_V.shape)}.")
    S, A = attention(X, W_Q, W_K, W_V, _check_scale(s))
    return S, A, A + _check_beta("beta", beta) * X


def collapse_measures(M: torch.Tensor) -> dict[str, float | np.ndarray]:
    """The book's collapse measures of ``M`` (one ``n x k`` matrix, or a batch ``(..., n, k)``).

    The spectral ones from :func:`convres.rank.singular_value_measures` (``sigma_min``,
    ``sigma_max``, condition number, effective rank, stable rank; one SVD per matrix) and the
    relative distance to the nearest matrix with identical rows, ``min_x ||M - 1 x^T||_F / ||M||_F``
    (:func:`convres.rank.rank_one_residual`). Floats for one matrix, arrays for a batch.
    """
    _check_matrix("M", M, ndim=tuple(range(2, 8)))
    measures = singular_value_measures(singular_values(M, "M"))
    measures["rank_one_residual"] = rank_one_residual(M, relative=True)
    out: dict[str, Any] = {k: v.detach().cpu().numpy() for k, v in measures.items()}
    return {k: float(v) for k, v in out.items()} if M.dim() == 2 else out


def gaussian_instance(n: int, d: int, d_qk: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """One random sequence and weights: ``X`` (``n x d``) with i.i.d. ``N(0, 1)`` entries and
    ``W_Q, W_K`` (``d x d_qk``), ``W_V`` (``d x d``) with i.i.d. ``N(0, 1/d)`` entries, the book's
    Gaussian initialization (:func:`convres.model.init_params`).

    ``X`` and the weights come from two independent streams derived from ``seed``, and ``X`` is
    drawn token by token, so changing ``n`` adds or removes rows of ``X`` and keeps the other rows
    and all the weights. The columns of ``W_Q``
    and ``W_K`` are drawn one after the other, so the first ``k`` columns of an instance with
    ``d_qk = K >= k`` are an instance with ``d_qk = k``: a sweep over ``d_qk`` adds query/key
    features to the *same* instance.
    """
    for name, v in (("n", n), ("d", d), ("d_qk", d_qk)):
        _check_int(name, v)
    if n > d:
        raise ValueError(f"the book's collapse measures need n <= d (so that X can have full row rank n), "
                         f"got n={n}, d={d}; use more features or fewer tokens.")
    seed = as_int("seed", seed, minimum=0)
    seed_X, seed_W = (int(ss.generate_state(1, np.uint64)[0]) for ss in np.random.SeedSequence(seed).spawn(2))
    gen_X, gen_W = torch.Generator().manual_seed(seed_X), torch.Generator().manual_seed(seed_W)
    X = torch.stack([torch.randn(d, generator=gen_X, dtype=DTYPE) for _ in range(n)])  # token by token
    W_V = torch.randn(d, d, generator=gen_W, dtype=DTYPE) / math.sqrt(d)
    QK = torch.randn(d_qk, 2, d, generator=gen_W, dtype=DTYPE) / math.sqrt(d)  # column by column
    return {"X": X, "W_Q": QK[:, 0, :].T.contiguous(), "W_K": QK[:, 1, :].T.contiguous(), "W_V": W_V}


def logit_margins(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, token: int) -> torch.Tensor:
    """Per row ``i`` of the (unscaled) logits ``L = X W_Q W_K^T X^T``: ``L_{i,token} - max_{j != token}
    L_{ij}``. All positive means every row puts its largest attention weight on ``token``, at every
    scale ``s > 0`` (the argmax of ``softmax(s L_i)`` does not depend on ``s``), and
    ``||S - 1 e_token^T||`` decays like ``exp(-s min_i margin_i)`` as ``s`` grows."""
    _check_matrix("X", X, ndim=(2,))
    n = X.shape[0]
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < n:
        raise ValueError(f"token must be an index in [0, n) = [0, {n}), got {token!r}.")
    L = (X @ W_Q) @ (X @ W_K).T
    others = torch.cat([L[:, :token], L[:, token + 1:]], dim=1)
    return L[:, token] - others.max(dim=1).values


def spiked_instance(n: int, d: int, d_qk: int, seed: int = 0, *, strength: float = 6.0,
                    token: int = 0) -> dict[str, torch.Tensor]:
    """A Gaussian instance (:func:`gaussian_instance`) in which token ``token`` is every query's
    favourite key: the saturated counterexample.

    Feature 0 of ``X`` is set to 1 for every token (a constant feature, like a bias) and feature 1 to
    ``1`` for ``token`` and ``0`` for all others (a marker). Query/key column 0 is replaced by a
    "key direction": ``W_Q[:, 0] = strength e_0`` and ``W_K[:, 0] = strength e_1`` (the Gaussian
    column 0 is zeroed first), so this column adds exactly ``s * strength^2`` to the logit of
    ``token`` in every row and nothing to the others; the other ``d_qk - 1`` columns stay Gaussian.

    Raises ``ValueError`` unless every row's largest logit is on ``token``
    (:func:`logit_margins` all positive): then for large ``s`` every row of ``S`` tends to
    ``e_token^T``. Returns ``X, W_Q, W_K, W_V`` and the per-row ``margins``.
    """
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
            f"strength={strength}): "
            f"rows {bad} do not put their largest logit on token {token} (the Gaussian "
            f"columns outweigh the spike strength^2 = {strength ** 2:g}); use a larger "
            "strength or another seed.")
    return {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": inst["W_V"], "margins": margins}


def _sweep(inst_at, points: Sequence, betas: Sequence[float]) -> dict[str, np.ndarray]:
    """Shared loop of :func:`dqk_sweep` and :func:`scale_sweep` (many tiny matrices: one PyTorch
    thread is faster than several, and much faster on a loaded machine)."""
    betas = [_check_beta(f"betas[{i}]", b) for i, b in enumerate(betas)]
    with torch_threads(1):
        return _sweep_body(inst_at, points, betas)


def _sweep_body(inst_at, points: Sequence, betas: list[float]) -> dict[str, np.ndarray]:
    S_all, A_all, Z_all, rows = [], [], [], []
    for p in points:
        X, W_Q, W_K, W_V, s = inst_at(p)
        S, A, _ = attention_output(X, W_Q, W_K, W_V, s)
        S_all.append(S)
        A_all.append(A)
        Z_all.append(torch.stack([A + b * X for b in betas])
                     if betas else A.new_zeros(0, *A.shape))
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


def dqk_sweep(d_qks: Sequence[int], betas: Sequence[float] = (0.1, 1.0), *, n: int = 8, d: int = 16,
              seed: int = 0, scale: str = "1/d_qk") -> dict[str, np.ndarray]:
    """The collapse measures of ``Attn(X)`` and of ``Z = Attn(X) + beta X`` as ``d_qk`` grows.

    One :func:`gaussian_instance` with ``max(d_qks)`` query/key features; at each ``d_qk`` its first
    ``d_qk`` columns are used, with the attention scale ``scale`` (``"1/d_qk"``: the logits shrink like
    ``1/sqrt(d_qk)`` and ``S -> 1 1^T/n``; ``"1/sqrt(d_qk)"``: they stay of order one).

    Returns a dict of arrays: ``d_qk``; ``attn_<measure>`` (one value per ``d_qk``) and
    ``Z_<measure>`` (``len(d_qks) x len(betas)``) for every measure of :data:`MEASURES`; all singular
    values ``attn_sv`` (``len(d_qks) x n``) and ``Z_sv`` (``len(d_qks) x len(betas) x n``);
    ``dist_uniform = ||S - 1 1^T/n||_2``, ``S_rank_one_residual`` (relative distance of ``S`` to
    the matrices with identical rows), ``dist_one_hot`` (distance of ``S`` to ``1 e_j^T`` for its
    most attended token ``j``), ``sigma_min_X``, ``sigma_max_X``, the two upper bounds on
    ``sigma_2(Attn(X))`` of the book's lemma "Nearly uniform attention gives a nearly rank-one
    output" (chapter *Rank collapse*; ``uniform_bound`` =
    ``||S - 1 1^T/n||_2 ||X||_2 ||W_V||_2`` and ``logit_bound`` =
    ``||s X W_Q W_K^T X^T||_F ||X||_2 ||W_V||_2 / 2``) and ``betas``.
    """
    if not isinstance(d_qks, Sequence) or len(d_qks) == 0:
        raise ValueError(f"d_qks must be a non-empty list of positive integers, got {d_qks!r}.")
    for i, v in enumerate(d_qks):
        _check_int(f"d_qks[{i}]", v)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}.")
    inst = gaussian_instance(n, d, max(d_qks), seed)

    def at(k):
        s = attention_scale(ModelConfig(d=d, d_qk=k, m=1, scale=scale))
        return inst["X"], inst["W_Q"][:, :k], inst["W_K"][:, :k], inst["W_V"], s

    out = _sweep(at, list(d_qks), betas)
    out["d_qk"] = np.asarray(d_qks, dtype=np.int64)
    return out


def dqk_sweep_seeds(d_qks: Sequence[int], betas: Sequence[float] = (0.1, 1.0), *,
                    seeds: Sequence[int] = tuple(range(16)), **kwargs) -> dict[str, np.ndarray]:
    """:func:`dqk_sweep` on one instance per seed, stacked: every array gets a leading seed
    dimension (``d_qk`` and ``betas`` stay one-dimensional). For medians and quantiles over
    instances: ``sigma_min`` of a single instance fluctuates a lot."""
    if not isinstance(seeds, Sequence) or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty list of integers, got {seeds!r}.")
    runs = [dqk_sweep(d_qks, betas, seed=s, **kwargs) for s in seeds]
    out = {k: np.stack([r[k] for r in runs]) for k in runs[0] if k not in ("d_qk", "betas")}
    out["d_qk"], out["betas"] = runs[0]["d_qk"], runs[0]["betas"]
    return out


def scale_sweep(scales: Sequence[float], betas: Sequence[float] = (0.1, 1.0), *,
                instance: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The collapse measures of ``Attn(X)`` and ``Z`` as the attention scale ``s`` varies on one
    instance (e.g. :func:`spiked_instance`): small ``s`` gives uniform rows, large ``s`` saturated
    rows. Same keys as :func:`dqk_sweep`, with ``scale`` instead of ``d_qk``."""
    if not isinstance(scales, Sequence) or len(scales) == 0:
        raise ValueError(f"scales must be a non-empty list of positive numbers, got {scales!r}.")
    scales = [_check_scale(s) for s in scales]
    missing = {"X", "W_Q", "W_K", "W_V"} - set(instance)
    if missing:
        raise ValueError("instance must hold X, W_Q, W_K and W_V (e.g. from spiked_instance), missing "
                         f"{sorted(missing)}.")
    out = _sweep(lambda s: (instance["X"], instance["W_Q"], instance["W_K"], instance["W_V"], s),
                 scales, betas)
    out["scale"] = np.asarray(scales, dtype=np.float64)
    return out


def value_counterexample(n: int = 6, d: int = 8, *, beta: float = 1.0, seed: int = 0,
                         scale: float = 1.0, identity_attention: bool = False) -> dict[str, torch.Tensor]:
    """The instance where the residual does *not* save the rank: ``W_V = -beta I``.

    Then ``Z = S X W_V + beta X = beta (I - S) X`` and ``(I - S) 1 = 0`` for every row-stochastic
    ``S``, so ``rank Z <= n - 1`` whatever ``X`` and the attention weights are. With
    ``identity_attention=True`` the attention is pushed to ``S = I`` (``W_Q = W_K = I``, rows of
    ``X`` of equal norm, a large ``scale``) and ``Z`` tends to the zero matrix.
    Returns ``X, W_Q, W_K, W_V, S, A, Z``.
    """
    beta = _check_beta("beta", beta)
    scale = _check_scale(scale)
    inst = gaussian_instance(n, d, d, seed)
    X, W_Q, W_K = inst["X"], inst["W_Q"], inst["W_K"]
    if identity_attention:
        X = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True) * math.sqrt(d)
        W_Q = W_K = torch.eye(d, dtype=DTYPE)
    W_V = -beta * torch.eye(d, dtype=DTYPE)
    S, A, Z = attention_output(X, W_Q, W_K, W_V, scale, beta)
    return {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V, "S": S, "A": A, "Z": Z}


def rank_one_floor(Y: torch.Tensor) -> float:
    """``1/2 sum_i ||Y_i - 1 ybar_i^T||_F^2`` with ``ybar_i`` the mean row of ``Y_i``: the smallest loss
    (book equation (5)) of any model whose output has identical rows within each sequence, as a
    collapsed attention output forces when there is no residual."""
    _check_matrix("Y", Y, ndim=(3,))
    return 0.5 * float(rank_one_residual(Y).pow(2).sum())


def gd_attention_stats(beta=0.0, *, mu: float = 0.002, **instance) -> dict[str, np.ndarray | float]:
    """How uniform the attention of the gradient-descent experiment is at initialization and how
    fast one step moves it (book chapter *Rank collapse under gradient descent*).

    On :func:`convres.instances.collapse_instance` (keyword arguments ``instance``) with residual
    ``beta`` (a number or a pair): ``dist_uniform``, ``||S_i - 1 1^T/n||_2`` per sequence at ``theta_0``, and
    ``logit_step``, ``||Delta_1||_F / mu`` with ``Delta_1`` the change of the scaled logits
    ``s X_i W_Q W_K^T X_i^T`` (all sequences) after one step of size ``mu``. The gradient of a logit
    with respect to ``W_Q, W_K`` carries the factor ``s``, and the change of the logits carries it
    again, so with ``s = 1/d_qk`` the step moves the logits about ``d_qk`` times less per unit of
    ``mu`` at ``d_qk`` than at ``d_qk = 1`` (times ``d_qk``-independent factors at initialization).
    """
    mu = as_real("mu (the step size)", mu, minimum=0.0, above=True)
    params, X, Y, cfg = collapse_instance(**instance)
    cfg = cfg.with_residual(beta)
    s = attention_scale(cfg)
    _, grads, tr = loss_and_grad(params, X, Y, cfg)
    W_Q, W_K = (params[k] - mu * grads[k] for k in ("layer1.W_Q", "layer1.W_K"))
    dist = torch.linalg.matrix_norm(tr.S[0] - 1.0 / X.shape[1], ord=2)
    step = torch.linalg.vector_norm(attention_logits(X, W_Q, W_K, s) - tr.logits[0]) / mu
    return {"dist_uniform": dist.numpy(), "logit_step": float(step)}


#: The ``d_qk`` values of the ``rank-collapse`` command: from 16 on, where the uniform-rows collapse
#: dominates (at ``d_qk = 1`` the logit matrix has rank one, a different degeneracy, see the chapter).
TABLE_D_QKS = (16, 64, 256, 1024, 4096, 16384)


def sigma_min_table(beta: float = 1.0, d_qks: Sequence[int] = TABLE_D_QKS, *, n: int = 8, d: int = 16,
                    seed: int = 0, seeds: int = 16) -> list[dict[str, float]]:
    """``[{"d_qk", "sigma_min_attn", "sigma_min_residual", ...}, ...]``: the median over ``seeds``
    :func:`gaussian_instance` s (seeds ``seed, ..., seed + seeds - 1``) of ``sigma_min(Attn(X))`` and
    ``sigma_min(Attn(X) + beta X)`` with scale ``1/d_qk`` (the ``rank-collapse`` command, book chapter
    *Rank collapse*, its first figure). One instance fluctuates a lot (its ``sigma_min(Attn)``
    need not fall from one ``d_qk`` to the next); the median shows the ``d_qk^{-1/2}`` trend.
    Extra fields per row: ``sigma_min_attn_q10`` and ``sigma_min_attn_q90`` (10 % and 90 % quantiles
    over the instances) and ``instances`` (= ``seeds``)."""
    beta = _check_beta("beta", beta)
    _check_int("seeds", seeds)
    _check_int("seed", seed, minimum=0)
    sw = dqk_sweep_seeds(list(d_qks), [beta], seeds=list(range(seed, seed + seeds)), n=n, d=d)
    a, z = sw["attn_sigma_min"], sw["Z_sigma_min"][:, :, 0]
    med_a, med_z = np.median(a, axis=0), np.median(z, axis=0)
    q10, q90 = np.quantile(a, 0.1, axis=0), np.quantile(a, 0.9, axis=0)
    return [{"d_qk": int(k), "sigma_min_attn": float(ma), "sigma_min_residual": float(mz),
             "sigma_min_attn_q10": float(lo), "sigma_min_attn_q90": float(hi), "instances": int(seeds)}
            for k, ma, mz, lo, hi in zip(sw["d_qk"], med_a, med_z, q10, q90)]
