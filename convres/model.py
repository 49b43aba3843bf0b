"""The Transformer of the paper: one attention head, a two-layer FFN, residual connections.

Book chapter: *The model* (``book/model.md``), equations (1)-(4) there. One block::

    S    = softmax_rows( s X W_Q W_K^T X^T )        (1)  n x n, rows sum to 1
    A    = S X W_V                                  (1)  the attention output Attn(X)
    Z    = A + beta_attn X                          (2)
    H    = act(Z W_1) W_2 + beta_ffn Z              (3)
    F    = H W_U                                    (4)

With ``beta_attn = beta_ffn = 1`` this is the paper's ``F = (FFN(Attn(X) + X) + Attn(X) + X) W_U``;
``beta = 0`` removes both residual connections exactly. ``L`` blocks are stacked by feeding ``H``
of one block as ``X`` of the next; ``W_U`` acts on the last ``H``. With ``pool="mean"`` the rows of
the last ``H`` are averaged first (one output per sequence, for classification).

Parameters are a plain ``dict`` of tensors named in the paper's notation: block ``l`` (from 1)
holds ``"layer{l}.W_Q"``, ..., ``"layer{l}.W_2"`` and the model holds ``"W_U"``. Every weight may
carry one extra leading axis of ``B`` *configurations* (a sweep): the forward pass then evaluates
all of them at once with batched matrix products, and the residual coefficients may be tensors of
shape ``(B,)``. :func:`forward` and :func:`loss` are pure functions of ``(params, X)``, so
``torch.func.grad`` and ``torch.func.vmap`` apply to them; :func:`check_inputs` is the one place
where inputs are checked.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Callable, Mapping, NamedTuple

import torch
import torch.nn.functional as nnf

from .runtime import check_device

__all__ = [
    "Activation", "ACTIVATIONS", "SCALES", "ModelConfig", "Trace", "attention", "attention_scale",
    "block", "check_inputs", "forward", "forward_trace", "init_params", "generator",
    "layer_params", "loss", "memory_estimate", "param_shapes", "squared_error",
]


@dataclasses.dataclass(frozen=True)
class Activation:
    """An FFN activation and the constants the theory needs (book chapter *Assumptions*).

    Attributes:
        fn: the function, applied entrywise.
        smooth: whether ``fn'`` is Lipschitz (the descent lemma needs a smooth loss).
        gain: ``sup_x |fn(x)| / |x|`` (``inf`` when ``fn(0) != 0``), the FFN lemma's constant.
        lip: ``sup_x |fn'(x)|``, the Lipschitz constant of ``fn``.
        lip2: ``sup_x |fn''(x)|`` (``inf`` for ReLU), the Lipschitz constant of ``fn'``.
    """

    fn: Callable[[torch.Tensor], torch.Tensor]
    smooth: bool
    gain: float
    lip: float
    lip2: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def __repr__(self) -> str:
        return f"Activation(smooth={self.smooth}, gain={self.gain:g}, lip={self.lip:.4g}, lip2={self.lip2:.4g})"


_SQRT2PI = math.sqrt(2 * math.pi)

#: The FFN activations, all Lipschitz. GELU: ``sup|gelu'| = gelu'(sqrt 2) = Phi(sqrt 2) + sqrt(2)
#: phi(sqrt 2)`` and ``sup|gelu''| = gelu''(0) = 2 phi(0)``; tanh: ``sup|tanh''| = 4 / (3 sqrt 3)``;
#: softplus: ``sup|softplus''| = 1/4``.
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(torch.relu, smooth=False, gain=1.0, lip=1.0, lip2=math.inf),
    "gelu": Activation(nnf.gelu, smooth=True, gain=1.0,
                       lip=0.5 * (1 + math.erf(1.0)) + math.sqrt(2) * math.exp(-1.0) / _SQRT2PI,
                       lip2=2 / _SQRT2PI),
    "tanh": Activation(torch.tanh, smooth=True, gain=1.0, lip=1.0, lip2=4 / (3 * math.sqrt(3))),
    "softplus": Activation(nnf.softplus, smooth=True, gain=math.inf, lip=1.0, lip2=0.25),
}

#: Named attention scales ``s`` in ``softmax(s X W_Q W_K^T X^T)``.
SCALES = ("1/sqrt(d_qk)", "1/d_qk", "1")

LAYER_WEIGHTS = ("W_Q", "W_K", "W_V", "W_1", "W_2")
POOLS = (None, "mean")
#: Largest seed accepted (``torch.Generator.manual_seed`` takes a 64-bit integer).
MAX_SEED = 2**63 - 1


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


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
        beta_attn, beta_ffn: separate coefficients for the attention and the FFN residual;
            ``None`` means "use ``beta``" (see :attr:`residual`).
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
            if not _is_int(value) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive integer, got {value!r}; "
                                 f"pass e.g. {name}=4.")
            object.__setattr__(self, name, int(value))
        for name in ("beta", "beta_attn", "beta_ffn"):
            value = getattr(self, name)
            if value is None and name != "beta":
                continue
            if not _is_real(value) or not math.isfinite(value):
                raise TypeError(f"ModelConfig.{name} must be a finite number, got {value!r}.")
            if value < 0:
                raise ValueError(f"ModelConfig.{name} must be >= 0 (0 removes the residual, 1 is "
                                 f"the paper's model), got {value!r}.")
            object.__setattr__(self, name, float(value))
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of "
                             f"{sorted(ACTIVATIONS)}.")
        attention_scale(self)  # checks `scale`
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool {self.pool!r}; choose None (per token) or 'mean'.")

    @property
    def residual(self) -> tuple[float, float]:
        """``(beta_attn, beta_ffn)``: the coefficients of ``Z = A + beta_attn X`` and
        ``H = FFN(Z) + beta_ffn Z``, each ``beta`` unless set on its own."""
        return (self.beta if self.beta_attn is None else self.beta_attn,
                self.beta if self.beta_ffn is None else self.beta_ffn)

    @property
    def act(self) -> Activation:
        """The FFN activation (an entry of :data:`ACTIVATIONS`)."""
        return ACTIVATIONS[self.activation]

    def replace(self, **changes) -> "ModelConfig":
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)


def attention_scale(cfg: ModelConfig) -> float:
    """The scale ``s`` of the attention logits ``s X W_Q W_K^T X^T``."""
    s = cfg.scale
    if isinstance(s, str):
        named = {"1/sqrt(d_qk)": 1.0 / math.sqrt(cfg.d_qk), "1/d_qk": 1.0 / cfg.d_qk, "1": 1.0}
        if s not in named:
            raise ValueError(f"unknown attention scale {s!r}; choose one of {SCALES} or a positive number.")
        return named[s]
    if not _is_real(s) or not (math.isfinite(s) and s > 0):
        raise ValueError(f"attention scale must be one of {SCALES} or a positive number, got {s!r}.")
    return float(s)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """Name -> shape of every weight of the model described by ``cfg``."""
    block_shapes = {"W_Q": (cfg.d, cfg.d_qk), "W_K": (cfg.d, cfg.d_qk), "W_V": (cfg.d, cfg.d),
                    "W_1": (cfg.d, cfg.m), "W_2": (cfg.m, cfg.d)}
    shapes = {f"layer{l}.{w}": s for l in range(1, cfg.L + 1) for w, s in block_shapes.items()}
    shapes["W_U"] = (cfg.d, cfg.c)
    return shapes


def memory_estimate(cfg: ModelConfig, N: int, n: int, *, configs: int = 1, dtype=torch.float64) -> int:
    """Bytes that one gradient-descent step on ``N`` sequences of ``n`` tokens needs, roughly: the
    weights, their gradients and the update (4 copies), and twice the activations autograd keeps
    for the backward pass (per block ``S`` and its logits, ``X W_Q``, ``X W_K``, ``S X``, ``A``,
    ``Z``, ``Z W_1`` and its activation, ``H``), for ``configs`` configurations."""
    weights = sum(a * b for a, b in param_shapes(cfg).values())
    per_block = 2 * n + 2 * cfg.d_qk + 4 * cfg.d + 2 * cfg.m
    activations = N * n * (cfg.d + cfg.L * per_block)
    return configs * (4 * weights + 2 * activations) * torch.empty(0, dtype=dtype).element_size()


def generator(seed: int | torch.Generator) -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed`` (an integer in ``0 .. 2**63 - 1``), or ``seed``
    itself when it already is a generator."""
    if isinstance(seed, torch.Generator):
        return seed
    if not _is_int(seed) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in 0 .. 2**63 - 1 or a torch.Generator, got {seed!r}.")
    return torch.Generator().manual_seed(int(seed))


