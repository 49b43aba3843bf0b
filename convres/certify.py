"""Rigorous constants for the book's theorem: every hypothesis of part (b') bounded before the run.

Book chapter: *The theorem* (``book/theorem.md``), sections *Certified constants* (lemmas
``thm-lem-chain``, ``thm-lem-rlo``, ``thm-lem-jup``, ``thm-lem-lup``) and *An instance certified
before the run*. Part (b') of theorem ``thm-main`` needs

* ``mu <= 1/L_B``, ``L_B`` the Lipschitz constant of ``grad Phi`` on the ball
  ``B_r = {theta : ||theta - theta_0|| <= r}``, and
* ``rho := 4 sqrt(2 Phi_0) / sigma_0 < r <= r_sigma`` (``r_sigma``: the radius on which
  ``sigma_Nn(H(theta)) >= sigma_0 / 2``).

This module computes, from norms at the centre ``theta_0`` and the radius ``r`` only, an upper
bound of the block Jacobians of ``Z``, ``M = act(Z W_1)``, ``H`` and ``F`` on ``B_r``
(:func:`chain`), and from it

* a **lower** bound ``r_sigma_lower <= r_sigma`` (``sup{r : r ||dH(r)|| <= sigma_0 / 2}``),
* an **upper** bound ``J_upper >= sup_B ||J||_2 >= J_B`` (the Jacobian of ``F``), and
* an **upper** bound ``L_upper >= sup_B ||hess Phi||_2 >= L_B``.

When ``rho / r_sigma_lower < 1``, part (b') holds with ``r = r_sigma_lower`` and
``mu = 1 / L_upper``: the instance is **certified** before the run (:func:`certificate`).
Everything is computed in float64; float64 round-off in these computations is not part of the
certificate (the bounds have slack far above it). Single block (``L = 1``), per-token readout,
smooth activation (``lip2`` finite).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .checks import contraction_check, tolerance
from .gd import Step, gradient_descent
from .instances import certified_instance
from .lemmas import alpha, flat_norm, hessian_norm, path_radius, r_sigma_upper
from .model import attention_scale, check_inputs, forward_trace, layer_params
from .rank import sigma_nn, spectral_norm, stacked
from .values import as_int, as_real

__all__ = ["Centre", "Chain", "Certificate", "CertifiedRun", "centre", "chain", "delta_H",
           "r_sigma_lower", "jacobian_upper", "smoothness_upper", "certificate", "check_certifiable",
           "certified_run", "sampled_estimates", "width_sweep", "crossing", "second_order", "BLOCKS"]

#: The weight blocks, in the order of the vectors of :class:`Chain`.
BLOCKS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "W_U")
_Q, _K, _V, _1, _2, _U = range(6)

@dataclasses.dataclass(frozen=True)
class Centre:
    """Norms at the centre ``theta_0`` (exact up to float64), the inputs of every bound.

    Per sequence ``i`` (arrays of length ``N``): ``x_i = ||X_i||_2``, ``q_i = ||X_i W_Q||_2``,
    ``k_i = ||X_i W_K||_2``, ``v_i = ||X_i W_V||_2``, ``sx_i = ||S_i X_i||_2``. Stacked:
    ``x = ||X||_2``, ``sx = ||[S_1 X_1; ...; S_N X_N]||_2``, ``z0 = ||Z_0||_2``, ``a0 = ||M_0||_2``
    (``M_0 = act(Z_0 W_1)``), ``h0 = ||H_0||_2``, ``sigma_0 = sigma_Nn(H_0)``; weights:
    ``w1 = ||W_1||_2``, ``w2 = ||W_2||_2``, ``u = ||W_U||_2``; ``R0 = ||F_0 - Y||_F =
    sqrt(2 Phi_0)``; constants: ``s`` (attention scale), ``n``, ``beta_f`` (FFN residual),
    ``lip = sup|act'|``, ``lip2 = sup|act''|``.
    """

    x_i: np.ndarray
    q_i: np.ndarray
    k_i: np.ndarray
    v_i: np.ndarray
    sx_i: np.ndarray
    x: float
    sx: float
    z0: float
    a0: float
    h0: float
    sigma_0: float
    w1: float
    w2: float
    u: float
    R0: float
    s: float
    n: int
    beta_f: float
    lip: float
    lip2: float

    @property
    def alpha(self) -> float:
        """``alpha = (sigma_0 / 2)^2`` (:func:`convres.lemmas.alpha`)."""
        return alpha(self.sigma_0)

    @property
    def rho(self) -> float:
        """The path-length radius of part (b') (:func:`convres.lemmas.path_radius`)."""
        return path_radius(0.5 * self.R0 ** 2, self.sigma_0)


def check_certifiable(params, X, Y, cfg) -> None:
    """Raise a clear error unless the certified bounds apply to this instance: valid inputs
    (:func:`convres.model.check_inputs`), one block, per-token readout, smooth activation, one
    configuration."""
    check_inputs(params, X, Y, cfg)
    if cfg.L != 1:
        raise ValueError(f"the certified bounds are for one block (L = 1), got L = {cfg.L}; "
                         "use ModelConfig(L=1).")
    if cfg.pool is not None:
        raise ValueError(f"the certified bounds are per token (pool=None), got pool={cfg.pool!r}.")
    if not cfg.act.smooth or not math.isfinite(cfg.act.lip2):
        raise ValueError(f"the smoothness bound needs a smooth activation (gelu, tanh, softplus), "
                         f"got {cfg.activation!r}.")
    if params["W_U"].dim() != 2:
        raise ValueError("the certified bounds take one configuration (weights without a leading "
                         "axis of stacked configurations).")


def _norms(T: torch.Tensor) -> np.ndarray:
    """``||T_i||_2`` of every matrix of a batch, float64."""
    return torch.linalg.matrix_norm(T, ord=2).numpy().astype(np.float64)


def centre(params, X, Y, cfg, weight_norms: dict | None = None) -> Centre:
    """The centre quantities of :class:`Centre` at ``params`` (one block, per token, smooth
    activation; see :func:`check_certifiable`), in float64. ``weight_norms``: the norms of
    :func:`_weight_norms` when already computed for these weights."""
    p = {k: v.detach().to(torch.float64) for k, v in params.items()}
    X, Y = X.detach().to(torch.float64), Y.detach().to(torch.float64)
    W = layer_params(p, 1)
    with torch.no_grad():
        tr = forward_trace(p, X, cfg)
    S, Z, H = tr.S[0], tr.Z[0], tr.H[0]
    return Centre(
        x_i=_norms(X), q_i=_norms(X @ W["W_Q"]), k_i=_norms(X @ W["W_K"]), v_i=_norms(X @ W["W_V"]),
        sx_i=_norms(S @ X), x=spectral_norm(stacked(X)), sx=spectral_norm(stacked(S @ X)),
        z0=spectral_norm(stacked(Z)), a0=spectral_norm(stacked(tr.M[0])), h0=spectral_norm(stacked(H)),
        sigma_0=sigma_nn(H), **(weight_norms or _weight_norms(p)), R0=float((tr.F - Y).norm()),
        s=attention_scale(cfg),
        n=int(X.shape[1]), beta_f=float(cfg.residual[1]), lip=float(cfg.act.lip),
        lip2=float(cfg.act.lip2))


def _weight_norms(p) -> dict:
    """``w1, w2, u``: the spectral norms of the weights that the bounds use (the value, query
    and key weights enter only through ``X_i W``, computed per sequence)."""
    return {"w1": spectral_norm(p["layer1.W_1"]), "w2": spectral_norm(p["layer1.W_2"]),
            "u": spectral_norm(p["W_U"])}


@dataclasses.dataclass(frozen=True)
class Chain:
    """The bounds of lemma ``thm-lem-chain`` on the ball ``B_r``: for every ``theta`` in ``B_r``
    and every block ``b`` (order :data:`BLOCKS`), ``||D_b G(theta)||_{F -> F} <= dG[b]`` for
    ``G = Z, P = Z W_1, M = act(P), H, F``; the increments ``||G(theta) - G(theta_0)||_F <=
    delta_G``; the suprema ``Zbar >= ||Z||_2``, ``Mbar >= ||M||_2``, ``Hbar >= ||H||_2`` on ``B_r``;
    and the softmax increments ``dS_i >= ||S_i - S_i^0||_F``."""

    r: float
    dS_i: np.ndarray
    dZ: np.ndarray
    dP: np.ndarray
    dM: np.ndarray
    dH: np.ndarray
    dF: np.ndarray
    delta_Z: float
    delta_M: float
    delta_H: float
    Zbar: float
    Mbar: float
    Hbar: float


#: Number of radii in the upper Riemann sums of :func:`chain`.
RIEMANN_STEPS = 32


def chain(c: Centre, r: float, steps: int = RIEMANN_STEPS) -> Chain:
    """Lemma ``thm-lem-chain``: block-Jacobian bounds on ``B_r`` from the centre norms ``c``.

    For a radius ``rho`` (every weight block has moved by at most ``rho`` in Frobenius norm), with
    ``Kbar_i = k_i + x_i rho`` (``Qbar_i``, ``Vbar_i`` likewise) and ``W1bar = w1 + rho``, ...::

        dS_i(rho) = min(sqrt(2 n), rho s x_i sqrt(Kbar_i^2 + Qbar_i^2) / 2)  >= ||S_i - S_i^0||_F
        dZ(rho) = (s/2 ||(x_i Kbar_i Vbar_i)_i||, s/2 ||(x_i Qbar_i Vbar_i)_i||,
                   min(sqrt(n) x, sx + x max_i dS_i), 0, 0, 0)
        dP = W1bar dZ + Zbar e_1,   dM = lip dP,   dH = lip W2bar dP + beta_f dZ + Mbar e_2,
        dF = Ubar dH + Hbar e_U,

    with ``Zbar = z0 + delta_Z``, ``Mbar = a0 + delta_M``, ``Hbar = h0 + delta_H`` and
    ``delta_G(rho) = int_0^rho ||dG(t)|| dt`` (mean-value theorem along the segment from
    ``theta_0``, which stays in ``B_t`` at distance ``t``). Every ``||dG(t)||`` increases with
    ``t``, so the integral is bounded by the upper Riemann sum on ``steps`` equal pieces: that sum
    is what is used, at every radius ``k r / steps`` in turn.
    """
    r, K_ = float(r), int(steps)
    if K_ < 1 or r == 0.0:  # the centre itself
        return _chain_at_centre(c)
    h = r / K_
    rho = h * np.arange(1, K_ + 1)[:, None]          # the radii k r / K, as a column
    x_i, s, norm = c.x_i[None, :], c.s, np.linalg.norm
    K, Q, V = c.k_i + x_i * rho, c.q_i + x_i * rho, c.v_i + x_i * rho
    W1, W2, U = c.w1 + rho, c.w2 + rho, c.u + rho     # (K, 1)
    dS_i = np.minimum(math.sqrt(2 * c.n), rho * s * x_i * np.sqrt(K ** 2 + Q ** 2) / 2)
    dZ = np.zeros((K_, 6))
    dZ[:, _Q] = s / 2 * norm(x_i * K * V, axis=1)
    dZ[:, _K] = s / 2 * norm(x_i * Q * V, axis=1)
    dZ[:, _V] = np.minimum(math.sqrt(c.n) * c.x, c.sx + c.x * dS_i.max(axis=1))
    delta_Z = h * np.cumsum(norm(dZ, axis=1))        # upper Riemann sums, every radius
    dP = W1 * dZ
    dP[:, _1] = c.z0 + delta_Z
    dM = c.lip * dP
    delta_M = h * np.cumsum(norm(dM, axis=1))
    dH = c.lip * W2 * dP + c.beta_f * dZ
    dH[:, _2] = c.a0 + delta_M
    delta_H = h * np.cumsum(norm(dH, axis=1))
    dF = U * dH
    dF[:, _U] = c.h0 + delta_H
    dZ_, dM_, dH_ = (float(v[-1]) for v in (delta_Z, delta_M, delta_H))
    return Chain(r, dS_i[-1], dZ[-1], dP[-1], dM[-1], dH[-1], dF[-1], dZ_, dM_, dH_,
                 c.z0 + dZ_, c.a0 + dM_, c.h0 + dH_)


def _chain_at_centre(c: Centre) -> Chain:
    dZ = np.zeros(6)
    dZ[_Q] = 0.5 * c.s * float(np.linalg.norm(c.x_i * c.k_i * c.v_i))
    dZ[_K] = 0.5 * c.s * float(np.linalg.norm(c.x_i * c.q_i * c.v_i))
    dZ[_V] = min(math.sqrt(c.n) * c.x, c.sx)
    dP = c.w1 * dZ
    dP[_1] = c.z0
    dM = c.lip * dP
    dH = c.lip * c.w2 * dP + c.beta_f * dZ
    dH[_2] = c.a0
    dF = c.u * dH
    dF[_U] = c.h0
    return Chain(0.0, np.zeros(len(c.x_i)), dZ, dP, dM, dH, dF, 0.0, 0.0, 0.0, c.z0, c.a0, c.h0)


def delta_H(c: Centre, r: float) -> float:
    """``delta_H(r)``, an upper bound of ``||H(theta) - H_0||_2`` on ``B_r`` (:func:`chain`)."""
    return chain(c, r).delta_H


def r_sigma_lower(c: Centre, iters: int = 40) -> float:
    """Lemma ``thm-lem-rlo``: a lower bound of ``r_sigma``, the largest ``r`` (to bisection
    accuracy, always on the safe side) with ``delta_H(r) <= sigma_0 / 2``; by Weyl's inequality
    ``sigma_Nn(H(theta)) >= sigma_0 - delta_H(r) >= sigma_0 / 2`` on ``B_r``."""
    target = c.sigma_0 / 2
    if not target > 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while delta_H(c, hi) <= target:  # delta_H grows at least linearly: this ends
        lo, hi = hi, 2 * hi
        if hi > 1e12:
            return lo
    for _ in range(iters):  # bisection; lo always satisfies delta_H(lo) <= target
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_H(c, mid) <= target else (lo, mid)
    return lo


def _sym(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The symmetric matrix ``(a b^T + b a^T) / 2``, whose quadratic form is ``(a.e)(b.e)``."""
    return 0.5 * (np.outer(a, b) + np.outer(b, a))


def _unit(k: int) -> np.ndarray:
    e = np.zeros(6)
    e[k] = 1.0
    return e


def second_order(c: Centre, ch: Chain) -> float:
    """Lemma ``thm-lem-lup``: ``M_2 >= sup ||D^2 F(theta)[w, w]||_F`` over ``theta`` in ``B_r``
    and unit ``w``, as the largest eigenvalue of a non-negative ``6 x 6`` matrix ``Q_F`` with
    ``||D^2 F[w, w]||_F <= e^T Q_F e``, ``e`` the vector of block norms of ``w``."""
    r, s, x_i = ch.r, c.s, c.x_i
    K, Q, V = c.k_i + x_i * r, c.q_i + x_i * r, c.v_i + x_i * r
    W1, W2, U = c.w1 + r, c.w2 + r, c.u + r
    eQ, eK, eV, e1, e2, eU = (_unit(k) for k in range(6))
    QZ = np.zeros((6, 6))
    for i in range(len(x_i)):
        l_i = s * x_i[i] * (K[i] * eQ + Q[i] * eK)            # ||D l_i[w]||_F <= l_i . e
        D2S = s * x_i[i] ** 2 * _sym(eQ, eK) + np.outer(l_i, l_i)   # ||D^2 S_i[w, w]||_F
        QZ += V[i] * D2S + x_i[i] * _sym(l_i, eV)             # ||D^2 Z_i[w, w]||_F
    QP = W1 * QZ + 2 * _sym(ch.dZ, e1)
    QH = c.lip2 * W2 * np.outer(ch.dP, ch.dP) + c.lip * W2 * QP + 2 * c.lip * _sym(ch.dP, e2) \
        + c.beta_f * QZ
    QF = U * QH + 2 * _sym(ch.dH, eU)
    return float(np.linalg.eigvalsh(QF)[-1])


def _smoothness_upper(c: Centre, r: float) -> tuple[float, float, float]:
    ch = chain(c, r)
    J = float(np.linalg.norm(ch.dF))
    M2 = second_order(c, ch)
    return J ** 2 + (c.R0 + r * J) * M2, J, M2


def jacobian_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup`` (first part): ``||dF(r)|| >= sup_{B_r} ||J(theta)||_2 >= J_B``, ``J``
    the Jacobian of ``theta -> vec F_theta(X)``."""
    return float(np.linalg.norm(chain(c, as_real("the radius r", r, minimum=0.0)).dF))


def smoothness_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup``: ``L_upper(r) = J_up^2 + (||R_0|| + r J_up) M_2 >= sup_{B_r}
    ||hess Phi||_2 >= L_B``."""
    return _smoothness_upper(c, as_real("the radius r", r, minimum=0.0))[0]


@dataclasses.dataclass(frozen=True)
class Certificate:
    """Every hypothesis of part (b') of ``thm-main``, bounded before the run.

    Attributes:
        certified: ``ratio < 1`` (and ``sigma_0 > 0``): part (b') applies with ``r = radius``,
            ``mu = 1 / L_upper``: every iterate stays within ``rho`` of ``theta_0`` and
            ``Phi_t <= (1 - mu alpha)^t Phi_0``.
        ratio: ``rho / r_sigma_lower``, the left side of (b') over the certified radius.
        rho: ``4 sqrt(2 Phi_0) / sigma_0``; r_sigma_lower: lemma ``thm-lem-rlo``.
        radius: the ball used for ``L_upper`` and ``J_upper`` (``r_sigma_lower``).
        L_upper, J_upper, M2: lemmas ``thm-lem-lup`` and ``thm-lem-jup`` on ``B_radius``.
        mu: ``1 / L_upper``; alpha: ``(sigma_0 / 2)^2``; sigma_0, initial_loss: at ``theta_0``.
        sigma_max_H0: ``||H_0||_2``; ``L_B >= sigma_max_H0^2`` (the ``W_U`` block of the Hessian),
            so ``L_upper / sigma_max_H0^2`` bounds how loose ``L_upper`` can be.
    """

    certified: bool
    ratio: float
    rho: float
    r_sigma_lower: float
    radius: float
    L_upper: float
    J_upper: float
    M2: float
    mu: float
    alpha: float
    sigma_0: float
    sigma_max_H0: float
    initial_loss: float

    def to_dict(self) -> dict:
        """JSON-ready (infinite values become ``None``)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}


def certificate(params, X, Y, cfg) -> Certificate:
    """Bound every hypothesis of part (b') before the run (book: *The theorem*, *Certified
    constants*): ``rho = 4 sqrt(2 Phi_0) / sigma_0`` exactly, ``r_sigma_lower``, and on the ball of
    radius ``r_sigma_lower`` the upper bounds ``L_upper`` and ``J_upper``. ``certified`` iff
    ``rho < r_sigma_lower``. A failed certificate is a result (``certified=False``, its ratio)."""
    check_certifiable(params, X, Y, cfg)
    return certificate_of(centre(params, X, Y, cfg))


#: The ball of part (b') is taken just above the path-length radius: ``r = min(r_sigma_lower,
#: BALL_MARGIN * rho)`` (any ``r`` in ``(rho, r_sigma_lower]`` is admissible; a smaller ball gives a
#: smaller ``L_upper``, hence a larger step).
BALL_MARGIN = 1.01


def certificate_of(c: Centre) -> Certificate:
    """The :class:`Certificate` from the centre quantities ``c`` (see :func:`certificate`)."""
    r_lo = r_sigma_lower(c)
    rho = c.rho
    ratio = rho / r_lo if r_lo > 0 else math.inf
    certified = bool(c.sigma_0 > 0 and ratio < 1)
    radius = min(r_lo, BALL_MARGIN * rho) if certified else r_lo
    L, J, M2 = _smoothness_upper(c, radius)
    return Certificate(certified=certified, ratio=ratio, rho=rho, r_sigma_lower=r_lo, radius=radius,
                       L_upper=L, J_upper=J, M2=M2, mu=1.0 / L, alpha=c.alpha, sigma_0=c.sigma_0,
                       sigma_max_H0=c.h0, initial_loss=0.5 * c.R0 ** 2)


@dataclasses.dataclass
class CertifiedRun:
    """Gradient descent with ``mu = 1 / L_upper`` on a certified instance, and the certified
    claims checked at every step.

    Attributes:
        certificate: the :class:`Certificate` computed before the run.
        loss: ``Phi_t``, ``t = 0 .. T``; envelope: ``(1 - mu alpha)^t Phi_0``.
        distance: ``||theta_t - theta_0||``; path: ``sum_{s<t} mu ||g_s||`` (both ``<= rho``).
        sigma: ``sigma_Nn(H_t)`` (``>= sigma_0 / 2`` on the certified ball).
        ratio: ``Phi_{t+1} / Phi_t`` (``<= 1 - mu alpha``).
        violations: steps where a certified claim fails beyond float64 round-off (per-step
            contraction, envelope, distance or path beyond ``rho``, sigma below ``sigma_0/2``);
            checked only while ``Phi_t > 1e-20 Phi_0``.
        status: the run's status.
    """

    certificate: Certificate
    loss: np.ndarray
    envelope: np.ndarray
    distance: np.ndarray
    path: np.ndarray
    sigma: np.ndarray
    ratio: np.ndarray
    violations: int
    checked_steps: int
    status: str

    @property
    def steps(self) -> int:
        return len(self.loss) - 1

    def to_dict(self) -> dict:
        """JSON-ready: the summary, the certificate and the per-step arrays (for the chapter's
        figure, ``convres.plotting.plot_certified_run``, and the cache)."""
        return {"summary": self.summary(), "certificate": self.certificate.to_dict(),
                **{k: np.asarray(getattr(self, k)).tolist()
                   for k in ("loss", "envelope", "distance", "path", "sigma", "ratio")}}

    def summary(self) -> dict:
        """What ``python -m convres theorem --certify --json`` prints (with the sizes added)."""
        c = self.certificate
        fin = lambda v: None if not math.isfinite(v) else float(v)  # noqa: E731
        return {
            "certified": c.certified, "ratio": fin(c.ratio), "rho": fin(c.rho),
            "r_sigma_lower": c.r_sigma_lower, "radius": c.radius, "L_upper": c.L_upper,
            "J_upper": c.J_upper, "mu": c.mu, "alpha": c.alpha, "mu_alpha": c.mu * c.alpha,
            "sigma_0": c.sigma_0, "initial_loss": float(self.loss[0]), "final_loss": float(self.loss[-1]),
            "envelope_final": float(self.envelope[-1]), "steps": self.steps,
            "violations": self.violations, "checked_steps": self.checked_steps,
            "max_distance": float(self.distance.max()), "path_length": float(self.path[-1]),
            "min_sigma_ratio": float(self.sigma.min() / c.sigma_0) if c.sigma_0 > 0 else None,
            "status": self.status,
        }


def certified_run(params, X, Y, cfg, *, steps: int = 100, cert: Certificate | None = None) -> CertifiedRun:
    """Certify the instance (or take ``cert``), run ``steps`` steps of gradient descent with
    ``mu = 1 / L_upper`` and check at every step what the certificate promises (see
    :class:`CertifiedRun`). On an instance that is not certified the same checks are made: they
    are then observations, not consequences of a theorem."""
    check_certifiable(params, X, Y, cfg)
    steps = as_int("steps", steps, minimum=1)
    cert = certificate_of(centre(params, X, Y, cfg)) if cert is None else cert
    dist, sig = [], []
    theta0 = {k: v.detach() for k, v in params.items()}

    def record(step: Step):
        dist.append(flat_norm(step.params[k] - theta0[k] for k in theta0))
        sig.append(sigma_nn(step.trace.H[-1]))

    _, hist = gradient_descent(params, X, Y, cfg, cert.mu, steps, callback=record)
    loss = np.asarray(hist.loss, dtype=np.float64)
    T = hist.steps
    mu_alpha = cert.mu * cert.alpha
    envelope = loss[0] * (1 - mu_alpha) ** np.arange(T + 1)
    path = np.concatenate([[0.0], np.cumsum(cert.mu * hist.grad_norm)])
    dist_a, sig_a = np.asarray(dist), np.asarray(sig)
    tol = tolerance(params["W_U"].dtype)
    contraction = contraction_check(loss, mu_alpha, tol=tol)
    live = np.zeros(T + 1, dtype=bool)
    live[contraction.steps] = True
    bad = np.zeros(T + 1, dtype=bool)
    bad[contraction.steps + 1] |= contraction.excess > tol
    bad |= live & (loss > envelope * (1 + tol))
    if cert.certified:
        bad |= (dist_a > cert.rho * (1 + tol)) | (path > cert.rho * (1 + tol))
        bad |= sig_a < cert.sigma_0 / 2 * (1 - tol)
    return CertifiedRun(certificate=cert, loss=loss, envelope=envelope, distance=dist_a, path=path,
                        sigma=sig_a, ratio=hist.ratio, violations=int(bad.sum()),
                        checked_steps=contraction.checked_steps, status=hist.status)


def _ascend_delta_H(theta0, X, cfg, r, start, steps) -> float:
    """The largest ``||H(theta) - H_0||_2`` that projected gradient ascent finds on ``B_r``
    (``steps`` steps from ``start``): a lower estimate of what ``delta_H(r)`` bounds."""
    with torch.no_grad():
        H0 = stacked(forward_trace(theta0, X, cfg).H[0])

    def value(p):
        return torch.linalg.matrix_norm(stacked(forward_trace(p, X, cfg).H[0]) - H0, 2)

    p, best = start, 0.0
    for _ in range(steps + 1):
        leaves = {k: v.detach().requires_grad_(True) for k, v in p.items()}
        with torch.enable_grad():
            val = value(leaves)
            grads = torch.autograd.grad(val, list(leaves.values()), allow_unused=True,
                                        materialize_grads=True)
        best = max(best, float(val.detach()))
        gnorm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads)) or 1.0
        step = {k: leaves[k].detach() + 0.5 * r * g / gnorm - theta0[k] for k, g in zip(leaves, grads)}
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in step.values()))
        p = {k: theta0[k] + step[k] * min(1.0, r / norm) for k in theta0}
    return best


