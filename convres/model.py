"""The Transformer of the paper: one attention head, a two-layer FFN, residual connections.

Book chapter: *The model* (``book/model.md``). Paper: arXiv:2506.05249, Section "Problem setup"
(v1 and v4 use the same single-layer model).

One block (equations (model-Z), (model-H) and (model-F) of the book)::

    S   = softmax_rows( s * X W_Q W_K^T X^T )          (n x n, each row sums to 1)
    Z   = S X W_V + beta_attn * X                       attention output plus residual
    H   = act(Z W_1) W_2 + beta_ffn * Z                 FFN output plus residual
    F   = H W_U                                         output projection

With ``beta_attn = beta_ffn = 1`` this is the paper's ``F = (FFN(Attn(X) + X) + Attn(X) + X) W_U``;
``beta = 0`` removes both residual connections exactly. ``L`` blocks are stacked by feeding ``H``
of one block as ``X`` of the next; ``W_U`` acts on the last ``H``. With ``pool="mean"`` the rows of
the last ``H`` are averaged first (one output per sequence, used for classification).

Parameters are a plain ``dict`` of tensors named in the paper's notation; the layer ``l`` (from 1)
holds ``"layer{l}.W_Q"``, ``"layer{l}.W_K"``, ``"layer{l}.W_V"``, ``"layer{l}.W_1"``,
``"layer{l}.W_2"`` and the model holds ``"W_U"``. Every function here is a pure function of
``(params, X)`` given a :class:`ModelConfig`, so ``torch.func.grad`` and ``torch.func.vmap`` apply.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

import torch
import torch.nn.functional as nnf

__all__ = [
    "ACTIVATIONS",
    "SCALES",
    "ModelConfig",
    "Trace",
    "activation",
    "attention_scale",
    "attention_matrix",
    "block",
    "forward",
    "forward_trace",
    "init_params",
    "layer_params",
    "loss",
    "param_shapes",
    "validate",
    "validate_params",
    "validate_data",
]

#: Lipschitz activations of the FFN (all 1-Lipschitz).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": nnf.gelu,
    "tanh": torch.tanh,
    "softplus": nnf.softplus,
}

#: Named attention scales ``s`` in ``softmax(s X W_Q W_K^T X^T)``.
SCALES = ("1/sqrt(d_qk)", "1/d_qk", "1")

LAYER_WEIGHTS = ("W_Q", "W_K", "W_V", "W_1", "W_2")
POOLS = (None, "mean")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and options of the model (everything but the weights).

    Attributes:
        d: feature dimension of the input ``X`` (tokens x ``d``) and of every hidden matrix.
        d_qk: inner dimension of ``W_Q`` and ``W_K`` (``d x d_qk``).
        m: width of the FFN (``W_1`` is ``d x m``, ``W_2`` is ``m x d``).
        c: output dimension (``W_U`` is ``d x c``).
        L: number of stacked blocks (``L = 1`` is the paper's single-layer model).
        beta: residual coefficient of both connections (1 = the paper's model, 0 = none).
        beta_attn, beta_ffn: separate coefficients for the attention / FFN residual; ``None`` means
            "use ``beta``".
        activation: name of the FFN activation, one of :data:`ACTIVATIONS`.
        scale: attention scale ``s``: one of :data:`SCALES` or a positive number.
        pool: ``None`` (one output row per token) or ``"mean"`` (average the rows of the last
            ``H`` before ``W_U``: one output per sequence).
    """

    d: int
    d_qk: int
    m: int
    c: int = 1
    L: int = 1
    beta: float = 1.0
    beta_attn: float | None = None
    beta_ffn: float | None = None
    activation: str = "relu"
    scale: str | float = "1/sqrt(d_qk)"
    pool: str | None = None

    def __post_init__(self):
        for name in ("d", "d_qk", "m", "c", "L"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ModelConfig.{name} must be a positive integer, got {value!r}; "
                    f"pass e.g. {name}=4.")
        for name in ("beta", "beta_attn", "beta_ffn"):
            value = getattr(self, name)
            if value is None and name != "beta":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError(f"ModelConfig.{name} must be a finite number, got {value!r}.")
            if value < 0:
                raise ValueError(
                    f"ModelConfig.{name} must be >= 0 (0 removes the residual, 1 is the paper's "
                    f"model), got {value!r}.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        attention_scale(self)  # validates `scale`
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool {self.pool!r}; choose None (per token) or 'mean'.")

    @property
    def b_attn(self) -> float:
        """Coefficient of the attention residual ``Z = Attn(X) + b_attn X``."""
        return float(self.beta if self.beta_attn is None else self.beta_attn)

    @property
    def b_ffn(self) -> float:
        """Coefficient of the FFN residual ``H = FFN(Z) + b_ffn Z``."""
        return float(self.beta if self.beta_ffn is None else self.beta_ffn)

    def replace(self, **changes) -> "ModelConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def attention_scale(cfg: ModelConfig) -> float:
    """The scale ``s`` of the attention logits ``s X W_Q W_K^T X^T``."""
    s = cfg.scale
    if isinstance(s, str):
        if s == "1/sqrt(d_qk)":
            return 1.0 / math.sqrt(cfg.d_qk)
        if s == "1/d_qk":
            return 1.0 / cfg.d_qk
        if s == "1":
            return 1.0
        raise ValueError(f"unknown attention scale {s!r}; choose one of {SCALES} or a positive number.")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and s > 0):
        raise ValueError(f"attention scale must be one of {SCALES} or a positive number, got {s!r}.")
    return float(s)


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function called ``name`` (see :data:`ACTIVATIONS`)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}.") from None


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """Name -> shape of every weight of the model described by ``cfg``."""
    shapes: dict[str, tuple[int, int]] = {}
    for l in range(1, cfg.L + 1):
        shapes[f"layer{l}.W_Q"] = (cfg.d, cfg.d_qk)
        shapes[f"layer{l}.W_K"] = (cfg.d, cfg.d_qk)
        shapes[f"layer{l}.W_V"] = (cfg.d, cfg.d)
        shapes[f"layer{l}.W_1"] = (cfg.d, cfg.m)
        shapes[f"layer{l}.W_2"] = (cfg.m, cfg.d)
    shapes["W_U"] = (cfg.d, cfg.c)
    return shapes


