"""Benchmark: ``convres.sweep`` against three loops a paper script would write, first call and warm.

The same sweep (configurations that differ in residual coefficient beta, initial weights and step
size mu), from the same starting weights, four ways:

(a) *plain*: one ``torch.nn.Module`` per configuration (:class:`PlainTransformer`), ``loss.backward()``
    and a manual update ``p -= mu * p.grad``, configurations one after another;
(b) *stacked*: every configuration's weights stacked on a leading axis of one module
    (:class:`StackedTransformer`, broadcasting matmuls), one autograd graph for the summed loss;
(c) *compiled*: (b) with the module compiled by ``torch.compile`` (its forward and, through
    AOTAutograd, its backward; compiled once per shape and cached on disk by PyTorch);
(d) *convres*: ``convres.sweep`` on the list of configurations (which also records every gradient
    norm, applies the stopping rules and chooses how to stack by problem size).

Both comparison models are written here on purpose, independently of ``convres.model``; the loss
curves of the four ways must agree. *Warm*: in one process, after one call of each way, the ways
alternate their order repeat after repeat, and a speed-up is the median of the per-repeat ratios
(on a shared machine the load drifts; a ratio of two runs taken seconds apart is more robust than
a ratio of medians taken minutes apart). *First call*: each way in a fresh process (the time of its
first sweep, after imports), the compiled way twice: with an empty compilation cache and again
with the cache the first process left on disk. Times are CPU seconds (one thread; the compiler's
child processes included), which a busy machine inflates less than wall time; the load average
is recorded with them.

Usage: ``python benchmarks/gd_speed.py [--profile full|quick|tiny] [--threads 1] [--device cpu]
[--json] [--out FILE]``. The *Performance* appendix reads the
committed result of the ``full`` profile, ``benchmarks/gd_speed.json`` (:func:`committed_result`),
and never times anything itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import convres
from convres import ModelConfig, init_params, synthetic_regression
from convres import sweep as convres_sweep
from convres.model import attention_scale
from convres.runtime import check_device, max_threads, torch_threads

HERE = Path(__file__).resolve().parent
#: The committed result of the ``full`` profile, which the *Performance* appendix reads.
RESULT = HERE / "gd_speed.json"

#: The sizes: the interactive (theorem) instance, a simulations regime, the Jena Climate
#: experiment's shapes and an SST-2 depth study's (synthetic Gaussian data of those shapes; the
#: speed does not depend on the values).
SIZES = {
    "theorem": dict(N=2, n=4, d=16, d_qk=16, m=16, L=1, activation="gelu", pool=None, configs=8,
                    mus=(0.005, 0.0025)),
    "one run": dict(N=2, n=4, d=16, d_qk=16, m=16, L=1, activation="gelu", pool=None, configs=1,
                    mus=(0.005, 0.0025)),
    "simulations": dict(N=4, n=4, d=32, d_qk=32, m=32, L=1, activation="gelu", pool=None, configs=40,
                        mus=(0.002, 0.001)),
    "jena": dict(N=321, n=24, d=11, d_qk=11, m=32, L=1, activation="relu", pool=None, configs=8,
                 mus=(1e-5, 5e-6)),
    "sst2": dict(N=8192, n=10, d=16, d_qk=16, m=16, L=6, activation="gelu", pool=None, configs=2,
                 mus=(2e-6, 1e-6)),
}

#: Per profile: the (size, dtype, steps, repeats) rows, the ways, and whether first calls are timed
#: in fresh processes.
PROFILES = {
    "full": dict(rows=[("theorem", "float64", 400, 7), ("one run", "float64", 400, 7),
                       ("simulations", "float64", 300, 3), ("jena", "float64", 20, 3),
                       ("sst2", "float32", 3, 3), ("sst2", "float64", 2, 1)],
                 ways=("plain", "stacked", "compiled", "convres"), first_call=True),
    "quick": dict(rows=[("theorem", "float64", 300, 3), ("jena", "float64", 5, 3)],
                  ways=("plain", "stacked", "convres"), first_call=False),
    "tiny": dict(rows=[("theorem", "float64", 5, 1), ("jena", "float64", 1, 1)],
                 ways=("plain", "stacked", "convres"), first_call=False),
}

#: The depths of the SST-2 paper piece, and its steps: the piece estimate of the ``full`` profile.
PIECE = dict(depths=(2, 6, 10), betas=(0.0, 1.0), steps=1000, measured_steps=4, repeats=3)

BETAS = (0.0, 0.25, 0.5, 1.0)
#: The backend of the compiled way (tests use ``"eager"``, which traces without compiling).
COMPILE_BACKEND = "inductor"


class PlainTransformer(nn.Module):
    """Way (a): the model as a paper script would write it, ``nn.Parameter`` weights and a ``forward``."""

    def __init__(self, cfg: ModelConfig, params):
        super().__init__()
        self.cfg = cfg
        self.w = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(v.detach().clone())
                                   for k, v in params.items()})

    def forward(self, X):
        cfg, w, s = self.cfg, self.w, attention_scale(self.cfg)
        act = convres.ACTIVATIONS[cfg.activation]
        b_attn, b_ffn = cfg.residual
        H = X
        for l in range(1, cfg.L + 1):
            S = torch.softmax(s * (H @ w[f"layer{l}_W_Q"]) @ (H @ w[f"layer{l}_W_K"]).transpose(-1, -2), -1)
            Z = S @ H @ w[f"layer{l}_W_V"] + b_attn * H
            H = act(Z @ w[f"layer{l}_W_1"]) @ w[f"layer{l}_W_2"] + b_ffn * Z
        return (H.mean(-2) if cfg.pool == "mean" else H) @ w["W_U"]


class StackedTransformer(nn.Module):
    """Way (b): all configurations in one module, every weight ``(B, p, q)``, broadcasting over ``B``."""

    def __init__(self, cfgs, params_list):
        super().__init__()
        self.cfg, self.names = cfgs[0], {k.replace(".", "_"): k for k in params_list[0]}
        self.w = nn.ParameterDict({k: nn.Parameter(torch.stack([p[name].detach() for p in params_list]))
                                   for k, name in self.names.items()})
        dtype = params_list[0]["W_U"].dtype
        self.b_attn = torch.tensor([c.residual[0] for c in cfgs], dtype=dtype).view(-1, 1, 1, 1)
        self.b_ffn = torch.tensor([c.residual[1] for c in cfgs], dtype=dtype).view(-1, 1, 1, 1)

    def load(self, params_list) -> StackedTransformer:
        """Set the weights to ``params_list`` again (the same module, so a compiled one is reused)."""
        with torch.no_grad():
            for k, w in self.w.items():
                w.copy_(torch.stack([p[self.names[k]] for p in params_list]))
        return self

    def forward(self, X):
        cfg, w, s = self.cfg, self.w, attention_scale(self.cfg)
        act = convres.ACTIVATIONS[cfg.activation]
        H = X.unsqueeze(0)
        for l in range(1, cfg.L + 1):
            W = {k: w[f"layer{l}_{k}"].unsqueeze(1) for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
            S = torch.softmax(s * (H @ W["W_Q"]) @ (H @ W["W_K"]).transpose(-1, -2), -1)
            Z = S @ H @ W["W_V"] + self.b_attn * H
            H = act(Z @ W["W_1"]) @ W["W_2"] + self.b_ffn * Z
        H = H.mean(-2) if cfg.pool == "mean" else H
        return H @ (w["W_U"] if cfg.pool == "mean" else w["W_U"].unsqueeze(1))


def sweep(size: str, dtype: str = "float64", device=None):
    """``(params_list, X, Y, cfgs, mus)`` of the sweep at ``size``: configuration ``i`` has
    ``beta = BETAS[i % 4]``, weights from seed ``1 + i // 4`` and step ``mus[(i // 4) % 2]``
    (SST-2: ``beta`` 0 and 1, the two arms of a depth)."""
    z = SIZES[size]
    dt = getattr(torch, dtype)
    base = ModelConfig(d=z["d"], d_qk=z["d_qk"], m=z["m"], L=z["L"], activation=z["activation"],
                       pool=z["pool"])
    X, Y = synthetic_regression(z["N"], z["n"], z["d"], 1, seed=0, dtype=dt, pooled=z["pool"] == "mean")
    k, betas = z["configs"], (0.0, 1.0) if size == "sst2" else BETAS
    cfgs = [base.replace(beta=betas[i % len(betas)]) for i in range(k)]
    params = [init_params(base, seed=1 + i // len(betas), dtype=dt, device=device) for i in range(k)]
    mus = [z["mus"][(i // len(betas)) % 2] for i in range(k)]
    return params, X.to(device), Y.to(device), cfgs, mus


def _descend(model, X, Y, mus, steps, stacked: bool):
    """Manual gradient descent on ``model``; returns the losses (one row per configuration)."""
    mu = torch.tensor(mus, dtype=X.dtype, device=X.device)
    losses = []
    for t in range(steps + 1):
        phi = 0.5 * (model(X) - Y).pow(2).flatten(1 if stacked else 0).sum(-1)
        losses.append(phi.detach().reshape(-1))
        if t == steps:
            break
        model.zero_grad()
        phi.sum().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= (mu.view(-1, *[1] * (p.dim() - 1)) if p.dim() == 3 else mu) * p.grad
    return torch.stack(losses, 1).cpu().numpy()


def way_plain(params, X, Y, cfgs, mus, steps):
    return np.concatenate([_descend(PlainTransformer(c, p).to(X.device), X, Y, [m], steps, False)
                           for p, c, m in zip(params, cfgs, mus)])


def way_stacked(params, X, Y, cfgs, mus, steps):
    return _descend(StackedTransformer(cfgs, params).to(X.device), X, Y, mus, steps, True)


_COMPILED: dict = {}


def way_compiled(params, X, Y, cfgs, mus, steps):
    """Way (c): one compiled module per shape of the sweep, its weights loaded again at each call."""
    key = (len(params), tuple(c for c in cfgs), tuple(X.shape), X.dtype, str(X.device))
    if key not in _COMPILED:
        model = StackedTransformer(cfgs, params).to(X.device)
        _COMPILED[key] = (model, torch.compile(model, backend=COMPILE_BACKEND))
    model, compiled = _COMPILED[key]
    model.load(params)
    return _descend(compiled, X, Y, mus, steps, True)


def way_convres(params, X, Y, cfgs, mus, steps):
    runs = convres_sweep(params, X, Y, cfgs, mus, steps)
    bad = [r.history.message for r in runs if r.history.status != "max_steps"]
    if bad:
        raise RuntimeError(f"a benchmark run stopped early ({bad[0]}); the sweep must run all steps.")
    return np.stack([r.history.loss for r in runs])


WAYS = {"plain": way_plain, "stacked": way_stacked, "compiled": way_compiled, "convres": way_convres}


def cpu_seconds() -> float:
    """CPU time of this process and of the child processes it waited for (the C++ compiler that
    ``torch.compile`` runs with one compile thread), in seconds."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def _sync(device):
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def loss_differences(losses: dict) -> dict:
    """Per way, against convres: the largest difference of the loss curves relative to each run's
    initial loss (a relative difference at the float64 floor of a converged run would mean
    nothing), and the largest relative difference of the final losses of the runs that end above
    1e-8 of their initial loss (``None`` when none does)."""
    ref = losses["convres"]
    above = ref[:, -1] > 1e-8 * ref[:, 0]
    out = {}
    for w, v in losses.items():
        if w != "convres":
            final = np.abs(v[above, -1] - ref[above, -1]) / ref[above, -1]
            out[w] = {"curve": float(np.max(np.abs(v - ref) / ref[:, :1])),
                      "final": float(final.max()) if above.any() else None}
    return out


