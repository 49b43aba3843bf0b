"""Theorem ``wd-thm-width``: above ``d_min(N, n, delta)`` (:func:`width_condition`) the certificate
holds with probability at least ``1 - delta``; :func:`worst_case` bounds its centre (``wd-lem-below``).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from .certify import (
    BALL_MARGIN,
    Centre,
    centre,
    certificate_of,
    check_certifiable,
    r_sigma_lower,
    smoothness_upper,
    weight_norms,
)
from .checks import finite_fields
from .instances import CERTIFIED_REGIME, TARGETS, certified_instance, regime_settings, regression_data
from .model import ACTIVATIONS
from .values import as_int, as_real

__all__ = ["EVENT_GROUPS", "DELTA_SPLIT", "BISECTION_MARGIN", "events", "gelu_second_moment",
           "FixedData", "fixed_data", "orthonormal_data", "padded", "WorstCase", "worst_case",
           "worst_ratio", "WidthCondition", "width_condition", "quadratic_lower_bound", "width_sweep",
           "crossing"]

#: The groups of events of the union bound: the input ``X``, the query and key weights, the value
#: weight, the FFN, the readout, and (Gaussian targets only) the targets.
EVENT_GROUPS = ("X", "QK", "V", "FFN", "U", "Y")

#: The split of ``delta`` among the groups with events (any split fixed in advance is valid).
DELTA_SPLIT = {"X": 0.45, "QK": 0.05, "V": 0.01, "FFN": 0.07, "U": 0.42, "Y": 0.1}

#: The relative margin ``eta`` that covers the bisection of ``radius_within`` (any ``eta >= 2^-39``).
BISECTION_MARGIN = 2.0 ** -30
#: The widest ``d`` that :func:`width_condition` tries.
D_MAX = 2 ** 40


def _check_regime(regime: dict) -> dict:
    r = regime_settings(regime, CERTIFIED_REGIME, "certified regime")
    if r["scale"] != "1/d_qk":
        raise ValueError(f"the width theorem is for the attention scale '1/d_qk' (s d fixed), got "
                         f"{r['scale']!r}.")
    if r["activation"] not in ("gelu", "tanh"):
        raise ValueError(f"the width theorem bounds ||M_0|| for gelu and tanh, got {r['activation']!r}.")
    if r["targets"] not in TARGETS:
        raise ValueError(f"targets must be one of {TARGETS}, got {r['targets']!r}.")
    for key in ("branch_scale", "readout_scale", "beta", "ffn_ratio"):
        r[key] = as_real(key, r[key], minimum=0.0, above=True)
    return r


def events(N: int, n: int, targets: str = "sign", activation: str = "gelu",
           fixed: bool = False) -> dict[str, list[str]]:
    """The events of theorem wd-thm-width by group; none on ``X`` and ``Y`` for ``fixed`` data."""
    return {"X": [] if fixed else ["X+", "X-", "XF", "Pi"] + ([f"X{i}" for i in range(N)] if N > 1 else []),
            "QK": [f"Q{i}" for i in range(N)] + [f"K{i}" for i in range(N)]
            + ([f"l{i}" for i in range(N)] if n > 1 else []),
            "V": [f"V{i}" for i in range(N)] + ["A", "AP"],
            "FFN": ["W1", "P", "MF"] + (["EF"] if activation == "gelu" else []) + ["W2", "MW", "MWP"],
            "U": ["U", "Unorm"],
            "Y": ["Y"] if targets == "gaussian" and not fixed else []}


def gelu_second_moment(sigma: float) -> tuple[float, float]:
    """Lemma wd-lem-gelu2: ``(c_psi, c_e)`` with ``c_psi(sigma) = E gelu(sigma g)^2 / sigma^2`` and
    ``c_e(sigma) = E e(sigma g)^2 / sigma^2``, ``e(u) = gelu(u) - u/2``, ``g ~ N(0, 1)``::

        c_e = (arcsin(sigma^2 / (1 + sigma^2)) + 2 sigma^2 / ((1 + sigma^2) sqrt(1 + 2 sigma^2))) / (2 pi)

    and ``c_psi = 1/4 + c_e``; both non-decreasing in ``sigma``."""
    s2 = sigma * sigma
    c_e = (math.asin(s2 / (1 + s2)) + 2 * s2 / ((1 + s2) * math.sqrt(1 + 2 * s2))) / (2 * math.pi)
    return 0.25 + c_e, c_e


@dataclasses.dataclass(frozen=True)
class FixedData:
    """Fixed data (corollary wd-cor-fixed): ``x = ||X||_2``, ``sigma_X``, ``x_i = max_i ||X_i||_2``,
    ``X_F``, ``ux = ||[1 xbar_i^T]_i||_2``, ``y = ||Y||_F``."""

    N: int
    n: int
    d0: int
    x: float
    sigma_X: float
    x_i: float
    X_F: float
    ux: float
    y: float


def fixed_data(X: torch.Tensor, Y: torch.Tensor) -> FixedData:
    """The :class:`FixedData` of ``X`` (``(N, n, d0)``, ``N n <= d0``) and targets ``Y``."""
    N, n, d0 = X.shape
    Xs, U = X.double().reshape(N * n, d0), X.double().mean(1, keepdim=True).expand(N, n, d0)
    sv = torch.linalg.svdvals(Xs)
    return FixedData(N=N, n=n, d0=d0, x=float(sv[0]), sigma_X=float(sv[N * n - 1]) if N * n <= d0 else 0.0,
                     x_i=float(torch.linalg.matrix_norm(X.double(), 2).max()), X_F=float(Xs.norm()),
                     ux=float(torch.linalg.matrix_norm(U.reshape(N * n, d0), 2)), y=float(Y.double().norm()))


def orthonormal_data(N: int, n: int, y: float, seed: int = 0):
    """``(X, Y)``: ``N n`` orthonormal tokens in dimension ``N n``, sign targets with ``||Y||_F = y``."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(N * n, N * n, generator=gen, dtype=torch.float64))[0]
    Y = torch.where(torch.randn(N, n, 1, generator=gen, dtype=torch.float64) >= 0, 1.0, -1.0).double()
    return Q.reshape(N, n, N * n), Y * y / math.sqrt(N * n)


