"""Full-batch gradient descent ``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` (book equation (6)):
:func:`gradient_descent` runs one configuration, :func:`sweep` a list, stacked where sizes allow
(appendix *Performance*), each with the results of a run on its own."""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from .backprop import backward_rows, forward_rows, trace_of, transposes
from .model import ModelConfig, Trace, check_cost, check_inputs, forward_trace, phi_and_grad, rows_of
from .rank import extreme_singular_values
from .runtime import check_device
from .values import as_int, as_real, is_real

__all__ = ["History", "Run", "Step", "gradient_descent", "sweep", "loss_and_grad", "chunk_size",
           "stopping_rule", "STACK_LIMIT", "STACK_MAX", "BLOWUP", "MAX_STEPS"]


@dataclasses.dataclass
class History:
    """One run: ``loss`` ``Phi(theta_t)`` (``t <= steps``), ``grad_norm`` (``t < steps``), the extreme
    singular values of the stacked ``Z_1`` and ``H_L`` at ``record_steps``, ``status`` (converged,
    max_steps, diverged) and ``diverged_at``, the step that blew up (the history ends before it)."""

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
        arrays = {"record_steps": np.int64}
        kept: dict[str, Any] = {k: np.asarray(v, dtype=arrays.get(k, np.float64)) if isinstance(v, list)
                                else v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**kept)


class Run(NamedTuple):
    """The last iterate with a finite loss (never NaN) and the :class:`History`."""

    params: dict[str, torch.Tensor]
    history: History


@dataclasses.dataclass(frozen=True)
class Step:
    """What a ``callback`` sees at iterate ``t`` of configuration ``index`` (the gradient ``None`` at
    the last); editing them in place is refused (RuntimeError)."""

    t: int
    index: int
    params: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] | None
    loss: float
    trace: Trace


def loss_and_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig):
    """``(Phi(theta), grad Phi(theta), trace)``: :func:`convres.model.phi_and_grad`, inputs checked."""
    check_inputs(params, X, Y, cfg, training=True)
    with torch.no_grad():
        return phi_and_grad(params, X, Y, cfg)


#: Stack configurations only while one's block activations, ``N n (d + d_qk + m + n)`` entries,
#: stay below this (one CPU core, 8 configurations: stacked 1.1-1.9 times faster up to 17,500,
#: 0.66-0.9 times above 29,000; appendix *Performance*).
STACK_LIMIT = 20_000
#: At most this many configurations in one stack.
STACK_MAX = 64
#: The most steps one call accepts (a larger count is a typo, not a plan).
MAX_STEPS = 10**8
#: A run diverges when its loss exceeds this many times its initial value (the default ``blowup``).
BLOWUP = 1e6


def chunk_size(cfg: ModelConfig, X: torch.Tensor, count: int, *,
               limit: int = STACK_LIMIT, most: int = STACK_MAX) -> int:
    """All ``count`` (up to ``most``) while ``N n (d + d_qk + m + n) <= limit``, else one."""
    N, n = X.shape[0], X.shape[1]
    small = N * n * (cfg.d + cfg.d_qk + cfg.m + n) <= limit
    return max(1, min(count, most)) if small else 1


def stopping_rule(t: int, phi: float, phi_0: float, *, tol: float, blowup: float, steps: int,
                  mu: float, rtol: float = 0.0) -> tuple[str, str] | None:
    """``(status, message)`` or ``None`` (go on): diverged (non-finite or ``> blowup phi_0``),
    converged (``<= tol`` or ``<= rtol phi_0``), or ``max_steps`` at ``t == steps``."""
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
    """At most ``steps`` steps of size ``mu`` from ``params`` (not modified); options: :func:`sweep`'s."""
    if not isinstance(params, Mapping):
        raise TypeError(f"gradient_descent runs one configuration (a dict of weights); for a list "
                        f"of them use convres.sweep(...), got {type(params).__name__}.")
    return sweep([params], X, Y, cfg, mu, steps, **options)[0]


