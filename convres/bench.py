"""Benchmark: convres's batched engine against the plain PyTorch loop a paper script would write.

Book chapter: *Performance* (``book/performance.md``); command line: ``python -m convres bench``;
script: ``benchmarks/gd_speed.py``.

In one process, the same sweep (several residual coefficients ``beta``, seeds and step sizes
``mu``) runs two ways:

(a) *plain*: one ``torch.nn.Module`` per configuration (:class:`PlainTransformer`), the loss, ``loss.backward()``
    and a manual update ``p -= mu * p.grad`` in a Python loop, configurations one after another;
(b) *engine*: :func:`convres.engine.gradient_descent_batch`, all configurations in one batched
    step, which also records gradient norms and singular values.

Both start from the same weights, so their losses must agree (``max_abs_loss_diff``). The two ways
are timed in alternation, repeat after repeat (the order swapped every repeat), and the speed-up is
the median of the per-repeat ratios: on a shared machine the load drifts, and a ratio of two runs
taken seconds apart is more robust than a ratio of two medians taken minutes apart.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .cache import cache_key, cached_json
from .paths import cache_dir
from .data import synthetic_regression
from .engine import check_device, gradient_descent_batch, torch_threads
from .gd import gradient_descent
from .model import ModelConfig, activation, attention_scale, init_params

__all__ = ["PROFILES", "PlainTransformer", "plain_sweep", "sweep_instance", "compare_sweep",
           "single_run_seconds", "run_benchmark", "cached_benchmark", "benchmark_config", "format_report",
           "plot_speed", "cache_path", "targets_table", "TARGETS"]

#: Sizes of the two instances. ``theorem``: the theorem chapter's small synthetic instance
#: (:func:`convres.theory.theorem_instance`: N=2 sequences of n=4 tokens, d=16, GELU);
#: ``jena``: the Jena Climate experiment's shapes (321 windows of 24 hourly tokens, 11 features,
#: FFN width 32, one output per token), with synthetic Gaussian data of those shapes.
SIZES = {
    "theorem": dict(N=2, n=4, d=16, d_qk=16, m=16, activation="gelu", mus=(0.005, 0.0025)),
    "jena": dict(N=321, n=24, d=11, d_qk=11, m=32, activation="relu", mus=(1e-5, 5e-6)),
}

#: Benchmark profiles: configurations x steps per size, repeats, and the single interactive run.
PROFILES = {
    "full": dict(theorem=(8, 500), jena=(8, 50), repeats=5, jena_repeats=3, single_repeats=5,
                 default_threads_repeats=3),
    "book": dict(theorem=(8, 500), jena=(8, 3), repeats=3, jena_repeats=2, single_repeats=3,
                 default_threads_repeats=0),  # the chapter's time budget: no default-threads run
    "tiny": dict(theorem=(4, 20), jena=(2, 2), repeats=1, jena_repeats=1, single_repeats=1,
                 default_threads_repeats=0),
}

#: The interactive chapter's size for ``single_run_seconds``: one 500-step single-layer run.
SINGLE = dict(N=4, n=4, d=8, steps=500)

BETAS = (0.0, 0.25, 0.5, 1.0)


# --- (a) the plain way -----------------------------------------------------------------------------

class PlainTransformer(nn.Module):
    """The model as a paper script would write it: ``nn.Parameter`` weights and a ``forward``.

    Same model as :func:`convres.model.forward` (book equations (model-S) to (model-F)); the weights
    are copied from a ``convres`` parameter dict so both ways start from the same point.
    """

    def __init__(self, cfg: ModelConfig, params: Mapping[str, torch.Tensor]):
        super().__init__()
        self.cfg = cfg
        self.weights = nn.ParameterDict(
            {name.replace(".", "_"): nn.Parameter(w.detach().clone()) for name, w in params.items()})

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        cfg, w = self.cfg, self.weights
        s, act = attention_scale(cfg), activation(cfg.activation)
        H = X
        for l in range(1, cfg.L + 1):
            W_Q, W_K, W_V = w[f"layer{l}_W_Q"], w[f"layer{l}_W_K"], w[f"layer{l}_W_V"]
            W_1, W_2 = w[f"layer{l}_W_1"], w[f"layer{l}_W_2"]
            S = torch.softmax(s * (H @ W_Q) @ (H @ W_K).transpose(-1, -2), dim=-1)
            Z = S @ H @ W_V + cfg.b_attn * H
            H = act(Z @ W_1) @ W_2 + cfg.b_ffn * Z
        if cfg.pool == "mean":
            H = H.mean(dim=-2)
        return H @ w["W_U"]


def plain_sweep(params_list: Sequence[Mapping[str, torch.Tensor]], X: torch.Tensor, Y: torch.Tensor,
                cfgs: Sequence[ModelConfig], mus: Sequence[float], steps: int) -> list[np.ndarray]:
    """Way (a): for each configuration in turn, ``steps`` steps of manual gradient descent.

    Returns the losses ``Phi(theta_t)``, ``t = 0 .. steps``, of each configuration (no early stop).
    """
    out = []
    for params, cfg, mu in zip(params_list, cfgs, mus):
        model = PlainTransformer(cfg, params)
        losses = []
        for t in range(steps + 1):
            loss = 0.5 * (model(X) - Y).pow(2).sum()
            losses.append(loss.item())
            if t == steps:
                break
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= mu * p.grad
        out.append(np.asarray(losses))
    return out


# --- the sweep ------------------------------------------------------------------------------------

def sweep_instance(size: str, configs: int, *, device=None, dtype=torch.float64):
    """The data and the ``configs`` configurations of a sweep at ``size`` (see :data:`SIZES`).

    Configuration ``i`` has ``beta = BETAS[i % 4]``, weights from seed ``1 + i // 4`` and step size
    ``mus[(i // 4) % 2]``: residual strengths, initializations and step sizes all vary.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}.")
    if isinstance(configs, bool) or not isinstance(configs, int) or configs < 1:
        raise ValueError(f"configs must be a positive integer, got {configs!r}.")
    z = SIZES[size]
    base = ModelConfig(d=z["d"], d_qk=z["d_qk"], m=z["m"], c=1, activation=z["activation"])
    X, Y = synthetic_regression(z["N"], z["n"], z["d"], 1, seed=0, dtype=dtype)
    cfgs = [base.replace(beta=BETAS[i % len(BETAS)]) for i in range(configs)]
    params = [init_params(base, seed=1 + i // len(BETAS), dtype=dtype, device=device) for i in range(configs)]
    mus = [z["mus"][(i // len(BETAS)) % 2] for i in range(configs)]
    return params, X.to(device), Y.to(device), cfgs, mus


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def compare_sweep(size: str, configs: int, steps: int, repeats: int, *, device=None) -> dict:
    """Time ways (a) and (b) on the same sweep, alternating, and compare their losses."""
    params, X, Y, cfgs, mus = sweep_instance(size, configs, device=device)
    record_every = max(1, steps // 10)
    plain_t, engine_t, ratios, diff, rel = [], [], [], 0.0, 0.0
    for r in range(repeats):
        run_plain = lambda: plain_sweep(params, X, Y, cfgs, mus, steps)  # noqa: E731
        run_engine = lambda: gradient_descent_batch(params, X, Y, cfgs, mus, steps,  # noqa: E731
                                                    record_every=record_every, device=device)
        if r % 2 == 0:
            tp, losses = _timed(run_plain)
            te, runs = _timed(run_engine)
        else:
            te, runs = _timed(run_engine)
            tp, losses = _timed(run_plain)
        plain_t.append(tp)
        engine_t.append(te)
        ratios.append(tp / te)
        for a, (_, h) in zip(losses, runs):
            if h.status != "max_steps" or len(h.loss) != len(a):
                raise RuntimeError(f"benchmark run stopped early ({h.message}); the sweep must run all steps.")
            diff = max(diff, float(np.max(np.abs(a - h.loss))))
            rel = max(rel, float(np.max(np.abs(a - h.loss) / np.abs(a))))
    z = SIZES[size]
    work = configs * steps
    return {
        "size": size, "N": z["N"], "n": z["n"], "d": z["d"], "d_qk": z["d_qk"], "m": z["m"],
        "activation": z["activation"],
        "configs": configs, "steps": steps, "repeats": repeats, "record_every": record_every,
        "plain_seconds": plain_t, "engine_seconds": engine_t,
        "plain_steps_per_s": work / statistics.median(plain_t),
        "engine_steps_per_s": work / statistics.median(engine_t),
        "speedup": statistics.median(ratios), "speedup_per_repeat": ratios,
        "max_abs_loss_diff": diff, "max_rel_loss_diff": rel,
    }


def single_run_seconds(repeats: int, *, device=None) -> dict:
    """Wall time of one 500-step single-layer :func:`convres.gd.gradient_descent` run at the
    interactive size (:data:`SINGLE`, every-step singular values), and of the same run through the
    engine with one configuration. Medians of ``repeats``."""
    cfg = ModelConfig(d=SINGLE["d"], d_qk=SINGLE["d"], m=SINGLE["d"], c=1)
    X, Y = synthetic_regression(SINGLE["N"], SINGLE["n"], SINGLE["d"], 1, seed=0)
    X, Y = X.to(device), Y.to(device)
    params = init_params(cfg, seed=1, device=device)
    gd_t, eng_t = [], []
    for _ in range(repeats):
        gd_t.append(_timed(lambda: gradient_descent(params, X, Y, cfg, 0.005, SINGLE["steps"]))[0])
        eng_t.append(_timed(lambda: gradient_descent_batch([params], X, Y, cfg, 0.005, SINGLE["steps"]))[0])
    return {"gd": statistics.median(gd_t), "engine": statistics.median(eng_t), "gd_all": gd_t, "engine_all": eng_t}


def _maxrss_mb(who=resource.RUSAGE_SELF) -> float:
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    scale = 1.0 if sys.platform == "darwin" else 1024.0
    return resource.getrusage(who).ru_maxrss * scale / 2**20


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _proc_status_mb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


_MEMORY_CHILD = r"""
import json, sys
from convres.bench import sweep_instance, plain_sweep, _maxrss_mb, _reset_peak_rss, _proc_status_mb
from convres.engine import gradient_descent_batch, torch_threads
way, size, configs, steps, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with torch_threads(threads or None):
    p, X, Y, c, m = sweep_instance(size, configs)
    reset = _reset_peak_rss()
    before = _proc_status_mb("VmRSS") if reset else _maxrss_mb()
    if way == "plain":
        plain_sweep(p, X, Y, c, m, steps)
    else:
        gradient_descent_batch(p, X, Y, c, m, steps, record_every=max(1, steps // 10))
    after = _proc_status_mb("VmHWM") if reset else _maxrss_mb()
print(json.dumps({"growth": after - before, "method": "VmHWM - VmRSS" if reset else "ru_maxrss"}))
"""


def memory_by_way(size: str, configs: int, steps: int, threads: int | None) -> dict:
    """Peak memory each way adds during one sweep, each in a fresh process, in MiB (CPU only).

    On Linux the kernel's peak resident set size is reset just before the sweep
    (``/proc/self/clear_refs``) and the growth is ``VmHWM`` after minus ``VmRSS`` before;
    elsewhere it is the growth of ``getrusage`` ``ru_maxrss``, which hides anything below the
    peak reached while importing PyTorch.
    """
    out = {}
    for way in ("plain", "engine"):
        res = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, way, size, str(configs), str(steps),
                              str(threads or 0)], capture_output=True, text=True, check=True)
        m = json.loads(res.stdout.strip().splitlines()[-1])
        out[way], out["method"] = m["growth"], m["method"]
    return out


def benchmark_config(profile: str = "full", *, threads: int | None = 1, device: str = "cpu") -> dict:
    """Everything a benchmark result depends on (its cache key)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}.")
    check_device(device)  # a clear ValueError for an unknown device or a build without CUDA
    return {"profile": profile, **PROFILES[profile], "sizes": SIZES, "single": SINGLE,
            "threads": threads, "device": str(device), "torch": torch.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count()}


def run_benchmark(profile: str = "full", *, threads: int | None = 1, device: str = "cpu",
                  memory: bool = True) -> dict:
    """Run the whole benchmark and return one JSON-serializable dict.

    Top-level keys: ``speedup`` (of the theorem-size sweep only, named by ``speedup_sweep``:
    plain time / engine time, median of the per-repeat ratios; each sweep's own speed-up is in
    ``sweeps``), ``single_run_seconds`` (median wall time of one 500-step
    :func:`convres.gd.gradient_descent` run at the interactive size), ``max_abs_loss_diff``
    (largest difference between the two ways' losses over both sweeps and every repeat, named by
    ``max_abs_loss_diff_sweeps``),
    ``peak_memory_mb`` (peak resident set size of this process, ``getrusage`` ``ru_maxrss``: the
    Python interpreter and PyTorch included); ``sweeps`` holds the details per size.

    Args:
        profile: one of :data:`PROFILES` (``"full"`` for the report, ``"book"`` for the chapter,
            ``"tiny"`` for tests).
        threads: PyTorch intra-op threads during the timings (``None``: PyTorch's default).
        device: where both ways run (``"cpu"``, ``"cuda"``, ...).
        memory: also measure each way's peak memory in a fresh process (CPU only).
    """
    config = benchmark_config(profile, threads=threads, device=device)
    dev = check_device(device)
    default_threads = torch.get_num_threads()
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    with torch_threads(threads):
        sweeps = {size: compare_sweep(size, *config[size], config["repeats" if size == "theorem" else "jena_repeats"],
                                      device=dev) for size in ("theorem", "jena")}
        single = single_run_seconds(config["single_repeats"], device=dev)
    single_default = None
    if config["default_threads_repeats"]:
        with torch_threads(default_threads):
            single_default = single_run_seconds(config["default_threads_repeats"], device=dev)
    result = {
        "speedup": sweeps["theorem"]["speedup"],
        "speedup_sweep": "theorem",
        "single_run_seconds": single["gd"],
        "max_abs_loss_diff": max(s["max_abs_loss_diff"] for s in sweeps.values()),
        "max_abs_loss_diff_sweeps": list(sweeps),
        "fields": {
            "speedup": "plain / engine time of the 'theorem' sweep (median of per-repeat ratios); "
                       "the 'jena' sweep's speed-up is sweeps.jena.speedup",
            "single_run_seconds": "median wall time of one 500-step gd.gradient_descent run (N=4, n=4, d=8)",
            "max_abs_loss_diff": "largest |loss difference| between the two ways over both sweeps "
                                 "(theorem and jena) and every repeat",
            "peak_memory_mb": "peak resident set size of the benchmark process (ru_maxrss), MiB",
        },
        "peak_memory_mb": _maxrss_mb(),
        "peak_memory_method": "resource.getrusage(RUSAGE_SELF).ru_maxrss of the benchmark process",
        "single_run_engine_seconds": single["engine"],
        "single_run_seconds_default_threads": single_default and single_default["gd"],
        "single_runs": {"threads": single, "default_threads": single_default},
        "sweeps": sweeps,
        "threads": threads, "default_threads": default_threads, "device": str(dev),
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "benchmark_seconds": time.perf_counter() - t_start, "config": config,
    }
    if memory and dev.type == "cpu":
        jc, js = config["jena"]
        result["memory_growth_mb_by_way"] = {
            "size": "jena", "configs": jc, "steps": js,
            **memory_by_way("jena", jc, js, threads)}
    return result


def cache_path(profile: str = "book", *, threads: int | None = 1, device: str = "cpu"):
    """Where :func:`cached_benchmark` keeps the result of ``profile``."""
    return cache_dir() / f"bench-{cache_key(benchmark_config(profile, threads=threads, device=device))}.json"


def cached_benchmark(profile: str = "book", *, threads: int | None = 1, device: str = "cpu",
                     refresh: bool = False) -> tuple[dict, bool]:
    """``(result, from_cache)``: the cached result of :func:`run_benchmark` for this profile on this
    machine and package version, or a fresh one (then cached) if there is none or ``refresh``."""
    computed = []

    def compute():
        computed.append(True)
        return run_benchmark(profile, threads=threads, device=device)

    result = cached_json("bench", benchmark_config(profile, threads=threads, device=device), compute,
                         refresh=refresh)
    return result, not computed


def format_report(result: dict) -> str:
    """A short plain-text report of a :func:`run_benchmark` result."""
    lines = [f"threads={result['threads']} (torch default {result['default_threads']}), device={result['device']}, "
             f"load average {result['load_average_before'][0]:.1f} -> {result['load_average_after'][0]:.1f}"]
    for s in result["sweeps"].values():
        lines.append(
            f"{s['size']:>8}: {s['configs']} configs x {s['steps']} steps (N={s['N']}, n={s['n']}, d={s['d']}, "
            f"m={s['m']}), median of {s['repeats']}: plain {s['plain_steps_per_s']:.0f} steps/s, engine "
            f"{s['engine_steps_per_s']:.0f} steps/s, speed-up {s['speedup']:.2f}x, max |loss diff| "
            f"{s['max_abs_loss_diff']:.1e}")
    default = result["single_run_seconds_default_threads"]
    lines.append(f"single 500-step run (gd.gradient_descent, N=4, n=4, d=8): {result['single_run_seconds']:.3f} s "
                 f"at threads={result['threads']}"
                 + ("" if default is None else f", {default:.3f} s at {result['default_threads']} threads")
                 + f"; engine with one configuration {result['single_run_engine_seconds']:.3f} s")
    lines.append(f"peak memory (ru_maxrss of this process): {result['peak_memory_mb']:.0f} MiB")
    if "memory_growth_mb_by_way" in result:
        m = result["memory_growth_mb_by_way"]
        lines.append(f"peak memory added by one {m['size']} sweep ({m['configs']} configs x {m['steps']} steps, "
                     f"fresh process each, {m['method']}): plain {m['plain']:.1f} MiB, engine {m['engine']:.1f} MiB")
    return "\n".join(lines)


def plot_speed(ax, result: dict) -> None:
    """Bar chart of configuration-steps per second, plain loop vs engine, one group per size (log scale)."""
    sizes = list(result["sweeps"])
    x = np.arange(len(sizes))
    plain = [result["sweeps"][s]["plain_steps_per_s"] for s in sizes]
    engine = [result["sweeps"][s]["engine_steps_per_s"] for s in sizes]
    ax.bar(x - 0.2, plain, 0.4, label="(a) plain nn.Module loop", color="tab:gray")
    ax.bar(x + 0.2, engine, 0.4, label="(b) convres engine", color="tab:blue")
    for i, s in enumerate(sizes):
        ax.annotate(f"{result['sweeps'][s]['speedup']:.1f}x", (x[i] + 0.2, engine[i]), ha="center",
                    va="bottom", fontsize=9)
    ax.set_xticks(x, [f"{s}\n({result['sweeps'][s]['configs']} configs)" for s in sizes])
    ax.set_xlabel("instance size of the sweep")
    ax.set_yscale("log")
    ax.set_ylabel("configuration-steps per second")
    ax.legend(frameon=False)


#: The book's targets on a 2-core machine: (name, key, comparison, threshold).
TARGETS = (
    ("speed-up, 8 configs x 500 steps (theorem size)", "speedup", ">=", 5.0),
    ("one 500-step run, seconds", "single_run_seconds", "<", 0.5),
    ("max |loss diff|, both sweeps", "max_abs_loss_diff", "<", 1e-10),
)


def targets_table(result: dict) -> list[dict]:
    """One row per target of :data:`TARGETS`: ``target``, ``measured``, ``threshold``, ``met``."""
    rows = []
    for name, key, op, threshold in TARGETS:
        value = result[key]
        rows.append({"target": name, "measured": value, "threshold": f"{op} {threshold:g}",
                     "met": value >= threshold if op == ">=" else value < threshold})
    return rows