def measure(size: str, dtype: str, steps: int, repeats: int, ways, device=None) -> dict:
    """Warm timings: one call of every way first, then ``repeats`` rounds alternating their order;
    the loss curves compared (:func:`loss_differences`)."""
    args = (*sweep(size, dtype, device), steps)
    losses = {w: WAYS[w](*args) for w in ways}               # the first calls, not timed here
    seconds: dict = {w: [] for w in ways}
    for r in range(repeats):
        for w in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            t0 = cpu_seconds()
            losses[w] = WAYS[w](*args)
            _sync(device)
            seconds[w].append(cpu_seconds() - t0)
    z = SIZES[size]
    return {"size": size, "dtype": dtype, "steps": steps, "repeats": repeats, "configs": z["configs"],
            "shape": f"{z['N']} x {z['n']} x {z['d']}, d_qk = {z['d_qk']}, m = {z['m']}, L = {z['L']}",
            "seconds": {w: statistics.median(v) for w, v in seconds.items()},
            "speedup": {w: statistics.median(a / b for a, b in zip(seconds[w], seconds["convres"]))
                        for w in ways if w != "convres"},
            "loss_diff": loss_differences(losses)}


def first_call(way: str, size: str, dtype: str, steps: int, threads, device=None) -> float:
    """The process CPU time of ``way``'s first sweep in this process (after imports and data)."""
    args = (*sweep(size, dtype, device), steps)
    with torch_threads(threads):
        t0 = cpu_seconds()
        WAYS[way](*args)
        _sync(device)
        return cpu_seconds() - t0