def sampled_estimates(params, X, Y, cfg, cert: Certificate, *, samples: int = 1, iters: int = 8,
                      ascent_steps: int = 10, seed: int = 0) -> dict:
    """What the certified bounds bound, estimated at sampled points (book: *The theorem*, the
    tightness table): lower estimates of the true constants, to compare the bounds with.

    * ``L_hat``: the largest power-iteration estimate of ``||hess Phi||_2`` (``iters`` exact
      Hessian-vector products) at ``theta_0`` and at ``samples`` random points of ``B_radius``;
      ``L_lower = ||H_0||_2^2`` is a rigorous lower bound of ``L_B`` (the ``W_U`` block).
    * ``J_0 = ||J(theta_0)||_2`` exactly (from the ``N n c x N n c`` Gram matrix of the rows of the
      Jacobian), ``J_hat`` the largest over ``theta_0`` and the sampled points.
    * ``delta_H_hat``: the largest ``||H(theta) - H_0||_2`` that ``ascent_steps`` steps of projected
      gradient ascent find on ``B_{r_sigma_lower}`` (from a random point of its sphere), against
      ``delta_H_bound``; ``r_sigma_upper``: the explicit point of lemma thm-lem-rsigma
      (``r_sigma_lower <= r_sigma <= r_sigma_upper``).
    """
    check_certifiable(params, X, Y, cfg)
    gen = torch.Generator().manual_seed(seed)
    theta0 = {k: v.detach() for k, v in params.items()}

    def point(r):
        u = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in theta0.items()}
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in u.values()))
        return {k: theta0[k] + r * u[k] / norm for k in theta0}

    def jac_norm(p):
        leaves = {k: v.detach().requires_grad_(True) for k, v in p.items()}
        with torch.enable_grad():
            F = forward_trace(leaves, X, cfg).F.reshape(-1)
            rows = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(F[i], list(leaves.values()),
                                                                          retain_graph=True)])
                    for i in range(F.numel())]
        G = torch.stack(rows)
        return math.sqrt(max(float(torch.linalg.eigvalsh(G @ G.T)[-1]), 0.0))

    pts = [point(cert.radius) for _ in range(samples)]
    L_hat = max(hessian_norm(p, X, Y, cfg, iters=iters, seed=seed) for p in [theta0] + pts)
    J_0 = jac_norm(theta0)
    J_hat = max([J_0] + [jac_norm(p) for p in pts])
    dH = _ascend_delta_H(theta0, X, cfg, cert.r_sigma_lower, point(cert.r_sigma_lower), ascent_steps)
    c = centre(params, X, Y, cfg)
    return {"L_hat": L_hat, "L_lower": c.h0 ** 2, "J_0": J_0, "J_hat": J_hat, "delta_H_hat": dH,
            "delta_H_bound": chain(c, cert.r_sigma_lower).delta_H,
            "r_sigma_upper": r_sigma_upper(params, X, cfg)}


