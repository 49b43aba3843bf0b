"""The Transformer of the paper: one attention head, a two-layer FFN, residual connections.

Book chapter: *The model* (``book/model.md``), equations (1)-(4) there. One block::

    S    = softmax_rows( s X W_Q W_K^T X^T )        (1)  n x n, rows sum to 1
    A    = S X W_V                                  (1)  the attention output Attn(X)
    Z    = A + beta_attn X                          (2)
    M    = act(Z W_1)                               (3)  the FFN activations
    H    = M W_2 + beta_ffn Z                       (3)
    F    = H W_U                                    (4)

With ``beta_attn = beta_ffn = 1`` this is the paper's ``F = (FFN(Attn(X) + X) + Attn(X) + X) W_U``;
``beta = 0`` removes both residual connections exactly. ``L`` blocks are stacked by feeding ``H``
of one block as ``X`` of the next; ``W_U`` acts on the last ``H``. With ``pool="mean"`` the rows of
the last ``H`` are averaged first (one output per sequence, for classification).

Parameters are a plain ``dict`` of tensors named in the paper's notation: block ``l`` (from 1)
holds ``"layer{l}.W_Q"``, ..., ``"layer{l}.W_2"`` and the model holds ``"W_U"``. Every weight may
carry one extra leading axis of ``B`` *configurations* (a sweep): the forward pass then evaluates
all of them at once with batched matrix products, and the residual coefficients may be tensors of
shape ``(B,)``.

:func:`forward_trace` and :func:`phi` are the pure forward pass and loss, with no checks: the
functions that ``torch.func.grad`` and ``torch.func.vmap`` trace and that the package calls inside
its loops. :func:`forward` and :func:`loss` are the entry points for a user's call: they check
their inputs first (:func:`check_inputs`, the one check: types, shapes, dtypes, devices and finite
values) and refuse an overflowing forward pass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as nnf

from .runtime import check_device
from .values import MAX_SEED, as_int, as_real, as_seed

__all__ = [
    "Activation", "ACTIVATIONS", "SCALES", "ModelConfig", "Trace", "attention", "attention_logits",
    "attention_scale", "block", "check_inputs", "forward", "forward_trace", "init_params",
    "generator", "layer_params", "loss", "memory_estimate", "param_shapes", "phi", "squared_error",
    "stack_size", "linear", "MAX_SEED",
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
        return (f"Activation(smooth={self.smooth}, gain={self.gain:g}, lip={self.lip:.4g}, "
                f"lip2={self.lip2:.4g})")


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
#: The residual coefficients of one block, as :attr:`ModelConfig.residual` gives them.
RESIDUAL_NAMES = ("beta_attn", "beta_ffn")


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
            try:
                object.__setattr__(self, name, as_int(f"ModelConfig.{name}", getattr(self, name), minimum=1))
            except ValueError as err:
                raise ValueError(f"{str(err)[:-1]}; pass e.g. {name}=4.") from None
        for name in ("beta", "beta_attn", "beta_ffn"):
            value = getattr(self, name)
            if value is not None or name == "beta":
                try:
                    object.__setattr__(self, name, as_real(f"ModelConfig.{name}", value, minimum=0.0))
                except ValueError as err:
                    raise ValueError(f"{str(err)[:-1]} (0 removes the residual, 1 is the paper's "
                                     "model).") from None
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

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def with_residual(self, b) -> ModelConfig:
        """A copy with the residual ``b``: a number ``beta`` (both connections) or a pair
        ``(beta_attn, beta_ffn)`` that sets the attention and FFN residuals separately."""
        if isinstance(b, (tuple, list)):
            if len(b) != 2:
                raise ValueError(f"a residual must be a number or a pair (beta_attn, beta_ffn), got {b!r}.")
            return self.replace(beta=1.0, beta_attn=b[0], beta_ffn=b[1])
        return self.replace(beta=b, beta_attn=None, beta_ffn=None)


def attention_scale(cfg: ModelConfig) -> float:
    """The scale ``s`` of the attention logits ``s X W_Q W_K^T X^T``."""
    s = cfg.scale
    if isinstance(s, str):
        named = {"1/sqrt(d_qk)": 1.0 / math.sqrt(cfg.d_qk), "1/d_qk": 1.0 / cfg.d_qk, "1": 1.0}
        if s not in named:
            raise ValueError(f"unknown attention scale {s!r}; choose one of {SCALES} or a positive number.")
        return named[s]
    return as_real(f"the attention scale (one of {SCALES} or a number)", s, minimum=0.0, above=True)


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
    return torch.Generator().manual_seed(as_seed("seed", seed))


def _check_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.is_complex:
        raise TypeError(f"dtype must be a real floating-point torch dtype (torch.float64 or "
                        f"torch.float32), got {dtype!r}.")


def init_params(cfg: ModelConfig, seed: int | torch.Generator = 0, *, dtype=torch.float64,
                device=None, branch_scale: float | None = None) -> dict[str, torch.Tensor]:
    """Gaussian initialization (the book's assumption "Gaussian initialization").

    Every entry is drawn independently from ``N(0, std^2)`` with ``std = 1/sqrt(fan_in)``:
    ``W_Q, W_K, W_V, W_1, W_U`` use ``1/sqrt(d)``, ``W_2`` uses ``1/sqrt(m)``. The two residual
    branches of each block (``W_V`` and ``W_2``) are multiplied by ``branch_scale``, by default
    ``1/sqrt(L)`` (1 for the single-layer model), which keeps a deep stack *with* residual
    connections at a bounded scale. Gaussian matrices are of full rank with probability one.

    Args:
        cfg: the model's sizes and options.
        seed: an integer seed or a ``torch.Generator``; the same seed gives bit-identical weights.
        dtype: a floating-point dtype; float64 by default (the theory checks need it).
        device: where to put the weights (CPU by default).
        branch_scale: a positive factor on ``W_V`` and ``W_2``; ``None`` means ``1/sqrt(L)``.
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}.")
    _check_dtype(dtype)
    branch_scale = 1.0 / math.sqrt(cfg.L) if branch_scale is None else \
        as_real("branch_scale", branch_scale, minimum=0.0, above=True)
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


