"""Exact full-batch gradient descent with a fixed step size: the one loop of the package.

Book chapter: *The model* (``book/model.md``, equation (6)), used by every later chapter. The update
is ``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` with ``Phi`` the loss of
:func:`convres.model.loss`: no momentum, no adaptive steps, no mini-batches.

:func:`gradient_descent` runs one configuration, or a sweep of them (different initial weights,
residual coefficients and step sizes on the same data). A sweep is not a loop of single runs:
configurations that share the model's sizes are stacked on a leading axis and advanced together
(one batched forward pass, one autograd backward pass on ``sum_b Phi_b``, whose gradient is, slice
by slice, the gradient of each ``Phi_b``). Small problems gain from stacking; large ones do not
(their working set leaves the cache), so the sweep is cut into chunks by problem size
(:func:`chunk_size`). Each configuration stops on its own (converged, diverged or out of steps) and
leaves the stack; the others go on. The results equal those of the configurations run one by one.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np
import torch

from .model import ModelConfig, Trace, _is_real, _trace, check_inputs, squared_error
from .rank import extreme_singular_values
from .runtime import check_device

__all__ = ["History", "Run", "Step", "gradient_descent", "loss_and_grad", "chunk_size"]


@dataclasses.dataclass
class History:
    """What one gradient-descent run records.

    Attributes:
        loss: ``Phi(theta_t)`` for ``t = 0 .. steps`` (every step).
        grad_norm: ``||grad Phi(theta_t)||`` (Euclidean norm over all weights) for every step taken,
            ``t = 0 .. steps-1`` (no gradient is computed at the last iterate).
        record_steps: the steps ``t`` at which singular values were recorded (every ``record_every``
            steps, and the last one).
        sigma_min_Z, sigma_max_Z: extreme singular values of the stacked first-block attention
            output ``Z`` (with its residual), at ``record_steps``; ``sigma_min`` is the smallest of
            the ``min(N n, d)`` singular values (``sigma_Nn`` when ``N n <= d``).
        sigma_min_H, sigma_max_H: the same for the last hidden matrix ``H`` (the input of ``W_U``).
        status: ``"converged"`` (loss reached ``tol``), ``"max_steps"`` or ``"diverged"``.
        message: a sentence that explains the status.
        mu: the step size.
    """

    loss: np.ndarray
    grad_norm: np.ndarray
    record_steps: np.ndarray
    sigma_min_Z: np.ndarray
    sigma_max_Z: np.ndarray
    sigma_min_H: np.ndarray
    sigma_max_H: np.ndarray
    status: str
    message: str
    mu: float

    @property
    def steps(self) -> int:
        """Number of gradient steps taken."""
        return max(0, len(self.loss) - 1)

    @property
    def ratio(self) -> np.ndarray:
        """Per-step contraction ``Phi(theta_{t+1}) / Phi(theta_t)``, ``t = 0 .. steps-1``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.loss[1:] / self.loss[:-1]

    @property
    def diverged(self) -> bool:
        return self.status == "diverged"

    def to_dict(self) -> dict:
        """A JSON-serializable dict (arrays as lists)."""
        return {f.name: (v.tolist() if isinstance(v := getattr(self, f.name), np.ndarray) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "History":
        """The inverse of :meth:`to_dict`."""
        return cls(**{f.name: np.asarray(d[f.name], dtype=np.int64 if f.name == "record_steps" else np.float64)
                      if isinstance(d[f.name], list) else d[f.name] for f in dataclasses.fields(cls)})


class Run(NamedTuple):
    """The result of one gradient-descent run: the final weights and the :class:`History`. The
    weights are the last iterate whose loss was finite: a diverged run never returns NaN."""

    params: dict[str, torch.Tensor]
    history: History


@dataclasses.dataclass(frozen=True)
class Step:
    """What a ``callback`` sees at iterate ``t`` of configuration ``index`` (its position in the
    sweep): the weights ``theta_t``, their gradient, ``Phi(theta_t)``, the output ``F`` and the
    first block's ``Z`` and the last ``H`` (shapes ``(N, n, .)``), all detached."""

    t: int
    index: int
    params: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor]
    loss: float
    F: torch.Tensor
    Z_1: torch.Tensor
    H_L: torch.Tensor


def loss_and_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
                  cfg: ModelConfig, *, residual=None):
    """``(Phi(theta), grad Phi(theta), trace)`` in one forward and one backward pass (autograd);
    ``trace`` is the detached :class:`convres.model.Trace` of the forward pass."""
    check_inputs(params, X, Y, cfg, residual=residual)
    phi, grads, tr = _loss_and_grad(params, X, Y, cfg, residual)
    return phi, grads, Trace(*([t.detach() for t in field] for field in tr[:4]), tr.F.detach())


