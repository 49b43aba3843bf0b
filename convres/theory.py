"""The book's two theorems checked along gradient-descent runs (:func:`theorem_run`,
:func:`ffn_theorem_run`: *observed*), the assumptions on an instance, and what the certified regimes
are (:func:`lazy_report`, :func:`sampled_estimates`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .certify import Certificate, CertifiedRun, centre, certificate_of, chain, check_certifiable, check_one
from .checks import Contraction, Hypothesis, contraction_check, finite_fields, tolerance
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
    random_point,
    smoothness_estimate,
)
from .model import check_inputs, forward_trace, phi, trace_no_grad
from .rank import sigma_k, sigma_nn, singular_values, spectral_norm, stacked
from .values import as_int, as_real, as_seed

__all__ = ["part_b_check", "check_assumptions", "RunCheck", "verify_run", "TheoremRun",
           "theorem_run", "FFNTheoremRun", "ffn_theorem_run", "tangent_kernel_blocks", "lazy_report",
           "sampled_estimates", "MIN_DECREASE"]

#: The "non-vacuous rate" hypothesis: the guaranteed factor ``(1 - mu alpha)^T`` is at most this.
MIN_DECREASE = 0.9


def part_b_check(params, X, Y, cfg) -> dict:
    """Part (b): ``fails`` if ``rho = 4 sqrt(2 Phi_0) / sigma_0 >= r_sigma_upper``; ``holds`` if
    certified (step ``mu_certified``), else ``None``; ``J0 = ||grad Phi_0|| / sqrt(2 Phi_0) <= J_B``."""
    check_one(params, X, Y, cfg)
    return _part_b(params, X, Y, cfg, *loss_and_grad(params, X, Y, cfg))


def _part_b(params, X, Y, cfg, phi_t, grads, tr) -> dict:
    phi, sigma_0, grad_norm = float(phi_t), sigma_nn(tr.H[-1]), flat_norm(grads.values())
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


_SMOOTH = "the activation's derivative is Lipschitz (GELU, tanh, softplus)"


def _assumptions(X, H0, cfg, mu, steps) -> list[Hypothesis]:
    N, n = X.shape[0], X.shape[1]
    Xs, H0 = stacked(X), stacked(H0)
    smooth = cfg.act.smooth
    rel_x = sigma_nn(Xs) / max(spectral_norm(Xs), 1e-300)
    sigma_0 = sigma_nn(H0)
    rel_h = sigma_0 / max(float(singular_values(H0, "H_0")[0]), 1e-300)
    checks = [
        Hypothesis("width", r"$Nn \le d$", float(N * n), float(cfg.d), N * n <= cfg.d),
        Hypothesis("smooth activation", _SMOOTH, float(smooth), 1.0, smooth),
        Hypothesis("full-rank input", r"$\sigma_{Nn}(X)/\|X\|_2 > 10^{-10}$",
                   rel_x, 1e-10, rel_x > 1e-10),
        Hypothesis("non-degenerate H_0", r"$\sigma_{Nn}(H_0)/\|H_0\|_2 > 10^{-10}$",
                   rel_h, 1e-10, rel_h > 1e-10)]
    if mu is not None:
        need, val = -math.log(MIN_DECREASE), mu * alpha(sigma_0) * steps
        rule = rf"$\mu\alpha T \ge \ln(1/{MIN_DECREASE:g})$"
        checks.append(Hypothesis("non-vacuous rate", rule, val, need, val >= need))
    return checks


def check_assumptions(params, X, Y, cfg, *, mu: float | None = None,
                      steps: int | None = None) -> list[Hypothesis]:
    """The book's assumptions on one instance: ``N n <= d``, smooth activation, full-rank ``X`` and
    ``H_0`` (relative ``sigma_Nn > 1e-10``), with ``mu`` and ``steps`` ``mu alpha T >= ln(1/0.9)``."""
    check_one(params, X, Y, cfg)
    if (mu is None) != (steps is None):
        raise ValueError(f"give both mu and steps (for the non-vacuous-rate check) or neither, got "
                         f"mu={mu!r}, steps={steps!r}.")
    if mu is not None:
        mu = as_real("mu", mu, minimum=0.0, above=True)
        steps = as_int("steps", steps, minimum=1)
    H0 = trace_no_grad(params, X, cfg).H[-1]
    return _assumptions(X, H0, cfg, mu, steps)


@dataclasses.dataclass
class RunCheck:
    """The proof's inequalities at every step: ``pl_margin = ||grad_{W_U}||^2 / (2 Phi_t) -
    sigma_Nn(H_t)^2``, ``half_margin = Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}``, ``sigma_ratio``."""

    contraction: Contraction
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    half_margin: np.ndarray
    sigma_ratio: np.ndarray
    observed: int
    max_distance: float

    @property
    def checked_steps(self) -> int:
        return self.contraction.checked_steps

    @property
    def every_step_observed(self) -> bool:
        """At least one step was checked, and every one satisfies every inequality."""
        tol = self.contraction.tolerance
        return (self.contraction.holds and self.observed == self.checked_steps
                and bool((self.pl_margin >= -tol).all()) and bool((self.descent_margin >= -tol).all()))


def verify_run(hist: History, grad_U, sigma_H, mu: float, a: float, L_hat: float, distance, *,
               tol: float) -> RunCheck:
    """The :class:`RunCheck` from ``||grad_{W_U} Phi(theta_t)||_F`` (``t < T``), ``sigma_Nn(H_t)`` and
    ``||theta_t - theta_0||`` (``t <= T``)."""
    loss, g = hist.loss, hist.grad_norm
    grad_U, sigma_H = np.asarray(grad_U, dtype=np.float64), np.asarray(sigma_H, dtype=np.float64)
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
    """A run with the theorem's step ``mu``, ``alpha = (sigma_0/2)^2``, the assumptions, part (b) and
    the :class:`RunCheck`."""

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
        """The scalar fields, JSON-ready; ``part_b_holds`` ``None`` where not decided."""
        verified = self.status != "diverged" and self.check.checked_steps > 0
        h, b = self.history, self.part_b
        mu_cert = b["mu_certified"]
        run_certified = bool(b["holds"]) and mu_cert is not None and self.mu <= mu_cert
        return finite_fields({
            "status": self.status, "alpha": self.alpha, "sigma_nn_H0": self.sigma_0, "mu": self.mu,
            "mu_max": self.mu_max, "mu_max_is_estimate": True, "sigma_min_Z0": self.sigma_min_Z0,
            "sigma_max_Z0": self.sigma_max_Z0, "assumptions_hold": self.assumptions_hold,
            "violations": self.check.contraction.violations if verified else None,
            "max_excess": self.check.contraction.max_excess if verified else None,
            "checked_steps": self.check.checked_steps, "observed_steps": self.check.observed,
            "initial_loss": float(h.loss[0]), "final_loss": float(h.loss[-1]), "steps": h.steps,
            "rho": b["rho"], "r_sigma_upper": b["r_sigma_upper"], "r_sigma_lower": b["r_sigma_lower"],
            "mu_certified": mu_cert, "run_step_certified": run_certified,
            "part_b_holds": False if b["fails"] else (True if run_certified else None),
        })


def theorem_run(params, X, Y, cfg, *, steps: int = 300, mu: float | None = None, safety: float = 2.0,
                smoothness_samples: int = 1, seed: int = 0) -> TheoremRun:
    """Gradient descent with the theorem's step (default ``1 / (safety L_hat)``), checked every step."""
    check_one(params, X, Y, cfg)
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
    at_start = loss_and_grad(params, X, Y, cfg)
    tr = at_start[2]
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
                      part_b=_part_b(params, X, Y, cfg, *at_start),
                      history=hist, check=check, params_final=final)


