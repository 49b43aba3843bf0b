"""The arms of the SST-2 experiment: their models, their initializations (the isometric and the
norm-preserving inits of a stack without residuals) and the design checks at initialization."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from ..gd import loss_and_grad
from ..lemmas import parameter_count
from ..model import ModelConfig, attention_scale, block, forward_trace, init_params, layer_params
from .base import design_check, output_rows

__all__ = ["ARM_KINDS", "Arm", "norm_preserving_init", "isometric_init", "matched_width", "wide_config",
           "arms_of", "arm_config", "arm_params", "pooled_sigma", "within", "init_diagnostics", "init_table",
           "design_checks"]

#: The arms: ``residual`` (beta = 1), ``isometric`` and ``norm-preserving`` (beta = 0, two inits),
#: ``matched`` (beta = 1 at the shallowest depth, FFN widened to the deepest stack's parameter count).
ARM_KINDS = ("residual", "isometric", "norm-preserving", "matched")

class Arm(NamedTuple):
    """One arm: depth ``L`` and ``kind`` (one of :data:`ARM_KINDS`)."""

    L: int
    kind: str

    @property
    def name(self) -> str:
        return f"L={self.L}, {self.kind}"

    @property
    def residual(self) -> bool:
        return self.kind in ("residual", "matched")


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())


def _block_by_block(cfg: ModelConfig, X: torch.Tensor, seed: int, dtype, name: str, adjust) -> dict:
    """The draws of :func:`convres.model.init_params` (branch scale 1) of a stack without residuals,
    then for ``l = 1, ..., L`` on ``X``: ``adjust(p, l, H_{l-1}, out)``, ``out()`` the outputs
    ``(logits, S, A, Z, M, H)`` of block ``l`` with the weights as they are then."""
    if cfg.residual != (0.0, 0.0):
        raise ValueError(f"{name} is an init of the model without residual connections; got residual "
                         f"coefficients {cfg.residual}.")
    p = init_params(cfg, seed, dtype=dtype, branch_scale=1.0)
    H = X.to(dtype=dtype, device=p["W_U"].device)
    with torch.no_grad():
        for l in range(1, cfg.L + 1):
            def out(l: int = l, H: torch.Tensor = H) -> tuple:
                return block(H, layer_params(p, l), s=attention_scale(cfg), act=cfg.act, beta_attn=0.0,
                             beta_ffn=0.0)
            adjust(p, l, H, out)
            H = out()[5]
    return p


def norm_preserving_init(cfg: ModelConfig, X: torch.Tensor, seed: int = 0, *,
                         dtype=torch.float64) -> dict[str, torch.Tensor]:
    """LSUV (Mishkin and Matas 2016) for a stack without residuals (:func:`_block_by_block`):

        W_V^(l) <- W_V^(l) RMS(H_{l-1}) / RMS(A_l),    W_2^(l) <- W_2^(l) RMS(H_{l-1}) / RMS(H_l)
    """
    def adjust(p, l, H, out):
        for name, k in (("W_V", 2), ("W_2", 5)):
            p[f"layer{l}.{name}"] *= _rms(H) / _rms(out()[k])
    return _block_by_block(cfg, X, seed, dtype, "norm_preserving_init", adjust)


def _polar(W: torch.Tensor) -> torch.Tensor:
    """The orthogonal factor ``U V^T`` of ``W = U Sigma V^T``."""
    U, _, Vh = torch.linalg.svd(W, full_matrices=False)
    return U @ Vh


def isometric_init(cfg: ModelConfig, X: torch.Tensor, seed: int = 0, *, identity_gain: float,
                   preactivation: float, qk_scale: float = 1.0,
                   dtype=torch.float64) -> dict[str, torch.Tensor]:
    """A stack without residuals started near an isometry (not collapsed); from the draws ``G``, per
    block (:func:`_block_by_block`):

        W_Q = r (G_Q + c I),  W_K = r (G_K + c I)       (attention near the identity)
        W_V = a_V P(G_V),  W_1 = a_1 P(G_1),  W_2 = a_2 P(G_2)

    ``c = identity_gain``, ``r = qk_scale`` (the logits times ``r^2``, a temperature; 1 leaves the
    weights as they were), ``P`` the orthogonal factor, ``RMS(A_l) = sqrt(eps) RMS(H_{l-1})``,
    ``RMS(Z_l W_1) = eps = preactivation`` (GELU near-linear), ``RMS(H_l) = RMS(H_{l-1})``.
    """
    def adjust(p, l, H, out):
        key = lambda w: f"layer{l}.{w}"  # noqa: E731
        for w in ("W_Q", "W_K"):   # times 1.0 (the default) is exact: the weights as they were
            p[key(w)] = qk_scale * (p[key(w)] + identity_gain * torch.eye(cfg.d, cfg.d_qk, dtype=dtype,
                                                                           device=H.device))
        for w in ("W_V", "W_1", "W_2"):
            p[key(w)] = _polar(p[key(w)])
        p[key("W_V")] *= math.sqrt(preactivation) * _rms(H) / _rms(out()[2])
        p[key("W_1")] *= preactivation / _rms(out()[3] @ p[key("W_1")])
        p[key("W_2")] *= _rms(H) / _rms(out()[5])
    return _block_by_block(cfg, X, seed, dtype, "isometric_init", adjust)


def matched_width(s: dict) -> int:
    """The FFN width ``m`` of the shallowest residual stack whose parameter count is closest to the
    deepest stack's (width ``s["m"]``), by :func:`convres.lemmas.parameter_count` ``L (2 d d_qk + d^2
    + 2 d m) + d`` (protocol check (c))."""
    lo, hi = min(s["depths"]), max(s["depths"])
    target, d = parameter_count(_cfg(s, hi, 1.0)), s["d"]
    m = (target - parameter_count(_cfg(s, lo, 1.0, m=1)) + 2 * d * lo) / (2 * d * lo)
    return min({max(1, math.floor(m)), max(1, math.ceil(m))},
               key=lambda w: (abs(parameter_count(_cfg(s, lo, 1.0, m=w)) - target), w))


def _cfg(s: dict, L: int, beta: float, **changes) -> ModelConfig:
    return ModelConfig(**{**dict(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, L=L, beta=beta, pool=None,
                                 activation=s["activation"]), **changes})


def wide_config(s: dict) -> ModelConfig:
    """The model of the wide-FFN run ``s["wide"]`` (pooled readout)."""
    w = s["wide"]
    return _cfg(s, w["L"], w["beta"], m=w["m"], activation=w["activation"], pool="mean")


def arms_of(s: dict) -> list[Arm]:
    """Every arm of the settings ``s``: per depth the kinds of ``s["arms"]``, then the ``matched``
    arm at the shallowest depth (when ``s["matched"]``)."""
    out = [Arm(L, k) for L in s["depths"] for k in s["arms"]]
    bad = [k for k in s["arms"] if k not in ARM_KINDS[:3]]
    if bad or not s["arms"]:
        raise ValueError(f"setting 'arms' must be a non-empty list of {list(ARM_KINDS[:3])}, "
                         f"got {s['arms']!r}.")
    return out + ([Arm(min(s["depths"]), "matched")] if s.get("matched") else [])


def arm_config(s: dict, arm: Arm) -> ModelConfig:
    """The model of ``arm``: ``beta = 1`` for the residual arms, 0 otherwise; the matched arm's FFN
    width from :func:`matched_width`."""
    return _cfg(s, arm.L, 1.0 if arm.residual else 0.0,
                **({"m": matched_width(s)} if arm.kind == "matched" else {}))


def arm_params(s: dict, arm: Arm, seed: int, X: torch.Tensor, *,
               dtype=torch.float64) -> dict[str, torch.Tensor]:
    """The initial weights of ``arm`` for ``seed``, from the seed's Gaussian draws for every arm:
    :func:`convres.model.init_params`, :func:`isometric_init` or :func:`norm_preserving_init` (on ``X``);
    the isometric arm's ``qk_scale`` from ``s.get("qk_scale", 1.0)`` (no profile sets it: a pilot's)."""
    cfg = arm_config(s, arm)
    if arm.residual:
        return init_params(cfg, seed, dtype=dtype)
    if arm.kind == "isometric":
        return isometric_init(cfg, X, seed, identity_gain=s["identity_gain"],
                              preactivation=s["preactivation"], qk_scale=s.get("qk_scale", 1.0),
                              dtype=dtype)
    return norm_preserving_init(cfg, X, seed, dtype=dtype)


def pooled_sigma(H: torch.Tensor) -> float:
    """``sigma_min / sigma_max`` of the pooled features: the ``N x d`` matrix of the sentences' mean
    rows of the last ``H``."""
    sv = torch.linalg.svdvals(H.double().mean(-2))
    return float(sv[-1] / sv[0])


def within(H: torch.Tensor) -> float:
    """The share of ``H`` that varies within a sentence: ``RMS(H - mean_t H) / RMS(H)``."""
    return _rms(H - H.mean(-2, keepdim=True)) / _rms(H)


def saturated_rows(s: dict, arm: Arm, seed: int, X: torch.Tensor, *, above: float = 0.999) -> list[float]:
    """Per block, the share of the attention rows of arm ``arm`` at initialization (``seed``,
    float64) that put more than ``above`` of their weight on one token:
    ``mean_{i,t} [max_u S_l(X_i)_{tu} > above]``."""
    cfg = arm_config(s, arm)
    with torch.no_grad():
        S = forward_trace(arm_params(s, arm, seed, X.double()), X.double(), cfg).S
    return [float((S_l.amax(-1) > above).double().mean()) for S_l in S]


def gradient_shares(s: dict, arm: Arm, seed: int, X: torch.Tensor, Yt: torch.Tensor) -> dict[str, float]:
    """Per weight (``W_Q``, ..., ``W_U``), its share of the squared gradient at initialization (``seed``,
    float64), summed over the blocks: ``sum_l ||grad_{W^(l)} Phi||^2 / ||grad Phi||^2``."""
    _, g, _ = loss_and_grad(arm_params(s, arm, seed, X.double()), X.double(), Yt.double(), arm_config(s, arm))
    total = sum(float(v.pow(2).sum()) for v in g.values())
    out: dict[str, float] = {}
    for k, v in g.items():
        name = k.rsplit(".", 1)[-1]
        out[name] = out.get(name, 0.0) + float(v.pow(2).sum()) / total
    return out


def attention_gradient_share(s: dict, arm: Arm, seed: int, X: torch.Tensor, Yt: torch.Tensor) -> float:
    """The share of :func:`gradient_shares` on the attention's ``W_Q`` and ``W_K``."""
    g = gradient_shares(s, arm, seed, X, Yt)
    return g["W_Q"] + g["W_K"]