def _loss_and_grad(params, X, Y, cfg, residual):
    """Unchecked :func:`loss_and_grad`; the trace is not detached (its graph is already freed)."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        tr = _trace(leaves, X, cfg, residual)
        phi = squared_error(tr.F, Y)
        grads = torch.autograd.grad(phi.sum(), list(leaves.values()))
    return phi.detach(), dict(zip(leaves, grads)), tr


def _loss_only(params, X, Y, cfg, residual):
    """``(Phi, None, trace)`` without a backward pass."""
    with torch.no_grad():
        tr = _trace(params, X, cfg, residual)
        return squared_error(tr.F, Y), None, tr


#: Stack configurations only while one configuration's largest activation (rows ``N n`` times the
#: widest layer) stays below this many entries; beyond it, running them one by one is faster on a
#: CPU (measured in ``benchmarks/gd_speed.py``; see the *Performance* appendix).
STACK_LIMIT = 16_384
#: At most this many configurations in one stack.
STACK_MAX = 64


def chunk_size(cfg: ModelConfig, X: torch.Tensor, count: int) -> int:
    """How many of ``count`` configurations of ``cfg`` on data ``X`` to stack at once: all (up to
    :data:`STACK_MAX`) for small problems, one for large ones (see :data:`STACK_LIMIT`)."""
    N, n = X.shape[0], X.shape[1]
    width = max(cfg.d, cfg.d_qk, cfg.m, n)
    return max(1, min(count, STACK_MAX)) if N * n * width <= STACK_LIMIT else 1


def _check_run_args(mu, steps, record_every, tol, blowup):
    if not _is_real(mu) or not math.isfinite(mu) or mu <= 0:
        raise ValueError(f"step size mu must be a positive finite number, got {mu!r}.")
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}.")
    if not isinstance(record_every, numbers.Integral) or isinstance(record_every, bool) or record_every < 1:
        raise ValueError(f"record_every must be a positive integer, got {record_every!r}.")
    if not _is_real(tol) or not tol >= 0:
        raise ValueError(f"tol must be a number >= 0 (0 runs all steps), got {tol!r}.")
    if not _is_real(blowup) or not blowup > 1:
        raise ValueError(f"blowup must be a number > 1, got {blowup!r}.")


def _as_sweep(params, cfg, mu):
    """``(params_list, cfgs, mus, single)``: one run or a sweep, in one form."""
    if isinstance(params, Mapping):
        if not isinstance(cfg, ModelConfig) or not _is_real(mu):
            raise TypeError("for one run pass one params dict, one ModelConfig and one step size mu; "
                            "for a sweep pass lists of them (params may be a list of dicts).")
        return [params], [cfg], [mu], True
    if not isinstance(params, Sequence) or isinstance(params, (str, bytes)):
        raise TypeError(f"params must be a dict of weights (one run) or a list of them (a sweep), "
                        f"got {type(params).__name__}.")
    n = len(params)
    cfgs = [cfg] * n if isinstance(cfg, ModelConfig) else list(cfg) if isinstance(cfg, Sequence) else None
    mus = [mu] * n if _is_real(mu) else list(mu) if isinstance(mu, (Sequence, np.ndarray)) else None
    if cfgs is None or mus is None:
        raise TypeError(f"cfg must be a ModelConfig or a list of them and mu a number or a list of "
                        f"numbers, got {type(cfg).__name__} and {type(mu).__name__}.")
    if len(cfgs) != n or len(mus) != n:
        raise ValueError(f"params, cfg and mu must have the same length, got {n}, {len(cfgs)}, {len(mus)}.")
    return list(params), cfgs, [float(m) if isinstance(m, np.floating) else m for m in mus], False


def _shared(cfg: ModelConfig) -> ModelConfig:
    """What configurations in one stack must share: everything but the residual coefficients."""
    return cfg.replace(beta=1.0, beta_attn=None, beta_ffn=None)


def gradient_descent(params, X: torch.Tensor, Y: torch.Tensor, cfg, mu, steps: int, *,
                     record_every: int = 1, tol: float = 0.0, blowup: float = 1e6,
                     progress: bool = False, callback: Callable[[Step], None] | None = None,
                     device=None, chunk: int | None = None):
    """Run ``steps`` steps of full-batch gradient descent; return a :class:`Run` (one run) or a list
    of them (a sweep), in the order given.

    One run: ``gradient_descent(params, X, Y, cfg, mu, steps)``. A sweep:
    ``gradient_descent([params_1, ...], X, Y, [cfg_1, ...], [mu_1, ...], steps)`` (one ``cfg`` or
    one ``mu`` is used for every run). Every run starts from its own weights and stops on its own:

    * ``status="converged"`` when ``Phi(theta_t) <= tol``;
    * ``status="diverged"`` when the loss or gradient becomes NaN/infinite or the loss exceeds
      ``blowup`` times its initial value. The history then ends at the last finite iterate and the
      returned weights are that iterate: no NaN is ever returned.
    * ``status="max_steps"`` otherwise.

    Args:
        params: initial weights (e.g. :func:`convres.init_params`), or a list of them; not modified.
        X: inputs ``(N, n, d)``; Y: targets ``(N, n, c)`` (or ``(N, c)`` with ``pool="mean"``).
        cfg: the model configuration, or one per run.
        mu: the step size (> 0), or one per run.
        steps: the largest number of steps.
        record_every: singular values are recorded every this many steps (and at the last step).
        tol: stop when the loss falls to this value (0: run all steps).
        blowup: divergence threshold relative to the initial loss.
        progress: show a progress bar (tqdm).
        callback: ``callback(step)`` with a :class:`Step`, called at every iterate whose loss is
            kept in the history, for every run; its return value is ignored.
        device: where to run (e.g. ``"cuda"``); ``None`` keeps the device of the weights. The
            returned weights live there.
        chunk: how many configurations to stack at once; ``None`` chooses by problem size
            (:func:`chunk_size`).
    """
    params_list, cfgs, mus, single = _as_sweep(params, cfg, mu)
    for i, (p, c, m) in enumerate(zip(params_list, cfgs, mus)):
        try:
            check_inputs(p, X, Y, c)
            _check_run_args(m, steps, record_every, tol, blowup)
            if p["W_U"].dtype not in (torch.float64, torch.float32):
                raise TypeError(f"gradient descent runs in torch.float64 or torch.float32 (its singular "
                                f"values need them), got {p['W_U'].dtype}; convert the weights and data "
                                "with .double() (or .float()).")
        except (TypeError, ValueError) as err:
            raise type(err)(err if single else f"run {i}: {err}") from None
    if chunk is not None and (not isinstance(chunk, numbers.Integral) or isinstance(chunk, bool) or chunk < 1):
        raise ValueError(f"chunk must be a positive integer or None, got {chunk!r}.")
    dev = check_device(device) if device is not None else None
    groups: dict = {}
    for i, (p, c) in enumerate(zip(params_list, cfgs)):
        groups.setdefault((_shared(c), p["W_U"].dtype, p["W_U"].device), []).append(i)
    chunks = []
    for (shared, _, _), idx in groups.items():
        size = chunk or chunk_size(shared, X, len(idx))
        chunks += [idx[j:j + size] for j in range(0, len(idx), size)]
    bar = _progress(steps * len(chunks), progress)
    results: list = [None] * len(params_list)
    for idx in chunks:
        runs = _descend([params_list[i] for i in idx], X, Y, [cfgs[i] for i in idx], [mus[i] for i in idx],
                        steps, record_every, tol, blowup, dev, bar,
                        None if callback is None else (lambda step, idx=idx: callback(
                            dataclasses.replace(step, index=idx[step.index]))))
        for i, r in zip(idx, runs):
            results[i] = r
    if bar is not None:
        bar.close()
    return results[0] if single else results


@dataclasses.dataclass
class _Record:
    """One configuration's record while its chunk runs."""

    mu: float
    losses: list = dataclasses.field(default_factory=list)
    gnorms: list = dataclasses.field(default_factory=list)
    rec: list = dataclasses.field(default_factory=list)
    sv: list = dataclasses.field(default_factory=list)
    status: str = "max_steps"
    message: str = ""
    params: dict | None = None

    def check(self, t: int, phi: float, gnorm: float | None, blowup: float, tol: float, steps: int) -> bool:
        """Apply the stopping rules at iterate ``t`` (``gnorm`` is ``None`` at the last one); record
        it unless it diverged. True: stop."""
        if not (math.isfinite(phi) and (gnorm is None or math.isfinite(gnorm))):
            self.status = "diverged"
            self.message = (f"the initial loss or gradient is not finite (loss {phi:.3g}): no step was "
                            "taken; check the scale of beta and of the data" if t == 0 else
                            f"loss or gradient became non-finite at step {t} (mu={self.mu:g} too large?)")
            return True
        if self.losses and phi > blowup * self.losses[0]:
            self.status = "diverged"
            self.message = (f"loss {phi:.3g} at step {t} exceeded {blowup:g} x the initial loss "
                            f"(mu={self.mu:g} too large?)")
            return True
        self.losses.append(phi)
        if phi <= tol:
            self.status, self.message = "converged", f"loss {phi:.3g} <= tol={tol:g} at step {t}"
            return True
        self.message = f"ran all {steps} steps"
        if gnorm is not None:
            self.gnorms.append(gnorm)
        return t == steps

    def run(self) -> Run:
        sv = np.asarray(self.sv, dtype=np.float64).reshape(-1, 4)
        return Run(self.params, History(
            loss=np.asarray(self.losses, dtype=np.float64),
            grad_norm=np.asarray(self.gnorms, dtype=np.float64),
            record_steps=np.asarray(self.rec, dtype=np.int64),
            sigma_min_Z=sv[:, 0], sigma_max_Z=sv[:, 1], sigma_min_H=sv[:, 2], sigma_max_H=sv[:, 3],
            status=self.status, message=self.message, mu=float(self.mu)))


