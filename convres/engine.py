"""Many gradient-descent runs at once (sweeps over beta, seeds and step sizes).

Book chapter: *Performance* (``book/performance.md``). Every experiment and widget runs its sweeps
through :func:`gradient_descent_batch`, which returns what :func:`convres.gd.gradient_descent`
returns for each configuration on its own (equal to 1e-10 in float64, checked by
``tests/test_engine.py``), but advances all configurations in one vectorized step.

How it is vectorized. The weights of the ``B`` configurations are stacked on a leading axis
(``W_Q`` becomes ``B x d x d_qk`` and so on) and the model of :mod:`convres.model` is evaluated for
all of them at once with batched matrix products; the residual coefficients ``beta`` and the step
sizes ``mu`` are tensors of length ``B``. Configurations are independent, so the gradient of
``sum_b Phi_b`` with respect to the stacked weights is, slice by slice, the gradient of each
``Phi_b`` (book equation (gd)). One backward pass therefore serves every configuration; it is
written out by hand (the chain rule through the block), which avoids autograd's bookkeeping and is
checked against autograd by the tests. A configuration that stops (converged, diverged or out of
steps) is removed from the stack, and the others go on. Nothing here assumes a CPU: pass
``device="cuda"`` to run on a GPU.

:func:`torch_threads` limits PyTorch's intra-op threads for a block of code: for models this
small, thread synchronization costs more than it saves (see the *Performance* chapter).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch

from .gd import History, _check_run_args, _progress
from .model import ModelConfig, activation, attention_scale, validate

__all__ = ["gradient_descent_batch", "batched_loss", "torch_threads", "check_device"]


# --- the batched model and its gradient ---------------------------------------------------------

def _mm(A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``A W`` for a batch of configurations: ``A`` is ``(B, N, n, p)``, ``W`` is ``(B, p, q)``."""
    B, N, n, p = A.shape
    return torch.bmm(A.reshape(B, N * n, p), W).view(B, N, n, W.shape[-1])