def _fresh(way, size, dtype, steps, threads, device, env) -> float:
    """:func:`first_call` in a fresh Python process."""
    command = [sys.executable, str(Path(__file__).resolve()), "--first-call", way, size, dtype, str(steps),
               "--threads", str(threads or 0), "--device", str(device or "cpu")]
    path = os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": path, **env})
    if done.returncode != 0:
        raise RuntimeError(f"the first call of {way} at {size} failed: {done.stderr.strip()[-2000:]}")
    return float(json.loads(done.stdout)["seconds"])


def first_calls(size, dtype, steps, ways, threads, device) -> dict:
    """Per way, its first call in a fresh process; the compiled way with an empty compilation
    cache (``compiled``) and with the cache that run left (``compiled, cache on disk``)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="gd-speed-inductor-") as cache:
        for w in ways:
            env = {"TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_COMPILE_THREADS": "1"} \
                if w == "compiled" else {}
            out[w] = _fresh(w, size, dtype, steps, threads, device, env)
            if w == "compiled":
                out["compiled, cache on disk"] = _fresh(w, size, dtype, steps, threads, device, env)
    return out


def piece_estimate(threads, device=None) -> dict:
    """The SST-2 paper piece (:data:`PIECE`): ``convres.sweep`` at each depth, float32, with a
    callback at every step as the experiment has (one step per block, a trace per step), timed over
    ``measured_steps`` steps after one warm-up step (the median of ``repeats``); the piece's
    training runs then take ``sum over depths and betas of steps / rate`` seconds."""
    z = SIZES["sst2"]
    X, Y = synthetic_regression(z["N"], z["n"], z["d"], 1, seed=0, dtype=torch.float32)
    rates = {}
    with torch_threads(threads):
        for L in PIECE["depths"]:
            cfg = ModelConfig(d=z["d"], d_qk=z["d_qk"], m=z["m"], L=L, activation=z["activation"])
            params = [init_params(cfg, seed=1, dtype=torch.float32, device=device)]
            for b in PIECE["betas"]:
                convres_sweep(params, X.to(device), Y.to(device), cfg.replace(beta=b), 1e-6, 1,
                              callback=lambda step: None)
                seconds = []
                for _ in range(PIECE["repeats"]):
                    t0 = cpu_seconds()
                    convres_sweep(params, X.to(device), Y.to(device), cfg.replace(beta=b), 1e-6,
                                  PIECE["measured_steps"], callback=lambda step: None)
                    _sync(device)
                    seconds.append(cpu_seconds() - t0)
                rates[f"L={L}, beta={b:g}"] = (PIECE["measured_steps"] + 1) / statistics.median(seconds)
    seconds = sum(PIECE["steps"] / r for r in rates.values())
    return {"steps_per_second": rates, "steps": PIECE["steps"], "minutes": seconds / 60}


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def run(profile: str = "quick", *, threads: int | None = 1, device: str = "cpu") -> dict:
    """Every row of ``profile``; returns one JSON-able dict."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}.")
    dev = check_device(device)
    p = PROFILES[profile]
    load = [_load()]
    with torch_threads(threads):
        used = torch.get_num_threads()
        rows = []
        for size, dtype, steps, repeats in p["rows"]:
            row = measure(size, dtype, steps, repeats, p["ways"], dev)
            if p["first_call"]:
                row["first_call"] = first_calls(size, dtype, steps, p["ways"], threads, dev)
            rows.append(row)
            load.append(_load())
        piece = piece_estimate(threads, dev) if p["first_call"] else None
    return {"profile": profile, "threads": used, "device": str(dev), "torch": torch.__version__,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or 'CPU'}",
            "load_average": [v for v in load if v is not None], "settings": settings(profile),
            "rows": rows, "sst2_piece": piece}