def _check_runs(params_list, Xs, Ys, cfgs, mus, finite: bool) -> None:
    """Each configuration's inputs and step size (``mus`` made floats in place), errors numbered."""
    for i, (p, c, m) in enumerate(zip(params_list, cfgs, mus)):
        try:
            check_inputs(p, Xs[i], Ys[i], c, finite=finite)
            if p["W_U"].dtype not in (torch.float64, torch.float32):
                raise TypeError(f"gradient descent runs in torch.float64 or torch.float32 (its singular "
                                f"values need them), got {p['W_U'].dtype}; convert the weights and data "
                                "with .double() (or .float()).")
            mus[i] = as_real("the step size mu", m, minimum=0.0, above=True)
        except (TypeError, ValueError) as err:
            raise type(err)(err if len(params_list) == 1 else f"configuration {i}: {err}") from None


def sweep(params: Sequence[Mapping[str, torch.Tensor]], X, Y, cfg, mu, steps: int, *,
          record_every: int | None = None, tol: float = 0.0, rtol: float = 0.0, blowup: float = BLOWUP,
          progress: bool = False, callback: Callable[[Step], None] | None = None, device=None,
          chunk: int | None = None) -> list[Run]:
    """:func:`gradient_descent` for a list of ``params`` (``X``, ``Y``, ``cfg``, ``mu`` shared or one
    each): singular values every ``record_every`` steps, ``callback(step)`` at every iterate."""
    if isinstance(params, Mapping) or not isinstance(params, Sequence) or isinstance(params, (str, bytes)):
        raise TypeError(f"sweep takes a list of weight dicts (one per configuration); for one run use "
                        f"convres.gradient_descent, got {type(params).__name__}.")
    k = len(params)
    cfgs = [cfg] * k if isinstance(cfg, ModelConfig) else list(cfg) if isinstance(cfg, Sequence) else None
    mus = [mu] * k if is_real(mu) else list(mu) if isinstance(mu, (Sequence, np.ndarray)) else None
    if cfgs is None or mus is None or len(cfgs) != k or len(mus) != k:
        raise TypeError(f"cfg must be a ModelConfig or a list of {k} and mu a number or a list of {k} "
                        f"(one per weight dict), got {type(cfg).__name__} and {type(mu).__name__}.")
    per_config = isinstance(X, (list, tuple))
    if per_config != isinstance(Y, (list, tuple)) or per_config and not len(X) == len(Y) == k:
        raise TypeError(f"X and Y must both be tensors (data shared by every configuration) or both be "
                        f"lists with one tensor per configuration ({k}).")
    Xs, Ys = (list(X), list(Y)) if per_config else ([X] * k, [Y] * k)
    params_list = list(params)
    steps = as_int("steps", steps, minimum=0, maximum=MAX_STEPS)
    record_every = None if record_every is None else as_int("record_every", record_every, minimum=1)
    tol = as_real("tol", tol, minimum=0.0, finite=False)
    rtol = as_real("rtol", rtol, minimum=0.0, maximum=1.0)
    blowup = as_real("blowup", blowup, minimum=1.0, above=True, finite=False)
    chunk = None if chunk is None else as_int("chunk", chunk, minimum=1)
    if torch.is_inference_mode_enabled():
        raise RuntimeError("gradient descent returns weights and traces for autograd to use, which "
                           "torch.inference_mode() forbids; call it outside that block.")
    dev = check_device(device) if device is not None else None
    _check_runs(params_list, Xs, Ys, cfgs, mus, finite=False)       # the shapes
    groups: dict = {}
    for i, (p, c) in enumerate(zip(params_list, cfgs)):    # one stack shares all but the residual
        shared = c.replace(beta=1.0, beta_attn=None, beta_ffn=None)
        key = (shared, p["W_U"].dtype, p["W_U"].device, tuple(Xs[i].shape), tuple(Ys[i].shape))
        groups.setdefault(key, []).append(i)
    chunks = []
    for (shared, dtype, on, *_), idx in groups.items():
        size = chunk or chunk_size(shared, Xs[idx[0]], len(idx))
        chunks += [idx[j:j + size] for j in range(0, len(idx), size)]
        check_cost(shared, *Xs[idx[0]].shape[:2], configs=min(size, len(idx)), dtype=dtype,
                   device=on if dev is None else dev)          # the largest stack, before a value is read
    _check_runs(params_list, Xs, Ys, cfgs, mus, finite=True)        # the values
    shown = progress and steps * len(chunks) > 0
    # tqdm.auto warns when imported in a notebook without ipywidgets: imported only to show a bar
    tqdm = importlib.import_module("tqdm.auto" if shown else "tqdm").tqdm
    results: list = [None] * len(params_list)
    with tqdm(total=steps * len(chunks), desc="gradient descent", unit="step", leave=False,
              disable=not shown) as bar:
        for idx in chunks:
            loop = _Loop(idx, params_list, Xs, Ys, cfgs, mus, dev, record_every, callback)
            for i, r in zip(idx, loop.run(steps, tol, rtol, blowup, bar)):
                results[i] = r
    return results