def _tmm(A: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``A^T G`` summed over all sequences and tokens: ``(B, N, n, p), (B, N, n, q) -> (B, p, q)``."""
    B, N, n, p = A.shape
    return torch.bmm(A.reshape(B, N * n, p).transpose(1, 2), G.reshape(B, N * n, G.shape[-1]))


def _T(W: torch.Tensor) -> torch.Tensor:
    return W.transpose(-1, -2)


def _act_grad(name: str, U: torch.Tensor, G: torch.Tensor, dG: torch.Tensor) -> torch.Tensor:
    """``dG * act'(U)`` with ``G = act(U)``, the derivative PyTorch's autograd uses for each activation."""
    if name == "relu":
        return torch.ops.aten.threshold_backward(dG, G, 0)
    if name == "tanh":
        return dG * (1 - G * G)
    if name == "gelu":  # exact (erf) GELU: Phi(u) + u phi(u)
        cdf = 0.5 * (1 + torch.erf(U * math.sqrt(0.5)))
        pdf = torch.exp(-0.5 * U * U) / math.sqrt(2 * math.pi)
        return dG * (cdf + U * pdf)
    if name == "softplus":  # torch's softplus is linear above the threshold 20
        z = torch.exp(U)
        return torch.where(U > 20, dG, dG * z / (z + 1))
    raise ValueError(f"no derivative for activation {name!r}.")  # pragma: no cover (validated by ModelConfig)


def _forward(theta, X, cfg, ba, bf):
    """The batched forward pass; returns ``F`` and, per block, ``(H_in, Q, K, S, P, Z, U, G)``."""
    B = ba.shape[0]
    s, act = attention_scale(cfg), activation(cfg.activation)
    H = X.unsqueeze(0).expand(B, *X.shape)
    saved = []
    for l in range(1, cfg.L + 1):
        W = {w: theta[f"layer{l}.{w}"] for w in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
        Q, K = _mm(H, W["W_Q"]), _mm(H, W["W_K"])
        S = torch.softmax(s * Q @ _T(K), dim=-1)            # (model-S)
        P = S @ H
        Z = torch.addcmul(_mm(P, W["W_V"]), ba, H)           # (model-Z): P W_V + beta X
        U = _mm(Z, W["W_1"])
        G = act(U)
        saved.append((H, Q, K, S, P, Z, U, G))
        H = torch.addcmul(_mm(G, W["W_2"]), bf, Z)           # (model-H): FFN(Z) + beta Z
    if cfg.pool == "mean":
        F = torch.bmm(H.mean(dim=-2), theta["W_U"])          # (model-F), one row per sequence
    else:
        F = _mm(H, theta["W_U"])                             # (model-F)
    return F, saved, H


def batched_loss(theta: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig,
                 b_attn: torch.Tensor, b_ffn: torch.Tensor) -> torch.Tensor:
    """``Phi_b`` (shape ``(B,)``) for ``B`` stacked configurations on the same data.

    Mirrors :func:`convres.model.forward` and :func:`convres.model.loss` (book equations (model-S)
    to (model-F) and (loss)), with every weight carrying a leading axis of length ``B`` and per-
    configuration residual coefficients ``b_attn``, ``b_ffn`` of shape ``(B,)``. ``cfg`` supplies
    the sizes and options shared by all configurations (its own ``beta`` is ignored).
    """
    B = b_attn.shape[0]
    F, _, _ = _forward(theta, X, cfg, b_attn.view(B, 1, 1, 1), b_ffn.view(B, 1, 1, 1))
    return 0.5 * (F - Y).pow(2).flatten(1).sum(dim=1)


def _loss_and_grad(theta, X, Y, cfg, b_attn, b_ffn):
    """``(Phi_b, grad Phi_b, Z_1, H_L)`` for every configuration: one forward pass and the backward
    pass written out by hand (the chain rule through (model-F), (model-H), (model-Z), (model-S)).

    Equal to autograd on :func:`batched_loss` (checked in ``tests/test_engine.py``), but without
    the autograd graph, whose bookkeeping dominates the time at the book's sizes.
    """
    B = b_attn.shape[0]
    ba, bf = b_attn.view(B, 1, 1, 1), b_ffn.view(B, 1, 1, 1)
    F, saved, HL = _forward(theta, X, cfg, ba, bf)
    R = F - Y
    phi = 0.5 * R.pow(2).flatten(1).sum(dim=1)
    s, W_U = attention_scale(cfg), theta["W_U"]
    grads = {}
    if cfg.pool == "mean":
        n = HL.shape[-2]
        grads["W_U"] = torch.bmm(_T(HL.mean(dim=-2)), R)
        dH = (torch.bmm(R, _T(W_U)) / n).unsqueeze(-2).expand(HL.shape)
    else:
        grads["W_U"] = _tmm(HL, R)
        dH = _mm(R, _T(W_U))
    for l in range(cfg.L, 0, -1):
        W = {w: theta[f"layer{l}.{w}"] for w in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
        H, Q, K, S, P, Z, U, G = saved[l - 1]
        grads[f"layer{l}.W_2"] = _tmm(G, dH)
        dU = _act_grad(cfg.activation, U, G, _mm(dH, _T(W["W_2"])))
        grads[f"layer{l}.W_1"] = _tmm(Z, dU)
        dZ = torch.addcmul(_mm(dU, _T(W["W_1"])), bf, dH)
        grads[f"layer{l}.W_V"] = _tmm(P, dZ)
        dP = _mm(dZ, _T(W["W_V"]))
        dS = dP @ _T(H)
        dA = torch.ops.aten._softmax_backward_data(dS, S, -1, S.dtype)  # S * (dS - rowsum(dS * S))
        dQ, dK = dA @ (s * K), _T(dA) @ (s * Q)
        grads[f"layer{l}.W_Q"] = _tmm(H, dQ)
        grads[f"layer{l}.W_K"] = _tmm(H, dK)
        if l > 1:
            dH = torch.addcmul(_T(S) @ dP + _mm(dQ, _T(W["W_Q"])) + _mm(dK, _T(W["W_K"])), ba, dZ)
    grads = {k: grads[k] for k in theta}
    return phi, grads, saved[0][5], HL


def _extreme_sv(M: torch.Tensor) -> torch.Tensor:
    """``(k, 2)``: ``sigma_min`` and ``sigma_max`` of each stacked ``(N n, d)`` matrix in ``M`` (``k, N, n, d``)."""
    s = torch.linalg.svdvals(M.reshape(M.shape[0], -1, M.shape[-1]))
    return torch.stack([s[:, -1], s[:, 0]], dim=1)


# --- the engine ---------------------------------------------------------------------------------

def check_device(device) -> torch.device:
    """``device`` as a :class:`torch.device` usable by this PyTorch build, or a ValueError.

    Accepts ``None`` (returned as the CPU), a ``torch.device`` or a name such as ``"cpu"``,
    ``"cuda"`` or ``"cuda:1"``. Raises ValueError, naming the device and the fix, for an unknown
    device name, or for ``cuda`` (``mps``) when this PyTorch build or machine has no such device.
    """
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', or a torch.device, got "
                        f"{type(device).__name__}.")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use 'cpu', or 'cuda' (or 'cuda:0', ...) on a machine "
                         "with an NVIDIA GPU and a CUDA build of PyTorch.") from None
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError(f"device {device!r}: this PyTorch build ({torch.__version__}) has no CUDA support; "
                             "use device 'cpu', or install a CUDA build of PyTorch.")
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: PyTorch was built with CUDA but no CUDA device is "
                             "available on this machine (driver or GPU missing); use device 'cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here "
                             f"(indices 0..{torch.cuda.device_count() - 1}).")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r}: Apple's MPS backend is not available here; use device 'cpu'.")
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r} is not supported by convres; use 'cpu' or 'cuda'.")
    return dev


@dataclasses.dataclass
class _Run:
    """The record of one configuration while the batch runs."""

    mu: float
    losses: list = dataclasses.field(default_factory=list)
    gnorms: list = dataclasses.field(default_factory=list)
    rec: list = dataclasses.field(default_factory=list)
    sv: list = dataclasses.field(default_factory=list)
    status: str = "max_steps"
    message: str = ""
    theta: dict | None = None

    def history(self) -> History:
        sv = np.asarray(self.sv, dtype=np.float64).reshape(-1, 4)
        return History(
            loss=np.asarray(self.losses, dtype=np.float64),
            grad_norm=np.asarray(self.gnorms, dtype=np.float64),
            record_steps=np.asarray(self.rec, dtype=np.int64),
            sigma_min_Z=sv[:, 0], sigma_max_Z=sv[:, 1], sigma_min_H=sv[:, 2], sigma_max_H=sv[:, 3],
            status=self.status, message=self.message, mu=float(self.mu))


def _shared_options(cfg: ModelConfig) -> ModelConfig:
    return cfg.replace(beta=0.0, beta_attn=None, beta_ffn=None)


def _check_batch(params_list, cfgs, mus):
    if isinstance(params_list, Mapping) or not isinstance(params_list, Sequence):
        raise TypeError(
            "params_list must be a list of parameter dicts (one per configuration), got "
            f"{type(params_list).__name__}; wrap a single dict as [params].")
    n = len(params_list)
    if isinstance(cfgs, ModelConfig):
        cfgs = [cfgs] * n
    elif isinstance(cfgs, Sequence):
        cfgs = list(cfgs)
    else:
        raise TypeError(f"cfgs must be a ModelConfig or a list of them, got {type(cfgs).__name__}.")
    if isinstance(mus, (int, float)) and not isinstance(mus, bool):
        mus = [mus] * n
    elif isinstance(mus, Sequence) or (isinstance(mus, np.ndarray) and mus.ndim == 1):
        mus = [float(m) if isinstance(m, np.floating) else m for m in mus]
    else:
        raise TypeError(f"mus must be a number or a list of numbers, got {type(mus).__name__}.")
    if len(cfgs) != n or len(mus) != n:
        raise ValueError(
            f"params_list, cfgs and mus must have the same length, got {n}, {len(cfgs)}, {len(mus)}.")
    for i, cfg in enumerate(cfgs):
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfgs[{i}] must be a convres.ModelConfig, got {type(cfg).__name__}.")
        if _shared_options(cfg) != _shared_options(cfgs[0]):
            raise ValueError(
                f"cfgs[{i}] differs from cfgs[0] in more than beta/beta_attn/beta_ffn "
                f"({cfg} vs {cfgs[0]}); a batch shares sizes and options: run separate batches.")
    return cfgs, mus


def gradient_descent_batch(params_list: Sequence[Mapping[str, torch.Tensor]], X: torch.Tensor,
                           Y: torch.Tensor, cfgs: Sequence[ModelConfig] | ModelConfig,
                           mus: Sequence[float] | float, steps: int, *, record_every: int = 1,
                           tol: float = 0.0, blowup: float = 1e6, progress: bool = False,
                           device=None) -> list[tuple[dict[str, torch.Tensor], History]]:
    """Run :func:`convres.gd.gradient_descent` for every ``(params, cfg, mu)`` on the same data.

    The configurations may differ in ``beta`` (``beta_attn``, ``beta_ffn``), initial weights and
    step size; sizes and options must be equal. Returns ``[(params_final, History), ...]`` in the
    order of ``params_list``, equal to running them one by one: same losses, gradient norms and
    singular values (to rounding), same stopping rules, statuses and messages. A configuration that
    converges (loss ``<= tol``) or diverges stops there, while the others go on.

    All configurations advance together: their weights are stacked on a leading axis and one
    batched forward and backward pass computes every loss and gradient (see the module docstring).

    Args:
        params_list: initial weights, one dict per configuration (not modified).
        X: inputs ``(N, n, d)``; Y: targets ``(N, n, c)`` (or ``(N, c)`` with ``pool="mean"``).
        cfgs: one :class:`~convres.model.ModelConfig` for all, or one per configuration.
        mus: one step size for all, or one per configuration.
        steps, record_every, tol, blowup: as in :func:`convres.gd.gradient_descent`.
        progress: show a progress bar (tqdm).
        device: where to run (e.g. ``"cuda"``); ``None`` keeps the device of ``params_list[0]``.
            The returned weights live there.
    """
    cfgs, mus = _check_batch(params_list, cfgs, mus)
    if not params_list:
        return []
    for i, (params, cfg) in enumerate(zip(params_list, cfgs)):
        try:
            validate(params, X, Y, cfg)
        except (TypeError, ValueError) as err:
            raise type(err)(f"params_list[{i}]: {err}") from None
    for mu in mus:
        _check_run_args(mu, steps, record_every, tol, blowup)

    dev = check_device(device) if device is not None else params_list[0]["W_U"].device
    names = list(params_list[0])
    theta = {k: torch.stack([p[k].detach().to(dev) for p in params_list]) for k in names}
    dtype = theta["W_U"].dtype
    X, Y = X.to(dev), Y.to(dev)
    b_attn = torch.tensor([c.b_attn for c in cfgs], dtype=dtype, device=dev)
    b_ffn = torch.tensor([c.b_ffn for c in cfgs], dtype=dtype, device=dev)
    mu_t = torch.tensor(mus, dtype=dtype, device=dev)
    runs = [_Run(mu=mu, message=f"ran all {steps} steps") for mu in mus]
    active = list(range(len(runs)))  # runs[active[j]] is slice j of the stacked tensors
    prev = theta                       # the last finite iterate (what a diverged run returns)

    bar = _progress(steps, progress)
    for t in range(steps + 1):
        phi, grads, Z1, HL = _loss_and_grad(theta, X, Y, cfgs[0], b_attn, b_ffn)
        gsq = torch.stack([g.pow(2).flatten(1).sum(dim=1).double() for g in grads.values()]).sum(dim=0)
        phis, gnorms = (v.tolist() for v in torch.stack([phi.double(), gsq.sqrt()]).cpu())  # one sync a step
        keep, stopped, record = [], [], []
        for j, i in enumerate(active):
            r, p, g = runs[i], phis[j], gnorms[j]
            if not (math.isfinite(p) and math.isfinite(g)):
                r.status, r.message = "diverged", (
                    f"loss or gradient became non-finite at step {t} (mu={r.mu:g} too large?)")
            elif r.losses and p > blowup * r.losses[0]:
                r.status, r.message = "diverged", (
                    f"loss {p:.3g} at step {t} exceeded {blowup:g} x the initial loss (mu={r.mu:g} too large?)")
            if r.status == "diverged":
                r.theta = {k: v[j].clone() for k, v in prev.items()}  # the iterate that failed is dropped
                continue
            r.losses.append(p)
            r.gnorms.append(g)
            done = p <= tol or t == steps
            if t % record_every == 0 or done:
                r.rec.append(t)
                record.append(j)
            if p <= tol:
                r.status, r.message = "converged", f"loss {p:.3g} <= tol={tol:g} at step {t}"
            if done:
                stopped.append(j)
            else:
                keep.append(j)
        if record:
            idx = torch.tensor(record, device=dev)
            sv = torch.cat([_extreme_sv(Z1[idx]), _extreme_sv(HL[idx])], dim=1).cpu().tolist()
            for j, row in zip(record, sv):
                runs[active[j]].sv.append(tuple(row))
        for j in stopped:
            runs[active[j]].theta = {k: v[j].clone() for k, v in theta.items()}
        if not keep:
            break
        if len(keep) < len(active):
            sel = torch.tensor(keep, device=dev)
            theta = {k: v[sel] for k, v in theta.items()}
            grads = {k: v[sel] for k, v in grads.items()}
            b_attn, b_ffn, mu_t = b_attn[sel], b_ffn[sel], mu_t[sel]
            active = [active[j] for j in keep]
        prev = theta
        theta = {k: theta[k] - mu_t.view(-1, 1, 1) * grads[k] for k in names}
        if bar is not None:
            bar.update(1)
            if t % 50 == 0:
                bar.set_postfix(loss=f"{min(phis):.3e}")
    if bar is not None:
        bar.close()
    return [(r.theta, r.history()) for r in runs]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a block with ``n`` PyTorch intra-op threads, then restore the previous number.

    ``None`` leaves the setting alone. The number of threads is a process-wide PyTorch setting;
    do not use this while other Python threads run PyTorch code.
    """
    if n is None:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive integer or None, got {n!r}.")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