def settings(profile: str) -> dict:
    """What a result of ``profile`` was computed with (checked when a committed result is read)."""
    p = PROFILES[profile]
    return {"sizes": {s: SIZES[s] for s, *_ in p["rows"]}, "rows": [list(r) for r in p["rows"]],
            "ways": list(p["ways"]), "piece": PIECE if p["first_call"] else None}


def committed_result(path: Path = RESULT) -> dict:
    """The committed result of the ``full`` profile, checked on reading: the same settings as this
    script's, every number finite; else a ValueError naming the file and the command to run."""
    redo = f"rerun it: python benchmarks/gd_speed.py --profile full --out {path.name}"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"the committed benchmark {path} cannot be read ({err}); {redo}.") from None
    if not isinstance(result, dict) or result.get("profile") != "full":
        raise ValueError(f"{path} is not a result of the full profile; {redo}.")
    if json.loads(json.dumps(settings("full"))) != result.get("settings"):
        raise ValueError(f"{path} was computed with other settings than benchmarks/gd_speed.py has now; "
                         f"{redo}.")

    def finite(v) -> bool:
        if isinstance(v, dict):
            return all(finite(x) for x in v.values())
        if isinstance(v, list):
            return all(finite(x) for x in v)
        return not isinstance(v, float) or math.isfinite(v)

    if not finite(result):
        raise ValueError(f"{path} holds a number that is not finite; {redo}.")
    return result


