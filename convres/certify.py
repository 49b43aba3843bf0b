"""Rigorous constants: every hypothesis of part (b) bounded before the run, from norms at ``theta_0``
(:func:`chain`, ``thm-lem-chain``); ``rho_eps < r_sigma_lower`` certifies an instance
(:func:`certificate`; :func:`ffn_certificate` for ``thm-ffn``). Float64, one block, smooth activation.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .checks import contraction_check, finite_fields, tolerance
from .gd import Step, gradient_descent
from .lemmas import activation_rows, alpha_ffn, flat_norm
from .model import attention_scale, check_inputs, layer_params, trace_no_grad
from .rank import sigma_k, sigma_nn, spectral_norm, stacked
from .values import as_int, as_real

__all__ = ["Centre", "Chain", "weight_norms", "Certificate", "FFNCentre", "FFNCertificate", "CertifiedRun",
           "centre", "ffn_centre", "chain", "radius_within", "r_sigma_lower", "second_order",
           "jacobian_upper", "smoothness_upper", "smoothness_bounds", "certificate", "certificate_of",
           "sharpest_certificate_of", "ffn_certificate", "ffn_certificate_of", "check_one",
           "check_certifiable", "certified_run", "ffn_certified_run", "BLOCKS", "SOFTMAX_C2", "EPS_BOOK",
           "EPS_GRID", "BALL_MARGIN", "RIEMANN_STEPS", "ROUTES"]

#: The weight blocks, in the order of the vectors of :class:`Chain`.
BLOCKS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "W_U")
_Q, _K, _V, _1, _2, _U = range(6)

#: The theorems a certificate can be for: ``"main"`` (thm-main), ``"ffn"`` (thm-ffn).
ROUTES = ("main", "ffn")

#: Lemma thm-lem-softmax: ``||D^2 softmax(z)[h, h]||_2 <= (sqrt 7 / 4) ||h||_2^2``.
SOFTMAX_C2 = math.sqrt(7) / 4

#: The book's statement of part (b) keeps ``sigma_Nn(H) >= sigma_0 / 2``: ``eps = 1/2``.
EPS_BOOK = 0.5
#: The ``eps`` that :func:`sharpest_certificate_of` tries (fixed in advance; corollary sc-cor-eps).
EPS_GRID = tuple(round(0.02 * k, 2) for k in range(1, 26))

#: The ball of part (b): ``r = min(r_lower, BALL_MARGIN * rho)`` (any ``r`` in ``(rho, r_lower]`` works).
BALL_MARGIN = 1.01

#: Number of radii in the upper Riemann sums of :func:`chain`.
RIEMANN_STEPS = 32


@dataclasses.dataclass(frozen=True)
class Centre:
    """Norms at ``theta_0``: per sequence ``x_i = ||X_i||_2``, ``q_i, k_i, v_i = ||X_i W_{Q,K,V}||_2``;
    stacked ``x = ||X||``, ``sx = ||S X||``, ``z0, a0, h0 = ||Z_0||, ||M_0||, ||H_0||``, ``sigma_0 =
    sigma_Nn(H_0)``; ``w1, w2, u`` the weights'; ``R0 = sqrt(2 Phi_0)``; ``beta_f`` the FFN residual."""

    x_i: np.ndarray
    q_i: np.ndarray
    k_i: np.ndarray
    v_i: np.ndarray
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

    def alpha(self, eps: float = EPS_BOOK) -> float:
        """``alpha_eps = ((1 - eps) sigma_0)^2`` (the book's ``alpha`` at ``eps = 1/2``)."""
        return ((1 - eps) * self.sigma_0) ** 2

    def rho(self, eps: float = EPS_BOOK) -> float:
        """``rho_eps = 2 sqrt(2 Phi_0) / ((1 - eps) sigma_0)``, the path radius of part (b)."""
        return 2 * self.R0 / ((1 - eps) * self.sigma_0) if self.sigma_0 > 0 else math.inf


def check_one(params, X, Y, cfg, *, per_token: bool = True) -> None:
    """:func:`convres.model.check_inputs` for one configuration, per token if ``per_token``."""
    check_inputs(params, X, Y, cfg)
    if per_token and cfg.pool is not None:
        raise ValueError(f"thm-main is stated per token (pool=None), got pool={cfg.pool!r}; use "
                         "ModelConfig(pool=None) (the FFN route, route='ffn', takes the pooled readout).")
    if params["W_U"].dim() != 2:
        raise ValueError("the theorems take one configuration (weights without a leading axis of "
                         "stacked configurations).")


