"""Exact full-batch gradient descent on ``Phi`` with a fixed step size ``mu``.

Book chapter: *The model* (``book/model.md``), used by every later chapter. Paper: arXiv:2506.05249,
the update ``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` whose loss the main theorem bounds by
``Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)``.

No momentum, no adaptive steps, no mini-batches: every step uses the gradient of the whole loss
:func:`convres.model.loss`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np
import torch

from .model import ModelConfig, forward_trace, validate

__all__ = ["History", "gradient_descent", "gd_step", "loss_and_grad", "stacked", "extreme_singular_values"]

STATUSES = ("converged", "max_steps", "diverged")


def stacked(M: torch.Tensor) -> torch.Tensor:
    """Stack a batch ``(N, n, k)`` of matrices into one ``(N n, k)`` matrix (rows of all sequences)."""
    return M.reshape(-1, M.shape[-1])


def extreme_singular_values(M: torch.Tensor) -> tuple[float, float]:
    """``(sigma_min, sigma_max)`` of the stacked matrix of ``M`` (``min(N n, k)`` singular values)."""
    s = torch.linalg.svdvals(stacked(M.detach()))
    return float(s[-1]), float(s[0])


def _loss_with_aux(params, X, Y, cfg):
    trace = forward_trace(params, X, cfg)
    phi = 0.5 * (trace.F - Y).pow(2).sum()
    return phi, (trace.Z[0].detach(), trace.H[-1].detach())


def loss_and_grad(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, cfg: ModelConfig):
    """``(Phi(theta), grad Phi(theta), Z_1, H_L)`` in one forward and one backward pass.

    ``Z_1`` is the first block's attention output (with its residual) and ``H_L`` the last hidden
    matrix, both of shape ``(N, n, d)``.
    """
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    phi, (Z1, HL) = _loss_with_aux(params, X, Y, cfg)
    grads = torch.autograd.grad(phi, list(params.values()))
    return phi.detach(), dict(zip(params, grads)), Z1, HL


def gd_step(params: Mapping[str, torch.Tensor], grads: Mapping[str, torch.Tensor], mu: float) -> dict[str, torch.Tensor]:
    """One gradient-descent update ``theta - mu * grad`` (book equation (gd))."""
    return {k: params[k] - mu * grads[k] for k in params}


@dataclasses.dataclass
class History:
    """What one gradient-descent run records.

    Attributes:
        loss: ``Phi(theta_t)`` for ``t = 0 .. steps`` (every step).
        grad_norm: ``||grad Phi(theta_t)||`` (Euclidean norm over all weights), every step.
        record_steps: the steps ``t`` at which singular values were recorded (every ``record_every``
            steps, and the last one).
        sigma_min_Z, sigma_max_Z: extreme singular values of the stacked attention output ``Z``
            (with its residual) of the first block, at ``record_steps``.
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
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> "History":
        kwargs = {}
        for f in dataclasses.fields(cls):
            v = d[f.name]
            kwargs[f.name] = np.asarray(v, dtype=np.int64 if f.name == "record_steps" else np.float64) \
                if isinstance(v, list) else v
        return cls(**kwargs)


def _check_run_args(mu, steps, record_every, tol, blowup):
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not math.isfinite(mu) or mu <= 0:
        raise ValueError(f"step size mu must be a positive finite number, got {mu!r}.")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}.")
    if isinstance(record_every, bool) or not isinstance(record_every, int) or record_every < 1:
        raise ValueError(f"record_every must be a positive integer, got {record_every!r}.")
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0 (0 runs all steps), got {tol!r}.")
    if not (isinstance(blowup, (int, float)) and blowup > 1):
        raise ValueError(f"blowup must be a number > 1, got {blowup!r}.")


def gradient_descent(params: Mapping[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor,
                     cfg: ModelConfig, mu: float, steps: int, *, record_every: int = 1,
                     tol: float = 0.0, blowup: float = 1e6, progress: bool = False, callback=None):
    """Run ``steps`` steps of full-batch gradient descent from ``params``; return ``(params, History)``.

    The update is ``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` with ``Phi`` the loss of
    :func:`convres.model.loss`. The run stops early with

    * ``status="converged"`` when ``Phi(theta_t) <= tol``;
    * ``status="diverged"`` when the loss or gradient becomes NaN/infinite or the loss exceeds
      ``blowup`` times its initial value. The history then ends at the last finite iterate and the
      returned parameters are that iterate: no NaN is ever returned.

    Args:
        params: initial weights (e.g. from :func:`convres.init_params`); not modified.
        X: inputs ``(N, n, d)``; Y: targets ``(N, n, c)`` (or ``(N, c)`` with ``pool="mean"``).
        cfg: the model configuration.
        mu: the step size (> 0).
        steps: the largest number of steps.
        record_every: singular values are recorded every this many steps (and at the last step).
        tol: stop when the loss falls to this value (0: run all steps).
        blowup: divergence threshold relative to the initial loss.
        progress: show a progress bar (tqdm).
        callback: optional ``callback(t, theta, grads, H_L)``, called at every iterate whose loss
            is kept in the history (``t = 0, 1, ...``, every step, whatever ``record_every``) with
            the weights, their gradient and the last hidden matrix ``(N, n, d)``; its return value
            is ignored. Used by :func:`convres.theory.theorem_run` to check the proof at every step.
    """
    validate(params, X, Y, cfg)
    _check_run_args(mu, steps, record_every, tol, blowup)

    theta = {k: v.detach().clone() for k, v in params.items()}
    losses, gnorms, rec, sv = [], [], [], []
    status, message = "max_steps", f"ran all {steps} steps"
    bar = _progress(steps, progress)
    for t in range(steps + 1):
        phi, grads, Z1, HL = loss_and_grad(theta, X, Y, cfg)
        phi = float(phi)
        gnorm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
        if not (math.isfinite(phi) and math.isfinite(gnorm)):
            status, message = "diverged", f"loss or gradient became non-finite at step {t} (mu={mu:g} too large?)"
            break
        if losses and phi > blowup * losses[0]:
            status, message = "diverged", (
                f"loss {phi:.3g} at step {t} exceeded {blowup:g} x the initial loss (mu={mu:g} too large?)")
            break
        losses.append(phi)
        gnorms.append(gnorm)
        if callback is not None:
            callback(t, theta, grads, HL)
        done = phi <= tol or t == steps
        if t % record_every == 0 or done:
            rec.append(t)
            sv.append(extreme_singular_values(Z1) + extreme_singular_values(HL))
        if phi <= tol:
            status, message = "converged", f"loss {phi:.3g} <= tol={tol:g} at step {t}"
            break
        if t == steps:
            break
        last_finite = theta
        theta = gd_step(theta, grads, mu)
        if bar is not None:
            bar.update(1)
            if t % 50 == 0:
                bar.set_postfix(loss=f"{phi:.3e}")
    if bar is not None:
        bar.close()
    if status == "diverged" and losses:
        theta = last_finite  # the iterate that failed is dropped
    sv_arr = np.asarray(sv, dtype=np.float64).reshape(-1, 4)
    hist = History(
        loss=np.asarray(losses, dtype=np.float64),
        grad_norm=np.asarray(gnorms, dtype=np.float64),
        record_steps=np.asarray(rec, dtype=np.int64),
        sigma_min_Z=sv_arr[:, 0], sigma_max_Z=sv_arr[:, 1],
        sigma_min_H=sv_arr[:, 2], sigma_max_H=sv_arr[:, 3],
        status=status, message=message, mu=float(mu))
    return theta, hist


def _progress(steps: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=steps, desc="gradient descent", unit="step", leave=False)
