"""Exact full-batch gradient descent with a fixed step size: the one loop of the package.

Book chapter: *The model* (``book/model.md``, equation (6)), used by every later chapter. The update
is ``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` with ``Phi`` the loss of
:func:`convres.model.loss`: no momentum, no adaptive steps, no mini-batches.

:func:`gradient_descent` runs one configuration and :func:`sweep` a list of them (different initial
weights, residual coefficients and step sizes on the same data). Both run the same loop on a
*stack*: the weights of every configuration that shares the model's sizes get a leading axis and
advance together (one batched forward pass, one autograd backward pass on ``sum_b Phi_b``, whose
gradient is, slice by slice, the gradient of each ``Phi_b``); one run is a stack of one. Large
problems gain nothing from stacking (their working set leaves the cache), so a sweep is cut into
chunks by problem size (:func:`chunk_size`). Each configuration stops on its own (converged,
diverged or out of steps) and leaves the stack; the results equal those of the configurations run
one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from .model import ModelConfig, Trace, check_inputs, forward_trace, memory_estimate, squared_error
from .rank import extreme_singular_values
from .runtime import check_device, check_memory
from .values import as_int, as_real, is_real

__all__ = ["History", "Run", "Step", "gradient_descent", "sweep", "loss_and_grad", "chunk_size",
           "stopping_rule", "STACK_LIMIT", "STACK_MAX", "BLOWUP", "MAX_STEPS"]


@dataclasses.dataclass
class History:
    """What one gradient-descent run records. Whatever the status, ``len(loss) == steps + 1`` and
    ``len(grad_norm) == steps``.

    Attributes:
        loss: ``Phi(theta_t)`` for ``t = 0 .. steps``, every iterate the run kept.
        grad_norm: ``||grad Phi(theta_t)||`` (Euclidean norm over all weights) for the steps taken,
            ``t = 0 .. steps-1``.
        record_steps: the steps ``t`` at which singular values were recorded (every
            ``record_every`` steps and the last iterate; none unless ``record_every`` was given).
        sigma_min_Z, sigma_max_Z: extreme singular values of the stacked first-block attention
            output ``Z`` (with its residual), at ``record_steps``; ``sigma_min`` is the smallest of
            the ``min(N n, d)`` singular values (``sigma_Nn`` when ``N n <= d``).
        sigma_min_H, sigma_max_H: the same for the last hidden matrix ``H`` (the input of ``W_U``).
        status: ``"converged"`` (loss reached ``tol``), ``"max_steps"`` or ``"diverged"``.
        message: a sentence that explains the status.
        mu: the step size.
        diverged_at: the step whose loss or gradient was not finite or blew up (``None`` unless
            the run diverged); the history ends at the iterate before it.
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
    diverged_at: int | None = None

    @property
    def steps(self) -> int:
        """The number of gradient steps kept, ``len(loss) - 1``."""
        return len(self.loss) - 1

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
    def from_dict(cls, d: Mapping) -> History:
        """The inverse of :meth:`to_dict`."""
        def value(name):
            v = d.get(name)
            if isinstance(v, list):
                return np.asarray(v, dtype=np.int64 if name == "record_steps" else np.float64)
            return v
        return cls(**{f.name: value(f.name) for f in dataclasses.fields(cls) if f.name in d})


class Run(NamedTuple):
    """The result of one gradient-descent run: the final weights and the :class:`History`. The
    weights are the last iterate whose loss was finite: a diverged run never returns NaN."""

    params: dict[str, torch.Tensor]
    history: History


@dataclasses.dataclass(frozen=True)
class Step:
    """What a ``callback`` sees at iterate ``t`` of configuration ``index`` (its position in the
    sweep): the weights ``theta_t`` and their gradient (``grads`` is ``None`` at the last
    iterate), ``Phi(theta_t)`` and the detached :class:`~convres.model.Trace` of the forward pass
    (``trace.F``, ``trace.Z[0]``, ``trace.H[-1]``, ...). They are views of the run's own copy of
    the weights: the caller's weights are never touched, and a callback that edits any of them in
    place is refused (RuntimeError) before the run goes on with changed values; copy them
    (``step.params[k].clone()``) to keep or change them."""

    t: int
    index: int
    params: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] | None
    loss: float
    trace: Trace


