"""The pilot of review11 M1/M2 (issue 33): is there an SST-2 stack without residuals that is neither
collapsed nor saturated at initialization and trains? A pre-registered search in one family.

The rule, committed with this file before anything of it ran (2026-12-07):

**Family (12 candidates).** The isometric start of ``sst2_arms.isometric_init`` with a logit
temperature: ``W_Q = r (G_Q + c I)``, ``W_K = r (G_K + c I)``, then ``W_V, W_1, W_2`` orthogonal and
scaled block by block as before (the gains computed with the softer attention), for
``c`` in {6, 3} and ``r`` in {1, 2^-1/4, 2^-1/2, 2^-3/4, 2^-1, 2^-3/2} (the logits times ``r^2`` in
{1, 0.71, 0.5, 0.35, 0.25, 0.125}); the book profile otherwise (2,048 sentences, d = 16).

*Why this family.* The two ways a stack without residuals fails at init are opposite ends of one
dial, the sharpness of the attention rows. Sharp rows (``c = 6``: most rows of block 1 put > 0.999
of their weight on one token) keep the rows apart but pass almost no gradient to ``W_Q, W_K``
(softmax' derivative ``p (1 - p)``); flat rows average the tokens of a sentence in every block and
collapse the within-sentence variation geometrically in depth (``c = 1.5``: share 0.19). The
temperature ``r^2`` turns that dial while keeping the identity's structure (the noise ``G`` is
scaled with it). The grid spans the effective identity multiple ``(c r)^2`` from 36 (the committed
arm, known saturated) down to 1.1, below ``c = 1.5``'s 2.25 (known collapsed), so both ends are in
it; ``c = 3`` gives the same dial with relatively more noise. ``r = 1`` are the committed arm
(``c = 6``) and the earlier pilot's ``c = 3`` (``benchmarks/sst2_pilot.py``), anchors. Not in the
family: the norm-preserving (LSUV) start with an identity part in ``W_Q, W_K``: its collapse at
L >= 6 is across sentences as well (pooled sigma ratio 6e-5 to 8e-4), from products of Gaussian
``W_V, W_1, W_2``, which an identity part in the attention does not remove.

**Screens at init** (the two pilot seeds 200 and 201, float64; the same numbers as the experiment's
design checks, ``init_table``: the median over the two seeds), for each candidate at *every* depth
L in {2, 6, 10}:
  (a) alive: ``|log10(std of F / the residual arm's)| <= 1``;
  (b) not collapsed: within-sentence share ``>= 0.5`` and pooled ``sigma_min / sigma_max`` ``>= 0.1``
      times the residual arm's;
  (s) not saturated: in every block, the share of attention rows with max weight > 0.999
      (``saturated_rows``, the median over the two seeds) ``< 0.10``.
A candidate that passes every screen at every depth is a *survivor*. The share of the squared
gradient on ``W_Q, W_K`` at init is recorded for each candidate, not screened.

**Runs.** For each survivor, in the order c = 6 then 3, r from large to small, and at each depth
L = 2, 6, 10: the step tuned as the experiment tunes it (``sst2._tune``: the book profile's grid,
probe seeds 100-102, probe horizon 200 steps, capped at half the largest stable step), then 200
steps on each pilot seed at that step (float32, as the experiment).

**Trains.** At depth L a survivor *trains* if its final training MSE is below the floor's (least
squares on the mean word vector, the same sentences) on both pilot seeds and neither run diverged.
The curve's minimum and a climb above the run's start are recorded beside the final value.

**Decision.**
- Per depth L: the candidates that train at L; *the reference at L* is the one of them with the
  smallest largest-over-seeds ratio to the floor at L (tie: the larger ``r``, then the larger ``c``).
- The arm the evaluation would use is one candidate for every depth (T3 compares depths of one arm):
  the survivor that trains at the most depths, ties broken by the smallest largest ratio to the floor
  over the depths where it trains, then the larger ``r``, then the larger ``c``; adopted only if it
  trains at some depth.
- If it trains at every depth: T1, T3 and T4 could be graded with it. This pilot reports that and
  stops: whether the book's SST-2 evaluation is rerun with it (a design change, a dated deviation) is
  the coordinator's decision, not this file's.
- At a depth where no survivor trains, the claims that need that depth stay *not testable* (T1 and T4
  at that depth, so neither can be *reproduced* as "consistently"; T3 if it is L = 2 or L = 10), and
  the chapter says that no reference in this pre-registered family trains there within 200 steps on
  the pilot seeds. If there is no survivor at all, the same holds at every depth, by the screens alone.
- T2 does not use this arm (its reference is the matched residual stack) and is not affected.

Should the deadline of the session stop the runs, the finished candidates are committed as they are
and the others are marked not run; the decision is then stated on the finished ones only.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/sst2_reference_pilot.py run > part.json
    PYTHONPATH=$PWD python benchmarks/sst2_reference_pilot.py decide part.json \
        > results/sst2-reference-pilot.json
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from convres import __version__
from convres.cache import dumps
from convres.committed import git_commit
from convres.data import fingerprint
from convres.data.sst2 import sst2_data
from convres.experiments import sst2
from convres.experiments.base import RUN_CONTEXT, dtype_of, finite_list, protocol_stamp
from convres.experiments.sst2_arms import (
    Arm,
    attention_gradient_share,
    init_diagnostics,
    init_table,
    saturated_rows,
)
from convres.experiments.sst2_baselines import pooled_baseline

GAINS = (6.0, 3.0)
SCALES = (1.0, 2 ** -0.25, 2 ** -0.5, 2 ** -0.75, 2 ** -1.0, 2 ** -1.5)
DEPTHS = (2, 6, 10)
ALIVE, WITHIN, SIGMA, SATURATED = 1.0, 0.5, 0.1, 0.10


def settings(c: float, r: float) -> dict:
    """The book profile with the candidate's ``identity_gain`` and ``qk_scale``, two arms."""
    s = sst2.EXPERIMENT.profiles["book"]
    return {**s, "identity_gain": c, "qk_scale": r, "arms": ["residual", "isometric"], "matched": False,
            "halvings": {}}