def init_params(cfg: ModelConfig, seed: int | torch.Generator = 0, *, dtype=torch.float64,
                device=None, branch_scale: float | None = None) -> dict[str, torch.Tensor]:
    """Gaussian initialization (the book's assumption "Gaussian initialization").

    Every entry is drawn independently from ``N(0, std^2)`` with ``std = 1/sqrt(fan_in)``:
    ``W_Q, W_K, W_V, W_1, W_U`` use ``1/sqrt(d)``, ``W_2`` uses ``1/sqrt(m)``. The two residual
    branches of each block (``W_V`` and ``W_2``) are multiplied by ``branch_scale``, by default
    ``1/sqrt(L)`` (1 for the single-layer model), which keeps a deep stack without normalization at
    a bounded scale. Gaussian matrices are of full rank with probability one.

    Args:
        cfg: the model's sizes and options.
        seed: an integer seed or a ``torch.Generator``; the same seed gives bit-identical weights.
        dtype: a floating-point dtype; float64 by default (the theory checks need it).
        device: where to put the weights (CPU by default).
        branch_scale: a positive factor on ``W_V`` and ``W_2``; ``None`` means ``1/sqrt(L)``.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}.")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.is_complex:
        raise TypeError(f"dtype must be a real floating-point torch dtype (torch.float64 or "
                        f"torch.float32), got {dtype!r}.")
    if branch_scale is None:
        branch_scale = 1.0 / math.sqrt(cfg.L)
    if not _is_real(branch_scale) or not (math.isfinite(branch_scale) and branch_scale > 0):
        raise ValueError(f"branch_scale must be a positive finite number, got {branch_scale!r}.")
    device = check_device(device)
    gen = generator(seed)
    params = {}
    for name, (fan_in, fan_out) in param_shapes(cfg).items():
        std = 1.0 / math.sqrt(fan_in) * (branch_scale if name.endswith(("W_V", "W_2")) else 1.0)
        w = torch.randn(fan_in, fan_out, generator=gen, dtype=torch.float64) * std
        params[name] = w.to(dtype=dtype, device=device)
    return params


def layer_params(params: Mapping[str, torch.Tensor], l: int) -> dict[str, torch.Tensor]:
    """The weights of block ``l`` (counted from 1) under their short names ``W_Q``, ..., ``W_2``."""
    return {w: params[f"layer{l}.{w}"] for w in LAYER_WEIGHTS}


# --- the forward pass ---------------------------------------------------------------------------

def _linear(A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``A W``. ``W`` is ``(p, q)``, or ``(B, p, q)`` for ``B`` configurations with ``A`` of shape
    ``(B, ..., p)``: one batched product over all rows of each configuration."""
    if W.dim() == 2:
        return A @ W
    B, p, q = W.shape
    return torch.bmm(A.reshape(B, -1, p), W).reshape(*A.shape[:-1], q)


