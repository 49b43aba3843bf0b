"""The theorem chapters' computations (certificate, separation, width, ffn), each a cached record
by :func:`~convres.experiments.base.computation`; :data:`RECORDS` in the chapters' order."""

from __future__ import annotations

import math
from itertools import product
from typing import Any

import numpy as np

from ..certify import (
    EPS_BOOK,
    centre,
    certificate,
    certificate_of,
    certified_run,
    ffn_certificate,
    ffn_certified_run,
    sharpest_certificate_of,
)
from ..checks import contraction_check
from ..gd import gradient_descent
from ..instances import (
    certified_instance,
    ffn_certified_instance,
    simulations_instance,
    synthetic_regression,
    theorem_instance,
)
from ..lemmas import hessian_norm
from ..model import ModelConfig, init_params
from ..separation import (
    escape_step,
    path_check,
    perp_centre,
    plateau_certificate,
    separation_instance,
    separation_report,
)
from ..stats import steps_to
from ..theory import MIN_DECREASE, ffn_theorem_run, lazy_report, sampled_estimates
from ..width import (
    fixed_data,
    orthonormal_data,
    padded,
    quadratic_lower_bound,
    width_condition,
    width_sweep,
)
from .base import Shape, computation, profiles
from .simulations import EXPERIMENT as SIMULATIONS

#: The fields of a certificate the records keep per seed.
_CERT = ("certified", "ratio", "mu_alpha")


def non_vacuous_steps(mu_alpha: float, cap: int) -> int:
    """The smallest ``T`` with ``mu alpha T >= ln(1/MIN_DECREASE)`` (assumption (A4)), at most ``cap``."""
    return int(min(cap, math.ceil(math.log(1 / MIN_DECREASE) / mu_alpha))) if mu_alpha > 0 else cap


def _fields(x, keys: tuple[str, ...] = _CERT) -> dict:
    """The fields ``keys`` of a dict, or of a certificate's JSON."""
    d = x if isinstance(x, dict) else x.to_dict()
    return {k: d[k] for k in keys}


def _ffn(instance, keys: tuple[str, ...] = _CERT) -> dict:
    """The fields ``keys`` of the FFN certificate of ``instance = (params, X, Y, cfg)``."""
    return _fields(ffn_certificate(*instance), keys)


def _ffn_run(params, X, Y, cfg, cap: int):
    """The certified run of thm-ffn, :func:`non_vacuous_steps` long (at most ``cap``)."""
    cert = ffn_certificate(params, X, Y, cfg)
    return ffn_certified_run(params, X, Y, cfg, steps=non_vacuous_steps(cert.mu_alpha, cap), cert=cert)


@computation(
    "theorem_certified", "Certified instance: certificate, certified run, tightness, lazy regime",
    "book/certificate.md",
    profiles(dict(seed=0, N=1, n=2, d=1024, steps=60), smoke=dict(d=256, steps=5)))
def CERTIFIED(s: dict, **_) -> dict:
    params, X, Y, cfg = certified_instance(s["seed"], N=s["N"], n=s["n"], d=s["d"])
    cert = certificate(params, X, Y, cfg)          # everything before the run
    run = certified_run(params, X, Y, cfg, steps=s["steps"], cert=cert)
    return {"run": run.to_dict(), "estimates": sampled_estimates(params, X, Y, cfg, cert),
            "lazy": lazy_report(params, X, Y, cfg, run)}


@computation(
    "theorem_sharper", "Certified instance: the (1 - eps) sigma_0 certificate on fresh seeds",
    "book/certificate.md",
    profiles(dict(seeds=list(range(10, 15)), N=1, n=2, d=1024, steps=30),
             paper=dict(seeds=list(range(10, 30))), smoke=dict(seeds=[10], d=256, steps=3)))