def screen(c: float, r: float, task, Yt) -> dict:
    """The candidate's screens at init on the pilot seeds, per depth."""
    s = settings(c, r)
    rows = init_table(s, init_diagnostics(s, task.X, Yt, s["pilot_seeds"]))
    X = task.X.double()
    out = {}
    for L in DEPTHS:
        row = next(x for x in rows if (x["L"], x["arm"]) == (L, "isometric"))
        sat = np.median([saturated_rows(s, Arm(L, "isometric"), q, X) for q in s["pilot_seeds"]], axis=0)
        share = [attention_gradient_share(s, Arm(L, "isometric"), q, X, Yt) for q in s["pilot_seeds"]]
        v = {"std_ratio": row["std_ratio"], "within_sentence": row["within_sentence"],
             "sigma_ratio": row["sigma_ratio"], "saturated": [float(x) for x in sat], "qk_grad_share": share}
        v["passed"] = {"alive": abs(math.log10(v["std_ratio"])) <= ALIVE,
                       "within": v["within_sentence"] >= WITHIN, "sigma": v["sigma_ratio"] >= SIGMA,
                       "saturation": max(v["saturated"]) < SATURATED}
        out[str(L)] = v
    return out


def runs(c: float, r: float, task, Yt, floor: float) -> dict:
    """Per depth: the tuned step and 200 steps on each pilot seed."""
    s = settings(c, r)
    dtype, device = dtype_of(s), torch.device("cpu")
    out = {}
    for L in DEPTHS:
        arm = Arm(L, "isometric")
        t = sst2._tune(s, task.X, Yt, arm, dtype, device)
        keep = {k: t[k] for k in ("grid", "scores", "stable", "horizon", "best", "largest_stable", "chosen",
                                  "bracketed", "unresolved", "capped")}
        if t["chosen"] is None:   # no stable step on the grid: it does not train
            out[str(L)] = {"tuning": keep, "eta": None, "seeds": [], "trains": False}
            continue
        R, done = sst2._sweep(s, task.X, Yt, [(arm, k, t["chosen"]) for k in s["pilot_seeds"]], s["steps"],
                              dtype)
        seeds = []
        for k, (_, h) in zip(s["pilot_seeds"], done):
            mse = 2 * h.loss / R
            final = None if h.status == "diverged" else float(mse[-1])
            seeds.append({"seed": k, "status": h.status, "initial_mse": float(mse[0]), "final_mse": final,
                          "min_mse": float(np.nanmin(mse)), "climbed": bool(np.nanmax(mse[1:]) > mse[0]),
                          "ratio_to_floor": None if final is None else final / floor,
                          "mse": finite_list(mse[::s["record_every"]])})
        out[str(L)] = {"tuning": keep, "eta": t["chosen"], "seeds": seeds,
                       "trains": all(x["final_mse"] is not None and x["final_mse"] < floor for x in seeds)}
        print(f"c={c:g} r={r:.3f} L={L}: eta {t['chosen']}, ratios "
              f"{[x['ratio_to_floor'] for x in seeds]}", file=sys.stderr, flush=True)
    return out