# --- the width sweep ----------------------------------------------------------------------------------

def width_sweep(widths, shapes, seeds, **regime) -> list[dict]:
    """The certificate ratio ``rho / r_sigma_lower`` against the width ``d``: one row per width,
    shape ``(N, n)`` and seed, on :func:`certified_instance` (``regime`` overrides its defaults).
    Rows hold ``d``, ``N``, ``n``, ``Nn``, ``seed``, ``ratio``, ``rho``, ``r_sigma_lower``,
    ``sigma_0``, ``initial_loss``, ``L_upper``, ``mu_alpha``, ``certified``. The weights of a
    ``(d, seed)`` do not depend on ``(N, n)``: their norms are computed once."""
    rows = []
    for d in widths:
        for seed in seeds:
            norms = None
            for N, n in shapes:
                params, X, Y, cfg = certified_instance(seed, N=N, n=n, d=d, **regime)
                check_certifiable(params, X, Y, cfg)
                p64 = {k: v.detach().to(torch.float64) for k, v in params.items()}
                norms = norms or _weight_norms(p64)
                cert = certificate_of(centre(params, X, Y, cfg, norms))
                rows.append(dict(d=int(d), N=int(N), n=int(n), Nn=int(N * n), seed=int(seed),
                                 ratio=cert.ratio, rho=cert.rho, r_sigma_lower=cert.r_sigma_lower,
                                 sigma_0=cert.sigma_0, initial_loss=cert.initial_loss,
                                 L_upper=cert.L_upper, mu_alpha=cert.mu * cert.alpha,
                                 certified=cert.certified))
    return rows


def crossing(widths, ratios) -> float:
    """``d*``: the width at which ``ratios`` (one per width, increasing widths) first falls below 1,
    interpolated linearly in ``log d`` and ``log ratio`` between the bracketing widths; ``inf`` if
    it never does, the first width if it starts below 1."""
    w, q = np.asarray(widths, dtype=float), np.asarray(ratios, dtype=float)
    below = np.nonzero(q < 1)[0]
    if not len(below):
        return math.inf
    k = int(below[0])
    if k == 0:
        return float(w[0])
    x0, x1, y0, y1 = np.log(w[k - 1]), np.log(w[k]), np.log(q[k - 1]), np.log(q[k])
    return float(np.exp(x0 + (0 - y0) * (x1 - x0) / (y1 - y0)))