def _finished(r: dict[str, Any]) -> Run:
    """The :class:`Run` of a configuration's record (:meth:`History.to_dict`'s lists, ``sv`` the
    rows of the four singular values, ``params``)."""
    sv = np.asarray(r.pop("sv"), dtype=np.float64).reshape(-1, 4)
    sigmas = dict(zip(("sigma_min_Z", "sigma_max_Z", "sigma_min_H", "sigma_max_H"), sv.T))
    return Run(r.pop("params"), History.from_dict({**r, **sigmas}))


#: A block of steps keeps its gradients in at most this many bytes, and at most BLOCK_MAX steps.
BLOCK_BYTES = 2**25
BLOCK_MAX = 64


class _Loop:
    """The configurations ``index`` of a sweep, sharing ``cfg`` but the residual, their weights one
    flat ``theta``; steps run in blocks (doubling up to BLOCK_MAX), a configuration that stopped
    inside one replays its updates."""

    def __init__(self, index, params_list, X, Y, cfgs, mus, dev, record_every, callback):
        params_list, X, Y, cfgs, mus = ([v[i] for i in index] for v in (params_list, X, Y, cfgs, mus))
        dev = dev or params_list[0]["W_U"].device
        self.cfg, self.names = cfgs[0], list(params_list[0])
        self.shapes = [tuple(params_list[0][k].shape) for k in self.names]
        self.theta = torch.cat([torch.stack([p[k].detach().to(dev) for p in params_list]).reshape(-1)
                                for k in self.names])
        B, dtype = len(params_list), self.theta.dtype
        self.X, self.Y = (torch.stack([t.to(dev) for t in T]) for T in (X, Y))    # (B, N, n, d), (B, ...)
        # one coefficient per configuration; a plain number when they all share it (cheaper)
        self.residual = tuple(v[0] if len(set(v)) == 1 else torch.tensor(v, dtype=dtype, device=dev)
                              for v in zip(*(c.residual for c in cfgs)))
        self.mu = torch.tensor(mus, dtype=dtype, device=dev)
        self.records: list[dict[str, Any]] = [
            dict(loss=[], grad_norm=[], record_steps=[], sv=[], status="max_steps", message="", mu=m,
                 diverged_at=None, params=None) for m in mus]
        self.active = list(range(B))
        self.record_every, self.index, self.callback = record_every, index, callback
        self.most = min(BLOCK_MAX, max(1, BLOCK_BYTES // self.theta.nbytes))
        self._stack()

    def _stack(self):
        """Set when the stack changes: ``W``, ``args``, ``mu_theta``, the buffers ``G`` and ``R``."""
        self.W = self._weights(self.theta)
        self.args = rows_of(self.W, self.X, self.Y, self.cfg, residual=self.residual)
        self.layers_T = transposes(self.args[0])
        self.mu_theta = torch.cat([self.mu.repeat_interleave(math.prod(s)) for s in self.shapes])
        self.G = self.theta.new_empty((self.most, self.theta.numel()))
        self.grads = [self._weights(g) for g in self.G]
        Y = self.args[3]
        self.R = Y.new_empty((self.most, len(self.active), *Y.shape[1:]))
        self.G_rows, self.R_rows = list(self.G), list(self.R)       # the buffers of each step

    def _split(self, flat: torch.Tensor, dim: int = 0) -> tuple[torch.Tensor, ...]:
        """``flat`` (a stack of the active configurations along ``dim``) cut weight by weight."""
        return flat.split([len(self.active) * math.prod(s) for s in self.shapes], dim=dim)

    def _weights(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The weights held in ``flat``, as views ``(B, p, q)``."""
        B = len(self.active)
        return {k: v.view(B, *s) for k, v, s in zip(self.names, self._split(flat), self.shapes)}

    def _config(self, flat: torch.Tensor, j: int) -> dict[str, torch.Tensor]:
        """The weights of row ``j`` of the stack ``flat``, as views ``(p, q)``."""
        return {k: v[j] for k, v in self._weights(flat).items()}

    def _step(self, a: int, last: bool, trace: bool) -> Trace | None:
        """Iterate ``a``: ``R[a] = F - Y`` and, unless ``last``, ``G[a]`` and the update; the trace."""
        layers, W_U, X, Y, s, act, beta_attn, beta_ffn, N, pooled = self.args
        blocks, H, F = forward_rows(layers, W_U, X, s, act, beta_attn, beta_ffn, N, pooled)
        R = torch.sub(F, Y, out=self.R_rows[a])
        if not last:
            backward_rows(layers, W_U, blocks, H, R, s, act, beta_attn, beta_ffn, N, pooled,
                          out=self.grads[a], layers_T=self.layers_T)
            self.theta.addcmul_(self.mu_theta, self.G_rows[a], value=-1.0)
        if not trace:
            return None
        B, N, n, _ = self.X.shape
        return trace_of(blocks, self.args[0], F, (B,), N, n, self.cfg.pool == "mean")

    def _losses(self, k: int, last: bool) -> tuple[np.ndarray, np.ndarray]:
        """``Phi = 1/2 ||R||^2`` and ``||G||`` of the block's ``k`` iterates, ``(k, B)`` each."""
        phis = 0.5 * self.R[:k].pow(2).sum((2, 3))
        B = len(self.active)
        parts = self._split(self.G[:k], dim=1)
        squares = [torch.linalg.vector_norm(g.view(k, B, -1), dim=2).square_() for g in parts]
        for part in squares[1:]:             # each step alone (the same numbers in any block)
            squares[0] += part
        norms = squares[0].sqrt_()
        if last:
            norms[-1] = math.nan
        return phis.double().cpu().numpy(), norms.double().cpu().numpy()

    def _iterates(self, prev, start, end, k: int) -> Callable[[int], torch.Tensor]:
        """``at(x)``: the iterate before the block (``x = 0``) or at its step ``x - 1``, its updates
        replayed from the nearest one known (each made once)."""
        known = {0: prev, 1: start, k: end}

        def at(x: int) -> torch.Tensor:
            if x not in known:
                y = max(v for v in known if 1 <= v < x)
                theta = known[y].clone()
                for v in range(y, x):
                    theta.addcmul_(self.mu_theta, self.G[v - 1], value=-1.0)
                known[x] = theta
            return known[x]
        return at

    def run(self, steps, tol, rtol, blowup, bar) -> list[Run]:
        rules = dict(tol=tol, rtol=rtol, blowup=blowup, steps=steps)
        prev, t, size = None, 0, 1
        while self.active:
            block, spectra = range(t, min(t + size, steps + 1)), {}
            start = end = self.theta.clone()
            with torch.no_grad():
                for a, u in enumerate(block):
                    if a == len(block) - 1:
                        end = self.theta.clone() if a else start
                    record = self.record_every is not None and u % self.record_every == 0
                    tr = self._step(a, u == steps, record or self.callback is not None)
                    if record and tr is not None:    # the rows whose loss is finite
                        phi = 0.5 * self.R[a].pow(2).sum((1, 2))
                        rows = torch.isfinite(phi).nonzero().flatten().tolist()
                        spectra[u] = dict(zip(rows, _spectra(tr.select(rows)).tolist()))
            losses, gnorms = self._losses(len(block), block[-1] == steps)
            step = tr if self.callback is not None else None
            # per configuration, the first step at which a stopping rule may apply (a superset of
            # stopping_rule's tests, which then decide; the last iterate's norm is NaN)
            phi_0 = np.array([self.records[i]["loss"][0] if self.records[i]["loss"] else losses[0, j]
                              for j, i in enumerate(self.active)])
            with np.errstate(invalid="ignore", over="ignore"):
                flag = (~np.isfinite(losses) | ~np.isfinite(gnorms) | (losses > blowup * phi_0)
                        | (losses <= np.maximum(tol, rtol * phi_0)) | (step is not None))
            first = np.where(flag.any(0), flag.argmax(0), len(block))
            at = self._iterates(prev, start, end, len(block))
            keep = [j for j, i in enumerate(self.active) if self._record(
                block, j, i, first[j], losses[:, j], gnorms[:, j], at, spectra, step, rules)]
            bar.update(len(block))
            prev, t = end, block[-1] + 1
            if len(keep) < len(self.active):
                sel = torch.tensor(keep, dtype=torch.long, device=self.theta.device)
                self.theta, prev = (torch.cat([v[sel].reshape(-1) for v in self._weights(w).values()])
                                    for w in (self.theta, prev))
                self.mu, self.X, self.Y = self.mu[sel], self.X[sel], self.Y[sel]
                self.residual = self._residual(sel)
                self.active = [self.active[j] for j in keep]
                if self.active:
                    self._stack()
            if step is None:
                size = min(2 * size, self.most)
        bar.update(max(0, steps + 1 - t))
        return [_finished(r) for r in self.records]

    def _record(self, block, j, i, first, losses, norms, at, spectra, step, rules) -> bool:
        """Record configuration ``i`` (row ``j``) over ``block``; True while it goes on."""
        r = self.records[i]
        r["loss"] += losses[:first].tolist()
        r["grad_norm"] += norms[:first].tolist()
        recorded = [t for t in block[:first] if self.record_every and t % self.record_every == 0]
        r["record_steps"] += recorded
        r["sv"] += [spectra[t][j] for t in recorded]
        for a in range(first, len(block)):
            t, phi = block[a], float(losses[a])
            rule = stopping_rule(t, phi, r["loss"][0] if r["loss"] else phi, mu=r["mu"], **rules)
            if rule is not None and rule[0] == "diverged":     # iterate t is not kept
                r.update(status=rule[0], message=rule[1], diverged_at=t)
                if r["grad_norm"]:
                    r["grad_norm"].pop()                        # the gradient that led here
                if t == 0:
                    r["loss"].append(phi)                       # the non-finite start, for the record
                r["params"] = {k: v.clone() for k, v in self._config(at(a if t else a + 1), j).items()}
                return False
            r["loss"].append(phi)
            if rule is None and not np.isfinite(norms[a]):
                rule = ("diverged", f"the gradient became non-finite at step {t}; no step was taken "
                                    f"from it (mu={r['mu']:g} too large?)")
                r["diverged_at"] = t + 1
            theta = self._config(at(a + 1), j)
            if step is not None:
                self._notify(t, j, i, phi, theta, None if rule is not None else self._config(self.G[a], j),
                             step)
            if rule is None:
                r["grad_norm"].append(float(norms[a]))
            else:
                r.update(status=rule[0], message=rule[1], params={k: v.clone() for k, v in theta.items()})
            if self.record_every is not None and (rule is not None or t % self.record_every == 0):
                r["record_steps"].append(t)
                r["sv"].append(spectra[t][j] if j in spectra.get(t, ()) else self._spectra_at(theta, j))
            if rule is not None:
                return False
        return True

    def _residual(self, rows) -> tuple:
        """The residual coefficients of the configurations ``rows`` (an index tensor or a slice)."""
        return tuple(b[rows] if isinstance(b, torch.Tensor) else b for b in self.residual)

    @torch.no_grad()
    def _spectra_at(self, theta, j) -> list:
        """The four extreme singular values at the weights ``theta`` of row ``j``."""
        W = {k: v.unsqueeze(0) for k, v in theta.items()}
        tr = forward_trace(W, self.X[j:j + 1], self.cfg, residual=self._residual(slice(j, j + 1)))
        return _spectra(tr)[0].tolist()

    def _notify(self, t, j, i, phi, theta, g, tr):
        trace = tr.select(j).detach()
        params = {k: v.clone() for k, v in theta.items()}
        grads = None if g is None else {k: v.clone() for k, v in g.items()}
        tensors = [*params.values(), *(grads or {}).values(), *(x for f in trace[:6] for x in f), trace.F]
        versions = [v._version for v in tensors]
        self.callback(Step(t, self.index[i], params, grads, phi, trace))
        if [v._version for v in tensors] != versions:
            raise RuntimeError("the callback modified step.params, step.grads or step.trace in place, "
                               "which would change the run (the caller's own weights are untouched); "
                               "copy them first (step.params[k].clone()).")


def _spectra(tr: Trace) -> torch.Tensor:
    """``(sigma_min, sigma_max)`` of ``Z_1`` and of ``H_L`` per configuration, ``(B, 4)``."""
    return torch.cat([extreme_singular_values(tr.Z[0]), extreme_singular_values(tr.H[-1])], dim=1)

