"""The book's experiments: one record per experiment, one runner each, cached results.

Book chapters: *Simulations*, *Jena Climate*, *SST-2*, *Rank collapse* and the *Reproduction
report*. Paper: arXiv:2506.05249, its experiments as described in the abstract (v1 and v4): (1)
simulations, (2) Jena Climate with residual coefficients beta from small values to 1, (3) SST-2
with depth L = 2, 6, 10 with and without residuals. Every size, seed, step size and window below is
**the book's choice**: the paper's settings are not known to this project.

An :class:`Experiment` holds everything about one experiment: its settings per profile
(``"book"``: what the chapters show; ``"paper"``: larger, run by hand or on a GPU; ``"smoke"``: unit
tests only), its runner (settings -> JSON data, storing its own axes), its key numbers, its claims
for the reproduction report and its figure. :func:`run_experiment` runs one (or loads its cached
result, :func:`convres.cache.cached_json`) and returns a :class:`Result`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from typing import Any, Callable, Mapping

import numpy as np
import torch

from . import plotting
from .cache import cached_json
from .collapse import gd_attention_stats, gd_instance, rank_one_floor, residual_config
from .data import (JENA_ALL_FEATURES, JENA_FEATURES, DataError, embed_tokens, load_jena, load_sst2,
                   sst2_subset, standardize, synthetic_regression)
from .gd import Step, gradient_descent
from .model import ModelConfig, init_params
from .runtime import torch_threads
from .theory import rate_alpha

__all__ = ["Experiment", "Result", "EXPERIMENTS", "PROFILES", "VERDICTS", "settings", "run_experiment",
           "claims", "measured_rate", "jena_data", "sst2_data"]

PROFILES = ("book", "paper", "smoke")
#: Version of the layout of the results; part of the cache key (bump it when a runner changes).
RESULT_FORMAT = 3
#: The verdicts of the reproduction report. "inconclusive": the setting cannot show the effect (a
#: ceiling, or a regime where it cannot appear); "holds a posteriori": a row that checks one of the
#: book's own inequalities along the runs rather than a claim of the paper that could fail on its own.
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "holds a posteriori")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment of the book.

    Attributes:
        name, title, chapter: how the command line and the report name it.
        profiles: the settings per profile (see :data:`PROFILES`).
        run: ``run(settings, progress=..., data_dir=...) -> data``, a JSON-able dict.
        key_numbers: ``key_numbers(result) -> dict``, the figure's numbers.
        claims: ``claims(result) -> [row]``, the rows of the reproduction report.
        plot: ``plot(result) -> Figure``.
    """

    name: str
    title: str
    chapter: str
    profiles: Mapping[str, dict]
    run: Callable[..., dict]
    key_numbers: Callable[["Result"], dict]
    claims: Callable[["Result"], list]
    plot: Callable[["Result"], Any] | None = None


@dataclasses.dataclass
class Result:
    """A finished experiment: its name, profile, settings, the runner's data and its wall time."""

    name: str
    profile: str
    settings: dict
    data: dict
    seconds: float

    @property
    def experiment(self) -> Experiment:
        return EXPERIMENTS[self.name]

    def summary(self) -> dict:
        """The key numbers, JSON-ready (a non-finite number becomes ``None``)."""
        return _json_safe(self.experiment.key_numbers(self))

    def claims(self) -> list[dict]:
        """The experiment's rows of the reproduction report."""
        return [dict(experiment=self.name, **row) for row in self.experiment.claims(self)]

    def figure(self):
        """The experiment's figure (matplotlib)."""
        return self.experiment.plot(self)

    def to_json(self) -> dict:
        return {"name": self.name, "profile": self.profile, "settings": self.settings, "data": self.data,
                "seconds": self.seconds}