def padded(X: torch.Tensor, d: int) -> torch.Tensor:
    """``X`` (``(N, n, d0)``) zero-padded to width ``d``: the same data in a wider model."""
    return torch.nn.functional.pad(X, (0, d - X.shape[-1]))


@dataclasses.dataclass(frozen=True)
class WorstCase:
    """Definition wd-def-worst at width ``d``, with ``K`` events and each group's fluctuation ``t``."""

    N: int
    n: int
    d: int
    m: int
    delta: float
    K: int
    t: dict
    s: float
    x: float
    sigma_X: float
    x_i: float
    X_F: float
    q_i: float
    v_i: float
    logits: float
    eps_S: float
    sx: float
    A: float
    A_P: float
    z0: float
    Z_F: float
    sigma_Z: float
    w1: float
    P: float
    M_F: float
    E_F: float
    a0: float
    w2: float
    MW: float
    MW_P: float
    sigma_0: float
    h0: float
    y: float
    R0: float
    u: float
    beta: float
    lip: float
    lip2: float

    def centre(self) -> Centre:
        """The worst case as a :class:`~convres.certify.Centre`."""
        def per_sequence(v: float) -> np.ndarray:
            return np.full(self.N, float(v))
        return Centre(x_i=per_sequence(self.x_i), q_i=per_sequence(self.q_i), k_i=per_sequence(self.q_i),
                      v_i=per_sequence(self.v_i), x=self.x, sx=self.sx, z0=self.z0, a0=self.a0, h0=self.h0,
                      sigma_0=self.sigma_0, w1=self.w1, w2=self.w2, u=self.u, R0=self.R0, s=self.s,
                      n=self.n, beta_f=self.beta, lip=self.lip, lip2=self.lip2)