def _descend(params_list, X, Y, cfgs, mus, steps, record_every, tol, blowup, dev, bar, callback):
    """The loop, for one chunk of configurations sharing ``_shared(cfg)``: stacked when there are
    several (a leading axis on every weight), plain weights for one."""
    cfg = cfgs[0]
    dev = dev or params_list[0]["W_U"].device
    X, Y = X.to(dev), Y.to(dev)
    records = [_Record(mu=m) for m in mus]
    active = list(range(len(records)))      # records[active[j]] is slice j of the stack
    stack = len(records) > 1
    if stack:
        theta = {k: torch.stack([p[k].detach().to(dev) for p in params_list]) for k in params_list[0]}
        dtype = theta["W_U"].dtype
        residual = tuple(torch.tensor(v, dtype=dtype, device=dev) for v in zip(*(c.residual for c in cfgs)))
        mu_t = torch.tensor(mus, dtype=dtype, device=dev).view(-1, 1, 1)
    else:
        theta, residual = {k: v.detach().to(dev) for k, v in params_list[0].items()}, cfg.residual
    prev = theta                             # the last iterate with a finite loss
    for t in range(steps + 1):
        last = t == steps                  # no step is taken from the last iterate: no gradient
        phi, grads, tr = _loss_only(theta, X, Y, cfg, residual) if last else \
            _loss_and_grad(theta, X, Y, cfg, residual)
        F, Z1, HL = tr.F.detach(), tr.Z[0].detach(), tr.H[-1].detach()
        del tr
        if last:
            phis, gnorms = phi.double().reshape(-1).tolist(), [None] * len(active)
        else:
            flat = torch.cat([g.reshape(len(active) if stack else 1, -1) for g in grads.values()], dim=1)
            gnorm = torch.linalg.vector_norm(flat, dim=1)
            phis, gnorms = torch.stack([phi.double().reshape(-1), gnorm.double()]).tolist()
        keep, finite = [], []
        for j, i in enumerate(active):
            r = records[i]
            stop = r.check(t, phis[j], gnorms[j], blowup, tol, steps)
            if r.status != "diverged":
                finite.append(j)
                if t % record_every == 0 or stop:
                    r.rec.append(t)
                if callback is not None:
                    at = (lambda v: v[j]) if stack else (lambda v: v)
                    callback(Step(t, i, {k: at(v) for k, v in theta.items()},
                                  None if last else {k: at(v) for k, v in grads.items()}, phis[j],
                                  at(F), at(Z1), at(HL)))
            if stop:
                src = prev if r.status == "diverged" else theta
                r.params = {k: (v[j] if stack else v).detach().clone() for k, v in src.items()}
            else:
                keep.append(j)
        _record_singular_values(records, active, finite, t, Z1, HL, stack)
        if bar is not None:
            bar.update(1)
        if not keep:
            break
        if len(keep) < len(active):
            sel = torch.tensor(keep, device=dev)
            theta, grads = ({k: v[sel] for k, v in d.items()} for d in (theta, grads))
            residual = tuple(b[sel] for b in residual)
            mu_t = mu_t[sel]
            active = [active[j] for j in keep]
        prev = theta
        theta = ({k: torch.addcmul(v, mu_t, grads[k], value=-1.0) for k, v in theta.items()} if stack
                 else {k: torch.add(v, grads[k], alpha=-mus[0]) for k, v in theta.items()})
    if bar is not None and t < steps:
        bar.update(steps - t)
    return [r.run() for r in records]


def _record_singular_values(records, active, finite, t, Z1, HL, stack: bool) -> None:
    """Extreme singular values of ``Z_1`` and ``H_L`` for the finite configurations recording at
    ``t`` (one batched SVD for all of them)."""
    rows = [j for j in finite if records[active[j]].rec[-1:] == [t]]
    if not rows:
        return
    if stack:
        sel = torch.tensor(rows, device=Z1.device)
        Z1, HL = Z1[sel], HL[sel]
    sv = torch.cat([extreme_singular_values(Z1).reshape(-1, 2), extreme_singular_values(HL).reshape(-1, 2)],
                   dim=1).cpu().tolist()
    for j, row in zip(rows, sv):
        records[active[j]].sv.append(tuple(row))


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="gradient descent", unit="step", leave=False)
