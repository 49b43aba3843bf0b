"""The book's random instances: :func:`problem` builds ``(params, X, Y)`` (data from ``seed``,
weights from ``seed + 1`` unless ``weight_seed``); the named instances are its settings.
"""

from __future__ import annotations

import dataclasses

import torch

from .model import ModelConfig, attention_scale, generator, init_params
from .values import as_float_dtype, as_int, as_real

__all__ = ["synthetic_regression", "regression_data", "problem", "theorem_instance", "collapse_instance",
           "certified_instance", "CERTIFIED_REGIME", "ffn_certified_instance", "FFN_CERTIFIED_REGIME",
           "TARGETS", "simulations_instance", "SIMULATIONS_WEIGHT_SEED", "qk_reduced", "regime_settings"]

#: How the targets are drawn: i.i.d. ``N(0, 1)``, or their signs (``||Y||_F^2 = N n c`` exactly).
TARGETS = ("gaussian", "sign")


def synthetic_regression(N: int, n: int, d: int, c: int = 1, *, seed: int | torch.Generator = 0,
                         dtype=torch.float64, pooled: bool = False):
    """``X`` ``(N, n, d)`` and ``Y`` ``(N, n, c)`` (``(N, c)`` if ``pooled``), i.i.d. ``N(0, 1)``."""
    N, n, d, c = (as_int(name, v, minimum=1) for name, v in (("N", N), ("n", n), ("d", d), ("c", c)))
    dtype = as_float_dtype(dtype)
    gen = generator(seed)
    X = torch.randn(N, n, d, generator=gen, dtype=torch.float64)
    Y = torch.randn(*((N, c) if pooled else (N, n, c)), generator=gen, dtype=torch.float64)
    return X.to(dtype), Y.to(dtype)


def regression_data(cfg: ModelConfig, N: int, n: int, seed: int = 0, *, targets: str = "gaussian",
                    dtype=torch.float64):
    """:func:`synthetic_regression` for ``cfg``; ``targets="sign"``: their signs."""
    if targets not in TARGETS:
        raise ValueError(f"targets must be one of {TARGETS}, got {targets!r}.")
    X, Y = synthetic_regression(N, n, cfg.d, cfg.c, seed=seed, dtype=dtype, pooled=cfg.pool == "mean")
    if targets == "sign":
        Y = torch.where(Y >= 0, 1.0, -1.0).to(dtype)
    return X, Y


def problem(cfg: ModelConfig, N: int, n: int, seed: int = 0, *, weight_seed: int | None = None,
            branch_scale: float | None = None, readout_scale: float = 1.0, ffn_gain: float = 1.0,
            targets: str = "gaussian", dtype=torch.float64):
    """``(params, X, Y)``: data from ``seed``, weights from ``weight_seed`` (default ``seed + 1``),
    ``W_U`` times ``readout_scale``, ``W_1`` times ``ffn_gain``."""
    readout_scale = as_real("readout_scale", readout_scale, minimum=0.0, above=True)
    ffn_gain = as_real("ffn_gain", ffn_gain, minimum=0.0, above=True)
    X, Y = regression_data(cfg, N, n, seed, targets=targets, dtype=dtype)
    params = init_params(cfg, seed=seed + 1 if weight_seed is None else weight_seed, dtype=dtype,
                         branch_scale=branch_scale)
    for k in params:      # times 1.0 leaves a weight as it is
        gain = readout_scale if k == "W_U" else ffn_gain if k.endswith(".W_1") else 1.0
        params[k] = params[k] * gain
    return params, X, Y


def theorem_instance(seed: int = 0, *, beta: float = 1.0, layers: int = 1, N: int = 2, n: int = 4,
                     d: int = 16, activation: str = "gelu", scale: str | float = "1/sqrt(d_qk)",
                     d_qk: int | None = None):
    """The book's verification instance ``(params, X, Y, cfg)``: ``m = d``, ``c = 1``, ``d_QK = d``."""
    cfg = ModelConfig(d=d, d_qk=d if d_qk is None else d_qk, m=d, c=1, L=layers, beta=beta,
                      activation=activation, scale=scale)
    return (*problem(cfg, N, n, seed), cfg)


#: The *Simulations* experiment draws the weights of seed ``k`` from seed ``SIMULATIONS_WEIGHT_SEED + k``
#: (its data from ``k``): the weights never reuse the data's random stream.
SIMULATIONS_WEIGHT_SEED = 1000