def worst_case(N: int, n: int, d: int, delta: float = 0.05, data: FixedData | None = None,
               **regime) -> WorstCase:
    """Definition wd-def-worst at width ``d``, one event a line (lemma wd-lem-below)."""
    N, n, d = as_int("N", N, minimum=1), as_int("n", n, minimum=1), as_int("d", d, minimum=1)
    delta = as_real("delta", delta, minimum=0.0, above=True, maximum=1.0)
    if delta >= 1:
        raise ValueError(f"delta must be below 1, got {delta}.")
    r = _check_regime(regime)
    g, om, b, f = r["branch_scale"], r["readout_scale"], r["beta"], r["ffn_ratio"]
    if data is not None and (data.N, data.n) != (N, n) or data is not None and d < data.d0:
        raise ValueError(f"the fixed data have N, n, d0 = {data.N}, {data.n}, {data.d0}; got N={N}, "
                         f"n={n}, d={d} (d must be at least d0).")
    ev = events(N, n, r["targets"], r["activation"], fixed=data is not None)
    live = {g: DELTA_SPLIT[g] for g in EVENT_GROUPS if ev[g]}      # t_g = sqrt(2 ln(|g| / delta_g))
    t = {g: math.sqrt(2 * math.log(len(ev[g]) * sum(live.values()) / (w * delta))) for g, w in live.items()}
    tX, tQ, tV, tF, tU = t.get("X", 0.0), t["QK"], t["V"], t["FFN"], t["U"]
    act = ACTIVATIONS[r["activation"]]
    Nn, rd, rn, rN = N * n, math.sqrt(d), math.sqrt(n), math.sqrt(N)
    m = max(1, round(f * d))
    m_hi, m_lo = max(1.0, f * d + 0.5), max(1.0, f * d - 0.5)
    kX = min(Nn, d)                                       # the rank of the stacked N n x d matrices
    # the input
    x = rd + math.sqrt(Nn) + tX                           # E_X+
    sigma_X = rd - math.sqrt(Nn) - tX                     # E_X-
    x_i = min(x, rd + rn + tX)                            # E_Xi
    uX = tX * tX / 2
    X_F = math.sqrt(Nn * d + 2 * math.sqrt(Nn * d * uX) + 2 * uX)    # E_XF (Laurent-Massart)
    ux = rd + rN + tX                                     # E_Pi
    if data is not None:                                  # fixed data: exact norms
        x, sigma_X, x_i, X_F, ux = data.x, data.sigma_X, data.x_i, data.X_F, data.ux
    # the products X_i W (rank <= n), the logits and the attention
    q_i = x_i * (rn + rd + tQ) / rd                       # E_Qi, E_Ki (d_QK = d)
    v_i = g * x_i * (rn + rd + tV) / rd                   # E_Vi
    s = 1.0 / d
    logits = s * x_i * q_i * (n + tQ) / rd                # E_li
    # ||S_i - 1 1^T / n||_F <= min(1/2, exp(sqrt 2 ||l_i||_F) / n) ||l_i||_F (written without overflow)
    grows = math.sqrt(2) * logits > math.log(n / 2) if n > 1 else False
    eps_S = 0.0 if n == 1 else (0.5 if grows else math.exp(math.sqrt(2) * logits) / n) * logits
    sx = min(rn * x, ux + rN * eps_S * x_i)               # E_Pi and lemma wd-lem-det (a)
    A = g * sx * (math.sqrt(kX) + rd + tV) / rd           # E_A
    A_P = g * sx * (math.sqrt(kX) + math.sqrt(Nn) + tV) / rd    # E_AP
    z0, Z_F = b * x + A, b * X_F + math.sqrt(kX) * A
    sigma_Z = b * sigma_X - A_P                           # lemma wd-lem-det (b)
    # the FFN
    w1 = (rd + math.sqrt(m_hi) + tF) / rd                 # E_W1
    P = z0 * (math.sqrt(kX) + math.sqrt(m_hi) + tF) / rd  # E_P
    row = z0 / rd                                         # every row norm of Z_0 over sqrt(d)
    if r["activation"] == "gelu":
        c_psi, c_e = gelu_second_moment(row)
        M_F = math.sqrt(m_hi * c_psi) * Z_F / rd + act.lip * z0 * tF / rd                      # E_MF
        E_F = min(0.5, math.sqrt(c_e)) * math.sqrt(m_hi) * Z_F / rd + (act.lip - 0.5) * z0 * tF / rd  # E_EF
        a0 = min(M_F, 0.5 * P + E_F)
    else:                                                 # |tanh(u)| <= |u|: c_psi <= 1
        M_F = math.sqrt(m_hi) * Z_F / rd + act.lip * z0 * tF / rd
        E_F, a0 = math.nan, M_F
    w2 = g * (math.sqrt(m_hi) + rd + tF) / math.sqrt(m_lo)                   # E_W2
    kM = min(Nn, m_hi)
    MW = g * a0 * (math.sqrt(kM) + rd + tF) / math.sqrt(m_lo)                # E_MW
    MW_P = g * a0 * (math.sqrt(kM) + math.sqrt(Nn) + tF) / math.sqrt(m_lo)   # E_MWP
    sigma_0, h0 = b * sigma_Z - MW_P, b * z0 + MW
    # the readout
    if data is not None:
        y = data.y
    elif r["targets"] == "sign":
        y = math.sqrt(Nn)
    else:
        uY = t["Y"] ** 2 / 2
        y = math.sqrt(Nn + 2 * math.sqrt(Nn * uY) + 2 * uY)                  # E_Y
    R0 = math.sqrt(y ** 2 + (om * math.sqrt(kX) * h0 / rd) ** 2) + om * h0 * tU / rd   # E_U
    u = om * (rd + 1 + tU) / rd                                              # E_Unorm
    return WorstCase(N=N, n=n, d=d, m=m, delta=delta, K=sum(len(v) for v in ev.values()), t=t, s=s, x=x,
                     sigma_X=sigma_X, x_i=x_i, X_F=X_F, q_i=q_i, v_i=v_i, logits=logits, eps_S=eps_S,
                     sx=sx, A=A, A_P=A_P, z0=z0, Z_F=Z_F, sigma_Z=sigma_Z, w1=w1, P=P, M_F=M_F, E_F=E_F,
                     a0=a0, w2=w2, MW=MW, MW_P=MW_P, sigma_0=sigma_0, h0=h0, y=y, R0=R0, u=u, beta=b,
                     lip=act.lip, lip2=act.lip2)