def check_certifiable(params, X, Y, cfg, route: str = "main") -> None:
    """A clear error unless the bounds apply: :func:`check_one`, one block, smooth activation."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}.")
    check_one(params, X, Y, cfg, per_token=route == "main")
    if cfg.L != 1:
        raise ValueError(f"the certified bounds are for one block (L = 1), got L = {cfg.L}; "
                         "use ModelConfig(L=1).")
    if not cfg.act.smooth or not math.isfinite(cfg.act.lip2):
        raise ValueError(f"the smoothness bound needs a smooth activation (gelu, tanh, softplus), "
                         f"got {cfg.activation!r}.")


def _norms(T: torch.Tensor) -> np.ndarray:
    """``||T_i||_2`` of every matrix of a batch, float64."""
    return torch.linalg.matrix_norm(T, ord=2).numpy().astype(np.float64)


def _float64(params, X, Y):
    return ({k: v.detach().to(torch.float64) for k, v in params.items()}, X.detach().to(torch.float64),
            Y.detach().to(torch.float64))


def centre(params, X, Y, cfg, norms: dict | None = None) -> Centre:
    """The :class:`Centre` at ``params`` (``norms``: those of :func:`weight_norms`, if known)."""
    p, X, Y = _float64(params, X, Y)
    W = layer_params(p, 1)
    tr = trace_no_grad(p, X, cfg)
    S, Z, H = tr.S[0], tr.Z[0], tr.H[0]
    return Centre(
        x_i=_norms(X), q_i=_norms(X @ W["W_Q"]), k_i=_norms(X @ W["W_K"]), v_i=_norms(X @ W["W_V"]),
        x=spectral_norm(stacked(X)), sx=spectral_norm(stacked(S @ X)), z0=spectral_norm(stacked(Z)),
        a0=spectral_norm(stacked(tr.M[0])), h0=spectral_norm(stacked(H)), sigma_0=sigma_nn(H),
        **(norms or weight_norms(p)), R0=float((tr.F - Y).norm()), s=attention_scale(cfg),
        n=int(X.shape[1]), beta_f=float(cfg.residual[1]), lip=float(cfg.act.lip),
        lip2=float(cfg.act.lip2))


def weight_norms(p) -> dict:
    """``w1, w2, u``: the spectral norms of ``W_1, W_2, W_U``."""
    return {"w1": spectral_norm(p["layer1.W_1"]), "w2": spectral_norm(p["layer1.W_2"]),
            "u": spectral_norm(p["W_U"])}


@dataclasses.dataclass(frozen=True)
class Chain:
    """Lemma ``thm-lem-chain`` on ``B_r``: ``||D_b G|| <= dG[b]`` (``G = Z, P, M, H, F``), ``||G -
    G_0||_F <= delta_G``, ``Zbar, Mbar, Hbar >= ||Z||, ||M||, ||H||``, ``dS_i >= ||S_i - S_i^0||_F``."""

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


def chain(c: Centre, r: float, steps: int = RIEMANN_STEPS) -> Chain:
    """Lemma ``thm-lem-chain``: block-Jacobian bounds on ``B_r`` from the centre norms ``c``.

    At radius ``rho``, with ``Kbar_i = k_i + x_i rho`` (``Qbar_i``, ``Vbar_i`` likewise) and
    ``W1bar = w1 + rho``, ...::

        dS_i(rho) = min(sqrt(2 n), rho s x_i sqrt(Kbar_i^2 + Qbar_i^2) / 2)  >= ||S_i - S_i^0||_F
        dZ(rho) = (s/2 ||(x_i Kbar_i Vbar_i)_i||, s/2 ||(x_i Qbar_i Vbar_i)_i||,
                   min(sqrt(n) x, sx + x max_i dS_i), 0, 0, 0)
        dP = W1bar dZ + Zbar e_1,   dM = lip dP,   dH = lip W2bar dP + beta_f dZ + Mbar e_2,
        dF = Ubar dH + Hbar e_U,

    with ``Zbar = z0 + delta_Z`` (``Mbar``, ``Hbar`` likewise) and ``delta_G(rho) = int_0^rho ||dG||``
    by the upper Riemann sum on ``steps`` pieces; non-decreasing in ``r`` and ``c`` (wd-lem-monotone).
    """
    r, K_ = float(r), max(1, int(steps))
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


def radius_within(c: Centre, which: str, target: float, iters: int = 40) -> float:
    """``sup{r : delta_G(r) <= target}`` (``G = which``: Z, M or H) from below, by doubling and
    bisection to ``2^-iters max(1, r*)`` (lemma wd-lem-compare)."""
    def f(r: float) -> float:
        return getattr(chain(c, r), f"delta_{which}")

    if not target > 0:
        return 0.0
    if not math.isfinite(target):
        return math.inf
    lo, hi = 0.0, 1.0
    while f(hi) <= target:  # every increment grows at least linearly: this ends
        lo, hi = hi, 2 * hi
    for _ in range(iters):  # bisection; lo always satisfies f(lo) <= target
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) <= target else (lo, mid)
    return lo


def r_sigma_lower(c: Centre, iters: int = 40, eps: float = EPS_BOOK) -> float:
    """Lemma ``thm-lem-rlo``: ``sup{r : delta_H(r) <= eps sigma_0}``, on which ``sigma_Nn(H) >= (1 -
    eps) sigma_0`` (Weyl)."""
    return radius_within(c, "H", eps * c.sigma_0, iters)


def _sym(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The symmetric matrix ``(a b^T + b a^T) / 2``, whose quadratic form is ``(a.e)(b.e)``."""
    return 0.5 * (np.outer(a, b) + np.outer(b, a))


