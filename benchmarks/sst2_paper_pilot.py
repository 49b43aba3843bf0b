"""The pilot of review10 M2: SST-2's paper profile (16,384 sentences, 250 steps) on its two pilot seeds,
every arm at the tuned step committed in ``results/shared/``, before any evaluation seed is run.

The rule, committed with this file before it ran (2026-12-07):

- A reference arm (``sst2.references``: T1 and T4 the isometric arm at every depth, T2 the matched
  L = 2 arm, T3 the L = 2 isometric arm) *trains on the pilot* if its final training MSE is below the
  floor's (least squares on the mean word vector, the same sentences) on both pilot seeds.
- A claim whose references all train on the pilot is graded by the paper run (20 seeds), which applies
  the precondition again (``sst2.references_train``, the median over its seeds).
- A claim with a reference that does not train on the pilot is announced *not testable* at the paper
  scale before that run. If no claim is left, the paper profile's evaluation run is not made: it would
  measure only contrasts the protocol does not grade. The pilot itself is committed as the paper scale's
  SST-2 result (``results/sst2-paper-pilot.json``).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/sst2_paper_pilot.py run 200 > seed200.json
    PYTHONPATH=$PWD python benchmarks/sst2_paper_pilot.py merge seed200.json seed201.json \
        > results/sst2-paper-pilot.json
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from convres import __version__
from convres.cache import dumps
from convres.committed import git_commit, results_dir, shared_store
from convres.data import fingerprint
from convres.data.sst2 import sst2_data
from convres.experiments import sst2
from convres.experiments.base import dtype_of, finite_list, protocol_stamp
from convres.experiments.sst2_arms import arms_of
from convres.experiments.sst2_baselines import pooled_baseline


def run(seed: int) -> dict:
    """Every arm of the paper profile on pilot ``seed`` at its committed tuned step, ``steps`` steps:
    its final training MSE and the floor's."""
    s = sst2.EXPERIMENT.profiles["paper"]
    if seed not in s["pilot_seeds"]:
        raise SystemExit(f"seed must be one of the pilot seeds {s['pilot_seeds']}, got {seed}.")
    t0 = time.process_time()
    with shared_store(results_dir(), git_commit()):
        eta = {a: sst2.prepare("paper", f"tune {a.name}")["chosen"] for a in arms_of(s)}
    dtype = dtype_of(s)
    task = sst2_data(s, None, dtype)
    Yt = sst2.token_targets(task.Y, task.X.shape[1])
    floor = pooled_baseline(task.X, task.labels, task.X_val, task.labels_val)["train_mse"]
    R, out = sst2._sweep(s, task.X, Yt, [(a, seed, eta[a]) for a in eta], s["steps"], dtype)
    every = s["record_every"]   # the curve, for the spot check that reruns its first steps
    arms = [{"L": a.L, "arm": a.kind, "eta": eta[a], "status": h.status,
             "final_mse": None if h.status == "diverged" else 2 * float(h.loss[-1]) / R,
             "mse": finite_list(2 * h.loss[::every] / R)}
            for a, (_, h) in zip(eta, out)]
    return {"seed": seed, "floor_train_mse": floor, "arms": arms, "cpu_seconds": time.process_time() - t0,
            "commit": git_commit(), "data": fingerprint(None)}


def merge(parts: list[dict]) -> dict:
    """The pilot seeds' runs and the rule's decision for each claim."""
    s = sst2.EXPERIMENT.profiles["paper"]
    if sorted(p["seed"] for p in parts) != sorted(s["pilot_seeds"]):
        raise SystemExit(f"merge needs one part per pilot seed {s['pilot_seeds']}.")
    ratio = {(a["L"], a["arm"], p["seed"]): (a["final_mse"] or float("inf")) / p["floor_train_mse"]
             for p in parts for a in p["arms"]}
    decision = {}
    for claim, refs in sst2.references(s["depths"]).items():
        worst = max(ratio[(a.L, a.kind, k)] for a in refs for k in s["pilot_seeds"])
        decision[claim] = {"references": [a.name for a in refs], "largest_ratio_to_floor": worst,
                           "graded": worst < 1.0}
    return {"profile": "paper", "n_train": s["n_train"], "steps": s["steps"],
            "pilot_seeds": s["pilot_seeds"], "runs": parts, "decision": decision,
            "evaluation_run": any(d["graded"] for d in decision.values()),
            "provenance": {"commits": sorted({p["commit"] for p in parts}), "version": __version__,
                           "cpu_seconds": sum(p["cpu_seconds"] for p in parts), "protocol": protocol_stamp(),
                           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                           "torch": torch.__version__, "command": "benchmarks/sst2_paper_pilot.py"}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        print(dumps(run(int(sys.argv[2])), indent=1))
    elif sys.argv[1:2] == ["merge"]:
        print(dumps(merge([json.loads(Path(f).read_text()) for f in sys.argv[2:]]), indent=1))
    else:
        raise SystemExit(__doc__)
