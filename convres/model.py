"""The Transformer of the paper: one attention head, a two-layer FFN, residual connections.

Book chapter *The model* (``book/model.md``), equations (1)-(4). One block::

    S    = softmax_rows( s X W_Q W_K^T X^T )        (1)  n x n, rows sum to 1
    A    = S X W_V                                  (1)  the attention output Attn(X)
    Z    = A + beta_attn X                          (2)
    M    = act(Z W_1)                               (3)  the FFN activations
    H    = M W_2 + beta_ffn Z                       (3)
    F    = H W_U                                    (4)

``L`` blocks are stacked; ``pool="mean"`` averages the rows of the last ``H``. Weights: a dict
``"layer{l}.W_Q"``, ..., ``"W_U"``, optionally stacked ``B`` deep; :func:`forward` and :func:`loss`
check their inputs, the rest is pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as nnf

from . import backprop
from .backprop import Trace, attention, attention_logits, linear, softmax_rows
from .runtime import check_device, check_memory
from .values import MAX_SEED, as_float_dtype, as_int, as_real, as_seed

__all__ = [
    "Activation", "ACTIVATIONS", "SCALES", "ModelConfig", "Trace", "attention", "attention_logits",
    "attention_scale", "block", "check_cost", "check_inputs", "forward", "forward_trace", "init_params",
    "generator", "layer_params", "loss", "memory_estimate", "param_shapes", "phi", "phi_and_grad",
    "rows_of", "squared_error", "stack_size", "linear", "softmax_rows", "trace_no_grad", "MAX_SEED",
]


@dataclasses.dataclass(frozen=True)
class Activation:
    """An entrywise FFN activation: ``smooth`` (``fn'`` Lipschitz), ``gain = sup|fn(x)|/|x|``, ``lip =
    sup|fn'|``, ``lip2 = sup|fn''|``, ``grad(P, M, dM) = fn'(P) * dM`` (``None``: autograd's)."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    smooth: bool
    gain: float
    lip: float
    lip2: float
    grad: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def __repr__(self) -> str:
        return (f"Activation(smooth={self.smooth}, gain={self.gain:g}, lip={self.lip:.4g}, "
                f"lip2={self.lip2:.4g})")


_SQRT2PI = math.sqrt(2 * math.pi)
_aten = torch.ops.aten

#: The FFN activations, all Lipschitz. GELU: ``sup|gelu'| = gelu'(sqrt 2) = Phi(sqrt 2) + sqrt(2)
#: phi(sqrt 2)`` and ``sup|gelu''| = gelu''(0) = 2 phi(0)``; tanh: ``sup|tanh''| = 4 / (3 sqrt 3)``;
#: softplus: ``sup|softplus''| = 1/4``.
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(torch.relu, smooth=False, gain=1.0, lip=1.0, lip2=math.inf,
                       grad=lambda P, M, dM: _aten.threshold_backward(dM, M, 0)),
    "gelu": Activation(nnf.gelu, smooth=True, gain=1.0,
                       lip=0.5 * (1 + math.erf(1.0)) + math.sqrt(2) * math.exp(-1.0) / _SQRT2PI,
                       lip2=2 / _SQRT2PI, grad=lambda P, M, dM: _aten.gelu_backward(dM, P)),
    "tanh": Activation(torch.tanh, smooth=True, gain=1.0, lip=1.0, lip2=4 / (3 * math.sqrt(3)),
                       grad=lambda P, M, dM: _aten.tanh_backward(dM, M)),
    "softplus": Activation(nnf.softplus, smooth=True, gain=math.inf, lip=1.0, lip2=0.25,
                           grad=lambda P, M, dM: _aten.softplus_backward(dM, P, 1.0, 20.0)),
}

#: Named attention scales ``s`` in ``softmax(s X W_Q W_K^T X^T)``.
SCALES = ("1/sqrt(d_qk)", "1/d_qk", "1")



@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The model but its weights: ``X`` ``n x d``, ``W_Q, W_K`` ``d x d_qk``, ``W_1`` ``d x m``, ``W_U``
    ``d x c``, ``L`` blocks, residual ``beta`` (or ``beta_attn``/``beta_ffn`` apart), ``pool``
    ``None`` (per token) or ``"mean"`` (per sequence)."""

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
            object.__setattr__(self, name, as_int(f"ModelConfig.{name}", getattr(self, name), minimum=1))
        for name in ("beta", "beta_attn", "beta_ffn"):
            value = getattr(self, name)
            if value is not None or name == "beta":
                object.__setattr__(self, name, as_real(f"ModelConfig.{name}", value, minimum=0.0))
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of "
                             f"{sorted(ACTIVATIONS)}.")
        attention_scale(self)  # checks `scale`
        if self.pool not in (None, "mean"):
            raise ValueError(f"unknown pool {self.pool!r}; choose None (per token) or 'mean'.")

    @property
    def residual(self) -> tuple[float, float]:
        """``(beta_attn, beta_ffn)`` of ``Z = A + beta_attn X``, ``H = FFN(Z) + beta_ffn Z``."""
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
        """A copy with the residual ``b``: ``beta`` (both) or ``(beta_attn, beta_ffn)``."""
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


def memory_estimate(cfg: ModelConfig, N: int, n: int, *, configs: int = 1, dtype=torch.float64,
                    training: bool = True) -> int:
    """Rough bytes: 4 copies of the weights and 2 of the activations (``training``), else one each."""
    weights = sum(a * b for a, b in param_shapes(cfg).values())
    activations = N * n * (cfg.d + cfg.L * (2 * n + 2 * cfg.d_qk + 4 * cfg.d + 2 * cfg.m))
    copies = (4, 2) if training else (1, 1)
    return configs * (copies[0] * weights + copies[1] * activations) * torch.empty(0, dtype=dtype).itemsize


def check_cost(cfg: ModelConfig, N: int = 0, n: int = 0, *, configs: int = 1, dtype=torch.float64,
               device=None, training: bool = True) -> None:
    """Refuse (``CostRefused``) when :func:`memory_estimate` exceeds ``device``'s memory."""
    task = "gradient descent" if training else "the forward pass" if N else "the weights"
    on = f" on X of shape (N={N}, n={n}, d={cfg.d})" if N else ""
    what = f"{task}{on} of a model with d={cfg.d}, d_qk={cfg.d_qk}, m={cfg.m}, c={cfg.c}, L={cfg.L}"
    change = ("use fewer sequences N or tokens n (attention costs n^2 per sequence) or " if N else "use ") \
        + "a smaller model (d, d_qk, m, L)"
    if configs > 1:
        what += f" ({configs} configurations at once)"
        change += ", or chunk=1" if training else ""
    check_memory(memory_estimate(cfg, N, n, configs=configs, dtype=dtype, training=training), what, change,
                 device=device)


def generator(seed: int | torch.Generator) -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed`` (``0 .. 2**63 - 1``), or ``seed`` if it is one."""
    if isinstance(seed, torch.Generator):
        return seed
    return torch.Generator().manual_seed(as_seed("seed", seed))


def init_params(cfg: ModelConfig, seed: int | torch.Generator = 0, *, dtype=torch.float64,
                device=None, branch_scale: float | None = None) -> dict[str, torch.Tensor]:
    """Gaussian initialization: entries ``N(0, 1/fan_in)``, ``W_V`` and ``W_2`` times ``branch_scale``
    (default ``1/sqrt(L)``), drawn in float64 from ``seed``."""
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}.")
    dtype = as_float_dtype(dtype)
    branch_scale = 1.0 / math.sqrt(cfg.L) if branch_scale is None else \
        as_real("branch_scale", branch_scale, minimum=0.0, above=True)
    device = check_device(device)
    check_cost(cfg, dtype=torch.float64, device=device, training=False)  # drawn in float64
    gen = generator(seed)
    params = {}
    for name, (fan_in, fan_out) in param_shapes(cfg).items():
        std = 1.0 / math.sqrt(fan_in) * (branch_scale if name.endswith(("W_V", "W_2")) else 1.0)
        w = torch.randn(fan_in, fan_out, generator=gen, dtype=torch.float64) * std
        params[name] = w.to(dtype=dtype, device=device)
    return params


def layer_params(params: Mapping[str, torch.Tensor], l: int) -> dict[str, torch.Tensor]:
    """The weights of block ``l`` (counted from 1) under their short names ``W_Q``, ..., ``W_2``."""
    return {w: params[f"layer{l}.{w}"] for w in ("W_Q", "W_K", "W_V", "W_1", "W_2")}


# --- the forward pass (pure: no checks) ---------------------------------------------------------

def block(X, W: Mapping[str, torch.Tensor], *, s: float, act: Activation,
          beta_attn, beta_ffn):
    """One block, book equations (1)-(3): ``(logits, S, A, Z, M, H)`` for input ``X``."""
    B, (N, n, d) = W["W_Q"].shape[0] if W["W_Q"].dim() == 3 else None, X.shape[-3:]
    W = W if B else {k: v.unsqueeze(0) for k, v in W.items()}
    rows = X.expand(B or 1, N, n, d).reshape(B or 1, N * n, d)
    out = backprop.block_rows(rows, W, s, act, backprop.coefficient(beta_attn),
                              backprop.coefficient(beta_ffn), N)
    fields = backprop.trace_fields([out], [W["W_V"]], (B,) if B else (), N, n)
    return tuple(f[0] for f in fields)


def stack_size(params: Mapping[str, torch.Tensor]) -> int | None:
    """``B`` when the weights carry a leading axis of ``B`` configurations, else ``None``."""
    return params["W_U"].shape[0] if params["W_U"].dim() == 3 else None


def rows_of(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None, cfg: ModelConfig, *,
            residual=None) -> tuple:
    """The arguments of :func:`convres.backprop.phi_and_grad_rows` (``Y = None``: ``forward_rows``)."""
    W = params if stack_size(params) is not None else {k: v.unsqueeze(0) for k, v in params.items()}
    (B, *_), (N, n, d), pooled = W["W_U"].shape, X.shape[-3:], cfg.pool == "mean"
    rows = [X.expand(B, N, n, d).reshape(B, N * n, d)]
    if Y is not None:
        rows.append(Y.reshape(-1, N if pooled else N * n, Y.shape[-1]))
    betas = [backprop.coefficient(b) for b in (cfg.residual if residual is None else residual)]
    return ([layer_params(W, l) for l in range(1, cfg.L + 1)], W["W_U"], *rows, attention_scale(cfg), cfg.act,
            *betas, N, pooled)


def phi_and_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None,
                 cfg: ModelConfig, *, residual=None, trace: bool = True):
    """``(Phi, grad Phi, trace)``: the loss (5), its gradient and the :class:`Trace` (or ``None``);
    ``Y = None``: the trace alone (``Phi`` and the gradient ``None``)."""
    args, B = rows_of(params, X, Y, cfg, residual=residual), stack_size(params)
    phi = grads = tr = None
    if Y is None:
        blocks, _, F = backprop.forward_rows(*args)
    else:
        phi, grads, blocks, F = backprop.phi_and_grad_rows(*args)
        if B is None:
            phi, grads = phi[0], {k: g[0] for k, g in grads.items()}
        grads = {k: grads[k] for k in params}
    if trace:
        lead, (N, n) = (() if B is None else (B,)), X.shape[-3:-1]
        tr = backprop.trace_of(blocks, args[0], F, lead, N, n, cfg.pool == "mean")
    return phi, grads, tr


def forward_trace(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig, *,
                  residual=None) -> Trace:
    """The forward pass with every block's intermediates (book equations (1)-(4)); ``residual``
    overrides ``cfg``'s ``(beta_attn, beta_ffn)``."""
    return phi_and_grad(params, X, None, cfg, residual=residual)[2]


def trace_no_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> Trace:
    """:func:`forward_trace` under ``torch.no_grad()``: the values only, no autograd graph."""
    with torch.no_grad():
        return forward_trace(params, X, cfg)


def squared_error(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 sum_i ||F(X_i) - Y_i||_F^2`` (book equation (5)), ``(B,)`` for a stacked ``F``."""
    R = F - Y
    return 0.5 * (R.pow(2).flatten(1).sum(1) if F.dim() > Y.dim() else R.pow(2).sum())


def phi(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig, *,
        residual=None) -> torch.Tensor:
    """``Phi(theta)`` (book equation (5)), unchecked for ``torch.func``; :func:`loss` checks."""
    return squared_error(forward_trace(params, X, cfg, residual=residual).F, Y)


def _checked_output(params, X, Y, cfg) -> torch.Tensor:
    check_inputs(params, X, Y, cfg, training=False)
    F = forward_trace(params, X, cfg).F
    if not bool(torch.isfinite(F).all()):
        raise ValueError("the forward pass overflowed (the output has NaN or infinite entries although "
                         "the inputs are finite): the data or beta are too large for the dtype; "
                         "standardize X or use a smaller beta.")
    return F


def forward(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """``F_Theta(X)`` (book equation (4)), ``(N, n, c)`` or pooled ``(N, c)``; inputs checked."""
    return _checked_output(params, X, None, cfg)


def loss(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
         cfg: ModelConfig) -> torch.Tensor:
    """``Phi(theta)`` (book equation (5)), ``(B,)`` for stacked weights; checked as :func:`forward`."""
    return squared_error(_checked_output(params, X, Y, cfg), Y)


# --- the one place where inputs are checked ------------------------------------------------------

def check_inputs(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor | None,
                 cfg: ModelConfig, *, finite: bool = True, training: bool | None = None) -> int | None:
    """A clear error unless ``params`` (stacked ``B`` deep or not), ``X`` ``(N, n, d)`` and ``Y``
    ``(N, n, c)`` (pooled ``(N, c)``) fit ``cfg``: dense, real, one dtype and device, finite if
    ``finite``; with ``training`` set, :func:`check_cost` before any value is read. Returns ``B``
    (``None``: unstacked)."""
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}; "
                        "create one with convres.ModelConfig(d=..., d_qk=..., m=...).")
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
    for name, shape in expected.items():
        sizes = f"d={cfg.d}, d_qk={cfg.d_qk}, m={cfg.m}, c={cfg.c}" + (f", B={B}" if B else "")
        _check_tensor(f"params[{name!r}]", params[name], lead + shape, f"{lead + shape} ({sizes})")
    _check_tensor("X", X, (None, None, cfg.d), "(N sequences, n tokens, d features)",
                  hint="for a single sequence use X.unsqueeze(0)")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X has shape {tuple(X.shape)}: it needs at least one sequence and one token.")
    if Y is not None:
        N, n = X.shape[:2]
        shape_Y = (N, cfg.c) if cfg.pool == "mean" else (N, n, cfg.c)
        _check_tensor("Y", Y, shape_Y, f"(N={N}, n={n}, c={cfg.c}) for pool={cfg.pool!r}")
    tensors = [(f"params[{k!r}]", w) for k, w in params.items()] + [("X", X), ("Y", Y)]
    for name, t in tensors:
        if t is not None and t.dtype != W_U.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but the weights W_U have dtype {W_U.dtype}; "
                            f"convert it with .to({W_U.dtype}) (the book's theory uses torch.float64).")
        if t is not None and t.device != W_U.device:
            raise ValueError(f"{name} is on {t.device} but the weights W_U are on {W_U.device}; move it "
                             f"with .to({str(W_U.device)!r}).")
    if training is not None:
        check_cost(cfg, *X.shape[:2], configs=B or 1, dtype=X.dtype, device=X.device, training=training)
    for name, t in tensors:
        if finite and t is not None and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or infinite entries; clean or impute it first.")
    return B


def _check_tensor(name, t, shape, meaning, hint=""):
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