def SHARPER(s: dict, **_) -> dict:
    rows = []
    for seed in s["seeds"]:
        params, X, Y, cfg = certified_instance(seed, N=s["N"], n=s["n"], d=s["d"])
        c = centre(params, X, Y, cfg)
        row = {"seed": seed}
        for name, cert in (("book", certificate_of(c, EPS_BOOK)), ("sharp", sharpest_certificate_of(c))):
            run = certified_run(params, X, Y, cfg, steps=s["steps"], cert=cert)
            # observed_decrease: 1 - max_t Phi_{t+1} / Phi_t over the steps above the float floor
            row[name] = dict(_fields(cert, ("eps", *_CERT)), violations=run.violations,
                             observed_decrease=-contraction_check(run.loss, 0.0).max_excess)
        rows.append(row)
    return {"rows": rows}


@computation(
    "theorem_width_sweep", "Certified instance: the certificate's ratio against the width d",
    "book/certificate.md",
    profiles(dict(widths=[128, 256, 512, 1024, 2048, 4096], shapes=[[1, 2], [1, 4], [2, 4], [1, 8]],
                  seeds=[0, 1, 2], default_widths=[16, 64, 256, 1024]),
             paper=dict(widths=[128, 256, 512, 1024, 2048, 4096, 8192], seeds=list(range(5)),
                        shapes=[[1, 2], [1, 4], [2, 4], [1, 8], [4, 4], [1, 16]],
                        default_widths=[16, 64, 256, 1024, 2048]),
             smoke=dict(widths=[64, 128], shapes=[[1, 2]], seeds=[0], default_widths=[16])))
def WIDTH_SWEEP(s: dict, **_) -> dict:
    rows = width_sweep(s["widths"], [tuple(x) for x in s["shapes"]], s["seeds"])
    default = [dict(d=d, seed=seed, **_fields(certificate(*theorem_instance(seed, d=d)),
                                              ("ratio", "rho", "r_sigma_lower")))
               for d, seed in product(s["default_widths"], s["seeds"][:2])]
    return {"rows": rows, "default": default}


@computation(
    "theorem_width_condition", "Width theorem: the proven threshold d_min(N, n, delta)", "book/width.md",
    profiles(dict(delta=0.05, Nn=[2 ** k for k in range(13)], shapes=[[1, 2], [2, 2], [1, 4], [2, 4]],
                  deltas=[0.5, 0.1, 0.05, 0.01, 1e-3, 1e-6],
                  regimes=[{"targets": "gaussian"}, {"beta": 2.0}, {"beta": 0.5}, {"branch_scale": 0.001},
                           {"readout_scale": 0.3}], narrow_Nn=[2, 8, 32, 128, 512]),
             smoke=dict(Nn=[1, 2], deltas=[0.05], regimes=[{"beta": 2.0}], narrow_Nn=[2])))
def WIDTH_CONDITION(s: dict, **_) -> dict:
    delta = s["delta"]
    growth = [dict(width_condition(1, Nn, delta).to_dict(), lower=quadratic_lower_bound(1, Nn))
              for Nn in s["Nn"]]
    by_delta = [dict(N=N, n=n, delta=dl, d_min=width_condition(N, n, dl).d_min)
                for N, n in s["shapes"] for dl in s["deltas"]]
    regimes = [dict(N=N, n=n, regime=r, d_min=width_condition(N, n, delta, **r).d_min)
               for N, n in s["shapes"][:2] for r in s["regimes"]]
    narrow = [dict(Nn=Nn, d_min=width_condition(1, Nn, delta, ffn_ratio=0.25 / Nn).d_min)
              for Nn in s["narrow_Nn"]]
    return {"growth": growth, "by_delta": by_delta, "regimes": regimes, "narrow": narrow,
            "shapes": [width_condition(N, n, delta).to_dict() for N, n in s["shapes"]]}


@computation(
    "theorem_width_seeds", "Width theorem: instances drawn at d_min, certified or not", "book/width.md",
    profiles(dict(delta=0.05, shapes=[[1, 2], [2, 2], [1, 4], [2, 4]], fractions=[1.0, 0.5],
                  seeds=list(range(10000, 10010))),
             paper=dict(fractions=[1.0, 0.7, 0.5, 0.35], seeds=list(range(10000, 10050))),
             smoke=dict(shapes=[[1, 1]], fractions=[1.0], seeds=[10000])))