def loss_and_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
                  cfg: ModelConfig, *, residual=None):
    """``(Phi(theta), grad Phi(theta), trace)`` in one forward and one backward pass (autograd);
    ``trace`` is the detached :class:`convres.model.Trace` of the forward pass. Checks its inputs
    (:func:`convres.model.check_inputs`)."""
    check_inputs(params, X, Y, cfg, residual=residual)
    phi, grads, tr = _loss_and_grad(params, X, Y, cfg, residual)
    return phi, grads, tr.detach()


def _loss_and_grad(params, X, Y, cfg, residual):
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        tr = forward_trace(leaves, X, cfg, residual=residual)
        phi = _stacked_error(tr.F, Y) if tr.F.dim() == Y.dim() and leaves["W_U"].dim() == 3 \
            else squared_error(tr.F, Y)
        grads = torch.autograd.grad(phi.sum(), list(leaves.values()))
    return phi.detach(), dict(zip(leaves, grads)), tr


#: Stack configurations only while one configuration's largest activation (rows ``N n`` times the
#: widest layer) stays below this many entries; beyond it, running them one by one is as fast or
#: faster on a CPU (the *Performance* appendix, ``benchmarks/gd_speed.py``; measured on one core with
#: sweeps of 10-20 configurations of the Jena model: stacked 1.2-1.3 times faster at 25,000-48,000
#: entries, the Jena chapter's size, and no faster at 290,000; the limit is just above the largest
#: size measured faster).
STACK_LIMIT = 50_000
#: At most this many configurations in one stack.
STACK_MAX = 64
#: The most steps one call accepts (the cost policy: a larger count is a typo, not a plan).
MAX_STEPS = 10**8
#: A run diverges when its loss exceeds this many times its initial value (the default ``blowup``).
BLOWUP = 1e6


def chunk_size(cfg: ModelConfig, X: torch.Tensor, count: int) -> int:
    """How many of ``count`` configurations of ``cfg`` on data ``X`` to stack at once: all (up to
    :data:`STACK_MAX`) for small problems, one for large ones (see :data:`STACK_LIMIT`)."""
    N, n = X.shape[0], X.shape[1]
    width = max(cfg.d, cfg.d_qk, cfg.m, n)
    return max(1, min(count, STACK_MAX)) if N * n * width <= STACK_LIMIT else 1


def stopping_rule(t: int, phi: float, phi_0: float, *, tol: float, blowup: float, steps: int,
                  mu: float, rtol: float = 0.0) -> tuple[str, str] | None:
    """The status of a run whose iterate ``t`` has loss ``phi`` (``phi_0`` at ``t = 0``), as
    ``(status, message)``, or ``None`` while it goes on. Divergence: a non-finite loss, or one
    above ``blowup * phi_0``; convergence: ``phi <= tol`` or ``phi <= rtol * phi_0``; the end:
    ``t == steps``."""
    if not np.isfinite(phi):
        if t == 0:
            return "diverged", ("the initial loss is not finite: no step was taken; check the scale "
                                "of beta and of the data")
        return "diverged", f"the loss became non-finite at step {t} (mu={mu:g} too large?)"
    if t > 0 and phi > blowup * phi_0:
        return "diverged", (f"loss {phi:.3g} at step {t} exceeded {blowup:g} x the initial loss "
                            f"(mu={mu:g} too large?)")
    if phi <= tol:
        return "converged", f"loss {phi:.3g} <= tol={tol:g} at step {t}"
    if phi <= rtol * phi_0:
        return "converged", f"loss {phi:.3g} <= rtol={rtol:g} x the initial loss at step {t}"
    if t == steps:
        return "max_steps", f"ran all {steps} steps"
    return None