# --- the second theorem: PL through the last FFN's W_2 (book: *The theorem through the FFN*) ---------

@dataclasses.dataclass
class FFNTheoremRun:
    """A run checked against ``thm-ffn``, ``alpha_ffn = (sigma_M0 sigma_U0 / 4)^2``: hypotheses, margins
    per step, ``sigma_M``, ``sigma_U``, ``lemma_margin`` at recorded steps."""

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
        """The run did not diverge, and a step was checked."""
        return self.status != "diverged" and self.contraction.checked_steps > 0

    def summary(self) -> dict:
        """The scalar fields, JSON-ready."""
        h = self.history
        return finite_fields({
            "theorem": "thm-ffn", "claim": "observed", "readout": self.readout, "rows": self.rows,
            "alpha_ffn": self.alpha_ffn, "sigma_M0": self.sigma_M0, "sigma_U0": self.sigma_U0,
            "mu": self.mu, "mu_alpha": self.mu * self.alpha_ffn,
            "hypotheses": {x.name: x.to_dict() for x in self.hypotheses},
            "checked_conditions_hold": all(x.holds for x in self.hypotheses),
            "violations": self.contraction.violations if self.verified else None,
            "max_excess": self.contraction.max_excess if self.verified else None,
            "checked_steps": self.contraction.checked_steps, "observed_steps": int(self.observed),
            "recorded_steps": int(len(self.recorded_steps)),
            "min_lemma_margin": float(self.lemma_margin.min()) if len(self.lemma_margin) else None,
            "initial_loss": float(h.loss[0]), "final_loss": float(h.loss[-1]),
            "steps": h.steps, "status": self.status, "dtype": self.dtype,
        })