# --- the forward pass (pure: no checks) ---------------------------------------------------------

def linear(A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``A W``. ``W`` is ``(p, q)``, or ``(B, p, q)`` for ``B`` configurations with ``A`` of shape
    ``(B, ..., p)``: one batched product over all rows of each configuration."""
    if W.dim() == 2:
        return A @ W
    B, p, q = W.shape
    if B == 1:  # one configuration: a plain product (no batched kernel)
        return (A.reshape(-1, p) @ W[0]).reshape(*A.shape[:-1], q)
    return torch.bmm(A.reshape(B, -1, p), W).reshape(*A.shape[:-1], q)


def _coefficient(beta, like: torch.Tensor):
    """A residual coefficient ready to multiply ``like``: a number, or a ``(B,)`` tensor viewed as
    ``(B, 1, ..., 1)`` to scale configuration ``b`` of ``like`` by ``beta[b]``."""
    if isinstance(beta, torch.Tensor):
        return beta.reshape(-1, *([1] * (like.dim() - 1)))
    return beta


def softmax_rows(logits):
    """``softmax_rows(G)_ij = exp(G_ij - c_i) / sum_k exp(G_ik - c_i)`` with ``c_i = max_k G_ik``
    (book equation (1)): the softmax of each row. The shift ``c`` cancels exactly, so it is held
    constant for autograd (every derivative is unchanged). The same function as
    ``torch.softmax(G, dim=-1)``, written out because that kernel is several times slower on a CPU
    for rows as short as the book's."""
    e = torch.exp(logits - logits.amax(-1, keepdim=True).detach())
    return e / e.sum(-1, keepdim=True)


def attention_logits(X, W_Q, W_K, s: float):
    """The attention logits ``s X W_Q W_K^T X^T`` (book equation (1)), ``(..., n, n)``."""
    return s * linear(X, W_Q) @ linear(X, W_K).transpose(-1, -2)


def attention(X, W_Q, W_K, W_V, s: float):
    """``(S, A)``: the attention matrix ``S = softmax_rows(s X W_Q W_K^T X^T)`` and the attention
    output ``A = Attn(X) = S X W_V`` (book equation (1)), for ``X`` of shape ``(..., n, d)``."""
    S = softmax_rows(attention_logits(X, W_Q, W_K, s))
    return S, linear(S @ X, W_V)


def block(X, W: Mapping[str, torch.Tensor], *, s: float, act: Activation,
          beta_attn, beta_ffn):
    """One block, book equations (1)-(3): ``(logits, S, A, Z, M, H)`` for input ``X``."""
    logits = attention_logits(X, W["W_Q"], W["W_K"], s)
    S = softmax_rows(logits)                                            # (1)
    A = linear(S @ X, W["W_V"])
    Z = A + _coefficient(beta_attn, X) * X                              # (2)
    M = act(linear(Z, W["W_1"]))                                        # (3)
    H = linear(M, W["W_2"]) + _coefficient(beta_ffn, Z) * Z
    return logits, S, A, Z, M, H


class Trace(NamedTuple):
    """Every intermediate of a forward pass: per block the ``logits``, ``S``, ``A``, ``Z``, ``M``
    and ``H`` (lists of length ``L``) and the output ``F``."""

    logits: list
    S: list
    A: list
    Z: list
    M: list
    H: list
    F: torch.Tensor

    def detach(self) -> Trace:
        """The same trace with every tensor detached from the autograd graph."""
        return Trace._make([*([t.detach() for t in field] for field in self[:6]), self.F.detach()])

    def select(self, index) -> Trace:
        """Configuration ``index`` (an int or an index tensor) of a stacked trace."""
        return Trace._make([*([t[index] for t in field] for field in self[:6]), self.F[index]])


def stack_size(params: Mapping[str, torch.Tensor]) -> int | None:
    """``B`` when the weights carry a leading axis of ``B`` configurations, else ``None``."""
    return params["W_U"].shape[0] if params["W_U"].dim() == 3 else None


def forward_trace(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig, *,
                  residual=None) -> Trace:
    """The forward pass keeping every block's intermediates (book equations (1)-(4)); pure and
    unchecked (see :func:`check_inputs`).

    ``residual = (beta_attn, beta_ffn)`` overrides the coefficients of ``cfg``; each may be a
    ``(B,)`` tensor when the weights are stacked (one coefficient per configuration).
    """
    beta_attn, beta_ffn = cfg.residual if residual is None else residual
    B = stack_size(params)
    H = X if B is None or X.dim() == 4 else X.expand(B, *X.shape)
    s, act = attention_scale(cfg), cfg.act
    fields: list[list] = [[], [], [], [], [], []]
    for l in range(1, cfg.L + 1):
        out = block(H, layer_params(params, l), s=s, act=act, beta_attn=beta_attn, beta_ffn=beta_ffn)
        for field, value in zip(fields, out):
            field.append(value)
        H = out[-1]
    last = H.mean(dim=-2) if cfg.pool == "mean" else H
    return Trace._make([*fields, linear(last, params["W_U"])])


def squared_error(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 sum_i ||F(X_i) - Y_i||_F^2`` (book equation (5)); one value per configuration
    (shape ``(B,)``) when ``F`` carries a leading axis of configurations that ``Y`` lacks."""
    R = F - Y
    return 0.5 * (R.pow(2).flatten(1).sum(1) if F.dim() > Y.dim() else R.pow(2).sum())


def phi(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig, *,
        residual=None) -> torch.Tensor:
    """``Phi(theta) = 1/2 sum_i ||F(X_i) - Y_i||_F^2`` (book equation (5)), pure and unchecked: the
    function to hand to ``torch.func.grad`` and ``torch.func.vmap`` (``vmap(grad(phi))`` gives the
    gradient of every configuration of a stack). :func:`loss` is the same value with checks."""
    return squared_error(forward_trace(params, X, cfg, residual=residual).F, Y)


def _finite_output(F: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(F).all()):
        raise ValueError("the forward pass overflowed (the output has NaN or infinite entries although "
                         "the inputs are finite): the data or beta are too large for the dtype; "
                         "standardize X or use a smaller beta.")
    return F


def forward(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig, *,
            residual=None) -> torch.Tensor:
    """``F_Theta(X)`` (book equation (4)): ``(N, n, c)`` per token, or ``(N, c)`` with
    ``pool="mean"``; with a leading axis ``B`` when the weights are stacked. An entry point: its
    inputs are checked (:func:`check_inputs`) and an overflow is an error, not a NaN."""
    check_inputs(params, X, None, cfg, residual=residual)
    return _finite_output(forward_trace(params, X, cfg, residual=residual).F)


def loss(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig, *,
         residual=None) -> torch.Tensor:
    """``Phi(theta)``, the book's one normalization (equation (5)); shape ``(B,)`` when the weights
    are stacked. An entry point, checked as :func:`forward` is; to differentiate or vectorize
    it with ``torch.func``, use the pure :func:`phi`."""
    check_inputs(params, X, Y, cfg, residual=residual)
    return squared_error(_finite_output(forward_trace(params, X, cfg, residual=residual).F), Y)


# --- the one place where inputs are checked ------------------------------------------------------

def check_inputs(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None,
                 cfg: ModelConfig, *, residual=None, finite: bool = True) -> int | None:
    """Raise a clear error unless ``cfg``, ``params``, ``X`` (and ``Y``) fit together; return the
    number ``B`` of stacked configurations (``None`` for plain weights).

    Checks: ``params`` holds exactly the weights of ``cfg`` with their shapes (all with one
    leading axis ``B``, or none); every tensor is a dense (strided) real floating-point tensor,
    not an inference-mode tensor, of one dtype and on one device; ``X`` is ``(N, n, d)`` with
    ``N, n >= 1``; ``Y`` is ``(N, n, c)``, or ``(N, c)`` with ``pool="mean"``; a ``residual``
    override is a pair of numbers ``>= 0`` or of ``(B,)`` tensors. With ``finite=True`` every
    value is also checked to be finite (a data-dependent test: not inside ``torch.func.vmap``).
    """
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}; "
                        "create one with convres.ModelConfig(d=..., d_qk=..., m=...).")
    B = _check_params(params, cfg, finite)
    _check_tensor("X", X, (None, None, cfg.d), "(N sequences, n tokens, d features)", finite,
                  hint="for a single sequence use X.unsqueeze(0)")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X has shape {tuple(X.shape)}: it needs at least one sequence and one token.")
    if Y is not None:
        N, n = X.shape[:2]
        expected = (N, cfg.c) if cfg.pool == "mean" else (N, n, cfg.c)
        _check_tensor("Y", Y, expected, f"(N={N}, n={n}, c={cfg.c}) for pool={cfg.pool!r}", finite)
    W_U = params["W_U"]
    for name, t in (("X", X), ("Y", Y)):
        if t is None:
            continue
        if t.dtype != W_U.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but the weights have dtype {W_U.dtype}; "
                            f"convert it with {name}.to({W_U.dtype}) (the book's theory uses "
                            "torch.float64).")
        if t.device != W_U.device:
            raise ValueError(f"{name} is on {t.device} but the weights are on {W_U.device}; move it "
                             f"with {name}.to({str(W_U.device)!r}).")
    if residual is not None:
        _check_residual(residual, B, finite)
    return B


def _check_tensor(name, t, shape, meaning, finite, hint=""):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {meaning}, got {type(t).__name__}; "
                        f"convert it with torch.as_tensor(..., dtype=torch.float64).")
    if t.layout != torch.strided:
        raise TypeError(f"{name} is a {t.layout} tensor; convres needs dense tensors: use "
                        f"{name}.to_dense().")
    if t.device.type == "meta":
        raise ValueError(f"{name} is a 'meta' tensor (a shape without values); create it with data.")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a real floating-point tensor, got dtype {t.dtype}; convert "
                        f"it with {name}.to(torch.float64).")
    if t.is_inference():
        raise ValueError(f"{name} was created under torch.inference_mode(), so autograd cannot use "
                         f"it; create it outside that block or pass {name}.clone() made outside it.")
    if t.dim() != len(shape) or any(e is not None and e != g for e, g in zip(shape, t.shape)):
        raise ValueError(f"{name} must have shape {meaning}, got {tuple(t.shape)}"
                         + (f"; {hint}" if hint else "") + ".")
    if finite and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite entries; clean or impute it first.")


def _check_params(params, cfg, finite) -> int | None:
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
    kinds = set()
    for name, shape in expected.items():
        w = params[name]
        label = f"params[{name!r}]"
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"{label} must be a torch.Tensor, got {type(w).__name__}.")
        if tuple(w.shape) != lead + shape:
            raise ValueError(f"{label} has shape {tuple(w.shape)}, expected {lead + shape} "
                             f"(d={cfg.d}, d_qk={cfg.d_qk}, m={cfg.m}, c={cfg.c}"
                             + (f", {B} stacked configurations" if B else "") + ").")
        _check_tensor(label, w, lead + shape, str(lead + shape), finite)
        kinds.add((w.dtype, w.device))
    if len({k[0] for k in kinds}) > 1:
        raise TypeError(f"the weights mix dtypes {sorted(str(k[0]) for k in kinds)}; convert them to "
                        "one, e.g. {k: w.double() for k, w in params.items()}.")
    if len({k[1] for k in kinds}) > 1:
        raise ValueError(f"the weights lie on several devices {sorted(str(k[1]) for k in kinds)}; "
                         "move them to one, e.g. {k: w.to('cpu') for k, w in params.items()}.")
    return B


def _check_residual(residual, B, finite):
    if not (isinstance(residual, (tuple, list)) and len(residual) == 2):
        raise ValueError(f"residual must be a pair (beta_attn, beta_ffn), got {residual!r}.")
    for name, beta in zip(RESIDUAL_NAMES, residual):
        if isinstance(beta, torch.Tensor) and beta.dim() > 0:
            if B is None or tuple(beta.shape) != (B,):
                raise ValueError(f"residual {name} is a tensor of shape {tuple(beta.shape)}; it must "
                                 f"have shape (B,) = ({B},) for stacked weights, or be a number.")
            if finite and not bool(((beta >= 0) & torch.isfinite(beta)).all()):
                raise ValueError(f"residual {name} must hold finite numbers >= 0, got {beta.tolist()}.")
        else:
            as_real(f"residual {name}", beta, minimum=0.0)