def format_report(result: dict) -> str:
    """A plain-text table of ``result``: seconds per way (warm, and first call when timed) and the
    speed-up of convres over each way."""
    ways = list(result["rows"][0]["seconds"])
    lines = [f"convres.sweep against {', '.join(w for w in ways if w != 'convres')} ({result['threads']} "
             f"thread(s), {result['device']}, torch {result['torch']}; process CPU seconds)",
             f"{'size':<12} {'dtype':<8} {'configs x steps':>15} "
             + " ".join(f"{w:>10}" for w in ways) + " " + " ".join(f"{'vs ' + w:>12}" for w in ways[:-1])]
    for r in result["rows"]:
        s = r["seconds"]
        lines.append(f"{r['size']:<12} {r['dtype']:<8} {r['configs']:>7} x {r['steps']:<5} "
                     + " ".join(f"{s[w]:>10.3f}" for w in ways) + " "
                     + " ".join(f"{r['speedup'][w]:>11.2f}x" for w in ways[:-1]))
        if "first_call" in r:
            f = r["first_call"]
            lines.append(f"{'  first call':<21} {'':>7}  " + " ".join(f"{f[w]:>10.3f}" for w in ways)
                         + (f"  (compiled with its cache on disk: {f['compiled, cache on disk']:.3f})"
                            if "compiled" in f else ""))
    if result.get("sst2_piece"):
        lines.append(f"SST-2 paper piece, training runs: about {result['sst2_piece']['minutes']:.0f} minutes")
    return "\n".join(lines)


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= max_threads():
        raise argparse.ArgumentTypeError(f"must be an integer in 0 .. {max_threads()} (0: PyTorch's default)")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gd_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--threads", type=_threads, default=1, help="intra-op threads (0: PyTorch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", help="also write the JSON result to this file")
    parser.add_argument("--first-call", nargs=4, metavar=("WAY", "SIZE", "DTYPE", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        check_device(args.device)
        if args.first_call:
            way, size, dtype, steps = args.first_call
            seconds = first_call(way, size, dtype, int(steps), args.threads or None,
                                 check_device(args.device))
            print(json.dumps({"seconds": seconds}))
            return 0
        result = run(args.profile, threads=args.threads or None, device=args.device)
    except (ValueError, RuntimeError) as err:
        print(f"gd_speed: error: {err}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1, allow_nan=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