def second_order(c: Centre, ch: Chain, c2: float = SOFTMAX_C2) -> float:
    """Lemma ``thm-lem-lup``: ``M_2 >= sup ||D^2 F[w, w]||_F`` on ``B_r`` (unit ``w``), the top eigenvalue
    of ``Q_F`` (``6 x 6``) with ``||D^2 F[w, w]|| <= e^T Q_F e``, ``e`` the block norms of ``w``."""
    r, s, x_i = ch.r, c.s, c.x_i
    K, Q, V = c.k_i + x_i * r, c.q_i + x_i * r, c.v_i + x_i * r
    W1, W2, U = c.w1 + r, c.w2 + r, c.u + r
    eQ, eK, eV, e1, e2, eU = np.eye(6)
    QZ = np.zeros((6, 6))
    for i in range(len(x_i)):
        l_i = s * x_i[i] * (K[i] * eQ + Q[i] * eK)            # ||D l_i[w]||_F <= l_i . e
        D2S = s * x_i[i] ** 2 * _sym(eQ, eK) + c2 * np.outer(l_i, l_i)   # ||D^2 S_i[w, w]||_F
        QZ += V[i] * D2S + x_i[i] * _sym(l_i, eV)             # ||D^2 Z_i[w, w]||_F
    QP = W1 * QZ + 2 * _sym(ch.dZ, e1)
    QH = c.lip2 * W2 * np.outer(ch.dP, ch.dP) + c.lip * W2 * QP + 2 * c.lip * _sym(ch.dP, e2) \
        + c.beta_f * QZ
    QF = U * QH + 2 * _sym(ch.dH, eU)
    return float(np.linalg.eigvalsh(QF)[-1])


def smoothness_bounds(c: Centre, r: float, readout: float = 1.0) -> tuple[float, float, float]:
    """``(L_upper, J_upper, M2)`` on ``B_r``; ``readout`` (``n^-1/2`` pooled, lemma ffn-lem-lup-pooled)
    multiplies ``J_upper`` and ``M2``."""
    ch = chain(c, r)
    J = readout * float(np.linalg.norm(ch.dF))
    M2 = readout * second_order(c, ch)
    return J ** 2 + (c.R0 + r * J) * M2, J, M2


def jacobian_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup``: ``||dF(r)|| >= sup_{B_r} ||J||_2 >= J_B`` (per token)."""
    return float(np.linalg.norm(chain(c, as_real("the radius r", r, minimum=0.0)).dF))


def smoothness_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup``: ``L_upper(r) = J_up^2 + (R_0 + r J_up) M_2 >= L_B`` (per token)."""
    return smoothness_bounds(c, as_real("the radius r", r, minimum=0.0))[0]


class _Bounds:

    mu: float
    alpha: float
    _derived: tuple[str, ...] = ("mu_alpha",)

    @property
    def mu_alpha(self) -> float:
        """The certified contraction per step, ``mu alpha`` (``mu alpha'`` for thm-ffn)."""
        return self.mu * self.alpha

    def to_dict(self) -> dict:
        """JSON-ready, with the derived values ``_derived``."""
        return finite_fields({**vars(self), **{k: getattr(self, k) for k in self._derived}})