def init_params(cfg: ModelConfig, seed: int | torch.Generator = 0, *, dtype=torch.float64,
                device=None, branch_scale: float | None = None) -> dict[str, torch.Tensor]:
    """Gaussian initialization (the book's Assumption "Gaussian initialization").

    Every entry is drawn independently from ``N(0, std^2)`` with ``std = 1/sqrt(fan_in)``:
    ``W_Q, W_K, W_V, W_1, W_U`` use ``1/sqrt(d)``, ``W_2`` uses ``1/sqrt(m)``. The two residual
    branches of each block (``W_V`` and ``W_2``) are multiplied by ``branch_scale``, by default
    ``1/sqrt(L)`` (1 for the single-layer model), which keeps a deep stack without normalization at
    a bounded scale. Gaussian matrices are of full rank with probability one.

    Args:
        cfg: the model's sizes and options.
        seed: an integer seed or a ``torch.Generator``; the same seed gives bit-identical weights.
        dtype: float64 by default (theory checks need it).
        device: where to put the weights (CPU by default).
        branch_scale: factor on ``W_V`` and ``W_2``; ``None`` means ``1/sqrt(L)``.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}.")
    gen = _generator(seed)
    if branch_scale is None:
        branch_scale = 1.0 / math.sqrt(cfg.L)
    params = {}
    for name, (fan_in, fan_out) in param_shapes(cfg).items():
        std = 1.0 / math.sqrt(fan_in)
        if name.endswith(("W_V", "W_2")):
            std *= branch_scale
        w = torch.randn(fan_in, fan_out, generator=gen, dtype=torch.float64) * std
        params[name] = w.to(dtype=dtype, device=device)
    return params


def _generator(seed: int | torch.Generator) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or a torch.Generator, got {seed!r}.")
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def layer_params(params: Mapping[str, torch.Tensor], l: int) -> dict[str, torch.Tensor]:
    """The weights of block ``l`` (counted from 1) under their short names ``W_Q``, ..., ``W_2``."""
    return {w: params[f"layer{l}.{w}"] for w in LAYER_WEIGHTS}


def attention_matrix(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, s: float) -> torch.Tensor:
    """``S = softmax_rows(s X W_Q W_K^T X^T)`` for a batch ``X`` of shape ``(N, n, d)``.

    Returns ``(N, n, n)``; every row is a probability vector (book equation (model-S)).
    """
    logits = s * (X @ W_Q) @ (X @ W_K).transpose(-1, -2)
    return torch.softmax(logits, dim=-1)


def block(X: torch.Tensor, W: Mapping[str, torch.Tensor], cfg: ModelConfig):
    """One block: returns ``(S, Z, H)`` for input ``X`` (``N x n x d``), see the module docstring."""
    S = attention_matrix(X, W["W_Q"], W["W_K"], attention_scale(cfg))
    Z = S @ X @ W["W_V"] + cfg.b_attn * X
    H = activation(cfg.activation)(Z @ W["W_1"]) @ W["W_2"] + cfg.b_ffn * Z
    return S, Z, H


@dataclasses.dataclass
class Trace:
    """Every intermediate of a forward pass: per block ``S``, ``Z``, ``H`` (lists of length L)."""

    S: list[torch.Tensor]
    Z: list[torch.Tensor]
    H: list[torch.Tensor]
    F: torch.Tensor


def forward_trace(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> Trace:
    """The forward pass keeping every block's ``S``, ``Z`` and ``H`` (for the theory chapters)."""
    S_all, Z_all, H_all = [], [], []
    H = X
    for l in range(1, cfg.L + 1):
        S, Z, H = block(H, layer_params(params, l), cfg)
        S_all.append(S)
        Z_all.append(Z)
        H_all.append(H)
    last = H.mean(dim=-2) if cfg.pool == "mean" else H
    return Trace(S_all, Z_all, H_all, last @ params["W_U"])


