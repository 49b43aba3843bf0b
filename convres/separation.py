"""The residual is necessary: a certified separation (theorem ``sep-thm``).

Without it the loss stays at or above half the rank-one floor ``Phi_floor = 1/2 ||C(Y)||_F^2`` for
``T_lb`` steps (:func:`plateau_certificate`); with it, linear convergence from step 0 is certified
(:func:`separation_report`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .certify import Centre, centre, check_certifiable, sharpest_certificate_of, smoothness_bounds
from .gd import gradient_descent
from .instances import certified_instance
from .lemmas import flat_norm
from .model import trace_no_grad
from .rank import spectral_norm, stacked
from .values import as_int, as_real, as_seed

__all__ = ["separation_instance", "balanced_targets", "centred", "PerpCentre",
           "perp_centre", "perp_chain", "path_radii", "Plateau", "plateau_certificate", "escape_step",
           "path_check", "separation_report", "TAU", "RADII"]

#: ``||C(F)||_F <= TAU ||C(Y)||_F`` keeps the loss at or above half the floor (lemma sep-lem-floor).
TAU = 1 - 2 ** -0.5
#: The radii at which the path bounds are tabulated (0 and a geometric grid up to 3).
RADII = np.concatenate([[0.0], np.geomspace(1e-7, 3.0, 300)])


def balanced_targets(N: int, n: int, seed: int) -> torch.Tensor:
    """``(N, n, 1)`` targets, ``n/2`` of ``+1`` and ``-1`` per sequence: ``C(Y) = Y``."""
    if n % 2:
        raise ValueError(f"balanced targets need an even number of tokens n, got n={n}.")
    gen = torch.Generator().manual_seed(as_seed("seed", seed))
    base = torch.tensor([1.0] * (n // 2) + [-1.0] * (n // 2), dtype=torch.float64)
    return torch.stack([base[torch.randperm(n, generator=gen)] for _ in range(N)]).unsqueeze(-1)


def separation_instance(d_qk: int, seed: int = 0, *, N: int = 1, n: int = 2, d: int = 1024,
                        beta: float = 0.0):
    """``(X, Y, params, cfg)``: the certified regime with ``d_QK = d_qk`` and :func:`balanced_targets`."""
    params, X, _, cfg = certified_instance(seed, N=N, n=n, d=d, d_qk=d_qk, beta=beta)
    return X, balanced_targets(N, n, seed), params, cfg


def centred(G: torch.Tensor) -> torch.Tensor:
    """``C(G)``: each sequence's rows minus their mean (``G`` of shape ``(N, n, k)``)."""
    return G - G.mean(dim=-2, keepdim=True)


@dataclasses.dataclass(frozen=True)
class PerpCentre:
    """At ``theta_0``: ``eps_i = ||S_i - 1 1^T/n||_F``, ``ux = ||U X||_2``, ``cZ, cM, cH, cF`` of ``C(.)``,
    ``par = ||(I - C)(F_0 - Y)||_F``, ``CY = ||C(Y)||_F``."""

    c: Centre
    eps_i: np.ndarray
    ux: float
    cZ: float
    cM: float
    cH: float
    cF: float
    par: float
    CY: float

    @property
    def floor(self) -> float:
        """``Phi_floor = 1/2 ||C(Y)||_F^2``, the rank-one floor."""
        return 0.5 * self.CY ** 2

    @property
    def room(self) -> float:
        """``TAU ||C(Y)||_F - ||C(F_0)||_F``: how far ``||C(F)||`` may grow (lemma sep-lem-floor)."""
        return TAU * self.CY - self.cF


def perp_centre(params, X, Y, cfg) -> PerpCentre:
    """The :class:`PerpCentre` of an instance without the residual (``cfg.residual == (0, 0)``)."""
    check_certifiable(params, X, Y, cfg)
    if tuple(cfg.residual) != (0.0, 0.0) or cfg.c != 1:
        raise ValueError(f"the plateau certificate is for the model without the residual and one output "
                         f"(beta = 0, c = 1), got residual {cfg.residual}, c = {cfg.c}; use "
                         "cfg.with_residual(0.0).")
    p = {k: v.detach().double() for k, v in params.items()}
    X, Y = X.detach().double(), Y.detach().double()
    tr = trace_no_grad(p, X, cfg)
    n = X.shape[1]
    sn = [spectral_norm(stacked(centred(G[0]))) for G in (tr.Z, tr.M, tr.H)]
    return PerpCentre(c=centre(p, X, Y, cfg), eps_i=torch.linalg.matrix_norm(tr.S[0] - 1.0 / n).numpy(),
                      ux=spectral_norm(stacked(X.mean(-2, keepdim=True).expand_as(X))), cZ=sn[0], cM=sn[1],
                      cH=sn[2], cF=float(centred(tr.F).norm()),
                      par=float((tr.F - Y - centred(tr.F - Y)).norm()), CY=float(centred(Y).norm()))


