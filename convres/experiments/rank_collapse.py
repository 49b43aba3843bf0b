"""Rank collapse under gradient descent (``book/rank_collapse_gd.md``): runs on
:func:`convres.instances.collapse_instance` with and without residuals at d_QK = 64 and 1024,
against the rank-one floor of the targets."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collapse import gd_attention_stats, rank_one_floor
from ..gd import sweep
from ..instances import collapse_instance
from ..plotting import plot_rank_collapse_gd
from .base import Result, Shape, computation, profiles


def _rank_collapse_numbers(res: Result) -> dict:
    return {"floor": res.data["floor"],
            "final_loss": [{"name": r["name"], "loss": r["history"]["loss"][-1]} for r in res.data["runs"]]}


def _shapes(s: dict) -> list[Shape]:
    return [Shape(f"rank_collapse_gd d_QK={q}", collapse_instance(N=1, n=1, d=s["d"], m=s["m"], d_qk=q,
                                                                  scale=s["scale"])[3], s["N"], s["n"])
            for q in sorted({r["d_qk"] for r in s["runs"]})]


_RC: dict[str, Any] = dict(mu=0.002, steps=2000, record_every=10, N=4, n=4, d=32, m=32, seed=0,
           scale="1/d_qk",
           runs=[{"name": "beta = 0, d_QK = 64", "d_qk": 64, "residual": [0.0, 0.0]},
                 {"name": "beta = 0, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 0.0]},
                 {"name": "beta = 1, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 1.0]},
                 {"name": "attention residual only, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 0.0]},
                 {"name": "FFN residual only, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 1.0]}],
           stat_seeds=list(range(8)), stat_d_qks=[64, 1024])


@computation(
    "rank_collapse_gd", "Rank collapse: gradient descent with and without residuals at d_QK = 64, 1024",
    "book/rank_collapse_gd.md", profiles(_RC, smoke=dict(steps=10, stat_seeds=[0], runs=_RC["runs"][1:3])),
    key_numbers=_rank_collapse_numbers, plot=plot_rank_collapse_gd, shapes=_shapes, in_scope=True)
def EXPERIMENT(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    inst = {k: s[k] for k in ("N", "n", "d", "m", "scale")}
    runs = []
    for r in s["runs"]:
        params, X, Y, cfg = collapse_instance(d_qk=r["d_qk"], seed=s["seed"], **inst)
        (_, h), = sweep([params], X, Y, [cfg.with_residual(r["residual"])], s["mu"], s["steps"],
                                   record_every=s["record_every"], progress=progress)
        runs.append({**r, "history": h.to_dict()})
    stats = []
    for d_qk in s["stat_d_qks"]:
        for seed in s["stat_seeds"]:
            at = gd_attention_stats(0.0, mu=s["mu"], d_qk=d_qk, seed=seed, **inst)
            stats.append({"d_qk": d_qk, "seed": seed, **{k: np.asarray(v).tolist() for k, v in at.items()}})
    _, _, Y, _ = collapse_instance(seed=s["seed"], **{k: s[k] for k in ("N", "n", "d", "m")})
    return {"runs": runs, "stats": stats, "floor": rank_one_floor(Y)}
