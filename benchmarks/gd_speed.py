"""Benchmark: ``convres.gradient_descent`` on a sweep, against the two loops a paper script would write.

The same sweep (configurations that differ in residual coefficient beta, initial weights and step
size mu), from the same starting weights, in one process, three ways:

(a) *plain*: one ``torch.nn.Module`` per configuration (:class:`PlainTransformer`), ``loss.backward()``
    and a manual update ``p -= mu * p.grad``, configurations one after another;
(b) *stacked*: every configuration's weights stacked on a leading axis of one module
    (:class:`StackedTransformer`, broadcasting matmuls), one autograd graph for the summed loss:
    the batched loop a user who knows batching would write;
(c) *convres*: ``convres.gradient_descent`` on the list of configurations (which also records every
    gradient norm and the extreme singular values, and stacks by problem size).

Both comparison models are written here on purpose, independently of ``convres.model``; the losses
of the three ways must agree. Timings alternate the order of the ways repeat after repeat, and a
speed-up is the median of the per-repeat ratios (on a shared machine the load drifts; a ratio of
two runs taken seconds apart is more robust than a ratio of medians taken minutes apart).

Usage: ``python benchmarks/gd_speed.py [--profile book|full|tiny] [--threads 1] [--device cpu] [--json]``
The *Performance* appendix of the book reads
:func:`cached_result`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

import convres
from convres import ModelConfig, init_params, synthetic_regression
from convres import sweep as convres_sweep
from convres.cache import cached_json
from convres.model import attention_scale
from convres.runtime import check_device, max_threads, torch_threads

#: The sizes: the theorem chapter's instance, the Jena Climate experiment's shapes and an SST-2 depth
#: study's shapes (synthetic Gaussian data of those shapes; the speed does not depend on the values).
SIZES = {
    "theorem": dict(N=2, n=4, d=16, d_qk=16, m=16, L=1, activation="gelu", pool=None, configs=8,
                    mus=(0.005, 0.0025)),
    "one run": dict(N=2, n=4, d=16, d_qk=16, m=16, L=1, activation="gelu", pool=None, configs=1,
                    mus=(0.005, 0.0025)),
    "jena": dict(N=321, n=24, d=11, d_qk=11, m=32, L=1, activation="relu", pool=None, configs=8,
                 mus=(1e-5, 5e-6)),
    "sst2": dict(N=2048, n=10, d=16, d_qk=16, m=16, L=6, activation="relu", pool="mean", configs=3,
                 mus=(1e-4, 5e-5)),
}

#: Per profile: (size, dtype, steps) rows, and repeats.
PROFILES = {
    "full": dict(rows=[("theorem", "float64", 500), ("one run", "float64", 500), ("jena", "float64", 40),
                       ("sst2", "float64", 10), ("sst2", "float32", 10)], repeats=5),
    "book": dict(rows=[("theorem", "float64", 300), ("one run", "float64", 500), ("jena", "float64", 5),
                       ("sst2", "float64", 2), ("sst2", "float32", 2)], repeats=3),
    "tiny": dict(rows=[("theorem", "float64", 5), ("jena", "float64", 1)], repeats=1),
}

BETAS = (0.0, 0.25, 0.5, 1.0)


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
        self.cfg = cfgs[0]
        self.w = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(torch.stack([p[k].detach()
                                                                                  for p in params_list]))
                                   for k in params_list[0]})
        dtype = params_list[0]["W_U"].dtype
        self.b_attn = torch.tensor([c.residual[0] for c in cfgs], dtype=dtype).view(-1, 1, 1, 1)
        self.b_ffn = torch.tensor([c.residual[1] for c in cfgs], dtype=dtype).view(-1, 1, 1, 1)

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
    ``beta = BETAS[i % 4]``, weights from seed ``1 + i // 4`` and step ``mus[(i // 4) % 2]``."""
    z = SIZES[size]
    dt = getattr(torch, dtype)
    base = ModelConfig(d=z["d"], d_qk=z["d_qk"], m=z["m"], L=z["L"], activation=z["activation"],
                       pool=z["pool"])
    X, Y = synthetic_regression(z["N"], z["n"], z["d"], 1, seed=0, dtype=dt, pooled=z["pool"] == "mean")
    k = z["configs"]
    cfgs = [base.replace(beta=BETAS[i % len(BETAS)]) for i in range(k)]
    params = [init_params(base, seed=1 + i // len(BETAS), dtype=dt, device=device) for i in range(k)]
    mus = [z["mus"][(i // len(BETAS)) % 2] for i in range(k)]
    return params, X.to(device), Y.to(device), cfgs, mus


def _descend(model, X, Y, mus, steps):
    """Manual gradient descent on ``model``; returns the losses (one row per configuration)."""
    mu = torch.tensor(mus, dtype=X.dtype, device=X.device)
    losses = []
    for t in range(steps + 1):
        phi = 0.5 * (model(X) - Y).pow(2).flatten(1 if isinstance(model, StackedTransformer) else 0).sum(-1)
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
    return np.concatenate([_descend(PlainTransformer(c, p), X, Y, [m], steps)
                           for p, c, m in zip(params, cfgs, mus)])


def way_stacked(params, X, Y, cfgs, mus, steps):
    return _descend(StackedTransformer(cfgs, params), X, Y, mus, steps)


def way_convres(params, X, Y, cfgs, mus, steps):
    runs = convres_sweep(params, X, Y, cfgs, mus, steps)
    bad = [r.history.message for r in runs if r.history.status != "max_steps"]
    if bad:
        raise RuntimeError(f"a benchmark run stopped early ({bad[0]}); the sweep must run all steps.")
    return np.stack([r.history.loss for r in runs])


WAYS = {"plain": way_plain, "stacked": way_stacked, "convres": way_convres}


def measure(size: str, dtype: str, steps: int, repeats: int, device=None) -> dict:
    """Time the three ways on one sweep, alternating their order; compare their losses."""
    args = (*sweep(size, dtype, device), steps)
    seconds = {w: [] for w in WAYS}
    losses = {}
    for r in range(repeats):
        order = list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]
        for w in order:
            t0 = time.perf_counter()
            losses[w] = WAYS[w](*args)
            if device is not None and torch.device(device).type == "cuda":
                torch.cuda.synchronize()
            seconds[w].append(time.perf_counter() - t0)
    ratio = {f"convres_vs_{w}": statistics.median(a / b for a, b in zip(seconds[w], seconds["convres"]))
             for w in ("plain", "stacked")}
    # the largest difference of the loss curves, relative to each run's initial loss (a relative
    # difference at the float64 floor of a converged run would be meaningless)
    diff = {w: float(np.max(np.abs(losses[w] - losses["convres"]) / losses["convres"][:, :1]))
            for w in ("plain", "stacked")}
    z = SIZES[size]
    return {"size": size, "dtype": dtype, "steps": steps, "repeats": repeats, "configs": z["configs"],
            "shape": f"{z['N']} x {z['n']} x {z['d']}, m = {z['m']}, L = {z['L']}",
            "seconds": {w: statistics.median(v) for w, v in seconds.items()}, **ratio,
            "max_loss_diff": max(diff.values())}


def run(profile: str = "book", *, threads: int | None = 1, device: str = "cpu") -> dict:
    """Every row of ``profile``; returns one JSON-able dict."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}.")
    dev = check_device(device)
    p = PROFILES[profile]
    with torch_threads(threads):
        used = torch.get_num_threads()
        rows = [measure(size, dtype, steps, p["repeats"], dev) for size, dtype, steps in p["rows"]]
    return {"profile": profile, "threads": used, "device": str(dev), "torch": torch.__version__,
            "machine": f"{platform.machine()}, {platform.processor() or 'CPU'}", "rows": rows}


def cached_result(profile: str = "book", *, threads: int | None = 1, device: str = "cpu",
                  refresh: bool = False) -> dict:
    """:func:`run`, cached by ``convres.cache`` (keyed by the settings, this script and the package)."""
    with open(__file__, "rb") as f:
        script = f.read().decode("utf-8")
    key = {"profile": profile, "threads": threads, "device": device, "script": script}
    return cached_json("benchmark-gd-speed", key, lambda: run(profile, threads=threads, device=device),
                       refresh=refresh)


def format_report(result: dict) -> str:
    """A plain-text table of ``result``."""
    lines = [f"convres.gradient_descent against a plain loop and a stacked graph ({result['threads']} "
             f"thread(s), {result['device']}, torch {result['torch']})",
             f"{'size':<8} {'dtype':<8} {'configs x steps':>15} {'plain s':>8} {'stacked s':>9} "
             f"{'convres s':>9} {'vs plain':>9} {'vs stacked':>10}"]
    for r in result["rows"]:
        s = r["seconds"]
        lines.append(f"{r['size']:<8} {r['dtype']:<8} {r['configs']:>7} x {r['steps']:<5} {s['plain']:>8.3f} "
                     f"{s['stacked']:>9.3f} {s['convres']:>9.3f} {r['convres_vs_plain']:>8.2f}x "
                     f"{r['convres_vs_stacked']:>9.2f}x")
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
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--threads", type=_threads, default=1, help="intra-op threads (0: PyTorch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        check_device(args.device)
        result = run(args.profile, threads=args.threads or None, device=args.device)
    except (ValueError, RuntimeError) as err:
        print(f"gd_speed: error: {err}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, allow_nan=False) if args.json else format_report(result)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