def run(out_path: Path) -> dict:
    """Every candidate's screens, then the survivors' runs; the part is rewritten after each step."""
    t0 = time.process_time()
    s = sst2.EXPERIMENT.profiles["book"]
    task = sst2_data(s, None, dtype_of(s))
    Yt = sst2.token_targets(task.Y, task.X.shape[1])
    floor = pooled_baseline(task.X, task.labels, task.X_val, task.labels_val)["train_mse"]
    part = {"floor_train_mse": floor, "candidates": [], "commit": git_commit(), "data": fingerprint(None)}

    def save() -> None:
        part["cpu_seconds"] = time.process_time() - t0
        out_path.write_text(dumps(part, indent=1))

    cands = [{"identity_gain": c, "qk_scale": r, "effective_identity": (c * r) ** 2} for c in GAINS
             for r in SCALES]
    for cand in cands:
        cand["screens"] = screen(cand["identity_gain"], cand["qk_scale"], task, Yt)
        cand["survivor"] = all(all(v["passed"].values()) for v in cand["screens"].values())
        cand["depths"] = None
        part["candidates"].append(cand)
        save()
    for cand in cands:
        if cand["survivor"]:
            cand["depths"] = runs(cand["identity_gain"], cand["qk_scale"], task, Yt, floor)
            save()
    part["finished"] = True
    save()
    return part


def _worst(cand: dict, L: int) -> float:
    return max((x["ratio_to_floor"] if x["ratio_to_floor"] is not None else math.inf
                for x in cand["depths"][str(L)]["seeds"]), default=math.inf)


def decide(part: dict) -> dict:
    """The rule's decision from the candidates' numbers (no recomputation)."""
    cands = part["candidates"]
    ran = [c for c in cands if c["survivor"] and c["depths"] is not None]
    per_depth = {}
    for L in DEPTHS:
        ok = [c for c in ran if c["depths"][str(L)]["trains"]]
        best = min(ok, key=lambda c: (_worst(c, L), -c["qk_scale"], -c["identity_gain"])) if ok else None
        per_depth[str(L)] = {"trains": [[c["identity_gain"], c["qk_scale"]] for c in ok],
                             "reference": None if best is None else [best["identity_gain"], best["qk_scale"]]}

    def rank(c: dict) -> tuple:
        D = [L for L in DEPTHS if c["depths"][str(L)]["trains"]]
        worst = max((_worst(c, L) for L in D), default=math.inf)
        return (-len(D), worst, -c["qk_scale"], -c["identity_gain"])

    top = min(ran, key=rank) if ran else None
    depths = [] if top is None else [L for L in DEPTHS if top["depths"][str(L)]["trains"]]
    adopted = None if not depths else {"identity_gain": top["identity_gain"], "qk_scale": top["qk_scale"],
                                       "trains_at": depths}
    missing = [L for L in DEPTHS if L not in depths]
    lo, hi = min(DEPTHS), max(DEPTHS)
    return {"survivors": [[c["identity_gain"], c["qk_scale"]] for c in cands if c["survivor"]],
            "not_run": [[c["identity_gain"], c["qk_scale"]] for c in cands
                        if c["survivor"] and c["depths"] is None],
            "per_depth": per_depth, "adopted": adopted, "trains_at_every_depth": not missing,
            "not_testable": {"T1": missing, "T4": missing,
                             "T3": [L for L in (lo, hi) if L in missing]}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        token = RUN_CONTEXT.set({"data": fingerprint(None), "shared": []})
        try:
            run(Path(sys.argv[2]))
        finally:
            RUN_CONTEXT.reset(token)
    elif sys.argv[1:2] == ["decide"] and len(sys.argv) == 3:
        part = json.loads(Path(sys.argv[2]).read_text())
        s = sst2.EXPERIMENT.profiles["book"]
        print(dumps({"name": "sst2", "profile": "reference-pilot", "n_train": s["n_train"],
                     "steps": s["steps"], "pilot_seeds": s["pilot_seeds"],
                     "what": "review11 M1/M2: a no-residual reference neither collapsed nor saturated "
                             "that trains, searched in one family fixed before the runs",
                     "rule": "benchmarks/sst2_reference_pilot.py (its docstring)",
                     "thresholds": {"alive": ALIVE, "within": WITHIN, "sigma": SIGMA,
                                    "saturated": SATURATED},
                     **{k: part[k] for k in ("floor_train_mse", "candidates")},
                     "finished": bool(part.get("finished")), "decision": decide(part),
                     "provenance": {"commit": part["commit"], "version": __version__,
                                    "cpu_seconds": part["cpu_seconds"], "data": part["data"],
                                    "protocol": protocol_stamp(),
                                    "machine": f"{platform.machine()}, {os.cpu_count()} shared CPUs",
                                    "torch": torch.__version__,
                                    "command": "OMP_NUM_THREADS=1 python benchmarks/sst2_reference_pilot.py "
                                               "run part.json; then decide part.json"}}, indent=1))
    else:
        raise SystemExit(__doc__)