def WIDTH_SEEDS(s: dict, **_) -> dict:
    rows = []
    for N, n in s["shapes"]:
        d_min = width_condition(N, n, s["delta"]).d_min
        for frac in s["fractions"]:
            d = int(round(frac * d_min))
            ratios = [certificate(*certified_instance(seed, N=N, n=n, d=d)).ratio for seed in s["seeds"]]
            rows.append(dict(N=N, n=n, d=d, d_min=d_min, fraction=frac, seeds=len(ratios),
                             certified=int(sum(r < 1 for r in ratios)), ratios=ratios))
    return {"rows": rows}


@computation(
    "theorem_width_fixed", "Width theorem for fixed data: orthonormal tokens padded to width d",
    "book/width.md",
    profiles(dict(delta=0.05, y=0.05, Nn=[1, 2, 4, 8, 16, 32, 64], measured_Nn=[1, 4, 16, 64],
                  seeds=[0, 1, 2], widths=[8, 16, 32, 64, 128, 256, 512, 1024]),
             smoke=dict(Nn=[1, 2], measured_Nn=[2], seeds=[0], widths=[8, 16])))
def WIDTH_FIXED(s: dict, **_) -> dict:
    proven, measured = [], []
    for Nn in s["Nn"]:
        X, Y = orthonormal_data(1, Nn, s["y"])
        small, unit = (width_condition(1, Nn, s["delta"], data=fixed_data(X, Y * k))
                       for k in (1.0, math.sqrt(Nn) / s["y"]))       # ||Y||_F = y, and unit targets
        proven.append(dict(Nn=Nn, d_min=small.d_min, limit=small.ratio_limit, limit_unit=unit.ratio_limit,
                           d_min_unit=unit.d_min))
    for Nn in s["measured_Nn"]:
        X, Y = orthonormal_data(1, Nn, s["y"])
        for d in (w for w in s["widths"] if w > Nn):
            drawn = [certified_instance(seed, N=1, n=1, d=d) for seed in s["seeds"]]
            ratios = [[certificate(p, padded(X, d), Y * k, cfg).ratio for p, _, _, cfg in drawn]
                      for k in (1.0, math.sqrt(Nn) / s["y"])]
            measured.append(dict(Nn=Nn, d=d, ratios=ratios[0], ratios_unit=ratios[1]))
    return {"proven": proven, "measured": measured}


CHECKED = ("r", "r_a", "R", "CF", "dCF", "steps")   # what path_check compares, and the steps it checked


@computation(
    "theorem_separation",
    "Separation: a certified plateau without the residual, certified convergence with it",
    "book/separation.md",
    profiles(dict(N=1, n=2, d=1024, d_qks=[16, 64, 256, 1024], seeds=[0, 1, 2, 3, 4], mu=0.1, steps=4000,
                  common_runs=[[16, 0], [64, 0], [256, 0]], sim_seeds=[0, 1, 2, 3, 4], sim_mu=0.002,
                  sim_steps=6000, mu_small=1e-3, control_scale="1/sqrt(d_qk)", check_seeds=[0, 1],
                  escape_mu_runs=[[16, 0], [256, 0]]),
             paper=dict(d_qks=[16, 64, 256, 1024, 4096], seeds=list(range(10)), steps=8000, sim_steps=10000,
                        common_runs=[[16, 0], [64, 0], [256, 0], [1024, 0]], sim_seeds=list(range(10)),
                        check_seeds=[0, 1, 2], escape_mu_runs=[[16, 0], [256, 0], [1024, 0]]),
             smoke=dict(d=64, d_qks=[16, 64], seeds=[0], steps=50, common_runs=[[16, 0]], sim_seeds=[0],
                        sim_steps=50, mu_small=1e-2, check_seeds=[0], escape_mu_runs=[[16, 0]])))
