"""The pilot of review9 N3: SST-2's isometric arm at a lower attention temperature (``identity_gain``).

Per gain ``c`` (book profile otherwise): design check (b) at every depth on the pilot seeds, the
isometric arm's step at L = 2 and the deepest L tuned as the experiment tunes it (probe seeds,
cached like the experiment's), then 200 steps on each pilot seed against the floor's training MSE.
The decision rule is in the closing note sst2t3.md, written before this ran.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/sst2_pilot.py 6 3 1.5 [--depths 2 10] > pilot.json
"""

from __future__ import annotations

import sys
import time

import torch

from convres.cache import dumps
from convres.data import fingerprint
from convres.data.sst2 import sst2_data
from convres.experiments import sst2
from convres.experiments.base import RUN_CONTEXT, dtype_of, shared_by_pieces
from convres.experiments.sst2_arms import Arm, arms_of, design_checks, init_diagnostics, init_table
from convres.experiments.sst2_baselines import pooled_baseline


def pilot(c: float, depths: list[int]) -> dict:
    s = {**sst2.EXPERIMENT.profiles["book"], "identity_gain": c, "halvings": {}}
    s0 = {k: v for k, v in s.items() if k != "halvings"}
    dtype, device = dtype_of(s), torch.device("cpu")
    task = sst2_data(s, None, dtype)
    Yt = sst2.token_targets(task.Y, task.X.shape[1])
    floor = pooled_baseline(task.X, task.labels, task.X_val, task.labels_val)["train_mse"]
    t0 = time.process_time()
    pilot_arms = {**s, "arms": ["residual", "isometric"], "matched": False}
    rows = init_table(pilot_arms, init_diagnostics(pilot_arms, task.X, Yt, s["pilot_seeds"]))
    checks = [x.to_json() for x in design_checks(pilot_arms, rows)]
    out: dict = {"identity_gain": c, "floor_train_mse": floor, "checks": checks, "depths": {}}
    for L in depths:
        arm = Arm(L, "isometric")
        assert arm in arms_of(s)
        t = shared_by_pieces("tune-sst2", s0, device,
                             lambda a=arm: sst2._tune(s, task.X, Yt, a, dtype, device), arm=list(arm))
        _, runs = sst2._sweep(s, task.X, Yt, [(arm, k, t["chosen"]) for k in s["pilot_seeds"]], s["steps"],
                              dtype)
        R = task.X.shape[0] * task.X.shape[1]
        final = [2 * float(h.loss[-1]) / R if h.status != "diverged" else None for _, h in runs]
        out["depths"][L] = {"chosen": t["chosen"], "grid": t["grid"], "scores": t["scores"],
                            "final_mse": final, "ratio_to_floor": [f / floor if f else None for f in final]}
    out["cpu_s"] = time.process_time() - t0
    return out


if __name__ == "__main__":
    token = RUN_CONTEXT.set({"data": fingerprint(None), "shared": []})
    try:
        args = sys.argv[1:] + ["--depths"] * ("--depths" not in sys.argv)
        i = args.index("--depths")
        depths = [int(L) for L in args[i + 1:]] or [2, 10]
        print(dumps([pilot(float(c), depths) for c in args[:i]], indent=1))
    finally:
        RUN_CONTEXT.reset(token)