def _coefficient(beta, like: torch.Tensor):
    """A residual coefficient ready to multiply ``like``: a number, or a ``(B,)`` tensor viewed as
    ``(B, 1, ..., 1)`` to scale configuration ``b`` of ``like`` by ``beta[b]``."""
    if isinstance(beta, torch.Tensor):
        return beta.reshape(-1, *([1] * (like.dim() - 1)))
    return beta


def attention(X, W_Q, W_K, W_V, s: float):
    """``(S, A)``: the attention matrix ``S = softmax_rows(s X W_Q W_K^T X^T)`` and the attention
    output ``A = Attn(X) = S X W_V`` (book equation (1)), for ``X`` of shape ``(..., n, d)``."""
    logits = s * _linear(X, W_Q) @ _linear(X, W_K).transpose(-1, -2)
    S = torch.softmax(logits, dim=-1)
    return S, _linear(S @ X, W_V)


def block(X, W: Mapping[str, torch.Tensor], *, s: float, act: Activation,
          beta_attn, beta_ffn):
    """One block, book equations (1)-(3): returns ``(S, A, Z, H)`` for input ``X``."""
    S, A = attention(X, W["W_Q"], W["W_K"], W["W_V"], s)                 # (1)
    Z = A + _coefficient(beta_attn, X) * X                              # (2)
    FFN = _linear(act(_linear(Z, W["W_1"])), W["W_2"])
    H = FFN + _coefficient(beta_ffn, Z) * Z                             # (3)
    return S, A, Z, H