def ffn_theorem_run(params, X, Y, cfg, *, mu: float, steps: int, record_every: int = 1,
                    seed: int = 0, smoothness_iters: int = 10) -> FFNTheoremRun:
    """Gradient descent checked against ``thm-ffn`` (any depth), ``sigma_rows(M~_t)`` and
    ``sigma_c(W_U)`` every ``record_every`` steps."""
    check_inputs(params, X, Y, cfg)
    mu = as_real("mu", mu, minimum=0.0, above=True)
    steps = as_int("steps", steps, minimum=1)
    record_every = as_int("record_every", record_every, minimum=1)
    seed = as_seed("seed", seed)
    smoothness_iters = as_int("smoothness_iters", smoothness_iters, minimum=0)
    rows, last = ffn_rows(cfg, X.shape[0], X.shape[1]), f"layer{cfg.L}"
    dtype = params["W_U"].dtype
    tol = tolerance(dtype)
    M0 = activation_rows(trace_no_grad(params, X, cfg).M[-1], cfg)
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
        H("width", r"FFN width $m \ge$ the number of output rows", cfg.m, rows, cfg.m >= rows),
        H("output_dim", r"outputs $c \le d$", cfg.c, cfg.d, cfg.c <= cfg.d),
        H("smooth_activation", _SMOOTH, float(cfg.act.smooth), 1.0, cfg.act.smooth),
        H("full_rank_activations", r"$\sigma_{\text{rows}}(\tilde M_0)/\|\tilde M_0\|_2 > 10^{-10}$",
          sM0 / max(norm_M0, 1e-300), 1e-10, sM0 > 1e-10 * norm_M0),
        H("full_rank_readout", r"$\sigma_c(W_U^0)/\|W_U^0\|_2 > 10^{-10}$", sU0 / max(norm_U0, 1e-300),
          1e-10, sU0 > 1e-10 * norm_U0),
        H("non_vacuous_rate", rf"$\mu\alpha' T \ge \ln(1/{MIN_DECREASE:g})$", rate, -math.log(MIN_DECREASE),
          rate >= -math.log(MIN_DECREASE)),
    ]
    if L_hat is not None:
        hyp.append(H("step_size", r"$\mu \hat L_0 \le 1$ ($\hat L_0 \le L_B$: a failure certifies "
                     r"$\mu > 1/L_B$)", mu * L_hat, 1.0, mu * L_hat <= 1, kind="estimated"))
    ratio_M = sM_a.min() / sM0 if len(sM_a) and sM0 > 0 else None
    ratio_U = sU_a.min() / sU0 if len(sU_a) and sU0 > 0 else None
    hyp += [
        H("sigma_M_along_run", r"$\min_t \sigma_{\text{rows}}(\tilde M_t)/\sigma_{\text{rows}}(\tilde M_0)$ "
          "over the recorded steps", ratio_M, 0.5, ratio_M is not None and ratio_M >= 0.5, kind="observed"),
        H("sigma_U_along_run", r"$\min_t \sigma_c(W_{U,t})/\sigma_c(W_U^0)$ over the recorded steps", ratio_U,
          0.5, ratio_U is not None and ratio_U >= 0.5, kind="observed"),
        H("descent_along_run", r"$\min_t\, (\Phi_t - \tfrac{\mu}{2}\|g_t\|^2 - \Phi_{t+1})/\Phi_t$",
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

def _jacobian(params, X, cfg) -> dict[str, torch.Tensor]:
    """The Jacobian of ``theta -> vec F_theta(X)`` per weight block, ``(outputs, entries)`` each."""
    J = torch.func.jacrev(lambda p: forward_trace(p, X, cfg).F.reshape(-1))(
        {k: v.detach() for k, v in params.items()})
    return {k: v.reshape(v.shape[0], -1) for k, v in J.items()}


def tangent_kernel_blocks(params, X, cfg) -> dict:
    """The tangent kernel ``K = J_0 J_0^T = sum_b K_b``: ``lambda_min``, ``trace`` and their shares."""
    parts: dict[str, torch.Tensor] = {}
    for name, Jb in _jacobian(params, X, cfg).items():
        Jb = Jb.to(torch.float64)
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


def lazy_report(params, X, Y, cfg, run: CertifiedRun, *, block: str = "W_U") -> dict:
    """How lazy ``run`` (from ``params``) is (Chizat, Oyallon & Bach 2019): the tangent kernel,
    displacements, ``||H_0 - X||``, ``max |S - U|``, ``block``-only descent, ``linearization_error``."""
    check_inputs(params, X, Y, cfg)
    if block not in params:
        raise ValueError(f"block must be one of the weights {sorted(params)}, got {block!r}.")
    p0 = {k: v.detach().to(torch.float64) for k, v in params.items()}
    X, Y = X.detach().to(torch.float64), Y.detach().to(torch.float64)
    tr = trace_no_grad(p0, X, cfg)
    Xs, H0 = stacked(X), stacked(tr.H[-1])
    out: dict = {"tangent_kernel": tangent_kernel_blocks(p0, X, cfg),
                 "H0_minus_X": spectral_norm(H0 - Xs) / spectral_norm(Xs) if H0.shape == Xs.shape else None,
                 "max_S_minus_uniform": float((tr.S[0] - 1.0 / X.shape[1]).abs().max()),
                 "sigma_Nn_H0": sigma_nn(H0) if H0.shape[0] <= H0.shape[1] else None,
                 "sigma_Nn_X": sigma_nn(Xs) if Xs.shape[0] <= Xs.shape[1] else None}
    mu, final, loss, T = run.certificate.mu, run.params_final, run.loss, run.steps
    disp = {k: float((final[k] - p0[k]).norm()) for k in p0}
    total = sum(v * v for v in disp.values())
    grad_and_value = torch.func.grad_and_value(lambda w: phi({**p0, block: w}, X, Y, cfg))
    w, one = p0[block], []                                # descent on the weight ``block`` alone
    for _ in range(T + 1):
        g, value = grad_and_value(w)
        one.append(float(value))
        w = w - mu * g
    delta = {k: final[k] - p0[k] for k in p0}             # F_0 and its derivative along theta_T - theta_0
    F0, JD = torch.func.jvp(lambda p: forward_trace(p, X, cfg).F, (p0,), (delta,))[:2]
    FT = trace_no_grad(final, X, cfg).F
    moved = float((FT - F0).norm())
    share = {k: v * v / total for k, v in disp.items()} if total > 0 else {}
    out.update(displacement=disp, displacement_share=share, block=block, loss=loss.tolist(),
               loss_one_block=one, one_block_gap={str(t): float(abs(one[t] - loss[t]) / loss[t])
                              for t in sorted({1, 10, 30, T}) if t <= T and loss[t] > 0},
               linearization_error=float((FT - F0 - JD).norm()) / moved if moved > 0 else None,
               mu=mu, steps=T)
    return out


# --- how tight the bounds are ---------------------------------------------------------------------------

def sampled_estimates(params, X, Y, cfg, cert: Certificate) -> dict:
    """Lower estimates of what the certificate bounds: ``L_hat``, ``L_lower = ||H_0||^2``, ``J_0``,
    ``J_hat``, ``delta_H_hat`` (against ``delta_H_bound``) and ``r_sigma_upper``."""
    check_certifiable(params, X, Y, cfg)
    gen = torch.Generator().manual_seed(0)
    theta0 = {k: v.detach() for k, v in params.items()}

    def jac_norm(p):
        G = torch.cat(list(_jacobian(p, X, cfg).values()), dim=1)
        return math.sqrt(max(float(torch.linalg.eigvalsh(G @ G.T)[-1]), 0.0))

    pts = [random_point(theta0, cert.radius, gen)]
    L_hat = max(hessian_norm(p, X, Y, cfg, iters=8) for p in [theta0] + pts)
    J_0 = jac_norm(theta0)
    J_hat = max([J_0] + [jac_norm(p) for p in pts])
    H0, r = stacked(trace_no_grad(theta0, X, cfg).H[0]), cert.r_sigma_lower

    def delta_H(p):
        return torch.linalg.matrix_norm(stacked(forward_trace(p, X, cfg).H[0]) - H0, 2)

    p, dH = random_point(theta0, r, gen), 0.0
    for _ in range(11):                                   # 10 steps of projected gradient ascent on B_r
        grads, val = torch.func.grad_and_value(delta_H)({k: v.detach() for k, v in p.items()})
        dH = max(dH, float(val))
        gnorm = flat_norm(grads.values()) or 1.0
        step = {k: p[k].detach() + 0.5 * r * g / gnorm - theta0[k] for k, g in grads.items()}
        norm = flat_norm(step.values())
        p = {k: theta0[k] + step[k] * min(1.0, r / norm) for k in theta0}
    c = centre(params, X, Y, cfg)
    return {"L_hat": L_hat, "L_lower": c.h0 ** 2, "J_0": J_0, "J_hat": J_hat, "delta_H_hat": dH,
            "delta_H_bound": chain(c, cert.r_sigma_lower).delta_H,
            "r_sigma_upper": r_sigma_upper(params, X, cfg)}