def simulations_instance(seed: int, *, N: int, n: int, d: int, m: int, d_qk: int, scale: str | float,
                         activation: str = "gelu", beta: float = 1.0, branch_scale: float | None = None,
                         readout_scale: float = 1.0, ffn_gain: float = 1.0, dtype=torch.float64):
    """One seed of chapter *Simulations*: ``(params, X, Y, cfg)``, one block, the same for every ``beta``."""
    cfg = ModelConfig(d=d, d_qk=d_qk, m=m, c=1, beta=beta, activation=activation, scale=scale)
    return (*problem(cfg, N, n, seed, weight_seed=SIMULATIONS_WEIGHT_SEED + as_int("seed", seed, minimum=0),
                     branch_scale=branch_scale, readout_scale=readout_scale, ffn_gain=ffn_gain, dtype=dtype),
            cfg)


def qk_reduced(params: dict, cfg: ModelConfig) -> tuple[dict, ModelConfig]:
    """The same run with ``W_Q, W_K`` of ``2 d`` columns when ``d_QK > 2 d``: it depends on ``W = [W_Q;
    W_K]`` only through ``W W^T``, so ``W^T = Q R`` gives ``W -> R^T`` (``s`` kept)."""
    if cfg.L != 1 or cfg.d_qk <= 2 * cfg.d:
        return params, cfg
    W = torch.cat([params["layer1.W_Q"], params["layer1.W_K"]])             # (2d, d_QK)
    R = torch.linalg.qr(W.T, mode="r").R                                   # W^T = Q R
    out = dict(params, **{"layer1.W_Q": R.T[:cfg.d].contiguous(), "layer1.W_K": R.T[cfg.d:].contiguous()})
    return out, dataclasses.replace(cfg, d_qk=2 * cfg.d, scale=attention_scale(cfg))


def collapse_instance(*, N: int = 4, n: int = 4, d: int = 32, m: int = 32, d_qk: int = 1024,
                      scale: str | float = "1/d_qk", seed: int = 0):
    """The instance of chapter *Rank collapse under gradient descent*: ReLU, scale ``1/d_qk``."""
    cfg = ModelConfig(d=d, d_qk=d_qk, m=m, c=1, beta=1.0, scale=scale)
    return (*problem(cfg, N, n, seed), cfg)


#: The book's certified regime (chapters *Certified constants and a certified instance* and *A width
#: theorem*), with ``d_QK = d``: small branches and readout, slow attention, a narrow FFN, sign targets.
CERTIFIED_REGIME = dict(branch_scale=0.01, readout_scale=0.1, scale="1/d_qk", activation="gelu",
                        beta=1.0, ffn_ratio=0.25, targets="sign")


def regime_settings(regime: dict, defaults: dict, what: str) -> dict:
    """``defaults`` updated by ``regime``; a ValueError naming a setting ``defaults`` does not have."""
    unknown = sorted(set(regime) - set(defaults))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown} of the {what}; known: {sorted(defaults)}.")
    return {**defaults, **regime}


def certified_instance(seed: int = 0, *, N: int = 1, n: int = 2, d: int = 1024, d_qk: int | None = None,
                       **regime):
    """``(params, X, Y, cfg)`` of :data:`CERTIFIED_REGIME` (``regime`` overrides it), ``d_QK = d``
    unless given."""
    r = regime_settings(regime, CERTIFIED_REGIME, "certified regime")
    ratio = as_real("ffn_ratio", r["ffn_ratio"], minimum=0.0, above=True)
    cfg = ModelConfig(d=d, d_qk=d if d_qk is None else d_qk, m=max(1, round(ratio * d)), c=1,
                      beta=r["beta"], activation=r["activation"], scale=r["scale"])
    return (*problem(cfg, N, n, seed, branch_scale=r["branch_scale"],
                     readout_scale=r["readout_scale"], targets=r["targets"]), cfg)


#: The regime in which the theorem through the FFN is certified with ``N n > d`` (chapter *The theorem
#: through the FFN, certified, and the scope*): a wide FFN whose ``W_1`` has entries ``N(0, a^2/d)``,
#: ``a = ffn_gain``, tiny branches, a larger readout, slow attention and sign targets.
FFN_CERTIFIED_REGIME = dict(m=4096, branch_scale=0.001, readout_scale=4.0, ffn_gain=300.0,
                            scale="1/d_qk", activation="gelu", beta=1.0, targets="sign", pool=None)


def ffn_certified_instance(seed: int = 0, *, N: int = 4, n: int = 4, d: int = 8, d_qk: int | None = None,
                           **regime):
    """``(params, X, Y, cfg)`` of :data:`FFN_CERTIFIED_REGIME` (``regime`` overrides it), ``N n > d``."""
    r = regime_settings(regime, FFN_CERTIFIED_REGIME, "FFN certified regime")
    cfg = ModelConfig(d=d, d_qk=d if d_qk is None else d_qk, m=r["m"], c=1, beta=r["beta"],
                      activation=r["activation"], scale=r["scale"], pool=r["pool"])
    return (*problem(cfg, N, n, seed, branch_scale=r["branch_scale"], readout_scale=r["readout_scale"],
                     ffn_gain=r["ffn_gain"], targets=r["targets"]), cfg)