def perp_chain(pc: PerpCentre, ra: float, rw: float, steps: int = 48) -> tuple[float, float, float]:
    """Lemma sep-lem-chain on ``B(ra, rw)``: ``(delta_perp, Jp_a, Jp_w)``, ``||C(F)||_F <= ||C(F_0)||_F
    + delta_perp``, by upper Riemann sums."""
    c, h = pc.c, 1.0 / steps
    x, s, n = c.x_i, c.s, c.n
    eps, cZ, cM, cH, Zb, delta = pc.eps_i.astype(float), pc.cZ, pc.cM, pc.cH, c.z0, 0.0
    aF = wF = 0.0
    for k in range(1, steps + 1):
        ta, tw = k * h * ra, k * h * rw
        KQ = np.hypot(c.k_i + x * ta, c.q_i + x * ta)
        Vb, W1, W2, U = c.v_i + x * tw, c.w1 + tw, c.w2 + tw, c.u + tw
        speed = s * x * KQ * ra                      # ||D l_i|| times ra
        p_hat = np.minimum(0.5, 1 / n + eps + 0.5 * h * speed)    # on the whole sub-interval
        eps = np.minimum(math.sqrt(n - 1), eps + h * p_hat * speed)
        p_hat = np.minimum(0.5, 1 / n + eps)
        dZa = float(np.linalg.norm(p_hat * s * x * Vb * KQ))
        ex = float(np.linalg.norm(eps * x))
        SX = pc.ux + ex
        cZ += h * (dZa * ra + ex * rw)
        Zb += h * (dZa * ra + SX * rw)
        cP = cZ * W1
        aM, vM, oM = c.lip * W1 * dZa, (c.lip * ex + c.lip2 * cP * SX) * W1, c.lip * cZ + c.lip2 * cP * Zb
        cM += h * (aM * ra + math.hypot(vM, oM) * rw)
        cH += h * (W2 * aM * ra + math.hypot(W2 * vM, W2 * oM, cM) * rw)
        aF, wF = U * W2 * aM, math.hypot(U * W2 * vM, U * W2 * oM, U * cM, cH)
        delta += h * (aF * ra + wF * rw)
    return delta, aF, wF


def path_radii(pc: PerpCentre, mu: float, max_steps: int = 10 ** 7, radii=RADII):
    """Lemma sep-lem-path: ``[(r_a,t, r_t, R_t)]`` bounding the distances and ``||(I - C)(F_t - Y)||``
    under step ``mu`` until ``C(F)`` may pass the threshold (the last index is ``T_path``)."""
    chains = np.array([perp_chain(pc, r, r, steps=24) for r in radii])
    floor_dp = np.array([perp_chain(pc, 0.0, r, steps=24)[0] for r in radii])   # delta_perp(0, r)
    bounds = np.array([smoothness_bounds(pc.c, r) for r in radii])
    J, M2 = bounds[:, 1], bounds[:, 2]
    Rp = pc.CY + pc.cF + chains[:, 0]
    E, Ea = np.hypot(chains[:, 1], chains[:, 2]) * Rp, chains[:, 1]
    r = ra = 0.0
    R, out, last = pc.par, [(0.0, 0.0, pc.par)], len(radii) - 1
    for _ in range(max_steps):
        k = int(np.searchsorted(radii, r))           # the tabulated radius just above r
        if k > last or floor_dp[k - 1 if k else 0] > pc.room:   # C(F) may pass the threshold
            break
        g = J[k] * R + E[k]
        r_next = r + mu * g
        ra = min(r_next, ra + mu * Ea[k] * (R + Rp[k]))
        kn = min(int(np.searchsorted(radii, r_next)), last)
        R_seg = R + J[kn] * mu * g
        R = min(R_seg, math.sqrt(R * R + 5 * mu * E[k] ** 2)) if mu * (J[kn] ** 2 + R_seg * M2[kn]) <= 1 \
            else R_seg
        r = r_next
        out.append((ra, r, R))
    return out


@dataclasses.dataclass(frozen=True)
class Plateau:
    """Theorem sep-thm (a): ``Phi_t >= floor / 2`` for ``t <= T_lb`` under step ``mu``."""

    certified: bool
    T_lb: int
    floor: float
    mu: float
    room: float
    radius: float
    radius_attention: float


