"""Rigorous constants for the book's theorems: every hypothesis of part (b') bounded before the run.

Book chapters *Certified constants and a certified instance* (``book/certificate.md``: lemmas
``thm-lem-softmax``, ``thm-lem-chain``, ``thm-lem-rlo``, ``thm-lem-lup``, corollaries
``thm-cor-cert`` and ``sc-cor-eps``) and *The theorem through the FFN, certified, and the scope*
(``book/ffn.md``: ``ffn-lem-rlo``, ``ffn-lem-lup-pooled``, ``ffn-cor-cert``).

Part (b') of theorem ``thm-main`` needs ``mu <= 1/L_B``, ``L_B`` the Lipschitz constant of
``grad Phi`` on a ball ``B_r = {theta : ||theta - theta_0|| <= r}`` on which ``sigma_Nn(H(theta))
>= (1 - eps) sigma_0``, and ``rho_eps := 2 sqrt(2 Phi_0) / ((1 - eps) sigma_0) < r`` (the book's
statement is ``eps = 1/2``: ``rho = 4 sqrt(2 Phi_0) / sigma_0``).

This module computes, from norms at the centre ``theta_0`` and the radius ``r`` only, upper
bounds of the block Jacobians of ``Z``, ``M = act(Z W_1)``, ``H`` and ``F`` on ``B_r`` and of the
increments ``delta_G(r) >= ||G(theta) - G(theta_0)||_F`` (:func:`chain`), and from them

* a **lower** bound ``r_sigma_lower(eps) = sup{r : delta_H(r) <= eps sigma_0}`` of the radius on
  which ``sigma_Nn(H) >= (1 - eps) sigma_0`` (Weyl's inequality),
* an **upper** bound ``J_upper >= sup_B ||J||_2 >= J_B`` (the Jacobian of ``F``), and
* an **upper** bound ``L_upper >= sup_B ||hess Phi||_2 >= L_B``.

When ``rho_eps < r_sigma_lower(eps)``, part (b') holds with ``r = min(r_sigma_lower, 1.01 rho_eps)``
and ``mu = 1 / L_upper(r)``: the instance is **certified** before the run (:func:`certificate`).
The same chain certifies the theorem through the FFN (``thm-ffn``, per token or pooled, also when
``N n > d``): :func:`ffn_certificate`. Everything is computed in float64; float64 round-off in
these computations is not part of the certificate (the bounds have slack far above it). Single
block (``L = 1``), smooth activation (``lip2`` finite).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from .checks import contraction_check, tolerance
from .gd import Step, gradient_descent
from .instances import CERTIFIED_REGIME, certified_instance, regression_data
from .lemmas import activation_rows, alpha_ffn, flat_norm, hessian_norm, r_sigma_upper
from .model import attention_scale, check_inputs, forward_trace, layer_params
from .rank import sigma_k, sigma_nn, spectral_norm, stacked
from .values import as_int, as_real

__all__ = ["Centre", "Chain", "Certificate", "FFNCentre", "FFNCertificate", "CertifiedRun", "centre",
           "ffn_centre", "chain", "delta_H", "radius_within", "r_sigma_lower", "second_order",
           "jacobian_upper", "smoothness_upper", "smoothness_bounds", "certificate", "certificate_of", "sharpest_certificate",
           "sharpest_certificate_of", "ffn_certificate", "ffn_certificate_of", "check_certifiable",
           "certified_run", "ffn_certified_run", "sampled_estimates", "width_sweep", "crossing", "BLOCKS",
           "SOFTMAX_C2", "EPS_BOOK", "EPS_GRID", "BALL_MARGIN", "RIEMANN_STEPS", "ROUTES"]

#: The weight blocks, in the order of the vectors of :class:`Chain`.
BLOCKS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "W_U")
_Q, _K, _V, _1, _2, _U = range(6)

#: The two theorems a certificate can be for: ``"main"`` (thm-main, through ``W_U``) and ``"ffn"``
#: (thm-ffn, through the FFN's ``W_2``).
ROUTES = ("main", "ffn")

#: Lemma thm-lem-softmax: ``||D^2 softmax(z)[h, h]||_2 <= (sqrt 7 / 4) ||h||_2^2`` (the constant of
#: the second-order bound of the attention, :func:`second_order`).
SOFTMAX_C2 = math.sqrt(7) / 4

#: The book's statement of part (b') keeps ``sigma_Nn(H) >= sigma_0 / 2``: ``eps = 1/2``.
EPS_BOOK = 0.5
#: The values of ``eps`` that :func:`sharpest_certificate_of` tries (fixed before any instance is
#: seen: each is a valid certificate on its own, corollary sc-cor-eps).
EPS_GRID = tuple(round(0.02 * k, 2) for k in range(1, 26))

#: The ball of part (b') is taken just above the path-length radius: ``r = min(r_lower,
#: BALL_MARGIN * rho)`` (any ``r`` in ``(rho, r_lower]`` is admissible; a smaller ball gives a
#: smaller ``L_upper``, hence a larger step).
BALL_MARGIN = 1.01

#: Number of radii in the upper Riemann sums of :func:`chain`.
RIEMANN_STEPS = 32


@dataclasses.dataclass(frozen=True)
class Centre:
    """Norms at the centre ``theta_0`` (exact up to float64), the inputs of every bound.

    Per sequence ``i`` (arrays of length ``N``): ``x_i = ||X_i||_2``, ``q_i = ||X_i W_Q||_2``,
    ``k_i = ||X_i W_K||_2``, ``v_i = ||X_i W_V||_2``. Stacked: ``x = ||X||_2``,
    ``sx = ||[S_1 X_1; ...; S_N X_N]||_2``, ``z0 = ||Z_0||_2``, ``a0 = ||M_0||_2``
    (``M_0 = act(Z_0 W_1)``), ``h0 = ||H_0||_2``, ``sigma_0 = sigma_Nn(H_0)`` (0 when ``N n > d``);
    weights: ``w1 = ||W_1||_2``, ``w2 = ||W_2||_2``, ``u = ||W_U||_2``; ``R0 = ||F_0 - Y||_F =
    sqrt(2 Phi_0)`` (of the readout of the model: per token, or pooled); constants: ``s``
    (attention scale), ``n``, ``beta_f`` (FFN residual), ``lip = sup|act'|``, ``lip2 = sup|act''|``.
    """

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
        """``alpha_eps = ((1 - eps) sigma_0)^2``; the book's ``alpha = (sigma_0 / 2)^2`` at
        ``eps = 1/2`` (:func:`convres.lemmas.alpha`)."""
        return ((1 - eps) * self.sigma_0) ** 2

    def rho(self, eps: float = EPS_BOOK) -> float:
        """``rho_eps = 2 sqrt(2 Phi_0) / ((1 - eps) sigma_0) = 2 sqrt(2 Phi_0 / alpha_eps)``, the
        path-length radius of part (b'); ``rho = 4 sqrt(2 Phi_0) / sigma_0`` at ``eps = 1/2``
        (:func:`convres.lemmas.path_radius`); ``inf`` when ``sigma_0 = 0``."""
        return 2 * self.R0 / ((1 - eps) * self.sigma_0) if self.sigma_0 > 0 else math.inf


def check_certifiable(params, X, Y, cfg, route: str = "main") -> None:
    """Raise a clear error unless the certified bounds apply to this instance: valid inputs
    (:func:`convres.model.check_inputs`), one block, a smooth activation, one configuration, and
    for ``route="main"`` a per-token readout (the FFN route also takes ``pool="mean"``)."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}.")
    check_inputs(params, X, Y, cfg)
    if cfg.L != 1:
        raise ValueError(f"the certified bounds are for one block (L = 1), got L = {cfg.L}; "
                         "use ModelConfig(L=1).")
    if route == "main" and cfg.pool is not None:
        raise ValueError(f"the certificate of thm-main is per token (pool=None), got pool={cfg.pool!r}; "
                         "the FFN route (route='ffn') takes the pooled readout.")
    if not cfg.act.smooth or not math.isfinite(cfg.act.lip2):
        raise ValueError(f"the smoothness bound needs a smooth activation (gelu, tanh, softplus), "
                         f"got {cfg.activation!r}.")
    if params["W_U"].dim() != 2:
        raise ValueError("the certified bounds take one configuration (weights without a leading "
                         "axis of stacked configurations).")