@dataclasses.dataclass(frozen=True)
class Certificate(_Bounds):
    """Part (b) of ``thm-main`` before the run (corollary ``sc-cor-eps``): ``certified`` iff ``ratio =
    rho / r_sigma_lower < 1``; ``mu = 1 / L_upper``; ``alpha = ((1 - eps) sigma_0)^2``."""

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
    eps: float = EPS_BOOK

    route = "main"


def certificate(params, X, Y, cfg, eps: float = EPS_BOOK) -> Certificate:
    """The :class:`Certificate` of an instance (a failed one is a result: ``certified=False``)."""
    check_certifiable(params, X, Y, cfg)
    return certificate_of(centre(params, X, Y, cfg), eps=as_real("eps", eps, minimum=0.0, above=True,
                                                                maximum=1.0))


def certificate_of(c: Centre, eps: float = EPS_BOOK) -> Certificate:
    """The :class:`Certificate` from the centre ``c``, ``0 < eps < 1`` (corollary sc-cor-eps)."""
    r_lo = r_sigma_lower(c, eps=eps)
    rho = c.rho(eps)
    certified, ratio, radius, (L, J, M2) = _ball(c, rho, r_lo, c.sigma_0 > 0)
    return Certificate(certified=certified, ratio=ratio, rho=rho, r_sigma_lower=r_lo, radius=radius,
                       L_upper=L, J_upper=J, M2=M2, mu=1.0 / L, alpha=c.alpha(eps), sigma_0=c.sigma_0,
                       sigma_max_H0=c.h0, initial_loss=0.5 * c.R0 ** 2, eps=float(eps))


def _ball(c: Centre, rho: float, r_lo: float, positive: bool, readout: float = 1.0) -> tuple:
    """``(certified, ratio, radius, smoothness_bounds)``: ``rho / r_lo < 1``, the ball ``min(r_lo,
    BALL_MARGIN rho)`` if certified (else ``r_lo``) and the bounds on it."""
    ratio = rho / r_lo if r_lo > 0 else math.inf
    certified = bool(positive and ratio < 1)
    radius = min(r_lo, BALL_MARGIN * rho) if certified else r_lo
    return certified, ratio, radius, smoothness_bounds(c, radius, readout)


def sharpest_certificate_of(c: Centre, grid=EPS_GRID) -> Certificate:
    """The certified :func:`certificate_of` with the largest ``mu alpha`` over ``grid`` (fixed in
    advance), else the book's (``eps = 1/2``)."""
    best = None
    for eps in grid:
        cert = certificate_of(c, eps=float(eps))
        if cert.certified and (best is None or cert.mu_alpha > best.mu_alpha):
            best = cert
    return best if best is not None else certificate_of(c)


# --- the FFN route (thm-ffn) -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FFNCentre:
    """The :class:`Centre`, ``sigma_M0 = sigma_rows(M~_0)``, ``norm_M0``, ``sigma_U0 = sigma_c(W_U)``."""

    chain: Centre
    sigma_M0: float
    norm_M0: float
    sigma_U0: float
    rows: int
    pooled: bool


def ffn_centre(params, X, Y, cfg) -> FFNCentre:
    """The :class:`FFNCentre` at ``params``."""
    p, X64, _ = _float64(params, X, Y)
    Mt = activation_rows(trace_no_grad(p, X64, cfg).M[0], cfg)
    rows = int(Mt.shape[0])
    return FFNCentre(chain=centre(params, X, Y, cfg), sigma_M0=sigma_k(Mt), norm_M0=spectral_norm(Mt),
                     sigma_U0=sigma_k(p["W_U"].T), rows=rows, pooled=cfg.pool == "mean")


