"""The theorem chapter's computations, registered like every other experiment (cached, listed).

Book chapter *The theorem* (``book/theorem.md``): the instance certified before the run with its
certified run and the estimates of what the bounds bound (``theorem_certified``), the certificate
against the width (``theorem_width_sweep``) and the FFN theorem checked along two runs
(``theorem_ffn_runs``).
"""

from __future__ import annotations

from ..certify import certificate, certified_run, sampled_estimates, width_sweep
from ..instances import certified_instance, synthetic_regression
from ..lemmas import hessian_norm
from ..model import ModelConfig, init_params
from ..theory import ffn_theorem_run
from .base import Experiment, Result, Shape

__all__ = ["CERTIFIED", "WIDTH_SWEEP", "FFN_RUNS"]


def _run_certified(s: dict, **_) -> dict:
    params, X, Y, cfg = certified_instance(s["seed"], N=s["N"], n=s["n"], d=s["d"])
    cert = certificate(params, X, Y, cfg)          # everything before the run
    run = certified_run(params, X, Y, cfg, steps=s["steps"], cert=cert)
    return {"run": run.to_dict(), "estimates": sampled_estimates(params, X, Y, cfg, cert)}


def _certified_shapes(s: dict) -> list[Shape]:
    cfg = certified_instance(s["seed"], N=1, n=1, d=s["d"])[3]
    return [Shape(f"theorem certified instance (d={s['d']})", cfg, s["N"], s["n"])]


def _run_width_sweep(s: dict, **_) -> dict:
    return {"rows": width_sweep(s["widths"], [tuple(x) for x in s["shapes"]], s["seeds"])}


def _run_ffn(s: dict, **_) -> dict:
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


def _none(res: Result) -> dict:
    return {}


CERTIFIED = Experiment(
    "theorem_certified", "The theorem: an instance certified before the run, and its run",
    "book/theorem.md",
    {p: dict(seed=0, N=1, n=2, d=1024 if p != "smoke" else 256, steps=60 if p != "smoke" else 5)
     for p in ("book", "paper", "smoke")},
    _run_certified, _none, lambda res: [], shapes=_certified_shapes, in_report=False)

WIDTH_SWEEP = Experiment(
    "theorem_width_sweep", "The theorem: the certificate's ratio against the width d",
    "book/theorem.md",
    {"book": dict(widths=[128, 256, 512, 1024, 2048], shapes=[[1, 2], [1, 4]], seeds=[0, 1, 2]),
     "paper": dict(widths=[128, 256, 512, 1024, 2048, 4096], shapes=[[1, 2], [1, 4], [2, 4]],
                   seeds=list(range(10))),
     "smoke": dict(widths=[64, 128], shapes=[[1, 2]], seeds=[0])},
    _run_width_sweep, _none, lambda res: [], in_report=False)

FFN_RUNS = Experiment(
    "theorem_ffn_runs", "The theorem: the FFN theorem checked along a per-token and a pooled run",
    "book/theorem.md",
    {"book": dict(m=256, d=8, steps={"per token": 3000, "pooled": 1500}, record_every=50),
     "paper": dict(m=256, d=8, steps={"per token": 3000, "pooled": 1500}, record_every=50),
     "smoke": dict(m=32, d=8, steps={"per token": 10, "pooled": 10}, record_every=5)},
    _run_ffn, _none, lambda res: [], in_report=False)