def _norms(T: torch.Tensor) -> np.ndarray:
    """``||T_i||_2`` of every matrix of a batch, float64."""
    return torch.linalg.matrix_norm(T, ord=2).numpy().astype(np.float64)


def _float64(params, X, Y):
    return ({k: v.detach().to(torch.float64) for k, v in params.items()}, X.detach().to(torch.float64),
            Y.detach().to(torch.float64))


def centre(params, X, Y, cfg, weight_norms: dict | None = None) -> Centre:
    """The centre quantities of :class:`Centre` at ``params`` (one block, smooth activation; see
    :func:`check_certifiable`), in float64. ``R0`` is the residual of ``cfg``'s readout (per token,
    or pooled). ``weight_norms``: the norms of :func:`_weight_norms` when already computed for these
    weights."""
    p, X, Y = _float64(params, X, Y)
    W = layer_params(p, 1)
    with torch.no_grad():
        tr = forward_trace(p, X, cfg)
    S, Z, H = tr.S[0], tr.Z[0], tr.H[0]
    return Centre(
        x_i=_norms(X), q_i=_norms(X @ W["W_Q"]), k_i=_norms(X @ W["W_K"]), v_i=_norms(X @ W["W_V"]),
        x=spectral_norm(stacked(X)), sx=spectral_norm(stacked(S @ X)), z0=spectral_norm(stacked(Z)),
        a0=spectral_norm(stacked(tr.M[0])), h0=spectral_norm(stacked(H)), sigma_0=sigma_nn(H),
        **(weight_norms or _weight_norms(p)), R0=float((tr.F - Y).norm()), s=attention_scale(cfg),
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
    is what is used, at every radius ``k r / steps`` in turn. Every output is non-decreasing and
    continuous in ``r`` and non-decreasing in every input of ``c`` (lemma wd-lem-monotone).
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


#: The increments of :class:`Chain` that :func:`radius_within` can hold below a target.
_INCREMENTS = {"Z": "delta_Z", "M": "delta_M", "H": "delta_H"}


def radius_within(c: Centre, which: str, target: float, iters: int = 40) -> float:
    """``sup{r : delta_G(r) <= target}`` for ``G = which`` (``"Z"``, ``"M"`` or ``"H"``), to
    bisection accuracy and always on the safe side: ``delta_G`` is continuous and non-decreasing in
    ``r`` (lemma wd-lem-monotone), and the returned ``lo`` always has ``delta_G(lo) <= target``,
    with ``r* - lo <= 2^-iters max(1, r*)`` (lemma wd-lem-compare). 0 when ``target <= 0``."""
    if which not in _INCREMENTS:
        raise ValueError(f"which must be one of {sorted(_INCREMENTS)}, got {which!r}.")
    field = _INCREMENTS[which]

    def f(r: float) -> float:
        return getattr(chain(c, r), field)

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
    """Lemma ``thm-lem-rlo``: ``r_sigma^lo(eps) = sup{r : delta_H(r) <= eps sigma_0}``
    (:func:`radius_within`); by Weyl's inequality ``sigma_Nn(H(theta)) >= sigma_0 - delta_H(r) >=
    (1 - eps) sigma_0`` on that ball, so ``r_sigma^lo(1/2) <= r_sigma``."""
    return radius_within(c, "H", eps * c.sigma_0, iters)


def _sym(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The symmetric matrix ``(a b^T + b a^T) / 2``, whose quadratic form is ``(a.e)(b.e)``."""
    return 0.5 * (np.outer(a, b) + np.outer(b, a))


def _unit(k: int) -> np.ndarray:
    e = np.zeros(6)
    e[k] = 1.0
    return e


def second_order(c: Centre, ch: Chain, c2: float = SOFTMAX_C2) -> float:
    """Lemma ``thm-lem-lup``: ``M_2 >= sup ||D^2 F(theta)[w, w]||_F`` over ``theta`` in ``B_r``
    and unit ``w`` (per-token readout), as the largest eigenvalue of a non-negative ``6 x 6`` matrix
    ``Q_F`` with ``||D^2 F[w, w]||_F <= e^T Q_F e``, ``e`` the vector of block norms of ``w``.
    ``c2`` is the softmax constant of lemma ``thm-lem-softmax`` (``sqrt 7 / 4``)."""
    r, s, x_i = ch.r, c.s, c.x_i
    K, Q, V = c.k_i + x_i * r, c.q_i + x_i * r, c.v_i + x_i * r
    W1, W2, U = c.w1 + r, c.w2 + r, c.u + r
    eQ, eK, eV, e1, e2, eU = (_unit(k) for k in range(6))
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
    """``(L_upper, J_upper, M2)`` on ``B_r``; ``readout`` is ``||P||_2`` of a linear map ``P`` applied
    to the per-token output (``n^{-1/2}`` for the mean over ``n`` tokens, lemma ffn-lem-lup-pooled),
    which multiplies ``J_upper`` and ``M2``; ``c.R0`` is the residual of that readout."""
    ch = chain(c, r)
    J = readout * float(np.linalg.norm(ch.dF))
    M2 = readout * second_order(c, ch)
    return J ** 2 + (c.R0 + r * J) * M2, J, M2


def jacobian_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup`` (first part): ``||dF(r)|| >= sup_{B_r} ||J(theta)||_2 >= J_B``, ``J``
    the Jacobian of ``theta -> vec F_theta(X)`` (per token)."""
    return float(np.linalg.norm(chain(c, as_real("the radius r", r, minimum=0.0)).dF))


def smoothness_upper(c: Centre, r: float) -> float:
    """Lemma ``thm-lem-lup``: ``L_upper(r) = J_up^2 + (||R_0|| + r J_up) M_2 >= sup_{B_r}
    ||hess Phi||_2 >= L_B`` (per token)."""
    return smoothness_bounds(c, as_real("the radius r", r, minimum=0.0))[0]


def _finite(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


@dataclasses.dataclass(frozen=True)
class Certificate:
    """Every hypothesis of part (b') of ``thm-main`` (corollary ``sc-cor-eps``; ``eps = 1/2`` is
    ``thm-cor-cert``), bounded before the run.

    Attributes:
        certified: ``ratio < 1`` (and ``sigma_0 > 0``): part (b') applies with ``r = radius``,
            ``mu = 1 / L_upper``: every iterate stays within ``rho`` of ``theta_0``,
            ``sigma_Nn(H_t) >= (1 - eps) sigma_0`` and ``Phi_t <= (1 - mu alpha)^t Phi_0``.
        ratio: ``rho / r_sigma_lower``, the left side of (b') over the certified radius.
        rho: ``2 sqrt(2 Phi_0) / ((1 - eps) sigma_0)``; r_sigma_lower: lemma ``thm-lem-rlo``.
        radius: the ball of ``L_upper`` and ``J_upper``: ``min(r_sigma_lower, 1.01 rho)`` when
            certified, else ``r_sigma_lower``.
        L_upper, J_upper, M2: lemma ``thm-lem-lup`` on ``B_radius``.
        mu: ``1 / L_upper``; alpha: ``((1 - eps) sigma_0)^2``; sigma_0, initial_loss: at ``theta_0``.
        sigma_max_H0: ``||H_0||_2``; ``L_B >= sigma_max_H0^2`` (the ``W_U`` block of the Hessian),
            so ``L_upper / sigma_max_H0^2`` bounds how loose ``L_upper`` can be.
        eps: the singular value is kept above ``(1 - eps) sigma_0`` (the book: ``1/2``).
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
    eps: float = EPS_BOOK

    route = "main"

    @property
    def mu_alpha(self) -> float:
        """The certified contraction per step, ``mu alpha``."""
        return self.mu * self.alpha

    @property
    def sigma_floor(self) -> float:
        """The certified lower bound ``(1 - eps) sigma_0`` of ``sigma_Nn(H_t)``."""
        return (1 - self.eps) * self.sigma_0

    def to_dict(self) -> dict:
        """JSON-ready (infinite values become ``None``)."""
        return _finite({**dataclasses.asdict(self), "mu_alpha": self.mu_alpha})


def certificate(params, X, Y, cfg, eps: float = EPS_BOOK) -> Certificate:
    """Bound every hypothesis of part (b') before the run (book: *Certified constants and a
    certified instance*): ``rho`` exactly, ``r_sigma_lower``, and on the ball of radius
    ``min(r_sigma_lower, 1.01 rho)`` the upper bounds ``L_upper`` and ``J_upper``. ``certified``
    iff ``rho < r_sigma_lower``. A failed certificate is a result (``certified=False``, its ratio)."""
    check_certifiable(params, X, Y, cfg)
    return certificate_of(centre(params, X, Y, cfg), eps=as_real("eps", eps, minimum=0.0, above=True,
                                                                maximum=1.0))


def certificate_of(c: Centre, eps: float = EPS_BOOK) -> Certificate:
    """The :class:`Certificate` from the centre quantities ``c`` (see :func:`certificate`);
    ``0 < eps < 1`` (corollary sc-cor-eps)."""
    r_lo = r_sigma_lower(c, eps=eps)
    rho = c.rho(eps)
    ratio = rho / r_lo if r_lo > 0 else math.inf
    certified = bool(c.sigma_0 > 0 and ratio < 1)
    radius = min(r_lo, BALL_MARGIN * rho) if certified else r_lo
    L, J, M2 = smoothness_bounds(c, radius)
    return Certificate(certified=certified, ratio=ratio, rho=rho, r_sigma_lower=r_lo, radius=radius,
                       L_upper=L, J_upper=J, M2=M2, mu=1.0 / L, alpha=c.alpha(eps), sigma_0=c.sigma_0,
                       sigma_max_H0=c.h0, initial_loss=0.5 * c.R0 ** 2, eps=float(eps))


def sharpest_certificate_of(c: Centre, grid=EPS_GRID) -> Certificate:
    """Among the certificates of :func:`certificate_of` for every ``eps`` of ``grid`` (a grid fixed
    before the instance is seen; each certified one is a valid certificate), the certified one with
    the largest ``mu alpha``; the book's (``eps = 1/2``) when none is certified."""
    best = None
    for eps in grid:
        cert = certificate_of(c, eps=float(eps))
        if cert.certified and (best is None or cert.mu_alpha > best.mu_alpha):
            best = cert
    return best if best is not None else certificate_of(c)


def sharpest_certificate(params, X, Y, cfg, grid=EPS_GRID) -> Certificate:
    """:func:`sharpest_certificate_of` at ``params`` (checked like :func:`certificate`)."""
    check_certifiable(params, X, Y, cfg)
    return sharpest_certificate_of(centre(params, X, Y, cfg), grid)


# --- the FFN route (thm-ffn) -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FFNCentre:
    """What the certificate of ``thm-ffn`` needs at ``theta_0``: the chain's :class:`Centre`
    (``R0`` the residual of the model's readout), ``sigma_M0 = sigma_rows(M~_0)`` (``M~ = M`` per
    token, its mean per sequence pooled; 0 when ``m < rows``), ``norm_M0 = ||M~_0||_2``,
    ``sigma_U0 = sigma_c(W_U^0)`` (0 when ``c > d``), ``rows`` (``N n`` or ``N``) and ``pooled``."""

    chain: Centre
    sigma_M0: float
    norm_M0: float
    sigma_U0: float
    rows: int
    pooled: bool


def ffn_centre(params, X, Y, cfg) -> FFNCentre:
    """The :class:`FFNCentre` at ``params`` (one block, smooth activation, per token or pooled)."""
    p, X64, _ = _float64(params, X, Y)
    with torch.no_grad():
        Mt = activation_rows(forward_trace(p, X64, cfg).M[0], cfg)
    rows = int(Mt.shape[0])
    return FFNCentre(chain=centre(params, X, Y, cfg), sigma_M0=sigma_k(Mt), norm_M0=spectral_norm(Mt),
                     sigma_U0=sigma_k(p["W_U"].T), rows=rows, pooled=cfg.pool == "mean")


@dataclasses.dataclass(frozen=True)
class FFNCertificate:
    """Every hypothesis of part (b') of ``thm-ffn`` bounded before the run (corollary
    ``ffn-cor-cert``).

    Attributes:
        certified: ``ratio < 1`` (and ``sigma_M0, sigma_U0 > 0``): part (b') of ``thm-ffn`` holds
            with ``r = radius``, ``mu = 1 / L_upper``: every iterate stays within ``rho`` of
            ``theta_0``, ``sigma_rows(M~_t) >= sigma_M0 / 2``, ``sigma_c(W_U,t) >= sigma_U0 / 2``
            and ``Phi_t <= (1 - mu alpha)^t Phi_0``.
        ratio: ``rho / r_lower``.
        rho: ``rho' = 8 sqrt(2 Phi_0) / (sigma_M0 sigma_U0)``.
        r_M: ``sup{r : delta_M(r) <= nu sigma_M0 / 2}``, ``nu = 1`` per token, ``sqrt(n)`` pooled.
        r_lower: ``r'_lo = min(r_M, sigma_U0 / 2)`` (lemma ``ffn-lem-rlo``).
        radius, L_upper, J_upper, M2, mu: as in :class:`Certificate` (lemma ``ffn-lem-lup-pooled``
            for the pooled readout).
        alpha: ``alpha' = (sigma_M0 sigma_U0 / 4)^2``.
        sigma_M0, norm_M0, sigma_U0, rows, pooled: the :class:`FFNCentre`.
        initial_loss: ``Phi_0``.
    """

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

    @property
    def mu_alpha(self) -> float:
        """The certified contraction per step, ``mu alpha'``."""
        return self.mu * self.alpha

    @property
    def rate_ceiling(self) -> float:
        """``1 / (16 kappa(M~_0)^2)``, ``kappa = ||M~_0||_2 / sigma_M0``: an upper bound of the
        certified ``mu alpha'`` per token (``L_upper >= J_upper^2 >= (sigma_U0 ||M_0||_2)^2``)."""
        return (self.sigma_M0 / self.norm_M0) ** 2 / 16 if self.norm_M0 > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-ready (infinite values become ``None``)."""
        return _finite({**dataclasses.asdict(self), "mu_alpha": self.mu_alpha,
                        "rate_ceiling": self.rate_ceiling})


def ffn_certificate(params, X, Y, cfg) -> FFNCertificate:
    """Bound every hypothesis of part (b') of ``thm-ffn`` before the run (book: *The theorem
    through the FFN, certified, and the scope*): one block, smooth activation, per-token or pooled
    readout; ``N n > d`` allowed. A failed certificate is a result (``certified=False``, its
    ratio)."""
    check_certifiable(params, X, Y, cfg, route="ffn")
    return ffn_certificate_of(ffn_centre(params, X, Y, cfg))


def ffn_certificate_of(f: FFNCentre) -> FFNCertificate:
    """The :class:`FFNCertificate` from an :class:`FFNCentre` (see :func:`ffn_certificate`)."""
    c = f.chain
    nu = math.sqrt(c.n) if f.pooled else 1.0
    r_M = radius_within(c, "M", nu * f.sigma_M0 / 2)
    r_lo = min(r_M, f.sigma_U0 / 2)
    positive = f.sigma_M0 > 0 and f.sigma_U0 > 0
    rho = 8 * c.R0 / (f.sigma_M0 * f.sigma_U0) if positive else math.inf
    ratio = rho / r_lo if r_lo > 0 else math.inf
    certified = bool(positive and ratio < 1)
    radius = min(r_lo, BALL_MARGIN * rho) if certified else r_lo
    L, J, M2 = smoothness_bounds(c, radius, readout=1 / math.sqrt(c.n) if f.pooled else 1.0)
    return FFNCertificate(certified=certified, ratio=ratio, rho=rho, r_M=r_M, r_lower=r_lo, radius=radius,
                          L_upper=L, J_upper=J, M2=M2, mu=1.0 / L, alpha=alpha_ffn(f.sigma_M0, f.sigma_U0),
                          sigma_M0=f.sigma_M0, norm_M0=f.norm_M0, sigma_U0=f.sigma_U0, rows=f.rows,
                          pooled=f.pooled, initial_loss=0.5 * c.R0 ** 2)


# --- runs with the certified step, every certified claim checked --------------------------------------

@dataclasses.dataclass
class CertifiedRun:
    """Gradient descent with ``mu = 1 / L_upper`` on a certified instance, and the certified
    claims checked at every step.

    Attributes:
        certificate: the :class:`Certificate` or :class:`FFNCertificate` computed before the run.
        route: ``"main"`` (thm-main) or ``"ffn"`` (thm-ffn).
        loss: ``Phi_t``, ``t = 0 .. T``; envelope: ``(1 - mu alpha)^t Phi_0``.
        distance: ``||theta_t - theta_0||``; path: ``sum_{s<t} mu ||g_s||`` (both ``<= rho``).
        sigma: ``sigma_Nn(H_t)`` (main: ``>= (1 - eps) sigma_0``) or ``sigma_rows(M~_t)`` (ffn:
            ``>= sigma_M0 / 2``); sigma_U: ``sigma_c(W_U,t)`` (ffn: ``>= sigma_U0 / 2``; empty for main).
        ratio: ``Phi_{t+1} / Phi_t`` (``<= 1 - mu alpha``).
        violations: steps where a claim fails beyond float64 round-off (per-step contraction,
            envelope, distance or path beyond ``rho``, a singular value below its floor); checked
            only while ``Phi_t > 1e-20 Phi_0``. On a certified instance these are claims of a
            theorem; on one that is not certified, the same checks are observations only.
        status: the run's status.
    """

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

    @property
    def route(self) -> str:
        return self.certificate.route

    @property
    def steps(self) -> int:
        return len(self.loss) - 1

    def to_dict(self) -> dict:
        """JSON-ready: the summary, the certificate and the per-step arrays (for the chapters'
        figures, ``convres.plotting.plot_certified_run``, and the cache)."""
        return {"summary": self.summary(), "certificate": self.certificate.to_dict(),
                **{k: np.asarray(getattr(self, k)).tolist()
                   for k in ("loss", "envelope", "distance", "path", "sigma", "sigma_U", "ratio")}}

    def min_sigma_ratio(self) -> float | None:
        """The smallest ``sigma_t / sigma_0`` along the run (ffn: the smaller of the two ratios)."""
        c = self.certificate
        if isinstance(c, FFNCertificate):
            if not (c.sigma_M0 > 0 and c.sigma_U0 > 0):
                return None
            return float(min(self.sigma.min() / c.sigma_M0, self.sigma_U.min() / c.sigma_U0))
        return float(self.sigma.min() / c.sigma_0) if c.sigma_0 > 0 else None

    def summary(self) -> dict:
        """What ``python -m convres theorem --certify --json`` prints (with the sizes added).
        ``violations`` counts failed certified claims and is ``None`` when the instance is not
        certified; then ``observed_violations`` counts the same checks (observations only)."""
        c = self.certificate
        if isinstance(c, FFNCertificate):
            r_lower, sigma_0 = c.r_lower, c.sigma_M0 * c.sigma_U0
            extra = dict(readout="pooled" if c.pooled else "per token", rows=c.rows, sigma_M0=c.sigma_M0,
                         sigma_U0=c.sigma_U0, r_M=c.r_M, rate_ceiling=c.rate_ceiling)
        else:
            r_lower, sigma_0, extra = c.r_sigma_lower, c.sigma_0, {"eps": c.eps}
        out = {
            "route": self.route, "certified": c.certified, "ratio": c.ratio, "rho": c.rho,
            "r_sigma_lower": r_lower, "radius": c.radius, "L_upper": c.L_upper, "J_upper": c.J_upper,
            "mu": c.mu, "alpha": c.alpha, "mu_alpha": c.mu_alpha, "sigma_0": sigma_0,
            "initial_loss": float(self.loss[0]), "final_loss": float(self.loss[-1]),
            "envelope_final": float(self.envelope[-1]), "steps": self.steps,
            "violations": self.violations if c.certified else None,
            "observed_violations": None if c.certified else self.violations,
            "checked_steps": self.checked_steps, "max_distance": float(self.distance.max()),
            "path_length": float(self.path[-1]), "min_sigma_ratio": self.min_sigma_ratio(),
            "status": self.status, **extra}
        return _finite(out)


def _checked_run(params, X, Y, cfg, cert, steps: int,
                 sigmas: Callable[[Step], tuple[float, float]], floors: tuple[float, float]) -> CertifiedRun:
    """Gradient descent with ``cert.mu``; at every iterate the distance, ``sigmas(step)`` (two
    singular values) and, afterwards, every claim of ``cert`` against its floor."""
    dist, sig, sig_U = [], [], []
    theta0 = {k: v.detach() for k, v in params.items()}

    def record(step: Step):
        dist.append(flat_norm(step.params[k] - theta0[k] for k in theta0))
        a, b = sigmas(step)
        sig.append(a)
        sig_U.append(b)

    _, hist = gradient_descent(params, X, Y, cfg, cert.mu, steps, callback=record)
    loss = np.asarray(hist.loss, dtype=np.float64)
    T = hist.steps
    envelope = loss[0] * (1 - cert.mu_alpha) ** np.arange(T + 1)
    path = np.concatenate([[0.0], np.cumsum(cert.mu * hist.grad_norm)])
    dist_a, sig_a, sigU_a = np.asarray(dist), np.asarray(sig), np.asarray(sig_U)
    tol = tolerance(params["W_U"].dtype)
    contraction = contraction_check(loss, cert.mu_alpha, tol=tol)
    live = np.zeros(T + 1, dtype=bool)
    live[contraction.steps] = True
    bad = np.zeros(T + 1, dtype=bool)
    bad[contraction.steps + 1] |= contraction.excess > tol
    bad |= live & (loss > envelope * (1 + tol))
    if cert.certified:
        bad |= (dist_a > cert.rho * (1 + tol)) | (path > cert.rho * (1 + tol))
        bad |= (sig_a < floors[0] * (1 - tol)) | (sigU_a < floors[1] * (1 - tol))
    return CertifiedRun(certificate=cert, loss=loss, envelope=envelope, distance=dist_a, path=path,
                        sigma=sig_a, sigma_U=sigU_a if isinstance(cert, FFNCertificate) else np.zeros(0),
                        ratio=hist.ratio, violations=int(bad.sum()),
                        checked_steps=contraction.checked_steps, status=hist.status)


def certified_run(params, X, Y, cfg, *, steps: int = 100, cert: Certificate | None = None) -> CertifiedRun:
    """Certify the instance for ``thm-main`` (or take ``cert``, any ``eps``), run ``steps`` steps of
    gradient descent with ``mu = 1 / L_upper`` and check at every step what the certificate
    promises (see :class:`CertifiedRun`). On an instance that is not certified the same checks are
    made: they are then observations, not consequences of a theorem."""
    check_certifiable(params, X, Y, cfg)
    steps = as_int("steps", steps, minimum=1)
    cert = certificate_of(centre(params, X, Y, cfg)) if cert is None else cert
    if not isinstance(cert, Certificate):
        raise TypeError(f"cert must be a Certificate of thm-main, got {type(cert).__name__}; use "
                        "ffn_certified_run for an FFNCertificate.")
    return _checked_run(params, X, Y, cfg, cert, steps, lambda step: (sigma_nn(step.trace.H[-1]), 0.0),
                        (cert.sigma_floor, 0.0))


def ffn_certified_run(params, X, Y, cfg, *, steps: int = 100,
                      cert: FFNCertificate | None = None) -> CertifiedRun:
    """Certify the instance for ``thm-ffn`` (or take ``cert``), run ``steps`` steps with
    ``mu = 1 / L_upper`` and check at every step what the certificate promises: the contraction,
    the envelope, distance and path within ``rho'``, ``sigma_rows(M~_t) >= sigma_M0 / 2`` and
    ``sigma_c(W_U,t) >= sigma_U0 / 2`` (see :class:`CertifiedRun`)."""
    check_certifiable(params, X, Y, cfg, route="ffn")
    steps = as_int("steps", steps, minimum=1)
    cert = ffn_certificate_of(ffn_centre(params, X, Y, cfg)) if cert is None else cert
    if not isinstance(cert, FFNCertificate):
        raise TypeError(f"cert must be an FFNCertificate, got {type(cert).__name__}.")

    def sigmas(step: Step) -> tuple[float, float]:
        return sigma_k(activation_rows(step.trace.M[-1], cfg)), sigma_k(step.params["W_U"].T)

    return _checked_run(params, X, Y, cfg, cert, steps, sigmas, (cert.sigma_M0 / 2, cert.sigma_U0 / 2))


# --- how tight the bounds are ---------------------------------------------------------------------------

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
    """What the certified bounds bound, estimated at sampled points (book: *Certified constants
    and a certified instance*, the tightness table): lower estimates of the true constants, to
    compare the bounds with.

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
    ``(d, seed)`` do not depend on ``(N, n)``: they are drawn once per width and seed, and only the
    data are drawn per shape (the same instances as :func:`certified_instance`)."""
    r = {**CERTIFIED_REGIME, **regime}
    rows = []
    for d in widths:
        for seed in seeds:
            params, _, _, cfg = certified_instance(seed, N=1, n=1, d=d, **regime)
            norms = _weight_norms({k: v.detach().to(torch.float64) for k, v in params.items()})
            for N, n in shapes:
                X, Y = regression_data(cfg, N, n, seed, targets=r["targets"])
                check_certifiable(params, X, Y, cfg)
                cert = certificate_of(centre(params, X, Y, cfg, norms))
                rows.append(dict(d=int(d), N=int(N), n=int(n), Nn=int(N * n), seed=int(seed),
                                 ratio=cert.ratio, rho=cert.rho, r_sigma_lower=cert.r_sigma_lower,
                                 sigma_0=cert.sigma_0, initial_loss=cert.initial_loss,
                                 L_upper=cert.L_upper, mu_alpha=cert.mu_alpha,
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