@dataclasses.dataclass(frozen=True)
class FFNCertificate(_Bounds):
    """Part (b) of ``thm-ffn`` before the run (corollary ``ffn-cor-cert``): ``certified`` iff ``rho' /
    r'_lo < 1``, ``rho' = 8 sqrt(2 Phi_0) / (sigma_M0 sigma_U0)``, ``r'_lo = min(r_M, sigma_U0 / 2)``,
    ``r_M = sup{r : delta_M(r) <= nu sigma_M0 / 2}`` (``nu = sqrt(n)`` pooled)."""

    certified: bool
    ratio: float
    rho: float
    r_M: float
    r_lower: float
    radius: float
    L_upper: float
    J_upper: float
    M2: float
    mu: float
    alpha: float
    sigma_M0: float
    norm_M0: float
    sigma_U0: float
    rows: int
    pooled: bool
    initial_loss: float

    route = "ffn"
    _derived = ("mu_alpha", "rate_ceiling")

    @property
    def rate_ceiling(self) -> float:
        """``1 / (16 kappa(M~_0)^2)``: an upper bound of the certified ``mu alpha'`` per token."""
        return (self.sigma_M0 / self.norm_M0) ** 2 / 16 if self.norm_M0 > 0 else 0.0


def ffn_certificate(params, X, Y, cfg) -> FFNCertificate:
    """The :class:`FFNCertificate` of an instance (``N n > d`` allowed)."""
    check_certifiable(params, X, Y, cfg, route="ffn")
    return ffn_certificate_of(ffn_centre(params, X, Y, cfg))


def ffn_certificate_of(f: FFNCentre) -> FFNCertificate:
    """The :class:`FFNCertificate` from an :class:`FFNCentre`."""
    c = f.chain
    nu = math.sqrt(c.n) if f.pooled else 1.0
    r_M = radius_within(c, "M", nu * f.sigma_M0 / 2)
    r_lo = min(r_M, f.sigma_U0 / 2)
    positive = f.sigma_M0 > 0 and f.sigma_U0 > 0
    rho = 8 * c.R0 / (f.sigma_M0 * f.sigma_U0) if positive else math.inf
    readout = 1 / math.sqrt(c.n) if f.pooled else 1.0
    certified, ratio, radius, (L, J, M2) = _ball(c, rho, r_lo, positive, readout)
    return FFNCertificate(certified=certified, ratio=ratio, rho=rho, r_M=r_M, r_lower=r_lo, radius=radius,
                          L_upper=L, J_upper=J, M2=M2, mu=1.0 / L, alpha=alpha_ffn(f.sigma_M0, f.sigma_U0),
                          sigma_M0=f.sigma_M0, norm_M0=f.norm_M0, sigma_U0=f.sigma_U0, rows=f.rows,
                          pooled=f.pooled, initial_loss=0.5 * c.R0 ** 2)


# --- runs with the certified step, every certified claim checked --------------------------------------

@dataclasses.dataclass
class CertifiedRun:
    """A run with ``mu = 1 / L_upper``, each claim checked every step (``envelope = (1 - mu alpha)^t
    Phi_0``, ``distance``, ``path <= rho``, ``sigma`` floors); ``violations`` beyond round-off."""

    certificate: Certificate | FFNCertificate
    loss: np.ndarray
    envelope: np.ndarray
    distance: np.ndarray
    path: np.ndarray
    sigma: np.ndarray
    sigma_U: np.ndarray
    ratio: np.ndarray
    violations: int
    checked_steps: int
    status: str
    params_final: dict

    @property
    def steps(self) -> int:
        return len(self.loss) - 1

    def to_dict(self) -> dict:
        """JSON-ready: the summary, the certificate and the per-step arrays."""
        return {"summary": self.summary(), "certificate": self.certificate.to_dict(),
                **{k: np.asarray(getattr(self, k)).tolist()
                   for k in ("loss", "envelope", "distance", "path", "sigma", "sigma_U", "ratio")}}

    def summary(self) -> dict:
        """What ``theorem certify --json`` prints (``observed_violations`` when not certified)."""
        c = self.certificate
        if isinstance(c, FFNCertificate):
            r_lower, sigma_0 = c.r_lower, c.sigma_M0 * c.sigma_U0
            ratios = [self.sigma.min() / c.sigma_M0, self.sigma_U.min() / c.sigma_U0] if sigma_0 > 0 else []
            extra = dict(readout="pooled" if c.pooled else "per token", rows=c.rows, sigma_M0=c.sigma_M0,
                         sigma_U0=c.sigma_U0, r_M=c.r_M, rate_ceiling=c.rate_ceiling)
        else:
            r_lower, sigma_0, extra = c.r_sigma_lower, c.sigma_0, {"eps": c.eps}
            ratios = [self.sigma.min() / c.sigma_0] if sigma_0 > 0 else []
        out = {
            "route": c.route, "certified": c.certified, "ratio": c.ratio, "rho": c.rho,
            "r_sigma_lower": r_lower, "radius": c.radius, "L_upper": c.L_upper, "J_upper": c.J_upper,
            "mu": c.mu, "alpha": c.alpha, "mu_alpha": c.mu_alpha, "sigma_0": sigma_0,
            "initial_loss": float(self.loss[0]), "final_loss": float(self.loss[-1]),
            "envelope_final": float(self.envelope[-1]), "steps": self.steps,
            "violations": self.violations if c.certified else None,
            "observed_violations": None if c.certified else self.violations,
            "checked_steps": self.checked_steps, "max_distance": float(self.distance.max()),
            "path_length": float(self.path[-1]), "min_sigma_ratio": float(min(ratios)) if ratios else None,
            "status": self.status, **extra}
        return finite_fields(out)