def plateau_certificate(params, X, Y, cfg, mu: float) -> Plateau:
    """Theorem sep-thm (a): the largest ``T <= T_path`` with ``||C(F_0)|| + delta_perp(r_a,T, r_T) <=
    TAU ||C(Y)||``, by bisection (0 when already above)."""
    mu = as_real("mu (the step size)", mu, minimum=0.0, above=True)
    pc = perp_centre(params, X, Y, cfg)
    path = path_radii(pc, mu) if pc.room > 0 else [(0.0, 0.0, pc.par)]
    lo, hi = 0, len(path)
    while hi - lo > 1:                               # delta_perp grows along the path
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if perp_chain(pc, *path[mid][:2])[0] <= pc.room else (lo, mid)
    return Plateau(certified=lo >= 1 and pc.room > 0, T_lb=lo if pc.room > 0 else 0, floor=pc.floor,
                   mu=mu, room=pc.room, radius=path[lo][1], radius_attention=path[lo][0])


def escape_step(params, X, Y, cfg, mu: float, steps: int) -> int | None:
    """The first ``t`` with ``Phi_t < Phi_floor / 2`` under step ``mu`` (observed), else ``None``."""
    floor = 0.5 * float(centred(Y.double()).norm()) ** 2
    _, h = gradient_descent(params, X, Y, cfg, mu, steps, tol=np.nextafter(0.5 * floor, 0))
    hit = np.nonzero(np.asarray(h.loss) < 0.5 * floor)[0]
    return int(hit[0]) if len(hit) else None


def path_check(params, X, Y, cfg, mu: float, steps: int | None = None) -> dict:
    """Lemmas sep-lem-path and sep-lem-chain against one run: the largest observed/bound ratios."""
    mu = as_real("mu (the step size)", mu, minimum=0.0, above=True)
    pc = perp_centre(params, X, Y, cfg)
    path = path_radii(pc, mu)
    T = len(path) - 2 if steps is None else min(as_int("steps", steps, minimum=1), len(path) - 2)
    if T < 1:
        raise ValueError(f"the path bound of this instance ends at step {len(path) - 1}; nothing to check "
                         "(use a smaller mu).")
    a_keys = ("layer1.W_Q", "layer1.W_K")
    p0 = {k: v.detach().double() for k, v in params.items()}
    worst = dict(r=0.0, r_a=0.0, R=0.0, CF=0.0, dCF=-math.inf)

    def check(step):
        if not 1 <= step.t <= T:
            return
        ra, r, R = path[step.t]
        F = step.trace.F.double()
        seen = dict(r=flat_norm(step.params[k] - p0[k] for k in p0),
                    r_a=flat_norm(step.params[k] - p0[k] for k in a_keys),
                    R=float((F - Y - centred(F - Y)).norm()), CF=float(centred(F).norm()))
        dp = perp_chain(pc, ra, r)[0]
        seen["dCF"], bound = seen["CF"] - pc.cF, dict(r=r, r_a=ra, R=R, CF=pc.cF + dp, dCF=dp)
        for k in worst:
            worst[k] = max(worst[k], seen[k] / bound[k])

    _, h = gradient_descent(params, X, Y, cfg, mu, T, callback=check)
    return {**{k: float(v) for k, v in worst.items()}, "steps": T, "loss": np.asarray(h.loss)}


def separation_report(d_qk: int, seed: int = 0, *, mu: float | None = None, N: int = 1, n: int = 2,
                      d: int = 1024) -> dict:
    """Theorem sep-thm on :func:`separation_instance`: ``separation`` iff ``steps_to <= T_lb``."""
    X, Y, params, cfg = separation_instance(d_qk, seed, N=N, n=n, d=d)
    res = sharpest_certificate_of(centre(params, X, Y, cfg.with_residual(1.0)))
    mu = res.mu if mu is None else as_real("mu", mu, minimum=0.0, above=True)
    plateau = plateau_certificate(params, X, Y, cfg, mu)
    at_mu = res.certified and mu <= res.mu

    def steps_to_at(rate):
        return math.ceil(math.log(100) / -math.log1p(-rate)) if res.certified and 0 < rate < 1 else None

    rate_res = res.mu * res.alpha
    rate = mu * res.alpha if at_mu else None
    steps_to = steps_to_at(rate) if rate is not None else None
    return {"plateau": dataclasses.asdict(plateau),
            "with_residual": {"certified": res.certified, "rate": rate, "steps_to": steps_to, "mu": res.mu,
                              "rate_at_mu_res": rate_res, "steps_to_at_mu_res": steps_to_at(rate_res),
                              "ratio": res.ratio, "eps": res.eps, "initial_loss": res.initial_loss},
            "separation": {"certified": bool(plateau.certified and at_mu and steps_to is not None
                                             and steps_to <= plateau.T_lb
                                             and 1e-2 * res.initial_loss < 0.5 * plateau.floor),
                           "window": [steps_to, plateau.T_lb] if at_mu else None},
            "instance": {"N": N, "n": n, "d": d, "d_qk": cfg.d_qk, "m": cfg.m, "seed": seed,
                         "scale": cfg.scale,
                         "rebuild": f"__import__('convres.separation').separation.separation_instance("
                                    f"d_qk={cfg.d_qk}, seed={seed}, N={N}, n={n}, d={d})"}}
