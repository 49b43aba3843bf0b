"""The explorers' grids: every slider position computed with convres, registered as experiments.

Book chapters: *Rank collapse under gradient descent* (the rank-collapse explorer) and *Explore
convergence*. A grid is the experiment's settings (:data:`RANK_COLLAPSE_GRID`,
:data:`CONVERGENCE_GRID`); its result holds one record per position (the arrays the charts draw,
the legend labels and the readout), cached like every experiment. :mod:`convres.explorers` turns
them into the page's explorers; all their gradient descent runs through :func:`run_gd`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..collapse import attention_output, collapse_measures, gaussian_instance, rank_one_floor
from ..gd import BLOWUP, sweep
from ..instances import collapse_instance, problem
from ..lemmas import rate_alpha
from ..model import ModelConfig
from ..rank import singular_values
from ..runtime import torch_threads
from ..vega import cell_text, position_key, rounded, value_text
from .base import Experiment, Result

__all__ = ["RANK_COLLAPSE_GRID", "CONVERGENCE_GRID", "GRID_LISTS", "run_gd", "collapse_point",
           "collapse_gd", "rank_collapse_position", "convergence_runs", "convergence_position",
           "RANK_COLLAPSE", "CONVERGENCE"]

#: The rank-collapse explorer: singular values of ``X``, ``Attn(X)`` and ``Z = Attn(X) + beta X`` on
#: :func:`convres.collapse.gaussian_instance` (``n`` tokens, ``d`` features, scale ``1/d_qk``), and
#: a short gradient descent (``gd``: ``steps`` steps of size ``mu`` on
#: :func:`convres.instances.collapse_instance`, ``N`` sequences of ``n`` tokens, ``d`` features,
#: FFN width ``m``, scale ``1/d_qk``) for ``beta = 0`` and the chosen ``beta`` (both residuals).
RANK_COLLAPSE_GRID: dict = {
    "betas": [0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 2.0],
    "d_qks": [4, 16, 64, 256, 1024, 4096],
    "ns": [2, 4, 8, 16],
    "d": 16, "seed": 0,
    "gd": {"N": 4, "d": 32, "m": 32, "mu": 0.002, "steps": 60, "record_every": 3, "seed": 0},
}

#: The convergence explorer, on the instance of the chapter *Simulations* (``N`` sequences of ``n``
#: tokens, ``d`` features, FFN width ``m``, data seed ``seed``, weights ``init_params(seed=init_seed)``)
#: with the attention scale ``1/d_qk`` (so that a large ``d_qk`` makes the attention nearly uniform):
#: ``steps`` steps of gradient descent of step size ``mu``, stopped when the loss reaches ``tol``
#: (float64 rounding level) or diverges.
CONVERGENCE_GRID: dict = {
    "betas": [0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0],
    "mus": [0.001, 0.002, 0.005, 0.01, 0.02, 0.05],
    "d_qks": [4, 32, 256, 1024],
    "N": 4, "n": 4, "d": 32, "m": 32, "activation": "gelu", "seed": 0, "init_seed": 1000,
    "steps": 300, "record_every": 5, "tol": 1e-20,
}

#: The settings of each grid that must be non-empty lists of distinct values.
GRID_LISTS = {"explorer_rank_collapse": ["betas", "d_qks", "ns"],
              "explorer_convergence": ["betas", "mus", "d_qks"]}


def run_gd(jobs: Sequence[tuple], steps: int, *, record_every: int, tol: float = 0.0) -> list:
    """Histories of gradient descent for ``jobs``, a list of ``(params, X, Y, cfg, mu)``, each run
    for at most ``steps`` steps (:func:`convres.gradient_descent`; the jobs that share ``X`` and
    ``Y`` run as one sweep; one PyTorch thread: the models are small; divergence at
    :data:`BLOWUP`). The one place the explorers run gradient descent."""
    groups: dict = {}
    for i, (_, X, Y, _, _) in enumerate(jobs):   # equal data: one sweep
        key = next((k for k, idx in groups.items() if torch.equal(jobs[idx[0]][1], X)
                    and torch.equal(jobs[idx[0]][2], Y)), len(groups))
        groups.setdefault(key, []).append(i)
    out: list = [None] * len(jobs)
    with torch_threads(1):
        for idx in groups.values():
            X, Y = jobs[idx[0]][1], jobs[idx[0]][2]
            runs = sweep([jobs[i][0] for i in idx], X, Y, [jobs[i][3] for i in idx],
                                    [jobs[i][4] for i in idx], steps, record_every=record_every,
                                    tol=tol, blowup=BLOWUP)
            for i, (_, history) in zip(idx, runs):
                out[i] = history
    return out


def collapse_point(beta: float, d_qk: int, n: int, *, d: int = 16, seed: int = 0) -> dict:
    """The spectra of one rank-collapse position: on :func:`convres.collapse.gaussian_instance`
    ``(n, d, d_qk, seed)`` with scale ``1/d_qk``, the singular values of ``X``, ``Attn(X)`` and
    ``Z = Attn(X) + beta X`` (decreasing) and the collapse measures of ``Attn(X)`` and ``Z``
    (:func:`convres.collapse.collapse_measures`)."""
    inst = gaussian_instance(n, d, d_qk, seed)
    _, A, Z = attention_output(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], 1.0 / d_qk, beta)
    return {"sv_X": singular_values(inst["X"], "X").numpy(), "sv_attn": singular_values(A, "Attn(X)").numpy(),
            "sv_Z": singular_values(Z, "Z").numpy(), "attn": collapse_measures(A), "Z": collapse_measures(Z)}


def collapse_gd(betas: Sequence[float], d_qk: int, n: int, *, N: int = 4, d: int = 32, m: int = 32,
                mu: float = 0.002, steps: int = 60, record_every: int = 3, seed: int = 0) -> dict:
    """Gradient descent of the rank-collapse explorer: from
    :func:`convres.instances.collapse_instance` (``N`` sequences of
    ``n`` tokens, ``d`` features, scale ``1/d_qk``, seed ``seed``) with both residuals ``beta``
    for every entry of ``betas`` (same data and weights), ``steps`` steps of size ``mu``. Returns
    ``{"floor": rank-one floor of Y, "runs": {beta: History}}``."""
    params, X, Y, cfg = collapse_instance(N=N, n=n, d=d, m=m, d_qk=d_qk, seed=seed)
    jobs = [(params, X, Y, cfg.replace(beta=float(b)), mu) for b in betas]
    hists = run_gd(jobs, steps, record_every=record_every)
    return {"floor": rank_one_floor(Y), "runs": dict(zip([float(b) for b in betas], hists))}


def rank_collapse_position(beta: float, d_qk: int, n: int, g: Mapping) -> dict:
    """The record of one position of the rank-collapse explorer, for any values (the live version
    calls it off the grid): :func:`collapse_point` and :func:`collapse_gd` for ``beta = 0`` and
    ``beta``, with the settings of the grid ``g`` (e.g. :data:`RANK_COLLAPSE_GRID`)."""
    pt = collapse_point(beta, d_qk, n, d=g["d"], seed=g["seed"])
    gd = collapse_gd([0.0] if beta == 0 else [0.0, float(beta)], d_qk, n, **g["gd"])
    return _rc_record(beta, pt, gd)


def _log10(x: float | None) -> float | None:
    return None if x is None else float(np.log10(max(x, 1e-300)))


def _rc_record(beta, pt, gd) -> dict:
    h0, h = gd["runs"][0.0], gd["runs"][float(beta)]
    b = value_text(beta)
    smin = ["σ<sub>min</sub>(Z<sub>t</sub>) stays between ", float(np.min(h.sigma_min_Z)), " and ",
            float(np.max(h.sigma_min_Z))]
    if h.status == "diverged":
        gd_line = [f"With β = {b} gradient descent diverges at this step size: it stops after ",
                   [len(h.loss) - 1, "int"], " steps. With β = 0 the loss is ", h0.loss[-1], " after ",
                   [len(h0.loss) - 1, "int"], " steps (rank-one floor ", gd["floor"], ")."]
    elif beta == 0:
        gd_line = ["After ", [len(h0.loss) - 1, "int"], " steps the loss is ", h0.loss[-1],
                   " (rank-one floor ", gd["floor"], "); ", *smin, "."]
    else:
        gd_line = ["After ", [len(h.loss) - 1, "int"], " steps the loss is ", h0.loss[-1],
                   " with β = 0 and ", h.loss[-1], f" with β = {b} (rank-one floor ", gd["floor"],
                   f"); with β = {b}, ", *smin, "."]
    end = None if h.status == "diverged" else float(h.loss[-1] / gd["floor"])
    return {
        "sv_X": pt["sv_X"], "sv_attn": pt["sv_attn"], "sv_Z": pt["sv_Z"],
        "loss0": h0.loss, "loss": h.loss, "floor": gd["floor"], "status0": h0.status, "status": h.status,
        # the overview cell: the chosen beta's last loss over the rank-one floor (None: diverged)
        "end": end, "cell_v": _log10(end), "cell_text": cell_text(end),
        "labels": {"Z": f"Z = Attn(X) + βX, β = {b}" + (" (equal to Attn(X))" if beta == 0 else ""),
                   "chosen": f"β = {b}" + (" (the same run)" if beta == 0 else "")},
        "readout": [
            ["σ<sub>min</sub>(Attn(X)) = ", pt["attn"]["sigma_min"], ", effective rank ",
             pt["attn"]["effective_rank"], "; σ<sub>min</sub>(Z) = ", pt["Z"]["sigma_min"],
             ", effective rank ", pt["Z"]["effective_rank"], "."],
            gd_line,
        ],
    }


def _rank_collapse_compute(g: dict) -> dict:
    positions = {}
    for k, n in enumerate(g["ns"]):
        for j, d_qk in enumerate(g["d_qks"]):
            gd = collapse_gd([0.0] + [b for b in g["betas"] if b != 0], d_qk, n, **g["gd"])
            for i, beta in enumerate(g["betas"]):
                pt = collapse_point(beta, d_qk, n, d=g["d"], seed=g["seed"])
                positions[position_key(i, j, k)] = rounded(_rc_record(beta, pt, gd))
    return positions


def _convergence_cfg(d_qk: int, beta: float, g: Mapping) -> ModelConfig:
    return ModelConfig(d=g["d"], d_qk=d_qk, m=g["m"], c=1, beta=float(beta), activation=g["activation"],
                       scale="1/d_qk")


def convergence_runs(points, g) -> list[dict]:
    """Gradient descent at the convergence explorer's ``points`` ``(beta, mu, d_qk)`` on the
    instance of the grid ``g``: the History, the theorem's rate ``alpha``
    (:func:`convres.lemmas.rate_alpha`) and its envelope ``Phi_0 (1 - mu alpha)^t`` at the
    recorded steps (``None`` when ``mu alpha >= 1``)."""
    jobs, alphas = [], []
    for beta, mu, d_qk in points:
        cfg = _convergence_cfg(d_qk, beta, g)
        p, X, Y = problem(cfg, g["N"], g["n"], g["seed"], weight_seed=g["init_seed"])
        jobs.append((p, X, Y, cfg, mu))
        alphas.append(rate_alpha(p, X, cfg))
    hists = run_gd(jobs, g["steps"], record_every=g["record_every"], tol=g["tol"])
    out = []
    for (_, mu, _), h, alpha in zip(points, hists, alphas):
        t = np.arange(0, g["steps"] + 1, g["record_every"])
        env = h.loss[0] * (1 - mu * alpha) ** t if mu * alpha < 1 else None
        out.append({"history": h, "alpha": alpha, "env_steps": t, "envelope": env})
    return out


def _cv_record(beta, mu, run, g) -> dict:
    h, alpha = run["history"], run["alpha"]
    steps = len(h.loss) - 1
    if h.status == "converged":
        status = ["Converged: the loss reached ", g["tol"], " (float64 rounding) at step ",
                  [steps, "int"], "."]
    elif h.status == "diverged":
        status = ["Diverged: after step ", [steps, "int"], " the loss grew past ", BLOWUP,
                  " times its start or overflowed; μ is too large here."]
    else:
        status = ["In ", [steps, "int"], " steps the loss went from ", h.loss[0], " to ", h.loss[-1], "."]
    env_end = None if run["envelope"] is None else (1 - mu * alpha) ** g["steps"]
    end = None if h.status == "diverged" else float(h.loss[-1] / h.loss[0])
    rec = {
        # the overview cell: the last loss over the first (None: diverged)
        "end": end, "cell_v": _log10(end), "cell_text": cell_text(end),
        "loss": h.loss, "rec": h.record_steps, "smin_Z": h.sigma_min_Z, "smin_H": h.sigma_min_H,
        "env_steps": run["env_steps"], "envelope": run["envelope"], "tol": g["tol"], "status": h.status,
        "alpha": alpha, "mu_alpha": mu * alpha,
        "labels": {"loss": f"loss, β = {value_text(beta)}, μ = {value_text(mu)}"},
        "readout": [
            ["α = (σ<sub>min</sub>(H<sub>0</sub>)/2)² = ", alpha, ", μα = ", mu * alpha,
             *([": in ", [g["steps"], "int"], " steps the envelope falls to ", env_end, " times its start."]
               if env_end is not None else [": μα ≥ 1, no envelope."])],
            status,
            ["σ<sub>min</sub>(Z<sub>t</sub>) between ", float(np.min(h.sigma_min_Z)), " and ",
             float(np.max(h.sigma_min_Z)), "; σ<sub>min</sub>(H<sub>t</sub>) between ",
             float(np.min(h.sigma_min_H)), " and ", float(np.max(h.sigma_min_H)), "."],
        ],
    }
    return rec


def convergence_position(beta: float, mu: float, d_qk: int, g: Mapping) -> dict:
    """The record of one position of the convergence explorer on the grid ``g`` (any values; the
    live version calls it off the grid)."""
    return _cv_record(beta, mu, convergence_runs([(beta, mu, d_qk)], g)[0], g)


def _convergence_compute(g: dict) -> dict:
    idx = list(itertools.product(range(len(g["betas"])), range(len(g["mus"])), range(len(g["d_qks"]))))
    runs = convergence_runs([(g["betas"][i], g["mus"][j], g["d_qks"][k]) for i, j, k in idx], g)
    return {position_key(i, j, k): rounded(_cv_record(g["betas"][i], g["mus"][j], run, g))
            for (i, j, k), run in zip(idx, runs)}


def _run_rank_collapse(g: dict, **_) -> dict:
    if 0.0 not in g["betas"]:
        raise ValueError(f"grid['betas'] must contain 0 (the comparison run), got {g['betas']}.")
    return {"positions": _rank_collapse_compute(g)}


def _run_convergence(g: dict, **_) -> dict:
    return {"positions": _convergence_compute(g)}


def _none(res: Result) -> dict:
    return {}


RANK_COLLAPSE = Experiment(
    "explorer_rank_collapse", "Explorer: rank collapse and gradient descent, beta x d_QK x n",
    "book/rank_collapse_gd.md",
    {"book": RANK_COLLAPSE_GRID, "paper": RANK_COLLAPSE_GRID,
     "smoke": dict(RANK_COLLAPSE_GRID, betas=[0.0, 1.0], d_qks=[4, 64], ns=[2, 4],
                   gd=dict(RANK_COLLAPSE_GRID["gd"], steps=6))},
    _run_rank_collapse, _none, lambda res: [], in_report=False)

CONVERGENCE = Experiment(
    "explorer_convergence", "Explorer: gradient descent and the theorem's envelope, beta x mu x d_QK",
    "book/explore_convergence.md",
    {"book": CONVERGENCE_GRID, "paper": CONVERGENCE_GRID,
     "smoke": dict(CONVERGENCE_GRID, betas=[0.0, 1.0], mus=[0.002, 0.05], d_qks=[4, 256], steps=10)},
    _run_convergence, _none, lambda res: [], in_report=False)