def settings(name: str, profile: str = "book") -> dict:
    """A copy of the settings of experiment ``name`` under ``profile``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}.")
    if profile not in EXPERIMENTS[name].profiles:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(EXPERIMENTS[name].profiles)}.")
    return copy.deepcopy(EXPERIMENTS[name].profiles[profile])


def _stored_ok(stored) -> bool:
    return isinstance(stored, dict) and {"name", "profile", "settings", "data", "seconds"} <= set(stored) \
        and isinstance(stored["data"], dict)


def run_experiment(name: str, profile: str = "book", *, progress: bool = False, refresh: bool = False,
                   data_dir=None, overrides: dict | None = None) -> Result:
    """Run experiment ``name`` under ``profile`` (or load its cached result); return a :class:`Result`.

    ``overrides`` replaces some settings (a different configuration, hence a different cache key).
    """
    s = settings(name, profile)
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of settings or None, got {type(overrides).__name__}.")
    if overrides:
        unknown = sorted(set(overrides) - set(s))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown} for {name!r}; known: {sorted(s)}.")
        s.update(copy.deepcopy(overrides))
    for key in ("betas", "seeds", "depths"):
        if key in s and (not isinstance(s[key], list) or not s[key]):
            raise ValueError(f"setting {key!r} of {name!r} must be a non-empty list, got {s[key]!r}.")
    key = {"experiment": name, "settings": s, "format": RESULT_FORMAT}

    def compute():
        t0 = time.perf_counter()
        with torch_threads(1):  # small models: one thread is fastest (appendix Performance)
            data = EXPERIMENTS[name].run(s, progress=progress, data_dir=data_dir)
        return Result(name, profile, s, data, time.perf_counter() - t0).to_json()

    return Result(**cached_json(f"experiment-{name}", key, compute, refresh=refresh, check=_stored_ok))


def claims(results: Mapping[str, Result]) -> list[dict]:
    """Every row of the reproduction report, from ``results`` (name -> :class:`Result`)."""
    unknown = sorted(set(results) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"results has unknown experiment(s) {unknown}; expected keys among {sorted(EXPERIMENTS)}.")
    return [row for name in EXPERIMENTS if name in results for row in results[name].claims()]


# --- helpers ---------------------------------------------------------------------------------------

def measured_rate(loss, floor: float = 1e-20) -> float:
    """Average per-step linear rate ``r`` with ``Phi_t ~ Phi_0 (1 - r)^t``, measured from ``t = 0``
    to the last step before the loss first reaches ``floor`` (float64 round-off): ``r = 1 -
    (Phi_T / Phi_0)^(1/T)``."""
    loss = np.asarray(loss, dtype=np.float64)
    below = np.nonzero(loss <= floor)[0]
    T = (int(below[0]) if len(below) else len(loss)) - 1
    if T < 1:
        return float("nan")
    return float(1.0 - (loss[T] / loss[0]) ** (1.0 / T))


def _finite(x):
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _dtype(s: dict) -> torch.dtype:
    name = s.get("dtype", "float64")
    if name not in ("float64", "float32"):
        raise ValueError(f"setting 'dtype' must be 'float64' or 'float32', got {name!r}.")
    return getattr(torch, name)


def _stable(h) -> bool:
    return bool(h.status != "diverged" and len(h.loss) > 1 and h.loss[-1] < h.loss[0])


def _median_by(runs, keys, value):
    groups: dict[tuple, list] = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in keys), []).append(value(r))
    return {k: float(np.median(v)) for k, v in groups.items()}


def _final(r, field="loss"):
    v = r[field][-1]
    return math.inf if v is None or r["status"] == "diverged" else float(v)


def _verdict(all_ok: bool, some_ok: bool) -> str:
    return VERDICTS[0] if all_ok else VERDICTS[1] if some_ok else VERDICTS[2]


# --- simulations -----------------------------------------------------------------------------------

def _run_simulations(s: dict, *, progress=False, data_dir=None) -> dict:
    dtype = _dtype(s)
    runs = []
    for seed in s["seeds"]:
        X, Y = synthetic_regression(s["N"], s["n"], s["d"], 1, seed=seed, dtype=dtype)
        cfgs = [ModelConfig(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, beta=b, activation=s["activation"])
                for b in s["betas"]]
        p0 = init_params(cfgs[0], seed=1000 + seed, dtype=dtype)  # the same weights for every beta
        out = gradient_descent([p0] * len(cfgs), X, Y, cfgs, s["mu"], s["steps"], progress=progress)
        for beta, cfg, (_, h) in zip(s["betas"], cfgs, out):
            # the book's PL-type bound from the output layer: Phi_{t+1} <= (1 - mu sigma_min(H_t)^2) Phi_t
            active = h.loss[:-1] > s["floor"]
            bound = 1.0 - s["mu"] * h.sigma_min_H[:-1] ** 2
            holds = bool(np.all(h.ratio[active] <= bound[active])) if active.any() else True
            runs.append(dict(beta=beta, seed=seed, status=h.status, loss=_finite(h.loss),
                             sigma_min_H=_finite(h.sigma_min_H), sigma_min_Z0=float(h.sigma_min_Z[0]),
                             alpha0=float(h.sigma_min_H[0] ** 2), alpha_theorem=rate_alpha(p0, X, cfg),
                             rate=measured_rate(h.loss, s["floor"]), bound_holds=holds))
    return {"runs": runs, "steps": list(range(s["steps"] + 1))}


def _simulations_numbers(res: Result) -> dict:
    runs = res.data["runs"]
    rate = _median_by(runs, ["beta"], lambda r: r["rate"])
    a0 = _median_by(runs, ["beta"], lambda r: r["alpha0"])
    return {"mu": res.settings["mu"],
            "median_rate_per_beta": [{"beta": k[0], "rate": v} for k, v in rate.items()],
            "median_alpha0_per_beta": [{"beta": k[0], "alpha0": v} for k, v in a0.items()],
            "bound_holds_all_runs": all(r["bound_holds"] for r in runs)}


def _simulations_claims(res: Result) -> list[dict]:
    runs, mu = res.data["runs"], res.settings["mu"]
    rate = {k[0]: v for k, v in _median_by(runs, ["beta"], lambda r: r["rate"]).items()}
    betas = sorted(rate)
    inc = [rate[a] < rate[b] for a, b in zip(betas, betas[1:])]
    drop = [r["loss"][-1] / r["loss"][0] for r in runs if r["beta"] == 0 and r["loss"][-1] is not None]
    stall = [x > 1e-2 for x in drop]
    holds = [r["bound_holds"] for r in runs]
    slack = [r["rate"] / (mu * r["alpha0"]) for r in runs]
    return [
        dict(claim="The stronger the residual, the faster gradient descent descends.",
             criterion="median measured linear rate increases with beta at every step of the sweep "
                       "(partly: beta = 1 faster than beta = 0 only)",
             measurement="median rate per step: " + ", ".join(f"beta={b:g}: {rate[b]:.2g}" for b in betas),
             verdict=_verdict(all(inc), rate[betas[-1]] > rate[betas[0]])),
        dict(claim="Without the residual, training stalls.",
             criterion="every beta = 0 run ends above 1% of its initial loss (partly: some runs); "
                       "inconclusive in the wide regime N n <= d, where the output layer alone can fit",
             measurement=f"beta = 0: final / initial loss between {min(drop):.2g} and {max(drop):.2g}",
             verdict=(VERDICTS[3] if not any(stall) and res.settings["N"] * res.settings["n"] <= res.settings["d"]
                      else _verdict(all(stall), any(stall)))),
        dict(claim="Linear convergence Phi_{t+1} <= (1 - mu alpha) Phi_t (alpha from smallest singular "
                   "values; the paper's alpha is not known to us).",
             criterion="a posteriori check, not a test of the paper's alpha: the per-step inequality of "
                       "part (a) of the book's theorem, Phi_{t+1} <= (1 - mu sigma_min(H_t)^2) Phi_t, with "
                       "sigma_min(H_t) measured along each run, at every step above the float floor of every "
                       f"run (mu = {mu:g} and ReLU are outside the theorem's conditions)",
             measurement=f"holds at every step in {sum(holds)} of {len(holds)} runs; loose: measured rate "
                         f"{min(slack):.3g}x to {max(slack):.3g}x mu sigma_min(H_0)^2",
             verdict=VERDICTS[4] if all(holds) else _verdict(False, any(holds))),
    ]


# --- Jena Climate ----------------------------------------------------------------------------------

def jena_data(s: dict, data_dir=None, dtype=torch.float64):
    """Inputs and targets of the book's Jena task (chapter *Jena Climate*).

    Rows of ``[start, end]`` at ``freq`` (selected by timestamp), every feature standardized by its
    mean and standard deviation over those rows; sequences are windows of ``window`` rows starting
    every ``stride`` rows; the target of position ``t`` of a window is the standardized temperature
    one row later. Returns ``(X, Y)`` of shapes ``(N, window, 11)`` and ``(N, window, 1)``.
    """
    for key in ("window", "stride"):
        v = s.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"setting {key!r} must be a positive integer (rows), got {v!r}.")
    if s.get("target") not in JENA_FEATURES:
        raise ValueError(f"setting 'target' must be one of {JENA_FEATURES}, got {s.get('target')!r}.")
    df = load_jena(s["start"], s["end"], data_dir=data_dir, columns=JENA_FEATURES, freq=s["freq"])
    values = df.to_numpy(dtype=np.float64)
    if len(values) <= s["window"]:
        raise DataError(f"{len(values)} rows in {s['start']} .. {s['end']} at {s['freq']}, but a window of "
                        f"{s['window']} needs at least {s['window'] + 1} (one more for the last target); "
                        "widen start/end or shorten the window.")
    z = standardize(values, df.columns, context=f" over {s['start']} .. {s['end']}")
    target = z[:, list(JENA_FEATURES).index(s["target"])]
    w, stride = s["window"], s["stride"]
    starts = range(0, len(z) - w, stride)           # the last window needs one more row for its target
    X = np.stack([z[i:i + w] for i in starts])
    Y = np.stack([target[i + 1:i + w + 1] for i in starts])[..., None]
    return torch.tensor(X, dtype=dtype), torch.tensor(Y, dtype=dtype)


def _run_jena(s: dict, *, progress=False, data_dir=None) -> dict:
    X, Y = jena_data(s, data_dir, _dtype(s))
    d, N = X.shape[-1], X.shape[0]
    cfgs = [ModelConfig(d=d, d_qk=s["d_qk"], m=s["m"], c=1, beta=b, activation=s["activation"])
            for b in s["betas"]]
    # step-size protocol: ONE mu = eta / N for every beta, eta the largest of the grid at which every
    # beta (seed 0) is stable over probe_steps (not diverged, loss below its start). eta is the step
    # on the loss averaged over the N sequences; the book's loss is the sum.
    probe, mu = [], None
    for eta in sorted(s["eta_grid"], reverse=True):
        out = gradient_descent([init_params(c, seed=s["seeds"][0], dtype=X.dtype) for c in cfgs], X, Y, cfgs,
                               eta / N, s["probe_steps"], record_every=s["probe_steps"], progress=progress)
        probe.append({"eta": eta, "stable": [_stable(h) for _, h in out], "status": [h.status for _, h in out]})
        if all(_stable(h) for _, h in out):
            mu = eta / N
            break
    if mu is None:
        raise RuntimeError(f"no step size eta / N with eta in {s['eta_grid']} is stable for every beta on the Jena task.")
    meta = [(beta, seed) for seed in s["seeds"] for beta in s["betas"]]
    params = [init_params(cfgs[0], seed=seed, dtype=X.dtype) for _, seed in meta]  # same weights per seed
    out = gradient_descent(params, X, Y, [cfgs[s["betas"].index(b)] for b, _ in meta], mu, s["steps"],
                           record_every=s["steps"], progress=progress)
    runs = [dict(beta=b, seed=sd, status=h.status, loss=_finite(h.loss),
                 sigma_min_Z0=float(h.sigma_min_Z[0]), sigma_min_H0=float(h.sigma_min_H[0]))
            for (b, sd), (_, h) in zip(meta, out)]
    return {"N": int(N), "n": int(X.shape[1]), "d": int(d), "mu": mu, "probe": probe, "runs": runs,
            "steps": list(range(s["steps"] + 1))}


def _jena_numbers(res: Result) -> dict:
    fin = _median_by(res.data["runs"], ["beta"], _final)
    return {"mu": res.data["mu"], "N": res.data["N"], "steps": res.settings["steps"],
            "median_final_loss_per_beta": [{"beta": k[0], "loss": v} for k, v in fin.items()],
            "diverged_runs": sum(r["status"] == "diverged" for r in res.data["runs"])}


def _jena_claims(res: Result) -> list[dict]:
    st, runs = res.settings, res.data["runs"]
    data = (f"on the book's slice only: rows {st['start']} .. {st['end']} at {st['freq']} "
            f"({len(JENA_FEATURES)} of the {len(JENA_ALL_FEATURES)} features, no wind); ")
    fin = {k[0]: v for k, v in _median_by(runs, ["beta"], _final).items()}
    betas = sorted(fin)
    dec = [fin[b] < fin[a] for a, b in zip(betas, betas[1:])]
    small = min(b for b in betas if b > 0)
    by_seed = {(r["beta"], r["seed"]): _final(r) for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    wins = [by_seed[(small, sd)] < by_seed[(0.0, sd)] for sd in seeds]
    return [
        dict(claim="Larger beta converges faster.",
             criterion=data + f"median final training loss after {st['steps']} steps at one common mu "
                       "decreases with beta at every step of the sweep (partly: beta = 1 below beta = 0 only)",
             measurement="median final loss: " + ", ".join(f"beta={b:g}: {fin[b]:.3g}" for b in betas),
             verdict=_verdict(all(dec), fin[betas[-1]] < fin[betas[0]])),
        dict(claim="Even a small beta converges faster than no residual.",
             criterion=data + f"smallest beta ({small:g}) ends below beta = 0 for every seed (partly: some seeds)",
             measurement=f"beta={small:g} below beta=0 in {sum(wins)} of {len(wins)} seeds "
                         f"(median {fin[small]:.3g} vs {fin[0.0]:.3g})",
             verdict=_verdict(all(wins), any(wins))),
    ]


# --- SST-2 -----------------------------------------------------------------------------------------

def sst2_data(s: dict, data_dir=None, dtype=torch.float64):
    """Inputs, targets and labels of the book's SST-2 task (chapter *SST-2*).

    The fixed subset of :func:`convres.data.sst2_subset` (``size`` training sentences of exactly
    ``n_tokens`` tokens, balanced), frozen hashed Gaussian embeddings of dimension ``d``
    (:func:`convres.data.embed_tokens`), targets ``+1`` (positive) and ``-1`` (negative).
    Returns ``(X, Y, labels)`` with shapes ``(N, n, d)``, ``(N, 1)``, ``(N,)``.
    """
    tokens, labels = sst2_subset(load_sst2("train", data_dir=data_dir), s["size"], s["n_tokens"])
    X = embed_tokens(tokens, s["d"], seed=s["emb_seed"], dtype=dtype)
    Y = torch.tensor(2.0 * labels - 1.0, dtype=dtype)[:, None]
    return X, Y, labels


def _run_sst2(s: dict, *, progress=False, data_dir=None) -> dict:
    X, Y, _ = sst2_data(s, data_dir, _dtype(s))
    N, every = X.shape[0], s["error_every"]
    runs, probes = [], []
    for L in s["depths"]:
        cfgs = {b: ModelConfig(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, L=L, beta=b, pool="mean",
                               activation=s["activation"]) for b in s["betas"]}
        # step-size protocol: each (L, beta) at the step mu = eta / N of the grid with the lowest
        # median training loss over the seeds after probe_steps, among the steps at which no seed
        # diverged during the probe.
        grid = sorted(s["eta_grid"], reverse=True)
        trials = [(b, eta, seed) for b in s["betas"] for eta in grid for seed in s["seeds"]]
        out = gradient_descent([init_params(cfgs[b], seed=seed, dtype=X.dtype) for b, _, seed in trials], X, Y,
                               [cfgs[b] for b, _, _ in trials], [eta / N for _, eta, _ in trials],
                               s["probe_steps"], record_every=s["probe_steps"], progress=progress)
        etas = {}
        for b in s["betas"]:
            scores = {}
            for eta in grid:
                hs = [h for (bb, e, _), (_, h) in zip(trials, out) if bb == b and e == eta]
                scores[eta] = math.inf if any(h.status == "diverged" for h in hs) else \
                    float(np.median([h.loss[-1] for h in hs]))
            probes.append({"L": L, "beta": b, "eta": grid, "loss": [None if math.isinf(scores[e]) else scores[e]
                                                                   for e in grid]})
            best = min(scores, key=lambda e: (scores[e], -e))
            if math.isinf(scores[best]):
                raise RuntimeError(f"every step size eta / N with eta in {grid} diverged for L={L}, beta={b} on SST-2.")
            etas[b] = best
        meta = [(b, seed) for b in s["betas"] for seed in s["seeds"]]
        errors = [[] for _ in meta]

        def train_error(step: Step):  # from the forward pass the step computes anyway
            if step.t % every == 0 or step.t == s["steps"]:
                errors[step.index].append(float((torch.sign(step.F) != Y).double().mean()))

        out = gradient_descent([init_params(cfgs[b], seed=seed, dtype=X.dtype) for b, seed in meta], X, Y,
                               [cfgs[b] for b, _ in meta], [etas[b] / N for b, _ in meta], s["steps"],
                               record_every=s["steps"], progress=progress, callback=train_error)
        for (b, seed), (_, h), er in zip(meta, out, errors):
            runs.append(dict(L=L, beta=b, seed=seed, mu=etas[b] / N, eta=etas[b], status=h.status,
                             loss=_finite(h.loss), error=er,
                             error_steps=[t for t in range(len(h.loss)) if t % every == 0 or t == s["steps"]]))
    return {"N": int(N), "n": int(X.shape[1]), "probe": probes, "runs": runs}


def _residual_name(beta) -> str:
    return "residual" if beta else "no residual"


def _sst2_numbers(res: Result) -> dict:
    runs = res.data["runs"]
    err = _median_by(runs, ["L", "beta"], lambda r: r["error"][-1])
    fin = _median_by(runs, ["L", "beta"], _final)
    eta = _median_by(runs, ["L", "beta"], lambda r: r["eta"])
    return {"N": res.data["N"], "steps": res.settings["steps"],
            "per_model": [{"L": k[0], "residual": bool(k[1]), "eta": eta[k], "median_final_error": err[k],
                           "median_final_loss": fin[k]} for k in err]}


def _sst2_claims(res: Result) -> list[dict]:
    runs = res.data["runs"]
    err = _median_by(runs, ["L", "beta"], lambda r: r["error"][-1])
    fin = _median_by(runs, ["L", "beta"], _final)
    depths = sorted({r["L"] for r in runs})
    lower = [err[(L, 1.0)] < err[(L, 0.0)] for L in depths]
    e_res, l_res = [err[(L, 1.0)] for L in depths], [fin[(L, 1.0)] for L in depths]
    ceiling = all(e == 0 for e in e_res)
    err_ok = all(b <= a for a, b in zip(e_res, e_res[1:])) and e_res[-1] < e_res[0]
    loss_ok = all(b < a for a, b in zip(l_res, l_res[1:]))
    e_no = [err[(L, 0.0)] for L in depths]
    return [
        dict(claim="With residual connections the training error is consistently lower.",
             criterion="median final training error with residuals below without, at every depth "
                       "(partly: at some depths)",
             measurement="; ".join(f"L={L}: {err[(L, 1.0)]:.1%} vs {err[(L, 0.0)]:.1%}" for L in depths),
             verdict=_verdict(all(lower), any(lower))),
        dict(claim="With residuals, the training error improves with depth.",
             criterion="with residuals, median final error non-increasing in L and lower at the largest "
                       "L, and median final loss decreasing in L (partly: one of the two); inconclusive "
                       "when every residual depth is at 0% error (a ceiling)",
             measurement="error " + ", ".join(f"L={L}: {e:.1%}" for L, e in zip(depths, e_res))
                         + "; loss " + ", ".join(f"L={L}: {v:.3g}" for L, v in zip(depths, l_res)),
             verdict=VERDICTS[3] if ceiling else _verdict(err_ok and loss_ok, err_ok or loss_ok)),
        dict(claim="Without residuals, depth does not help.",
             criterion="without residuals, median final error at the largest L is not below the smallest L",
             measurement="error " + ", ".join(f"L={L}: {e:.1%}" for L, e in zip(depths, e_no)),
             verdict=_verdict(e_no[-1] >= e_no[0], e_no[-1] >= e_no[0])),
    ]


# --- rank collapse: gradient descent with and without residuals (chapter Rank collapse) -----------

def _run_rank_collapse_gd(s: dict, *, progress=False, data_dir=None) -> dict:
    inst = {k: s[k] for k in ("N", "n", "d", "m", "scale")}
    runs = []
    for r in s["runs"]:
        params, X, Y, cfg = gd_instance(d_qk=r["d_qk"], seed=s["seed"], **inst)
        (_, h), = gradient_descent([params], X, Y, [residual_config(cfg, r["residual"])], s["mu"], s["steps"],
                                   record_every=s["record_every"], progress=progress)
        runs.append({**r, "history": h.to_dict()})
    stats = [{"d_qk": d_qk, "seed": seed, **{k: np.asarray(v).tolist() for k, v in
                                            gd_attention_stats(0.0, mu=s["mu"], d_qk=d_qk, seed=seed, **inst).items()}}
             for d_qk in s["stat_d_qks"] for seed in s["stat_seeds"]]
    _, _, Y, _ = gd_instance(seed=s["seed"], **{k: s[k] for k in ("N", "n", "d", "m")})
    return {"runs": runs, "stats": stats, "floor": rank_one_floor(Y)}


def _rank_collapse_numbers(res: Result) -> dict:
    return {"floor": res.data["floor"],
            "final_loss": [{"name": r["name"], "loss": r["history"]["loss"][-1]} for r in res.data["runs"]]}


# --- the registry ----------------------------------------------------------------------------------

_SIM = dict(N=4, n=4, d=32, d_qk=32, m=32, activation="relu", betas=[0.0, 0.25, 0.5, 1.0], mu=0.002,
            floor=1e-20, dtype="float64")
_JENA = dict(start="2009-01-01 01:00", end="2009-01-28 17:00", freq="1h", window=24, target="T (degC)",
             d_qk=11, activation="relu", betas=[0.0, 0.1, 0.25, 0.5, 1.0], eta_grid=[0.01, 0.003, 0.001],
             dtype="float64")
_SST2 = dict(n_tokens=10, d=16, d_qk=16, m=16, emb_seed=0, activation="relu", betas=[0.0, 1.0],
             eta_grid=[1.0, 0.3, 0.1, 0.03, 0.01], error_every=10, dtype="float64")
_RC = dict(mu=0.002, steps=300, record_every=10, N=4, n=4, d=32, m=32, seed=0, scale="1/d_qk",
           runs=[{"name": "beta = 0, d_QK = 64", "d_qk": 64, "residual": [0.0, 0.0]},
                 {"name": "beta = 0, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 0.0]},
                 {"name": "beta = 1, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 1.0]},
                 {"name": "attention residual only, d_QK = 1024", "d_qk": 1024, "residual": [1.0, 0.0]},
                 {"name": "FFN residual only, d_QK = 1024", "d_qk": 1024, "residual": [0.0, 1.0]}],
           stat_seeds=list(range(8)), stat_d_qks=[64, 1024])

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [
    Experiment(
        "simulations", "Simulations: loss curves for several beta and the measured linear rate",
        "book/simulations.md",
        {"book": dict(_SIM, seeds=[0, 1, 2], steps=300),
         "paper": dict(_SIM, betas=[0.0, 0.1, 0.25, 0.5, 1.0], seeds=[0, 1, 2, 3, 4], steps=600),
         "smoke": dict(_SIM, betas=[0.0, 1.0], seeds=[0], steps=20)},
        _run_simulations, _simulations_numbers, _simulations_claims, plotting.plot_simulations),
    Experiment(
        "jena", "Jena Climate: residual-coefficient sweep (next-hour temperature)", "book/jena.md",
        {"book": dict(_JENA, stride=6, m=16, seeds=[0, 1, 2], probe_steps=30, steps=200),
         "paper": dict(_JENA, stride=2, m=32, seeds=[0, 1, 2], probe_steps=50, steps=300),
         "smoke": dict(_JENA, end="2009-01-04 17:00", stride=12, m=8, betas=[0.0, 0.5, 1.0], seeds=[0],
                       probe_steps=5, steps=10)},
        _run_jena, _jena_numbers, _jena_claims, plotting.plot_jena),
    Experiment(
        "sst2", "SST-2: depth L = 2, 6, 10 with and without residual connections", "book/sst2.md",
        {"book": dict(_SST2, size=32, depths=[2, 6, 10], seeds=[0, 1, 2], probe_steps=20, steps=100),
         "paper": dict(_SST2, size=64, depths=[2, 6, 10], seeds=[0, 1, 2], probe_steps=30, steps=150),
         "smoke": dict(_SST2, size=16, depths=[1, 2], seeds=[0], eta_grid=[0.1, 0.01], probe_steps=3,
                       steps=10, error_every=5)},
        _run_sst2, _sst2_numbers, _sst2_claims, plotting.plot_sst2),
    Experiment(
        "rank_collapse_gd", "Rank collapse: gradient descent with and without residuals at d_QK = 64, 1024",
        "book/rank_collapse.md",
        {"book": _RC, "paper": _RC,
         "smoke": dict(_RC, steps=10, stat_seeds=[0], runs=_RC["runs"][1:3])},
        _run_rank_collapse_gd, _rank_collapse_numbers, lambda res: [], plotting.plot_rank_collapse_gd),
]}