def SEPARATION(s: dict, **_) -> dict:
    size = dict(N=s["N"], n=s["n"], d=s["d"])
    mu = s["mu"]
    rows, common, checks, reports = [], [], [], {}
    for d_qk, seed in product(s["d_qks"], s["seeds"]):
        X, Y, p, cfg = separation_instance(d_qk, seed, **size)
        pl = plateau_certificate(p, X, Y, cfg, mu)
        below = np.nextafter(0.5 * pl.floor, 0)       # the largest loss < floor / 2
        _, h = gradient_descent(p, X, Y, cfg, mu, s["steps"], tol=below)
        pc = perp_centre(p, X, Y, cfg)                # the hypotheses of sep-prop-exponent
        ctrl = cfg.replace(scale=s["control_scale"])  # the same draw, attention far from uniform
        reports[(d_qk, seed)] = separation_report(d_qk, seed, **size)
        rows.append(dict(d_qk=d_qk, seed=seed, T_lb=pl.T_lb, certified=pl.certified, floor=pl.floor,
                         escape=steps_to(list(h.loss), below, relative=False),
                         min_ratio=float(np.min(h.loss[:pl.T_lb + 1]) / (0.5 * pl.floor)),
                         eps_scaled=float(pc.eps_i.max()) * d_qk ** 0.5,
                         sk_scaled=float(np.max(pc.c.k_i + pc.c.q_i)) * pc.c.s * d_qk ** 0.5, par=pc.par,
                         T_lb_small=plateau_certificate(p, X, Y, cfg, s["mu_small"]).T_lb,
                         control_eps=float(perp_centre(p, X, Y, ctrl).eps_i.max()),
                         control_T_lb=plateau_certificate(p, X, Y, ctrl, mu).T_lb,
                         control_escape=escape_step(p, X, Y, ctrl, mu, s["steps"]),
                         report=reports[(d_qk, seed)]))
        if seed in s["check_seeds"]:                  # the lemmas' bounds along the run (mu = 0.1)
            checks.append(dict(d_qk=d_qk, seed=seed, mu=mu, **_fields(path_check(p, X, Y, cfg, mu), CHECKED)))
    mu_escape = []
    for d_qk, seed in s["escape_mu_runs"]:            # the escape in units of mu t at a smaller step
        X, Y, p, cfg = separation_instance(d_qk, seed, **size)
        mu_escape.append(dict(d_qk=d_qk, seed=seed, mu=mu / 10,
                              escape=escape_step(p, X, Y, cfg, mu / 10, 10 * s["steps"])))
    for d_qk, seed in s["common_runs"]:               # the plateau at the residual arm's step
        X, Y, p, cfg = separation_instance(d_qk, seed, **size)
        rep = reports.get((d_qk, seed)) or separation_report(d_qk, seed, **size)   # a row's, if one
        T, mu_res = rep["plateau"]["T_lb"], rep["plateau"]["mu"]
        chk = path_check(p, X, Y, cfg, mu_res, T)
        _, h1 = gradient_descent(p, X, Y, cfg.with_residual(1.0), mu_res, T)
        checks.append(dict(d_qk=d_qk, seed=seed, mu=mu_res, **_fields(chk, CHECKED)))
        common.append(dict(d_qk=d_qk, seed=seed, mu=mu_res, T_lb=T, steps_to=rep["with_residual"]["steps_to"],
                           min_ratio=float(np.min(chk["loss"]) / (0.5 * rep["plateau"]["floor"])),
                           residual_loss=h1.loss[::max(1, T // 200)].tolist(),
                           loss=chk["loss"][::max(1, T // 200)].tolist(), checked=chk["steps"],
                           residual_initial=float(h1.loss[0])))
    sims = []
    for d_qk, seed in product(s["d_qks"], s["sim_seeds"]):   # the simulations' instances (beta = 0)
        p, X, Y, cfg = simulations_instance(seed, N=4, n=4, d=32, m=32, d_qk=d_qk, scale="1/d_qk", beta=0.0)
        sims.append(dict(d_qk=d_qk, seed=seed, T_lb=plateau_certificate(p, X, Y, cfg, s["sim_mu"]).T_lb,
                         escape=escape_step(p, X, Y, cfg, s["sim_mu"], s["sim_steps"])))
    return {"rows": rows, "common": common, "simulations": sims, "checks": checks, "mu_escape": mu_escape}


@computation(
    "theorem_ffn_certified", "FFN theorem: certified before the run with N n > d, per token and pooled",
    "book/ffn.md",
    profiles(dict(seed=0, instances={"per token": dict(N=4, n=4, d=8),
                                     "pooled": dict(N=16, n=4, d=8, pool="mean")},
                  max_steps={"per token": 2000, "pooled": 1000},
                  seeds=list(range(1, 21)), gains=[30, 100, 300, 1000], widths=[1024, 4096, 16384]),
             paper=dict(max_steps={"per token": 2000, "pooled": 2500}, seeds=list(range(1, 51))),
             smoke=dict(instances={"per token": dict(N=4, n=4, d=8, m=512),
                                   "pooled": dict(N=8, n=4, d=8, m=512, pool="mean")},
                        max_steps={"per token": 5, "pooled": 5}, seeds=[1], gains=[300], widths=[512])))
def FFN_CERTIFIED(s: dict, **_) -> dict:
    out: dict = {}
    for name, kw in s["instances"].items():
        params, X, Y, cfg = ffn_certified_instance(s["seed"], **kw)
        run = _ffn_run(params, X, Y, cfg, s["max_steps"][name])
        out[name] = {"settings": kw, "run": run.to_dict()}
        if name == "per token":
            out[name]["lazy"] = lazy_report(params, X, Y, cfg, run, block="layer1.W_2")
    per_token = s["instances"]["per token"]
    out["seeds"] = [dict(seed=k, **_ffn(ffn_certified_instance(k, **per_token))) for k in s["seeds"]]
    out["grid"] = [dict(ffn_gain=a, m=m, **_ffn(ffn_certified_instance(s["seed"],
                                                                     **(per_token | dict(ffn_gain=a, m=m)))))
                   for a, m in product(s["gains"], s["widths"])]
    return out


@computation(
    "theorem_ffn_runs", "FFN theorem: observed along a per-token and a pooled run (default initialization)",
    "book/ffn.md",
    profiles(dict(m=256, d=8, steps={"per token": 3000, "pooled": 1500}, record_every=50),
             smoke=dict(m=32, steps={"per token": 10, "pooled": 10}, record_every=5)))
def FFN_RUNS(s: dict, **_) -> dict:
    out = {}
    for pool, N in ((None, 4), ("mean", 16)):
        name = "pooled" if pool else "per token"
        cfg = ModelConfig(d=s["d"], d_qk=s["d"], m=s["m"], c=1, activation="gelu", pool=pool)
        X, Y = synthetic_regression(N, 4, s["d"], 1, seed=0, pooled=pool == "mean")
        p = init_params(cfg, seed=1)
        mu = 1 / (2 * hessian_norm(p, X, Y, cfg, iters=30))
        out[name] = ffn_theorem_run(p, X, Y, cfg, mu=mu, steps=s["steps"][name],
                                    record_every=s["record_every"]).summary()
    return {"runs": out}


def _draw(s: dict, regime: dict, seed: int, variant: dict | None = None,
          beta: float = 1.0) -> tuple[dict, Any, Any, ModelConfig]:
    """:func:`convres.instances.simulations_instance` of a *Simulations* regime, rescaled by ``variant``."""
    sim = SIMULATIONS.profiles[s["simulations_profile"]]
    shape = dict(N=regime["N"], n=sim["n"], d=sim["d"], m=sim["m"], d_qk=regime["d_qk"],
                 scale=regime["scale"], activation=sim["activation"], beta=beta)
    return simulations_instance(seed, **(shape | (variant or {})))


def _regimes(s: dict) -> dict[str, dict]:
    sim = {r["name"]: r for r in SIMULATIONS.profiles[s["simulations_profile"]]["regimes"]}
    return {name: sim[name] for name in s["variants"]}


def _variant_label(name: str) -> str:
    return f"simulations ({name}), certified variant"


def _certify_both(params, X, Y, cfg) -> dict:
    """``{route: (certified, ratio)}`` of both theorems (thm-main only when ``N n <= d``)."""
    ffn = ffn_certificate(params, X, Y, cfg)
    out = {"ffn": (ffn.certified, ffn.ratio)}
    if X.shape[0] * X.shape[1] <= cfg.d:
        main = certificate(params, X, Y, cfg)
        out["main"] = (main.certified, main.ratio)
    return out


def _variant_shapes(s: dict) -> list[Shape]:
    n = SIMULATIONS.profiles[s["simulations_profile"]]["n"]
    return [Shape(_variant_label(name), _draw(s, regime, s["seeds"][0], s["variants"][name])[3],
                  regime["N"], n, note="the simulations' shapes and data, rescaled weights")
            for name, regime in _regimes(s).items()]


_WIDE = dict(m=1024, branch_scale=0.01, ffn_gain=300.0, readout_scale=1.0)
_NARROW = dict(m=4096, branch_scale=0.001, ffn_gain=1000.0, readout_scale=4.0)
_VARIANTS = dict(simulations_profile="book", seeds=[0, 1, 2, 3, 4],
                 variants={"wide": _WIDE, "uniform attention": _WIDE, "narrow": _NARROW},
                 run={"wide": 1000, "uniform attention": 1000}, betas=[0.0, 0.1, 0.25, 0.5, 1.0],
                 beta_runs=["wide", "uniform attention"], as_is_mu=0.002, as_is_steps=2000)


@computation(
    "theorem_certified_variants", "FFN theorem: the smallest variants of the simulations certified a priori",
    "book/ffn.md",
    {"book": _VARIANTS, "paper": dict(_VARIANTS, seeds=list(range(10)),
                                      run={"wide": 1000, "uniform attention": 1000, "narrow": 1000}),
     "smoke": dict(simulations_profile="smoke", seeds=[0], variants={"wide": dict(_WIDE, m=256)},
                   run={"wide": 3})}, shapes=_variant_shapes)
def VARIANTS(s: dict, **_) -> dict:
    out = {}
    for name, regime in _regimes(s).items():
        v, first = s["variants"][name], s["seeds"][0]
        entry = out[name] = {"regime": regime, "variant": v,
                             "as_it_stands": [_certify_both(*_draw(s, regime, k)) for k in s["seeds"]],
                             "seeds": [_ffn(_draw(s, regime, k, v)) for k in s["seeds"]]}
        if s.get("betas") and name in s["beta_runs"]:   # where the variant stops being certified
            entry["betas"] = [dict(beta=b, seeds=[_ffn(_draw(s, regime, k, v, b), ("certified", "ratio"))
                                                  for k in s["seeds"]]) for b in s["betas"]]
            _, h = gradient_descent(*_draw(s, regime, first, beta=0.0), s["as_is_mu"], s["as_is_steps"])
            entry["as_it_stands_beta0"] = {"mu": s["as_is_mu"], "loss": h.loss[::10].tolist()}
        if s["run"].get(name):
            entry["run"] = _ffn_run(*_draw(s, regime, first, v), s["run"][name]).to_dict()
    return {"variants": out}


def scope_certificates(profile: str = "book") -> list[dict]:
    """The scope table's certificates per regime of :data:`VARIANTS`, as it stands and as its variant."""
    s = VARIANTS.profiles[profile]
    rows = []
    for name, regime in _regimes(s).items():
        for key, variant in ((f"simulations ({name})", None), (_variant_label(name), s["variants"][name])):
            certs = [_certify_both(*_draw(s, regime, k, variant)) for k in s["seeds"]]
            for route, theorem in (("main", "thm-main"), ("ffn", "thm-ffn")):
                got = [c[route] for c in certs if route in c]
                done = sum(bool(c) for c, _ in got)
                if got:
                    rows.append(dict(experiment=key, theorem=theorem, certified=done == len(got),
                                     ratio=max(r for _, r in got), certified_seeds=done, seeds=len(got)))
    return rows


#: The experiments of this module, in the order of the chapters.
RECORDS = (CERTIFIED, SHARPER, SEPARATION, WIDTH_SWEEP, WIDTH_CONDITION, WIDTH_SEEDS, WIDTH_FIXED,
           FFN_CERTIFIED, FFN_RUNS, VARIANTS)
