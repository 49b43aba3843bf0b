"""The book's two theorems checked along gradient-descent runs, and the assumptions on an instance.

Book chapters: *Assumptions* (``book/assumptions.md``), *The theorems: statements and proofs*
(``book/theorem.md``), *Certified constants and a certified instance* (``book/certificate.md``),
*The theorem through the FFN, certified, and the scope* (``book/ffn.md``) and *Multi-layer*
(``book/multilayer.md``). Paper: arXiv:2506.05249 (main theorem: under proper
initialization ``Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)``). The constants are the
**book's own** (the paper's are not available to this project); the formulas are in
:mod:`convres.lemmas`, the rigorous bounds in :mod:`convres.certify`.

Theorem ``thm-main`` (through ``W_U``): :func:`theorem_run` runs gradient descent with the
theorem's step and measures every inequality of the proof at every step (:class:`RunCheck`); what
that establishes is *observed*, not certified before the run. :func:`part_b_check` decides part
(b') where it can: it *fails* when ``rho`` exceeds :func:`convres.lemmas.r_sigma_upper`, it
*holds* when the certificate of :mod:`convres.certify` is valid, for the certified step.

Theorem ``thm-ffn`` (through the last ``W_2``, per token or pooled): :func:`ffn_theorem_run`.
Which experiment meets which hypothesis: :mod:`convres.scope`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .certify import centre, certificate_of
from .checks import Contraction, Hypothesis, contraction_check, tolerance
from .gd import History, Step, gradient_descent, loss_and_grad
from .lemmas import (
    activation_rows,
    alpha,
    alpha_ffn,
    ffn_rows,
    flat_norm,
    hessian_norm,
    path_radius,
    r_sigma_upper,
    smoothness_estimate,
)
from .model import check_inputs, forward_trace, phi
from .rank import sigma_k, sigma_nn, singular_values, spectral_norm, stacked
from .values import as_int, as_real, as_seed

__all__ = ["part_b_check", "check_assumptions", "RunCheck", "verify_run", "TheoremRun",
           "theorem_run", "FFNTheoremRun", "ffn_theorem_run", "tangent_kernel_blocks", "lazy_report",
           "MIN_DECREASE"]

#: The "non-vacuous rate" hypothesis: the guaranteed factor ``(1 - mu alpha)^T`` is at most this.
MIN_DECREASE = 0.9


def _check_per_token(params, X, Y, cfg):
    check_inputs(params, X, Y, cfg)
    if cfg.pool is not None:
        raise ValueError(f"the theorem is stated per token (pool=None), got pool={cfg.pool!r}; "
                         "use ModelConfig(pool=None).")
    if params["W_U"].dim() != 2:
        raise ValueError("the theorem's checks take one configuration (weights without a leading "
                         "axis of stacked configurations).")


def _part_b(params, X, Y, cfg, phi: float, sigma_0: float, grad_norm: float) -> dict:
    upper = r_sigma_upper(params, X, cfg)
    rho = path_radius(phi, sigma_0)
    lower = holds = mu_certified = None
    if cfg.L == 1 and cfg.act.smooth and sigma_0 > 0:
        cert = certificate_of(centre(params, X, Y, cfg))
        lower, holds = cert.r_sigma_lower, True if cert.certified else None
        mu_certified = cert.mu if cert.certified else None
    a = alpha(sigma_0)
    J0 = grad_norm / math.sqrt(2 * phi) if phi > 0 else float("nan")
    return {"rho": rho, "r_sigma_upper": upper, "r_sigma_lower": lower,
            "fails": bool(sigma_0 == 0.0 or rho >= upper), "holds": holds,
            "mu_certified": mu_certified, "J0": J0,
            "radius_lower_A5": 2 * J0 * math.sqrt(2 * phi) / a if phi > 0 and a > 0 else math.inf}


def part_b_check(params, X, Y, cfg) -> dict:
    """Can part (b') of the book's theorem apply to this instance?

    Part (b') needs a radius ``r`` with ``rho := 4 sqrt(2 Phi_0) / sigma_0 < r <= r_sigma`` and
    ``mu <= 1/L_B`` on that ball. ``rho`` is computed exactly and ``r_sigma <= r_sigma_upper``: if
    ``rho >= r_sigma_upper`` no admissible ``r`` exists, and ``fails = True`` is a certificate of
    failure (up to float64). ``holds = True`` when :func:`convres.certify.certificate` certifies
    the instance (one block, smooth activation): (b') then holds **for the certified step**
    ``mu_certified = 1 / L_upper`` (or any smaller one); ``None`` when neither is decided.

    Also returned, for the remark on the older condition (A5) (``2 J_B sqrt(2 Phi_0) / alpha <=
    r``): ``J0 = ||grad Phi_0|| / sqrt(2 Phi_0) <= J_B`` and ``radius_lower_A5``, a lower bound of
    its left side.
    """
    _check_per_token(params, X, Y, cfg)
    phi, grads, tr = loss_and_grad(params, X, Y, cfg)
    return _part_b(params, X, Y, cfg, float(phi), sigma_nn(tr.H[-1]), flat_norm(grads.values()))


def _assumptions(X, H0, cfg, mu, steps) -> list[Hypothesis]:
    N, n = X.shape[0], X.shape[1]
    Xs, H0 = stacked(X), stacked(H0)
    smooth = cfg.act.smooth
    rel_x = sigma_nn(Xs) / max(spectral_norm(Xs), 1e-300)
    sigma_0 = sigma_nn(H0)
    rel_h = sigma_0 / max(float(singular_values(H0, "H_0")[0]), 1e-300)
    checks = [
        Hypothesis("width", "N n <= d", float(N * n), float(cfg.d), N * n <= cfg.d),
        Hypothesis("smooth activation", "act' is Lipschitz (gelu, tanh, softplus)",
                   float(smooth), 1.0, smooth),
        Hypothesis("full-rank input", "sigma_Nn(X) / ||X||_2 > 1e-10",
                   rel_x, 1e-10, rel_x > 1e-10),
        Hypothesis("non-degenerate H_0", "sigma_Nn(H_0) / ||H_0||_2 > 1e-10",
                   rel_h, 1e-10, rel_h > 1e-10)]
    if mu is not None:
        need, val = -math.log(MIN_DECREASE), mu * alpha(sigma_0) * steps
        rule = f"mu alpha T >= ln(1/{MIN_DECREASE:g})"
        checks.append(Hypothesis("non-vacuous rate", rule, val, need, val >= need))
    return checks


def check_assumptions(params, X, Y, cfg, *, mu: float | None = None,
                      steps: int | None = None) -> list[Hypothesis]:
    """Evaluate the book's assumptions (chapter *Assumptions*) on one instance.

    * ``width``: ``N n <= d`` (value ``N n``, threshold ``d``).
    * ``smooth activation``: the activation has a Lipschitz derivative (value 1 if so).
    * ``full-rank input``: ``sigma_Nn(X) > 0`` (relative to ``||X||_2``, threshold ``1e-10``).
    * ``non-degenerate H_0``: ``sigma_Nn(H_0) / ||H_0||_2 > 1e-10`` (no rank collapse at init).
    * ``non-vacuous rate`` (only with ``mu`` and ``steps``): ``mu alpha T >= ln(1/0.9)``, which
      implies that the guaranteed factor ``(1 - mu alpha)^T`` is at most :data:`MIN_DECREASE`.
    """
    _check_per_token(params, X, Y, cfg)
    if (mu is None) != (steps is None):
        raise ValueError(f"give both mu and steps (for the non-vacuous-rate check) or neither, got "
                         f"mu={mu!r}, steps={steps!r}.")
    if mu is not None:
        mu = as_real("mu", mu, minimum=0.0, above=True)
        steps = as_int("steps", steps, minimum=1)
    with torch.no_grad():
        H0 = forward_trace(params, X, cfg).H[-1]
    return _assumptions(X, H0, cfg, mu, steps)


@dataclasses.dataclass
class RunCheck:
    """Every inequality of the proof, measured at every step of one run (book: *The theorems*).

    ``contraction``: the per-step bound ``Phi_{t+1} <= (1 - mu alpha) Phi_t``
    (:func:`convres.checks.contraction_check`); at its checked steps ``t``: ``pl_margin =
    ||grad_{W_U}||^2 / (2 Phi_t) - sigma_Nn(H_t)^2`` (PL lemma, >= 0); ``descent_margin = Phi_t -
    mu (1 - L mu/2) ||g_t||^2 - Phi_{t+1}`` (descent lemma with the estimated ``L``, >= 0);
    ``half_margin = Phi_t - (mu/2) ||g_t||^2 - Phi_{t+1}`` (the form the proof uses, >= 0);
    ``sigma_ratio = sigma_Nn(H_t) / sigma_Nn(H_0)`` (>= 1/2 for the uniform rate). ``observed``
    counts the steps with ``half_margin >= 0`` and ``sigma_ratio >= 1/2``: at those, the PL lemma
    alone implies the per-step bound (an a-posteriori deduction, not a certificate).
    ``max_distance = max_t ||theta_t - theta_0||``.
    """

    contraction: Contraction
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    half_margin: np.ndarray
    sigma_ratio: np.ndarray
    observed: int
    max_distance: float

    @property
    def violations(self) -> int:
        return self.contraction.violations

    @property
    def checked_steps(self) -> int:
        return self.contraction.checked_steps

    @property
    def max_excess(self) -> float:
        return self.contraction.max_excess

    @property
    def every_step_observed(self) -> bool:
        """Every checked step satisfies the bound, the PL lemma, the descent inequality and the
        sigma condition, and at least one step was checked."""
        tol = self.contraction.tolerance
        return (self.contraction.holds and self.observed == self.checked_steps
                and bool((self.pl_margin >= -tol).all()) and bool((self.descent_margin >= -tol).all()))


def verify_run(hist: History, grad_U, sigma_H, mu: float, a: float, L_hat: float, distance, *,
               tol: float) -> RunCheck:
    """Measure the theorem's inequalities along a run (see :class:`RunCheck`).

    ``grad_U[t] = ||grad_{W_U} Phi(theta_t)||_F`` (``t = 0 .. T-1``), ``sigma_H[t] =
    sigma_Nn(H_t)`` and ``distance[t] = ||theta_t - theta_0||`` (``t = 0 .. T``), as
    :func:`theorem_run` records them.
    """
    loss, g = hist.loss, hist.grad_norm
    grad_U, sigma_H = np.asarray(grad_U, dtype=np.float64), np.asarray(sigma_H, dtype=np.float64)
    T = hist.steps
    if len(grad_U) != T or len(sigma_H) != T + 1 or len(distance) != T + 1:
        raise ValueError(f"need one gradient per step ({T}) and sigma_H, distance per iterate ({T + 1}), "
                         f"got {len(grad_U)}, {len(sigma_H)}, {len(distance)}.")
    c = contraction_check(loss, mu * a, tol=tol)
    k = c.steps
    pl = grad_U[k] ** 2 / (2 * loss[k]) - sigma_H[k] ** 2
    descent = loss[k] - mu * (1 - L_hat * mu / 2) * g[k] ** 2 - loss[k + 1]
    half = loss[k] - mu / 2 * g[k] ** 2 - loss[k + 1]
    sr = sigma_H[k] / sigma_H[0] if sigma_H[0] > 0 else np.zeros(len(k))
    observed = int(((half >= -tol * loss[k]) & (sr >= 0.5)).sum())
    return RunCheck(contraction=c, pl_margin=pl, descent_margin=descent, half_margin=half,
                    sigma_ratio=sr, observed=observed,
                    max_distance=float(np.max(distance)) if len(distance) else math.nan)


@dataclasses.dataclass
class TheoremRun:
    """Gradient descent with the theorem's step size, every inequality measured at every step.

    Attributes:
        alpha: the rate ``(sigma_0/2)^2``; sigma_0: ``sigma_Nn(H_0)``.
        mu: the step size used; mu_max: ``1/(safety L_hat)``, with ``L_hat`` *estimated*.
        sigma_min_Z0, sigma_max_Z0: extreme singular values of the stacked ``Z_0``.
        assumptions: the table of :func:`check_assumptions`; assumptions_hold: all hold.
        part_b: :func:`part_b_check` at ``theta_0`` (part (b')).
        history: the run's :class:`~convres.gd.History`; check: its :class:`RunCheck`;
        params_final: the last iterate.
    """

    alpha: float
    sigma_0: float
    mu: float
    mu_max: float
    L_hat: float
    sigma_min_Z0: float
    sigma_max_Z0: float
    assumptions: list
    part_b: dict
    history: History
    check: RunCheck
    params_final: dict

    @property
    def assumptions_hold(self) -> bool:
        return all(c.holds for c in self.assumptions)

    @property
    def status(self) -> str:
        return self.history.status

    def summary(self) -> dict:
        """The scalar fields, JSON-ready (what ``python -m convres theorem --json`` prints).
        ``violations`` and ``max_excess`` are ``None`` when the run diverged or no step was checked.
        ``part_b_holds`` is ``False`` when part (b') is certified to fail and ``True`` only when it
        is certified to hold *for this run's step* (``mu <= mu_certified``); ``None`` otherwise."""
        verified = self.status != "diverged" and self.check.checked_steps > 0
        h, b = self.history, self.part_b
        mu_cert = b["mu_certified"]
        run_certified = bool(b["holds"]) and mu_cert is not None and self.mu <= mu_cert
        return _finite_fields({
            "status": self.status, "alpha": self.alpha, "sigma_nn_H0": self.sigma_0, "mu": self.mu,
            "mu_max": self.mu_max, "mu_max_is_estimate": True, "sigma_min_Z0": self.sigma_min_Z0,
            "sigma_max_Z0": self.sigma_max_Z0, "assumptions_hold": self.assumptions_hold,
            "violations": self.check.violations if verified else None,
            "max_excess": self.check.max_excess if verified else None,
            "checked_steps": self.check.checked_steps, "observed_steps": self.check.observed,
            "initial_loss": float(h.loss[0]), "final_loss": float(h.loss[-1]), "steps": h.steps,
            "rho": b["rho"], "r_sigma_upper": b["r_sigma_upper"], "r_sigma_lower": b["r_sigma_lower"],
            "mu_certified": mu_cert, "run_step_certified": run_certified,
            "part_b_holds": False if b["fails"] else (True if run_certified else None),
        })


def _finite_fields(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def theorem_run(params, X, Y, cfg, *, steps: int = 300, mu: float | None = None, safety: float = 2.0,
                smoothness_samples: int = 1, seed: int = 0) -> TheoremRun:
    """Run gradient descent with the theorem's step (``mu`` defaults to ``1 / (safety L_hat)``,
    :func:`convres.lemmas.mu_max`) and measure the theorem's inequalities at every step; see
    :class:`TheoremRun`."""
    _check_per_token(params, X, Y, cfg)
    steps = as_int("steps", steps, minimum=1)
    mu = None if mu is None else as_real("mu", mu, minimum=0.0, above=True)
    safety = as_real("safety", safety, minimum=1.0)
    seed = as_seed("seed", seed)
    L_hat = smoothness_estimate(params, X, Y, cfg, samples=smoothness_samples, seed=seed)["L_hat"]
    m_max = math.inf if L_hat == 0 else 1.0 / (safety * L_hat)
    if mu is None and L_hat == 0:
        raise ValueError("the estimated Hessian of the loss is 0 at the initialization, so the theorem's "
                         "step size 1/(safety L_hat) is not defined; pass mu=... explicitly.")
    mu = m_max if mu is None else mu
    phi_0, grads_0, tr = loss_and_grad(params, X, Y, cfg)
    sigma_0 = sigma_nn(tr.H[-1])
    sZ = singular_values(stacked(tr.Z[0]), "Z_0")
    grad_U, dist, sig_H = [], [], []

    def record(step: Step):  # the quantities of the proof at every iterate theta_t
        if step.grads is not None:
            grad_U.append(float(step.grads["W_U"].norm()))
        dist.append(flat_norm(step.params[k] - params[k] for k in params))
        sig_H.append(sigma_nn(step.trace.H[-1]))

    final, hist = gradient_descent(params, X, Y, cfg, mu, steps, callback=record)
    a = alpha(sigma_0)
    check = verify_run(hist, grad_U[:hist.steps], sig_H, mu, a, L_hat, dist,
                       tol=tolerance(params["W_U"].dtype))
    return TheoremRun(alpha=a, sigma_0=sigma_0, mu=mu, mu_max=m_max, L_hat=L_hat,
                      sigma_min_Z0=sigma_nn(tr.Z[0]), sigma_max_Z0=float(sZ[0]),
                      assumptions=_assumptions(X, tr.H[-1], cfg, mu, steps),
                      part_b=_part_b(params, X, Y, cfg, float(phi_0), sigma_0, flat_norm(grads_0.values())),
                      history=hist, check=check, params_final=final)


# --- the second theorem: PL through the last FFN's W_2 (book: *The theorem through the FFN*) ---------

@dataclasses.dataclass
class FFNTheoremRun:
    """Gradient descent checked against the FFN theorem (book: *The theorem through the FFN*,
    thm-ffn); observed, nothing bounded before the run (that is :func:`convres.certify.ffn_certificate`).

    Attributes:
        alpha_ffn: ``alpha' = (sigma_M0 sigma_U0 / 4)^2``.
        sigma_M0: ``sigma_rows(M~_0)``, the smallest singular value of the activations of the
            last block (per token: ``N n x m``; pooled: their mean per sequence, ``N x m``).
        sigma_U0: ``sigma_c(W_U^0)``.
        mu, rows, readout: the step size, the number of output rows, ``"per token"`` or ``"pooled"``.
        hypotheses: the :class:`~convres.checks.Hypothesis` records (see :func:`ffn_theorem_run`).
        history: the run's :class:`~convres.gd.History`.
        contraction: ``Phi_{t+1} <= (1 - mu alpha') Phi_t`` checked at every step;
        pl_margin, descent_margin: at its checked steps,
            ``||grad_{W_2} Phi_t||^2 / (2 Phi_t) - alpha'`` and
            ``(Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}) / Phi_t``.
        recorded_steps, sigma_M, sigma_U: the singular values at the recorded steps.
        lemma_margin: at the recorded steps, ``||grad_{W_2} Phi||^2 / (2 Phi) - sigma_M^2 sigma_U^2``
            (the PL lemma itself: never negative up to round-off).
        observed: recorded steps ``t < T`` where every hypothesis of part (a) was measured to hold.
        dtype: the dtype of the run; params_final: the last iterate.
    """

    alpha_ffn: float
    sigma_M0: float
    sigma_U0: float
    mu: float
    rows: int
    readout: str
    hypotheses: list
    history: History
    contraction: Contraction
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    recorded_steps: np.ndarray
    sigma_M: np.ndarray
    sigma_U: np.ndarray
    lemma_margin: np.ndarray
    observed: int
    dtype: str
    params_final: dict

    @property
    def status(self) -> str:
        return self.history.status

    @property
    def verified(self) -> bool:
        """Whether anything was verified (the run did not diverge, and a step was checked)."""
        return self.status != "diverged" and self.contraction.checked_steps > 0

    @property
    def violations(self) -> int | None:
        """Checked steps with ``Phi_{t+1} > (1 - mu alpha') Phi_t`` beyond round-off; ``None``
        when nothing was verified."""
        return self.contraction.violations if self.verified else None

    def summary(self) -> dict:
        """The scalar fields, JSON-ready. ``checked_conditions_hold``: every hypothesis that was
        evaluated held; the step-size hypothesis ``mu <= 1/L_B`` is only compared with an
        *estimate* (it can be refuted, not established), so the run is *observed*."""
        h = self.history
        return _finite_fields({
            "theorem": "thm-ffn", "claim": "observed", "readout": self.readout, "rows": self.rows,
            "alpha_ffn": self.alpha_ffn, "sigma_M0": self.sigma_M0, "sigma_U0": self.sigma_U0,
            "mu": self.mu, "mu_alpha": self.mu * self.alpha_ffn,
            "hypotheses": {x.name: x.to_dict() for x in self.hypotheses},
            "checked_conditions_hold": all(x.holds for x in self.hypotheses),
            "violations": self.violations,
            "max_excess": self.contraction.max_excess if self.verified else None,
            "checked_steps": self.contraction.checked_steps, "observed_steps": int(self.observed),
            "recorded_steps": int(len(self.recorded_steps)),
            "min_lemma_margin": float(self.lemma_margin.min()) if len(self.lemma_margin) else None,
            "initial_loss": float(h.loss[0]), "final_loss": float(h.loss[-1]),
            "steps": h.steps, "status": self.status, "dtype": self.dtype,
        })


def ffn_theorem_run(params, X, Y, cfg, *, mu: float, steps: int, record_every: int = 1,
                    seed: int = 0, smoothness_iters: int = 10) -> FFNTheoremRun:
    """Run gradient descent and check the FFN theorem (book: *The theorem through the FFN*) along it.

    The theorem goes through the last block's ``W_2`` (any depth, per-token or pooled readout):
    with ``M~`` the last block's activations (per token) or their mean per sequence (pooled), the
    PL lemma ``||grad_{W_2} Phi||_F^2 >= 2 sigma_rows(M~)^2 sigma_c(W_U)^2 Phi`` gives
    ``Phi_{t+1} <= (1 - mu alpha') Phi_t`` with ``alpha' = (sigma_M0 sigma_U0 / 4)^2`` while both
    singular values stay above half their initial values and the descent inequality holds.

    Checked at **every** step (from the gradient the step computes anyway): the per-step bound,
    the PL inequality with ``alpha'`` and the descent inequality; at the **recorded** steps only
    (every ``record_every`` steps and the last): ``sigma_rows(M~_t)`` and ``sigma_c(W_U)``. Nothing
    is certified before the run: ``mu <= 1/L_B`` is compared with an *estimate* ``L_hat_0`` of the
    Hessian norm at ``theta_0`` (a lower bound of ``L_B``: a failure certifies ``mu > 1/L_B``, a
    success establishes nothing). The run may be float32; the tolerance is
    :func:`convres.checks.tolerance` of its dtype.

    Hypotheses: ``width`` (``m >= rows``), ``output_dim`` (``c <= d``), ``smooth_activation``,
    ``full_rank_activations`` (``sigma_M0 / ||M~_0||_2 > 1e-10``), ``full_rank_readout``,
    ``non_vacuous_rate`` (``mu alpha' T >= ln(1/0.9)``), ``step_size`` (``mu L_hat_0 <= 1``,
    estimated), and, observed along the run, ``sigma_M_along_run``, ``sigma_U_along_run`` (the
    smallest ratio to the initial value over the recorded steps, threshold 1/2) and
    ``descent_along_run``.
    """
    check_inputs(params, X, Y, cfg)
    mu = as_real("mu", mu, minimum=0.0, above=True)
    steps = as_int("steps", steps, minimum=1)
    record_every = as_int("record_every", record_every, minimum=1)
    seed = as_seed("seed", seed)
    smoothness_iters = as_int("smoothness_iters", smoothness_iters, minimum=0)
    N, n = X.shape[0], X.shape[1]
    rows, last = ffn_rows(cfg, N, n), f"layer{cfg.L}"
    dtype = params["W_U"].dtype
    tol = tolerance(dtype)
    with torch.no_grad():
        M0 = activation_rows(forward_trace(params, X, cfg).M[-1], cfg)
    sM0, sU0 = sigma_k(M0), sigma_k(params["W_U"].T)
    a = alpha_ffn(sM0, sU0)
    gW2, rec, sM, sU, lemma = [], [], [], [], []

    def record(step: Step):
        if step.grads is not None:
            gW2.append(float(step.grads[f"{last}.W_2"].double().pow(2).sum()))
        if step.t % record_every == 0 or step.grads is None:
            rec.append(step.t)
            sM.append(sigma_k(activation_rows(step.trace.M[-1], cfg)))
            sU.append(sigma_k(step.params["W_U"].T))
            if step.grads is not None and step.loss > 0:
                lemma.append(gW2[-1] / (2 * step.loss) - (sM[-1] * sU[-1]) ** 2)

    final, hist = gradient_descent(params, X, Y, cfg, mu, steps, callback=record)
    loss, g, T = hist.loss, hist.grad_norm, hist.steps
    gW2a = np.asarray(gW2[:T], dtype=np.float64)
    c = contraction_check(loss, mu * a, tol=tol)
    k = c.steps
    pl = gW2a[k] / (2 * loss[k]) - a
    descent = (loss[k] - mu / 2 * g[k] ** 2 - loss[k + 1]) / loss[k]
    rec_a, sM_a, sU_a = (np.asarray(v, dtype=np.float64) for v in (rec, sM, sU))
    ok_desc = {int(t): bool(dm >= -tol) for t, dm in zip(k, descent)}
    observed = sum(1 for t, m_t, u_t in zip(rec_a.astype(int), sM_a, sU_a)
                   if t < T and ok_desc.get(int(t), False) and m_t >= sM0 / 2 and u_t >= sU0 / 2)
    norm_M0, norm_U0 = spectral_norm(M0), spectral_norm(params["W_U"])
    L_hat = hessian_norm(params, X, Y, cfg, iters=smoothness_iters, seed=seed) if smoothness_iters else None
    rate = mu * a * T
    H = Hypothesis
    hyp = [
        H("width", "FFN width m >= number of output rows", cfg.m, rows, cfg.m >= rows),
        H("output_dim", "outputs c <= d", cfg.c, cfg.d, cfg.c <= cfg.d),
        H("smooth_activation", "act' Lipschitz (gelu, tanh, softplus)", float(cfg.act.smooth), 1.0,
          cfg.act.smooth),
        H("full_rank_activations", "sigma_rows(M~_0) / ||M~_0||_2 > 1e-10", sM0 / max(norm_M0, 1e-300),
          1e-10, sM0 > 1e-10 * norm_M0),
        H("full_rank_readout", "sigma_c(W_U^0) / ||W_U^0||_2 > 1e-10", sU0 / max(norm_U0, 1e-300),
          1e-10, sU0 > 1e-10 * norm_U0),
        H("non_vacuous_rate", f"mu alpha' T >= ln(1/{MIN_DECREASE:g})", rate, -math.log(MIN_DECREASE),
          rate >= -math.log(MIN_DECREASE)),
    ]
    if L_hat is not None:
        hyp.append(H("step_size", "mu L_hat_0 <= 1 (L_hat_0 <= L_B: a failure certifies mu > 1/L_B)",
                     mu * L_hat, 1.0, mu * L_hat <= 1, kind="estimated"))
    ratio_M = sM_a.min() / sM0 if len(sM_a) and sM0 > 0 else None
    ratio_U = sU_a.min() / sU0 if len(sU_a) and sU0 > 0 else None
    hyp += [
        H("sigma_M_along_run", "min over recorded steps of sigma_rows(M~_t) / sigma_M0", ratio_M, 0.5,
          ratio_M is not None and ratio_M >= 0.5, kind="observed"),
        H("sigma_U_along_run", "min over recorded steps of sigma_c(W_U,t) / sigma_U0", ratio_U, 0.5,
          ratio_U is not None and ratio_U >= 0.5, kind="observed"),
        H("descent_along_run", "min over steps of (Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}) / Phi_t",
          float(descent.min()) if len(descent) else None, -tol,
          bool(len(descent)) and descent.min() >= -tol, kind="observed"),
    ]
    return FFNTheoremRun(alpha_ffn=a, sigma_M0=sM0, sigma_U0=sU0, mu=mu, rows=rows,
                         readout="pooled" if cfg.pool == "mean" else "per token", hypotheses=hyp,
                         history=hist, contraction=c, pl_margin=pl, descent_margin=descent,
                         recorded_steps=rec_a.astype(int), sigma_M=sM_a, sigma_U=sU_a,
                         lemma_margin=np.asarray(lemma, dtype=np.float64), observed=observed,
                         dtype=str(dtype).replace("torch.", ""), params_final=final)



# --- what the certified regimes are: the lazy-training numbers (observed) ---------------------------

def _jacobian_rows(params, X, cfg) -> tuple[list[str], list[list[torch.Tensor]]]:
    """The Jacobian of ``theta -> vec F_theta(X)`` at ``params``: one list of per-block gradients
    per output (``N n c`` outputs per token, ``N c`` pooled)."""
    names = list(params)
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        F = forward_trace(leaves, X, cfg).F.reshape(-1)
        rows = [[g.reshape(-1) for g in torch.autograd.grad(F[i], list(leaves.values()), retain_graph=True,
                                                            allow_unused=True, materialize_grads=True)]
                for i in range(F.numel())]
    return names, rows


def tangent_kernel_blocks(params, X, cfg) -> dict:
    """The tangent kernel ``K = J_0 J_0^T`` at ``params`` (``J_0`` the Jacobian of ``vec F``) and its
    parts ``K_b = J_b J_b^T`` per weight block ``b`` (``K = sum_b K_b``, so ``lambda_min(K) >=
    sum_b lambda_min(K_b)``): ``lambda_min``, ``trace`` and per block (short names ``W_Q``, ...)
    ``lambda_min``, ``lambda_min_share = lambda_min(K_b) / lambda_min(K)`` and ``trace_share``
    (book: *Certified constants and a certified instance*, section *What the certified regime is*). Exact
    up to float64 (one backward pass per output); unchecked (see :func:`lazy_report`)."""
    names, rows = _jacobian_rows(params, X, cfg)
    parts: dict[str, torch.Tensor] = {}
    for j, name in enumerate(names):
        Jb = torch.stack([r[j] for r in rows]).to(torch.float64)
        short = name.split(".")[-1]
        parts[short] = parts[short] + Jb @ Jb.T if short in parts else Jb @ Jb.T
    K = torch.stack(list(parts.values())).sum(0)
    lam, tr = float(torch.linalg.eigvalsh(K)[0]), float(torch.trace(K))
    blocks = {}
    for b, Kb in parts.items():
        lb = float(torch.linalg.eigvalsh(Kb)[0])
        blocks[b] = {"lambda_min": lb, "lambda_min_share": lb / lam if lam > 0 else math.nan,
                     "trace_share": float(torch.trace(Kb)) / tr if tr > 0 else math.nan}
    return {"lambda_min": lam, "trace": tr, "blocks": blocks}


def _one_block_descent(params, X, Y, cfg, block: str, mu: float, steps: int) -> np.ndarray:
    """Gradient descent on the weight ``block`` alone (the others frozen at ``params``), step
    ``mu``: the losses ``Phi_0 .. Phi_T``."""
    p = {k: v.detach().clone() for k, v in params.items()}
    losses = []
    for t in range(steps + 1):
        w = p[block].requires_grad_(True)
        with torch.enable_grad():
            value = phi({**p, block: w}, X, Y, cfg)
            losses.append(float(value.detach()))
            if t == steps:
                break
            (g,) = torch.autograd.grad(value, [w])
        p[block] = (w - mu * g).detach()
    return np.asarray(losses)


def lazy_report(params, X, Y, cfg, *, mu: float, steps: int, block: str = "W_U") -> dict:
    """How lazy a run is (book: what the certified regimes are; Chizat, Oyallon & Bach 2019), all
    *observed*, for gradient descent with step ``mu`` for ``steps`` steps:

    * ``tangent_kernel``: :func:`tangent_kernel_blocks` at ``theta_0``;
    * ``displacement``, ``displacement_share``: ``||W_b,T - W_b,0||_F`` per weight (full names,
      ``"layer1.W_Q"``, ...) and its share of ``||theta_T - theta_0||^2``;
    * ``H0_minus_X``: ``||H_0 - X||_2 / ||X||_2``; ``max_S_minus_uniform``: ``max |S_ij - 1/n|`` at
      ``theta_0``; ``sigma_Nn_H0``, ``sigma_Nn_X`` (when ``N n <= d``);
    * ``loss``, ``loss_one_block``: full gradient descent and gradient descent on ``block`` alone
      (``"W_U"``, or e.g. ``"layer1.W_2"``) with the same step; ``one_block_gap``: their relative
      difference ``|Phi^b_t - Phi_t| / Phi_t`` at ``t = 1, 10, 30, T``;
    * ``linearization_error``: ``||F_T - F_0 - J_0 (theta_T - theta_0)|| / ||F_T - F_0||``.
    """
    check_inputs(params, X, Y, cfg)
    mu = as_real("mu", mu, minimum=0.0, above=True)
    steps = as_int("steps", steps, minimum=1)
    if block not in params:
        raise ValueError(f"block must be one of the weights {sorted(params)}, got {block!r}.")
    p0 = {k: v.detach().to(torch.float64) for k, v in params.items()}
    X, Y = X.detach().to(torch.float64), Y.detach().to(torch.float64)
    with torch.no_grad():
        tr = forward_trace(p0, X, cfg)
    Xs, H0 = stacked(X), stacked(tr.H[-1])
    out: dict = {"tangent_kernel": tangent_kernel_blocks(p0, X, cfg),
                 "H0_minus_X": spectral_norm(H0 - Xs) / spectral_norm(Xs) if H0.shape == Xs.shape else None,
                 "max_S_minus_uniform": float((tr.S[0] - 1.0 / X.shape[1]).abs().max()),
                 "sigma_Nn_H0": sigma_nn(H0) if H0.shape[0] <= H0.shape[1] else None,
                 "sigma_Nn_X": sigma_nn(Xs) if Xs.shape[0] <= Xs.shape[1] else None}
    final, hist = gradient_descent(p0, X, Y, cfg, mu, steps)
    disp = {k: float((final[k] - p0[k]).norm()) for k in p0}
    total = sum(v * v for v in disp.values())
    one = _one_block_descent(p0, X, Y, cfg, block, mu, hist.steps)
    loss = np.asarray(hist.loss, dtype=np.float64)
    names = list(p0)

    def F_of(*ws):
        return forward_trace(dict(zip(names, ws)), X, cfg).F

    delta = tuple(final[k] - p0[k] for k in names)
    F0, JD = torch.func.jvp(F_of, tuple(p0[k] for k in names), delta)[:2]
    with torch.no_grad():
        FT = forward_trace(final, X, cfg).F
    moved = float((FT - F0).norm())
    share = {k: v * v / total for k, v in disp.items()} if total > 0 else {}
    out.update(displacement=disp, displacement_share=share, block=block, loss=loss.tolist(),
               loss_one_block=one.tolist(), one_block_gap={str(t): float(abs(one[t] - loss[t]) / loss[t])
                              for t in sorted({1, 10, 30, hist.steps}) if t <= hist.steps and loss[t] > 0},
               linearization_error=float((FT - F0 - JD).norm()) / moved if moved > 0 else None,
               mu=mu, steps=hist.steps)
    return out