def gradient_descent(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
                     cfg: ModelConfig, mu: float, steps: int, **options) -> Run:
    """Run at most ``steps`` steps of full-batch gradient descent from ``params`` with step size
    ``mu``; return a :class:`Run`. The options are those of :func:`sweep`. Every run stops on its
    own:

    * ``status="converged"`` when ``Phi(theta_t) <= tol``;
    * ``status="diverged"`` when the loss or gradient becomes NaN/infinite or the loss exceeds
      ``blowup`` times its initial value; the history then ends at the last finite iterate and the
      returned weights are that iterate: no NaN is ever returned;
    * ``status="max_steps"`` otherwise.

    ``params`` is not modified. For a list of configurations use :func:`sweep`.
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"gradient_descent runs one configuration (a dict of weights); for a list "
                        f"of them use convres.sweep(...), got {type(params).__name__}.")
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig (one run; for several use convres.sweep), "
                        f"got {type(cfg).__name__}.")
    return sweep([params], X, Y, cfg, as_real("the step size mu", mu, minimum=0.0, above=True),
                 steps, **options)[0]


def _as_lists(params, cfg, mu) -> tuple[list, list, list]:
    if isinstance(params, Mapping) or not isinstance(params, Sequence) or isinstance(params, (str, bytes)):
        raise TypeError(f"sweep takes a list of weight dicts (one per configuration); for one run use "
                        f"convres.gradient_descent, got {type(params).__name__}.")
    k = len(params)
    cfgs = [cfg] * k if isinstance(cfg, ModelConfig) else list(cfg) if isinstance(cfg, Sequence) else None
    mus = [mu] * k if is_real(mu) else list(mu) if isinstance(mu, (Sequence, np.ndarray)) else None
    if cfgs is None or mus is None:
        raise TypeError(f"cfg must be a ModelConfig or a list of them and mu a number or a list of "
                        f"numbers, got {type(cfg).__name__} and {type(mu).__name__}.")
    if len(cfgs) != k or len(mus) != k:
        raise ValueError(f"params, cfg and mu must have the same length, got {k}, {len(cfgs)}, {len(mus)}.")
    return list(params), cfgs, mus


def _check_run(p, X, Y, cfg, mu) -> float:
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a convres.ModelConfig, got {type(cfg).__name__}.")
    check_inputs(p, X, Y, cfg)
    if p["W_U"].dtype not in (torch.float64, torch.float32):
        raise TypeError(f"gradient descent runs in torch.float64 or torch.float32 (its singular "
                        f"values need them), got {p['W_U'].dtype}; convert the weights and data "
                        "with .double() (or .float()).")
    return as_real("the step size mu", mu, minimum=0.0, above=True)


def _data_lists(X, Y, count: int) -> tuple[list, list]:
    """``X`` and ``Y`` as one tensor per configuration (the same tensor when shared)."""
    lists = [isinstance(v, (list, tuple)) for v in (X, Y)]
    if lists[0] != lists[1]:
        raise TypeError("X and Y must both be tensors (data shared by every configuration) or both be "
                        "lists with one tensor per configuration.")
    if not lists[0]:
        return [X] * count, [Y] * count
    if len(X) != count or len(Y) != count:
        raise ValueError(f"with data per configuration, X and Y need one tensor per configuration "
                         f"({count}), got {len(X)} and {len(Y)}.")
    return list(X), list(Y)


def _shared(cfg: ModelConfig) -> ModelConfig:
    """What configurations in one stack must share: everything but the residual coefficients."""
    return cfg.replace(beta=1.0, beta_attn=None, beta_ffn=None)


def sweep(params: Sequence[Mapping[str, torch.Tensor]], X, Y, cfg, mu, steps: int, *,
          record_every: int | None = None, tol: float = 0.0, rtol: float = 0.0, blowup: float = BLOWUP,
          progress: bool = False, callback: Callable[[Step], None] | None = None, device=None,
          chunk: int | None = None) -> list[Run]:
    """Gradient descent for a list of configurations, in the order given; see
    :func:`gradient_descent` for the stopping rules. The data may be shared (one ``X``, ``Y``) or
    one pair per configuration (lists ``X``, ``Y``: e.g. the seeds of an experiment, each with its
    own data); configurations whose data have the same shape are stacked together either way.

    Args:
        params: the initial weights of each configuration (e.g. :func:`convres.init_params`); not
            modified.
        X: inputs ``(N, n, d)``, or a list of them (one per configuration); Y: targets
            ``(N, n, c)`` (``(N, c)`` with ``pool="mean"``), or a list of them.
        cfg: the model configuration, or one per configuration.
        mu: the step size (> 0), or one per configuration.
        steps: the largest number of steps.
        record_every: if given, the extreme singular values of ``Z_1`` and ``H_L`` are recorded every
            ``record_every`` steps (``t = 0`` included) and at the last iterate; each record costs
            an SVD, so by default nothing is recorded (``record_every=steps``: the start and the end).
        tol: stop when the loss falls to this value (0: run all steps).
        rtol: stop when the loss falls to this fraction of its initial value (0: never).
        blowup: divergence threshold relative to the initial loss.
        progress: show a progress bar (tqdm).
        callback: ``callback(step)`` with a :class:`Step`, called at every iterate kept in the
            history, for every configuration; its return value is ignored.
        device: where to run (e.g. ``"cuda"``); ``None`` keeps the device of the weights. The
            returned weights live there.
        chunk: how many configurations to stack at once; ``None`` chooses by problem size
            (:func:`chunk_size`).
    """
    params_list, cfgs, mus = _as_lists(params, cfg, mu)
    Xs, Ys = _data_lists(X, Y, len(params_list))
    if is_real(steps) and not isinstance(steps, bool) and float(steps) > MAX_STEPS:
        raise ValueError(f"steps={steps!r} is more than {MAX_STEPS:,}: at a millisecond a step that is "
                         "over a day of computing; use fewer steps (and tol= or rtol= to stop early).")
    steps = as_int("steps", steps, minimum=0)
    record_every = None if record_every is None else as_int("record_every", record_every, minimum=1)
    tol = as_real("tol", tol, minimum=0.0, finite=False)
    rtol = as_real("rtol", rtol, minimum=0.0, maximum=1.0)
    blowup = as_real("blowup", blowup, minimum=1.0, above=True, finite=False)
    chunk = None if chunk is None else as_int("chunk", chunk, minimum=1)
    if torch.is_inference_mode_enabled():
        raise RuntimeError("gradient descent needs autograd, which torch.inference_mode() turns off; "
                           "call it outside that block.")
    for i, (p, c, m) in enumerate(zip(params_list, cfgs, mus)):
        try:
            mus[i] = _check_run(p, Xs[i], Ys[i], c, m)
        except (TypeError, ValueError) as err:
            raise type(err)(err if len(params_list) == 1 else f"configuration {i}: {err}") from None
    dev = check_device(device) if device is not None else None
    _check_cost(params_list, Xs, cfgs, dev, chunk)
    groups: dict = {}
    for i, (p, c) in enumerate(zip(params_list, cfgs)):
        key = (_shared(c), p["W_U"].dtype, p["W_U"].device, tuple(Xs[i].shape), tuple(Ys[i].shape))
        groups.setdefault(key, []).append(i)
    chunks = []
    for (shared, *_), idx in groups.items():
        size = chunk or chunk_size(shared, Xs[idx[0]], len(idx))
        chunks += [idx[j:j + size] for j in range(0, len(idx), size)]
    bar = _progress(steps * len(chunks), progress)
    results: list = [None] * len(params_list)
    try:
        for idx in chunks:
            shared_data = not isinstance(X, (list, tuple))
            loop = _Loop([params_list[i] for i in idx], X if shared_data else [Xs[i] for i in idx],
                         Y if shared_data else [Ys[i] for i in idx], [cfgs[i] for i in idx],
                         [mus[i] for i in idx], dev, record_every, idx, callback)
            for i, r in zip(idx, loop.run(steps, tol, rtol, blowup, bar)):
                results[i] = r
    finally:
        if bar is not None:
            bar.close()
    return results


def _check_cost(params_list, Xs, cfgs, dev, chunk) -> None:
    """The cost policy (:func:`convres.runtime.check_memory`) before anything is allocated: the
    largest stack of configurations must fit in the memory of the device it runs on."""
    worst, where = 0, None
    for p, X, c in zip(params_list, Xs, cfgs):
        count = min(len(params_list), chunk or STACK_MAX) if chunk_size(c, X, len(params_list)) > 1 else 1
        need = memory_estimate(c, X.shape[0], X.shape[1], configs=count, dtype=p["W_U"].dtype)
        if need > worst:
            worst, where = need, (X.shape, c, count)
    if where is None:
        return
    (N, n, _), c, count = where
    device = dev if dev is not None else params_list[0]["W_U"].device
    check_memory(worst, f"gradient descent on X of shape (N={N}, n={n}, d={c.d}) with L={c.L}, "
                 f"d_qk={c.d_qk}, m={c.m}" + (f" ({count} configurations at once)" if count > 1 else ""),
                 "use fewer sequences N or tokens n (attention costs n^2 per sequence), a smaller "
                 "model" + (", or chunk=1" if count > 1 else ""), device=device)


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
    diverged_at: int | None = None
    params: dict = dataclasses.field(default_factory=dict)

    def run(self) -> Run:
        sv = np.asarray(self.sv, dtype=np.float64).reshape(-1, 4)
        return Run(self.params, History(
            loss=np.asarray(self.losses, dtype=np.float64),
            grad_norm=np.asarray(self.gnorms, dtype=np.float64),
            record_steps=np.asarray(self.rec, dtype=np.int64),
            sigma_min_Z=sv[:, 0], sigma_max_Z=sv[:, 1], sigma_min_H=sv[:, 2], sigma_max_H=sv[:, 3],
            status=self.status, message=self.message, mu=float(self.mu), diverged_at=self.diverged_at))


class _Loop:
    """The loop for one chunk of configurations sharing ``_shared(cfg)``, always on a stack: every
    weight has a leading axis over the configurations still running (``active``)."""

    def __init__(self, params_list, X, Y, cfgs, mus, dev, record_every, index, callback):
        dev = dev or params_list[0]["W_U"].device
        self.cfg = cfgs[0]
        # shared data: one (N, n, d) tensor; data per configuration: a stack (B, N, n, d)
        self.X, self.Y = ((torch.stack([t.to(dev) for t in v]) if isinstance(v, list) else v.to(dev))
                          for v in (X, Y))
        self.per_config = isinstance(X, list)
        self.theta = {k: torch.stack([p[k].detach().to(dev) for p in params_list]) for k in params_list[0]}
        dtype = self.theta["W_U"].dtype
        # one coefficient per configuration; a plain number when they all share it (cheaper)
        self.residual = tuple(v[0] if len(set(v)) == 1 else torch.tensor(v, dtype=dtype, device=dev)
                              for v in zip(*(c.residual for c in cfgs)))
        self.mu = torch.tensor(mus, dtype=dtype, device=dev).view(-1, 1, 1)
        self.records = [_Record(mu=m) for m in mus]
        self.active = list(range(len(mus)))
        self.record_every, self.index, self.callback = record_every, index, callback

    def run(self, steps, tol, rtol, blowup, bar) -> list[Run]:
        self.prev = self.theta              # the previous iterate, slice by slice
        for t in range(steps + 1):
            phi, grads, tr = self._evaluate(last=t == steps)
            phis = phi.double().tolist()
            gnorms = [None] * len(phis) if grads is None else _grad_norms(grads).tolist()
            keep = [j for j, i in enumerate(self.active)
                    if self._advance(t, j, i, phis[j], gnorms[j], (tol, rtol), blowup, steps, grads, tr)]
            self._record_spectra(t, tr)
            del tr                          # free the activations before the next forward pass
            if bar is not None:
                bar.update(1)
            if not keep:
                break
            if len(keep) < len(self.active):
                sel = torch.tensor(keep, device=self.mu.device)
                self.theta = {k: v[sel] for k, v in self.theta.items()}
                grads = {k: g[sel] for k, g in grads.items()}
                self.residual = tuple(b[sel] if isinstance(b, torch.Tensor) else b for b in self.residual)
                self.mu = self.mu[sel]
                if self.per_config:
                    self.X, self.Y = self.X[sel], self.Y[sel]
                self.active = [self.active[j] for j in keep]
            self.prev = self.theta
            self.theta = {k: torch.addcmul(v, self.mu, grads[k], value=-1.0) for k, v in self.theta.items()}
        if bar is not None and t < steps:
            bar.update(steps - t)
        return [r.run() for r in self.records]

    def _evaluate(self, last: bool):
        if last:  # no step is taken from the last iterate: no gradient
            with torch.no_grad():
                tr = forward_trace(self.theta, self.X, self.cfg, residual=self.residual)
                return _stacked_error(tr.F, self.Y), None, tr
        return _loss_and_grad(self.theta, self.X, self.Y, self.cfg, self.residual)

    def _advance(self, t, j, i, phi, gnorm, tol, blowup, steps, grads, tr) -> bool:
        """Apply the stopping rules to configuration ``i`` (slice ``j``) at iterate ``t`` and
        record it. True: it goes on."""
        r = self.records[i]
        rule = stopping_rule(t, phi, r.losses[0] if r.losses else phi, tol=tol[0], rtol=tol[1],
                             blowup=blowup, steps=steps, mu=r.mu)
        if rule is not None and rule[0] == "diverged":     # iterate t is not kept
            r.status, r.message, r.diverged_at = *rule, t
            if r.gnorms:
                r.gnorms.pop()                              # the gradient that led here
            if t == 0:
                r.losses.append(phi)                        # the non-finite start, for the record
            r.params = {k: v[j].detach().clone() for k, v in (self.prev if t else self.theta).items()}
            return False
        r.losses.append(phi)
        if rule is None and not np.isfinite(gnorm):
            rule = ("diverged", f"the gradient became non-finite at step {t}; no step was taken "
                                f"from it (mu={r.mu:g} too large?)")
            r.diverged_at = t + 1
        self._notify(t, j, i, phi, grads if rule is None else None, tr)
        if rule is not None:
            r.status, r.message = rule
            if self.record_every is not None:
                r.rec.append(t)
            r.params = {k: v[j].detach().clone() for k, v in self.theta.items()}
            return False
        r.gnorms.append(gnorm)
        if self.record_every is not None and t % self.record_every == 0:
            r.rec.append(t)
        return True

    def _notify(self, t, j, i, phi, grads, tr):
        if self.callback is None:
            return
        trace = tr.select(j).detach()
        tensors = [*self.theta.values(), *(grads or {}).values(), *(x for f in trace[:6] for x in f),
                   trace.F]
        versions = [v._version for v in tensors]
        self.callback(Step(t, self.index[i], {k: v[j].detach() for k, v in self.theta.items()},
                           None if grads is None else {k: g[j] for k, g in grads.items()},
                           phi, trace))
        if [v._version for v in tensors] != versions:
            raise RuntimeError("the callback modified step.params, step.grads or step.trace in place, "
                               "which would change the run (the caller's own weights are untouched); "
                               "copy them first (step.params[k].clone()).")

    def _record_spectra(self, t, tr):
        """Extreme singular values of ``Z_1`` and ``H_L`` for the configurations recording at ``t``
        (one batched SVD for all of them)."""
        rows = [j for j, i in enumerate(self.active) if self.records[i].rec[-1:] == [t]]
        if not rows:
            return
        sel = torch.tensor(rows, device=tr.F.device)
        Z1, HL = tr.Z[0].detach()[sel], tr.H[-1].detach()[sel]
        sv = torch.cat([extreme_singular_values(Z1), extreme_singular_values(HL)], dim=1).cpu().tolist()
        for j, row in zip(rows, sv):
            self.records[self.active[j]].sv.append(tuple(row))

def _stacked_error(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi_b = 1/2 ||F_b - Y_b||_F^2`` for every configuration ``b`` of a stack; ``Y`` is shared
    (no leading axis) or stacked like ``F``."""
    return 0.5 * (F - Y).pow(2).flatten(1).sum(1)


def _grad_norms(grads: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``||grad||`` per configuration of a stacked gradient."""
    return torch.stack([g.flatten(1).pow(2).sum(1) for g in grads.values()]).sum(0).sqrt().double()


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="gradient descent", unit="step", leave=False)