def worst_ratio(N: int, n: int, d: int, delta: float = 0.05, data: FixedData | None = None,
                **regime) -> tuple[float, dict]:
    """``R(d) = rho(c_bar) / ((1 - eta) r_sigma^lo(c_bar))`` at the worst-case centre, ``eta =
    max(2^-30, 2^-30 / r_sigma^lo)``, and ``mu_alpha = sigma_0^2 / (4 L_upper)`` (part (iii))."""
    wc = worst_case(N, n, d, delta, data, **regime)
    out = {"d": d, "rho": math.inf, "r_sigma_lower": 0.0, "sigma_0": wc.sigma_0, "R0": wc.R0,
           "L_upper": math.inf, "mu_alpha": 0.0}
    if not wc.sigma_0 > 0:
        return math.inf, out
    c = wc.centre()
    r_lo, rho = r_sigma_lower(c), c.rho()
    eta = max(BISECTION_MARGIN, BISECTION_MARGIN / r_lo) if r_lo > 0 else 1.0
    L = smoothness_upper(c, BALL_MARGIN * rho)
    out.update(rho=rho, r_sigma_lower=r_lo, L_upper=L, mu_alpha=c.alpha() / L)
    return (rho / ((1 - eta) * r_lo) if eta < 1 else math.inf), out