class Trace(NamedTuple):
    """Every intermediate of a forward pass: per block ``S``, ``A``, ``Z``, ``H`` (lists of
    length ``L``) and the output ``F``."""

    S: list
    A: list
    Z: list
    H: list
    F: torch.Tensor


def _stack_size(params: Mapping[str, torch.Tensor]) -> int | None:
    """``B`` when the weights carry a leading axis of ``B`` configurations, else ``None``."""
    return params["W_U"].shape[0] if params["W_U"].dim() == 3 else None


def _trace(params, X, cfg, residual=None) -> Trace:
    """The forward pass, unchecked (see :func:`forward_trace`)."""
    beta_attn, beta_ffn = cfg.residual if residual is None else residual
    B = _stack_size(params)
    H = X if B is None else X.expand(B, *X.shape)
    s, act = attention_scale(cfg), cfg.act
    out = Trace([], [], [], [], None)
    for l in range(1, cfg.L + 1):
        for name, value in zip(("S", "A", "Z", "H"), block(H, layer_params(params, l), s=s, act=act,
                                                          beta_attn=beta_attn, beta_ffn=beta_ffn)):
            getattr(out, name).append(value)
        H = out.H[-1]
    last = H.mean(dim=-2) if cfg.pool == "mean" else H
    return out._replace(F=_linear(last, params["W_U"]))