def forward(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """``F_Theta(X)``: ``(N, n, c)`` per token, or ``(N, c)`` with ``pool="mean"``.

    Checks its inputs (:func:`validate`); :func:`forward_trace` is the unchecked inner version.
    """
    validate(params, X, None, cfg)
    return forward_trace(params, X, cfg).F


def loss(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """``Phi(theta) = 1/2 sum_i ||F(X_i) - Y_i||_F^2``, the book's one normalization (eq. (loss))."""
    validate(params, X, Y, cfg)
    return 0.5 * (forward_trace(params, X, cfg).F - Y).pow(2).sum()


def validate(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None,
             cfg: ModelConfig) -> None:
    """Raise a clear error unless ``cfg``, ``params``, ``X`` (and ``Y``) fit together.

    Combines :func:`validate_params` and :func:`validate_data` and checks that the data and the
    weights share one dtype (float64 throughout the book).
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}; "
                        "create one with convres.ModelConfig(d=..., d_qk=..., m=...).")
    validate_params(params, cfg)
    validate_data(X, Y, cfg)
    dtypes = {w.dtype for w in params.values()}
    if len(dtypes) > 1:
        raise TypeError(f"the weights mix dtypes {sorted(map(str, dtypes))}; convert them to one, "
                        "e.g. {k: w.double() for k, w in params.items()}.")
    (dtype,) = dtypes
    if X.dtype != dtype:
        raise TypeError(f"X has dtype {X.dtype} but the weights have dtype {dtype}; convert one of "
                        f"them, e.g. X.to({dtype}) (the book uses torch.float64).")


def validate_params(params: Mapping[str, torch.Tensor], cfg: ModelConfig) -> None:
    """Raise a clear error unless ``params`` holds exactly the weights ``cfg`` describes."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of tensors, got {type(params).__name__}.")
    expected = param_shapes(cfg)
    missing = sorted(set(expected) - set(params))
    extra = sorted(set(params) - set(expected))
    if missing or extra:
        raise ValueError(
            f"params do not match the config (L={cfg.L}): missing {missing}, unexpected {extra}; "
            "create them with convres.init_params(cfg).")
    for name, shape in expected.items():
        w = params[name]
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"params[{name!r}] must be a torch.Tensor, got {type(w).__name__}.")
        if tuple(w.shape) != shape:
            raise ValueError(
                f"params[{name!r}] has shape {tuple(w.shape)}, expected {shape} for "
                f"d={cfg.d}, d_qk={cfg.d_qk}, m={cfg.m}, c={cfg.c}.")
        if not torch.isfinite(w).all():
            raise ValueError(f"params[{name!r}] contains NaN or infinite entries.")


def validate_data(X: torch.Tensor, Y: torch.Tensor | None, cfg: ModelConfig) -> None:
    """Raise a clear error unless ``X`` (and ``Y``) have the shapes and values ``cfg`` expects.

    ``X`` must be ``(N, n, d)``; ``Y`` must be ``(N, n, c)``, or ``(N, c)`` with ``pool="mean"``.
    """
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"X must be a torch.Tensor of shape (N, n, d), got {type(X).__name__}.")
    if X.dim() != 3:
        raise ValueError(
            f"X must have shape (N sequences, n tokens, d features), got shape {tuple(X.shape)}; "
            "for a single sequence use X.unsqueeze(0).")
    if X.shape[-1] != cfg.d:
        raise ValueError(f"X has {X.shape[-1]} features but the model expects d={cfg.d}.")
    if not X.is_floating_point():
        raise TypeError(f"X must be a floating-point tensor, got dtype {X.dtype}.")
    if not torch.isfinite(X).all():
        raise ValueError("X contains NaN or infinite entries; clean or impute the data first.")
    if Y is None:
        return
    if not isinstance(Y, torch.Tensor):
        raise TypeError(f"Y must be a torch.Tensor, got {type(Y).__name__}.")
    N, n = X.shape[0], X.shape[1]
    expected = (N, cfg.c) if cfg.pool == "mean" else (N, n, cfg.c)
    if tuple(Y.shape) != expected:
        raise ValueError(
            f"Y has shape {tuple(Y.shape)}, expected {expected} "
            f"(N={N}, n={n}, c={cfg.c}, pool={cfg.pool!r}).")
    if not torch.isfinite(Y).all():
        raise ValueError("Y contains NaN or infinite entries; clean the targets first.")
    if Y.dtype != X.dtype:
        raise TypeError(f"X and Y must share a dtype, got {X.dtype} and {Y.dtype}.")