@dataclasses.dataclass(frozen=True)
class WidthCondition:
    """Theorem wd-thm-width: ``d_min``, the least ``d >= d_lo`` with ``R(d) < 1`` (``None``: none)."""

    N: int
    n: int
    delta: float
    regime: dict
    d_min: int | None
    d_lo: int
    m: int | None
    ratio: float | None
    ratio_below: float | None
    rho: float | None
    r_sigma_lower: float | None
    sigma_0: float | None
    R0: float | None
    mu_alpha: float | None
    K: int
    t: dict
    seconds: float
    ratio_limit: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready (what ``python -m convres theorem width --json`` prints)."""
        return finite_fields({**dataclasses.asdict(self), "Nn": self.N * self.n})


def width_condition(N: int, n: int, delta: float = 0.05, *, data: FixedData | None = None,
                    **regime) -> WidthCondition:
    """:class:`WidthCondition` by doubling and bisection on :func:`worst_ratio`."""
    t0 = time.perf_counter()
    N, n = as_int("N", N, minimum=1), as_int("n", n, minimum=1)
    r = _check_regime(regime)
    d_lo = max(N * n + 1, math.ceil(1.5 / r["ffn_ratio"]), data.d0 if data is not None else 1)

    def R(d: int) -> float:
        return worst_ratio(N, n, d, delta, data, **regime)[0]

    wc = worst_case(N, n, d_lo, delta, data, **regime)    # its events and fluctuations: every d's
    K, t = wc.K, wc.t
    limit = R(D_MAX)                                       # R is non-increasing in d (part (i))
    if limit >= 1:
        return WidthCondition(N, n, delta, dict(regime), None, d_lo, None, None, None, None, None, None,
                              None, None, K, t, time.perf_counter() - t0, limit)
    lo, hi = d_lo, d_lo
    while R(hi) >= 1:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:                                    # R(lo) >= 1 > R(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if R(mid) < 1 else (mid, hi)
    ratio, w = worst_ratio(N, n, hi, delta, data, **regime)
    below = R(hi - 1) if hi > d_lo else None
    if not ratio < 1 or (below is not None and below < 1):
        raise ArithmeticError(f"the worst-case ratio is not monotone near d = {hi} (R(d) = {ratio}, "
                              f"R(d - 1) = {below}); this contradicts part (i) of wd-thm-width.")
    return WidthCondition(N, n, delta, dict(regime), hi, d_lo, max(1, round(r["ffn_ratio"] * hi)), ratio,
                          below, w["rho"], w["r_sigma_lower"], w["sigma_0"], w["R0"], w["mu_alpha"], K, t,
                          time.perf_counter() - t0, limit)


def quadratic_lower_bound(N: int, n: int, beta: float = 1.0, ffn_ratio: float = 0.25) -> float:
    """Proposition wd-prop-exponent: ``d_min`` is asymptotically at least ``64 f c_e(beta) beta^-6
    (N n)^2`` (gelu; ``f`` the FFN ratio)."""
    return 64 * ffn_ratio * gelu_second_moment(beta)[1] * beta ** -6 * (N * n) ** 2


# --- the measured side: the certificate against the width ------------------------------------------

def width_sweep(widths, shapes, seeds, **regime) -> list[dict]:
    """The certificate of :func:`convres.instances.certified_instance` per width, shape and seed."""
    r = {**CERTIFIED_REGIME, **regime}
    rows = []
    for d in widths:
        for seed in seeds:
            params, _, _, cfg = certified_instance(seed, N=1, n=1, d=d, **regime)
            norms = weight_norms({k: v.detach().to(torch.float64) for k, v in params.items()})
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
    """``d*``: where ``ratios`` first fall below 1, linear in ``log d`` and ``log ratio`` (``inf``: never)."""
    w, q = np.asarray(widths, dtype=float), np.asarray(ratios, dtype=float)
    below = np.nonzero(q < 1)[0]
    if not len(below):
        return math.inf
    k = int(below[0])
    if k == 0:
        return float(w[0])
    x0, x1, y0, y1 = np.log(w[k - 1]), np.log(w[k]), np.log(q[k - 1]), np.log(q[k])
    return float(np.exp(x0 + (0 - y0) * (x1 - x0) / (y1 - y0)))