def _checked_run(params, X, Y, cfg, steps: int, cert: Certificate | FFNCertificate | None,
                 kind: type[Certificate] | type[FFNCertificate]) -> CertifiedRun:
    """Gradient descent with ``cert.mu`` (computed here if ``None``), every claim of ``cert`` checked."""
    main = kind is Certificate
    check_certifiable(params, X, Y, cfg, route=kind.route)
    steps = as_int("steps", steps, minimum=1)
    if cert is None and main:
        cert = certificate_of(centre(params, X, Y, cfg))
    elif cert is None:
        cert = ffn_certificate_of(ffn_centre(params, X, Y, cfg))
    if not isinstance(cert, kind):
        raise TypeError(f"cert must be a {kind.__name__} of thm-{kind.route}, got {type(cert).__name__}; "
                        f"use {'ffn_' if main else ''}certified_run for it.")
    dist, sig, sig_U = [], [], []
    theta0 = {k: v.detach() for k, v in params.items()}

    def record(step: Step):
        dist.append(flat_norm(step.params[k] - theta0[k] for k in theta0))
        if main:
            sig.append(sigma_nn(step.trace.H[-1]))
        else:
            sig.append(sigma_k(activation_rows(step.trace.M[-1], cfg)))
            sig_U.append(sigma_k(step.params["W_U"].T))

    final, hist = gradient_descent(params, X, Y, cfg, cert.mu, steps, callback=record)
    loss = np.asarray(hist.loss, dtype=np.float64)
    T = hist.steps
    envelope = loss[0] * (1 - cert.mu_alpha) ** np.arange(T + 1)
    path = np.concatenate([[0.0], np.cumsum(cert.mu * hist.grad_norm)])
    dist_a, sig_a, sigU_a = np.asarray(dist), np.asarray(sig), np.asarray(sig_U)
    floor = (1 - cert.eps) * cert.sigma_0 if isinstance(cert, Certificate) else cert.sigma_M0 / 2
    tol = tolerance(params["W_U"].dtype)
    contraction = contraction_check(loss, cert.mu_alpha, tol=tol)
    live = np.zeros(T + 1, dtype=bool)
    live[contraction.steps] = True
    bad = np.zeros(T + 1, dtype=bool)
    bad[contraction.steps + 1] |= contraction.excess > tol
    bad |= live & (loss > envelope * (1 + tol))
    if cert.certified:
        bad |= (dist_a > cert.rho * (1 + tol)) | (path > cert.rho * (1 + tol))
        bad |= sig_a < floor * (1 - tol)
        if isinstance(cert, FFNCertificate):
            bad |= sigU_a < cert.sigma_U0 / 2 * (1 - tol)
    return CertifiedRun(certificate=cert, loss=loss, envelope=envelope, distance=dist_a, path=path,
                        sigma=sig_a, sigma_U=sigU_a, ratio=hist.ratio, violations=int(bad.sum()),
                        checked_steps=contraction.checked_steps, status=hist.status, params_final=final)


def certified_run(params, X, Y, cfg, *, steps: int = 100, cert: Certificate | None = None) -> CertifiedRun:
    """The :class:`CertifiedRun` of ``thm-main`` (certified here unless ``cert`` is given)."""
    return _checked_run(params, X, Y, cfg, steps, cert, Certificate)


def ffn_certified_run(params, X, Y, cfg, *, steps: int = 100,
                      cert: FFNCertificate | None = None) -> CertifiedRun:
    """:func:`certified_run` for ``thm-ffn`` (floors ``sigma_M0 / 2`` and ``sigma_U0 / 2``)."""
    return _checked_run(params, X, Y, cfg, steps, cert, FFNCertificate)