_INIT_FIELDS = ("std", "rms_H", "grad_norm", "within_sentence", "pooled_sigma_ratio", "mse")


def init_diagnostics(s: dict, X: torch.Tensor, Yt: torch.Tensor, seeds) -> list[dict]:
    """Every arm at initialization (float64), per arm and seed: std of ``F``, RMS of the last ``H``,
    ``||grad Phi|| / (N n)``, within-sentence share, pooled ``sigma_min / sigma_max``, MSE."""
    X, Yt = X.double(), Yt.double()
    rows = []
    for arm in arms_of(s):
        cfg = arm_config(s, arm)
        for seed in seeds:
            phi, g, tr = loss_and_grad(arm_params(s, arm, seed, X), X, Yt, cfg)
            H, R = tr.H[-1], output_rows(cfg, X)
            grad = math.sqrt(sum(float(v.pow(2).sum()) for v in g.values())) / R
            vals = [float(tr.F.std()), _rms(H), grad, within(H), pooled_sigma(H), 2 * float(phi) / R]
            rows.append({"L": arm.L, "arm": arm.kind, "seed": seed, **dict(zip(_INIT_FIELDS, vals))})
    return rows


def init_table(s: dict, records: list[dict]) -> list[dict]:
    """The records of :func:`init_diagnostics` as one row per arm (median over the seeds), with its
    parameter count and the ratios to the residual arm of its depth (``std_ratio``, ``sigma_ratio``)."""
    by: dict = {}
    for r in records:
        by.setdefault((r["L"], r["arm"]), []).append(r)
    med = {k: {f: float(np.median([r[f] for r in rs])) for f in _INIT_FIELDS} for k, rs in by.items()}
    out = []
    for (L, kind), m in med.items():
        ref = med.get((L, "residual"))
        out.append({"L": L, "arm": kind, "residual": kind in ("residual", "matched"),
                    "params": parameter_count(arm_config(s, Arm(L, kind))), **m,
                    "std_ratio": m["std"] / ref["std"] if ref else None,
                    "sigma_ratio": m["pooled_sigma_ratio"] / ref["pooled_sigma_ratio"] if ref else None})
    return out


def design_checks(s: dict, table: list[dict]) -> list:
    """Protocol section 3 for SST-2 on :func:`init_table`: (a) every arm alive, (b) the isometric
    arm not collapsed, (c) the matched arm's parameter count within 5% of the deepest stack's."""
    alive = max(abs(math.log10(r["std_ratio"])) for r in table if r["std_ratio"] is not None)
    iso = [r for r in table if r["arm"] == "isometric"]
    checks = [design_check("sst2 arms alive", alive)]
    if iso:
        checks += [design_check("sst2 within-sentence share", min(r["within_sentence"] for r in iso)),
                   design_check("sst2 pooled sigma ratio", min(r["sigma_ratio"] for r in iso))]
    if s.get("matched"):
        deep = parameter_count(_cfg(s, max(s["depths"]), 1.0))
        matched = parameter_count(arm_config(s, Arm(min(s["depths"]), "matched")))
        checks.append(design_check("sst2 matched shallow arm", abs(matched / deep - 1)))
    return checks