def squared_error(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 sum_i ||F(X_i) - Y_i||_F^2`` (book equation (5)); one value per configuration
    (shape ``(B,)``) when ``F`` carries a leading axis of configurations that ``Y`` lacks."""
    R = F - Y
    return 0.5 * (R.pow(2).flatten(1).sum(1) if F.dim() > Y.dim() else R.pow(2).sum())


def forward_trace(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig, *,
                  residual=None) -> Trace:
    """The forward pass keeping every block's ``S``, ``A``, ``Z``, ``H`` (for the theory chapters).

    ``residual = (beta_attn, beta_ffn)`` overrides the coefficients of ``cfg``; each may be a
    ``(B,)`` tensor when the weights are stacked (one coefficient per configuration).
    """
    check_inputs(params, X, None, cfg, residual=residual)
    return _finite_output(_trace(params, X, cfg, residual))


def _finite_output(trace: Trace) -> Trace:
    """``trace``, or a clear error when the forward pass of finite inputs overflowed."""
    if not _all_finite(trace.F):
        raise ValueError("the forward pass overflowed (the output has NaN or infinite entries although "
                         "the inputs are finite): the data or beta are too large for the dtype; "
                         "standardize X or use a smaller beta.")
    return trace


def forward(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig, *,
            residual=None) -> torch.Tensor:
    """``F_Theta(X)`` (book equation (4)): ``(N, n, c)`` per token, or ``(N, c)`` with
    ``pool="mean"``; with a leading axis ``B`` when the weights are stacked."""
    return forward_trace(params, X, cfg, residual=residual).F


def loss(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig, *,
         residual=None) -> torch.Tensor:
    """``Phi(theta) = 1/2 sum_i ||F(X_i) - Y_i||_F^2``, the book's one normalization (equation (5));
    shape ``(B,)`` when the weights are stacked."""
    check_inputs(params, X, Y, cfg, residual=residual)
    return squared_error(_finite_output(_trace(params, X, cfg, residual)).F, Y)


# --- the one place where inputs are checked ------------------------------------------------------

def _all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite. Inside ``torch.func.vmap`` the values are not
    concrete (a data-dependent branch is not allowed there): the check is then skipped, and the
    caller of ``vmap`` checks its inputs."""
    try:
        return bool(torch.isfinite(t).all())
    except RuntimeError as err:
        if "vmap" in str(err):
            return True
        raise


def check_inputs(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None,
                 cfg: ModelConfig, *, residual=None) -> int | None:
    """Raise a clear error unless ``cfg``, ``params``, ``X`` (and ``Y``) fit together; return the
    number ``B`` of stacked configurations (``None`` for plain weights).

    Checks: ``params`` holds exactly the weights of ``cfg`` with their shapes (all with one
    leading axis ``B``, or none), every tensor is real floating point, finite and of one dtype;
    ``X`` is ``(N, n, d)`` with ``N, n >= 1``; ``Y`` is ``(N, n, c)``, or ``(N, c)`` with
    ``pool="mean"``; a ``residual`` override is a pair of finite numbers ``>= 0`` or ``(B,)``
    tensors.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}; "
                        "create one with convres.ModelConfig(d=..., d_qk=..., m=...).")
    B = _check_params(params, cfg)
    _check_tensor("X", X, (None, None, cfg.d), "(N sequences, n tokens, d features)",
                  hint="for a single sequence use X.unsqueeze(0)")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X has shape {tuple(X.shape)}: it needs at least one sequence and one token.")
    if Y is not None:
        N, n = X.shape[:2]
        expected = (N, cfg.c) if cfg.pool == "mean" else (N, n, cfg.c)
        _check_tensor("Y", Y, expected, f"(N={N}, n={n}, c={cfg.c}) for pool={cfg.pool!r}")
    dtype = params["W_U"].dtype
    for name, t in (("X", X), ("Y", Y)):
        if t is not None and t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but the weights have dtype {dtype}; convert "
                            f"it with {name}.to({dtype}) (the book's theory uses torch.float64).")
    if residual is not None:
        _check_residual(residual, B)
    return B


def _check_tensor(name, t, shape, meaning, hint=""):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {meaning}, got {type(t).__name__}; "
                        f"convert it with torch.as_tensor(..., dtype=torch.float64).")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a real floating-point tensor, got dtype {t.dtype}; convert "
                        f"it with {name}.to(torch.float64).")
    if t.dim() != len(shape) or any(e is not None and e != g for e, g in zip(shape, t.shape)):
        raise ValueError(f"{name} must have shape {meaning}, got {tuple(t.shape)}"
                         + (f"; {hint}" if hint else "") + ".")
    if not _all_finite(t):
        raise ValueError(f"{name} contains NaN or infinite entries; clean or impute it first.")


def _check_params(params, cfg) -> int | None:
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of tensors, got {type(params).__name__}; create it "
                        "with convres.init_params(cfg).")
    expected = param_shapes(cfg)
    missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
    if missing or extra:
        raise ValueError(f"params do not match the config (L={cfg.L}): missing {missing}, unexpected "
                         f"{extra}; create them with convres.init_params(cfg).")
    W_U = params["W_U"]
    B = W_U.shape[0] if isinstance(W_U, torch.Tensor) and W_U.dim() == 3 else None
    lead = () if B is None else (B,)
    dtypes = set()
    for name, shape in expected.items():
        w = params[name]
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"params[{name!r}] must be a torch.Tensor, got {type(w).__name__}.")
        if tuple(w.shape) != lead + shape:
            raise ValueError(f"params[{name!r}] has shape {tuple(w.shape)}, expected {lead + shape} "
                             f"(d={cfg.d}, d_qk={cfg.d_qk}, m={cfg.m}, c={cfg.c}"
                             + (f", {B} stacked configurations" if B else "") + ").")
        if not w.is_floating_point():
            raise TypeError(f"params[{name!r}] has dtype {w.dtype}; the weights must be real floating "
                            "point: {k: w.double() for k, w in params.items()}.")
        if not _all_finite(w):
            raise ValueError(f"params[{name!r}] contains NaN or infinite entries.")
        dtypes.add(w.dtype)
    if len(dtypes) > 1:
        raise TypeError(f"the weights mix dtypes {sorted(map(str, dtypes))}; convert them to one, "
                        "e.g. {k: w.double() for k, w in params.items()}.")
    return B


def _check_residual(residual, B):
    if not (isinstance(residual, (tuple, list)) and len(residual) == 2):
        raise ValueError(f"residual must be a pair (beta_attn, beta_ffn), got {residual!r}.")
    for name, beta in zip(("beta_attn", "beta_ffn"), residual):
        if isinstance(beta, torch.Tensor):
            if B is None or tuple(beta.shape) != (B,):
                raise ValueError(f"residual {name} is a tensor of shape {tuple(beta.shape)}; it must "
                                 f"have shape (B,) = ({B},) for stacked weights, or be a number.")
        elif not _is_real(beta) or not math.isfinite(beta) or beta < 0:
            raise ValueError(f"residual {name} must be a finite number >= 0, got {beta!r}.")
