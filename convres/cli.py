"""The command line: ``python -m convres SUBCOMMAND ...`` (``--help`` lists the subcommands).

Each subcommand is a pair of functions registered with :func:`command`: one adds its arguments to
an ``argparse`` parser, one runs it and returns the exit status. Output is plain text, or one JSON
object with ``--json`` where the subcommand offers it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable

from . import __version__

__all__ = ["main", "command"]

_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {}


def command(name: str, help: str):
    """Register ``add_arguments(parser)`` and return a decorator that registers ``run(args) -> int``."""
    def register_args(add_arguments: Callable[[argparse.ArgumentParser], None]):
        def register_run(run: Callable[[argparse.Namespace], int]):
            _COMMANDS[name] = (help, add_arguments, run)
            return run
        return register_run
    return register_args


def print_json(obj) -> None:
    """Print ``obj`` as one JSON object on stdout."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")


def positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


# --- gd: one gradient-descent run on a synthetic instance -----------------------------------------

def _gd_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the data and the weights (default 0)")
    p.add_argument("--beta", type=nonnegative_float, default=1.0, help="residual coefficient (default 1)")
    p.add_argument("--layers", type=positive_int, default=1, help="number of blocks L (default 1)")
    p.add_argument("--N", type=positive_int, default=4, metavar="SEQUENCES", help="number of sequences N (default 4)")
    p.add_argument("--n", type=positive_int, default=4, metavar="TOKENS", help="tokens per sequence n (default 4)")
    p.add_argument("--d", type=positive_int, default=16, metavar="FEATURES", help="feature dimension d (default 16)")
    p.add_argument("--mu", type=positive_float, default=0.005, help="step size (default 0.005)")
    p.add_argument("--steps", type=positive_int, default=500, help="number of steps (default 500)")
    p.add_argument("--activation", default="relu", choices=("gelu", "relu", "softplus", "tanh"),
                   help="FFN activation (default relu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


@command("gd", "run gradient descent on a random synthetic instance and summarize it")(_gd_args)
def _gd_run(args: argparse.Namespace) -> int:
    from .data import synthetic_regression
    from .gd import gradient_descent
    from .model import ModelConfig, init_params

    cfg = ModelConfig(d=args.d, d_qk=args.d, m=args.d, c=1, L=args.layers, beta=args.beta,
                      activation=args.activation)
    X, Y = synthetic_regression(args.N, args.n, args.d, 1, seed=args.seed)
    params = init_params(cfg, seed=args.seed + 1)
    _, h = gradient_descent(params, X, Y, cfg, args.mu, args.steps, record_every=max(1, args.steps // 50))
    summary = {
        "status": h.status, "message": h.message, "steps": h.steps, "mu": h.mu,
        "initial_loss": float(h.loss[0]) if len(h.loss) else None,
        "final_loss": float(h.loss[-1]) if len(h.loss) else None,
        "sigma_min_Z0": float(h.sigma_min_Z[0]) if len(h.sigma_min_Z) else None,
        "sigma_min_H0": float(h.sigma_min_H[0]) if len(h.sigma_min_H) else None,
    }
    if args.json:
        print_json(summary)
    else:
        for k, v in summary.items():
            print(f"{k:>14}: {v}")
    return 0


# --- theorem: the book's linear-convergence theorem checked on a random instance -------------------

THEOREM_FIELDS = ("alpha", "mu", "mu_max", "sigma_min_Z0", "sigma_max_Z0", "assumptions_hold",
                  "max_excess", "violations", "initial_loss", "final_loss", "steps",
                  "sigma_min_H0", "mu_max_is_estimate", "part_b_holds")

THEOREM_EPILOG = """\
output fields (book chapters 'The theorem' and 'Assumptions'):
  alpha              the rate (sigma_min_H0 / 2)^2 of part (a)
  sigma_min_H0       sigma_Nn(H_0), the smallest singular value of the stacked last hidden matrix
  mu, mu_max         step size used; mu_max = 1/(2 L_hat), L_hat ESTIMATED from sampled
                     Hessian-vector products (not a certified smoothness bound)
  mu_max_is_estimate always true (see mu_max)
  sigma_min_Z0, sigma_max_Z0  extreme singular values of the stacked attention output Z_0
  assumptions_hold   the CHECKED assumptions (A0)-(A4) hold: those of part (a), (A1)-(A3), plus
                     full-rank input (A0) and a non-vacuous rate (A4). It says nothing about
                     part (b), the whole-run statement.
  part_b_holds       false: part (b)'s proper-initialization condition (A5) is certified to fail;
                     null: not decided (convres can certify that (A5) fails, never that it holds)
  max_excess, violations  largest Phi_{t+1}/Phi_t - (1 - mu alpha), and steps where it is > 1e-9
  initial_loss, final_loss, steps  the run
"""


def _theorem_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = THEOREM_EPILOG
    p.add_argument("--seed", type=int, default=0, help="seed of the data (weights: seed + 1; default 0)")
    p.add_argument("--beta", type=nonnegative_float, default=1.0, help="residual coefficient (default 1)")
    p.add_argument("--layers", type=positive_int, default=1, help="number of blocks L (default 1)")
    p.add_argument("--steps", type=positive_int, default=300, help="gradient steps T (default 300)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


@command("theorem", "run GD with the theorem's step size and check Phi_{t+1} <= (1 - mu alpha) Phi_t "
                    "at every step (book chapter 'The theorem')")(_theorem_args)
def _theorem_run(args: argparse.Namespace) -> int:
    from .theory import theorem_instance, theorem_run

    r = theorem_run(*theorem_instance(args.seed, beta=args.beta, layers=args.layers), steps=args.steps)
    summary = {k: r[k] for k in THEOREM_FIELDS}
    if summary["max_excess"] != summary["max_excess"]:  # NaN: no step above the float floor
        summary["max_excess"] = None
    if args.json:
        print_json(summary)
    else:
        labels = {"mu_max": "mu_max (estimated)", "assumptions_hold": "assumptions (A0)-(A4) hold",
                  "part_b_holds": "part (b) holds"}
        for k, v in summary.items():
            if k != "mu_max_is_estimate":
                print(f"{labels.get(k, k):>26}: {'unknown' if v is None else v}")
        b = r["part_b"]
        print(f"  part (b) needs a radius >= {b['radius_lower']:.4g} but r_sigma <= "
              f"{b['r_sigma_upper']:.4g}; only part (a) is checked along the run")
        tags = {"full-rank input": "A0", "width": "A1", "smooth activation": "A2",
                "non-degenerate H_0": "A3", "non-vacuous rate": "A4"}
        for a in r["assumptions"]:
            print(f"  ({tags.get(a['name'], '?')}) {a['name']!r}: {a['statement']}: value {a['value']:.4g}, "
                  f"threshold {a['threshold']:.4g}, holds={a['holds']}")
    return 0


# --- rank-collapse: sigma_min of Attn(X) with and without the residual as d_QK grows ---------------

def _rank_collapse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beta", type=nonnegative_float, default=1.0, help="residual coefficient (default 1)")
    p.add_argument("--seeds", type=positive_int, default=16,
                   help="number K of Gaussian instances; the output is the median over K instances (default 16)")
    p.add_argument("--seed", type=int, default=0, help="first seed: instances seed, ..., seed + K - 1 (default 0)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {d_qk, sigma_min_attn, sigma_min_residual} (medians over K instances), "
                        "with sigma_min_attn_q10, sigma_min_attn_q90 and instances")


@command("rank-collapse", "median over K Gaussian instances of sigma_min(Attn(X)) and sigma_min(Attn(X) + beta X) "
                          "for growing d_QK (scale 1/d_QK)")(_rank_collapse_args)
def _rank_collapse_run(args: argparse.Namespace) -> int:
    from .collapse import sigma_min_table

    if args.seed < 0:
        raise SystemExit(f"--seed must be >= 0, got {args.seed}")
    rows = sigma_min_table(args.beta, seed=args.seed, seeds=args.seeds)
    if args.json:
        print_json(rows)
    else:
        k = args.seeds
        print(f"median over {k} instances (seeds {args.seed}..{args.seed + k - 1}; n = 8, d = 16, scale 1/d_QK, "
              f"beta = {args.beta:g})")
        print(f"{'d_QK':>6}  {'sigma_min(Attn)':>16}  {'10-90 % range':>21}  {'sigma_min(Attn + beta X)':>25}")
        for r in rows:
            rng = f"{r['sigma_min_attn_q10']:.1e} - {r['sigma_min_attn_q90']:.1e}"
            print(f"{r['d_qk']:>6}  {r['sigma_min_attn']:>16.3e}  {rng:>21}  {r['sigma_min_residual']:>25.3e}")
        first, last = rows[0], rows[-1]
        slope = math.log(last["sigma_min_attn"] / first["sigma_min_attn"]) / math.log(last["d_qk"] / first["d_qk"])
        print(f"median sigma_min(Attn) from d_QK = {first['d_qk']} to {last['d_qk']}: x {last['sigma_min_attn'] / first['sigma_min_attn']:.3g} "
              f"(~ d_QK^{slope:+.2f}); median sigma_min(Attn + beta X): x {last['sigma_min_residual'] / first['sigma_min_residual']:.3g}")
    return 0


# --- bench: the batched engine against a plain PyTorch loop (book chapter 'Performance') ----------

def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=("full", "book", "tiny"), default="full",
                   help="sizes and repeats: full (the report), book (the chapter), tiny (tests); default full")
    p.add_argument("--threads", type=int, default=1,
                   help="PyTorch intra-op threads while timing (0: PyTorch's default; default 1)")
    p.add_argument("--device", default="cpu", help="where both ways run: cpu, cuda, ... (default cpu)")
    p.add_argument("--no-memory", action="store_true", help="skip the per-way memory measurement")
    p.add_argument("--json", action="store_true", help="print one JSON object")


@command("bench", "time a sweep of GD runs: plain PyTorch loop vs convres's batched engine; "
                  "the result is also cached for the chapter 'Performance'")(_bench_args)
def _bench_run(args: argparse.Namespace) -> int:
    from .bench import cached_benchmark, format_report, run_benchmark
    from .engine import check_device

    check_device(args.device)  # a clear error for 'gpu' or 'cuda' without CUDA, before any work
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0: PyTorch's default), got {args.threads}.")
    threads = args.threads or None
    if args.no_memory:  # an incomplete result: not cached
        result = run_benchmark(args.profile, threads=threads, device=args.device, memory=False)
    else:  # always measured afresh, then cached for the chapter
        result, _ = cached_benchmark(args.profile, threads=threads, device=args.device, refresh=True)
    if args.json:
        print_json(result)
    else:
        print(format_report(result))
    return 0


# --- reproduce: the book's experiments (chapters Simulations, Jena Climate, SST-2) ----------------

def _reproduce_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="an experiment of --list, or 'all'")
    p.add_argument("--list", action="store_true", help="list the experiments and their figures")
    p.add_argument("--profile", choices=("smoke", "full"), default="smoke",
                   help="smoke: the settings of the book's figures (default); full: more data/seeds/steps")
    p.add_argument("--out", default="figures", help="folder for the PNG figures (default ./figures)")
    p.add_argument("--refresh", action="store_true", help="recompute even if a cached result exists")
    p.add_argument("--download", action="store_true",
                   help="first download missing real data (jena, sst2) into the data directory "
                        "($CONVRES_DATA_DIR, default ~/.cache/convres/data)")
    p.add_argument("--json", action="store_true", help="print the key numbers as one JSON object")


@command("reproduce", "regenerate a figure of the book's experiments (cached; --list lists them)")(_reproduce_args)
def _reproduce_run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from .cache import atomic_write_bytes
    from .experiments import EXPERIMENTS, key_numbers, run_experiment

    if args.list or args.name is None:
        for name, e in EXPERIMENTS.items():
            print(f"{name:<12} {e['title']}  [{e['chapter']}]")
        print(f"{'all':<12} every experiment above")
        return 0
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    if names[0] not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {args.name!r}; choose one of {sorted(EXPERIMENTS)} or 'all' "
                         "(see --list).")
    from .plotting import EXPERIMENT_PLOTS, figure_png

    out, summary = Path(args.out), {}
    try:  # before any work: --out must be (or become) a folder
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"--out {out}: {out if out.exists() else 'a parent of it'} is an existing file, "
                         "not a folder; pass a folder for the PNG figures (e.g. --out figures) or move "
                         "that file away.") from None
    if args.download:
        from .data import DATASETS, download
        for name in names:
            if name in DATASETS:
                path = download(name)
                if not args.json:
                    print(f"{name}: data in {path}")
    for name in names:
        t0 = time.perf_counter()
        result = run_experiment(name, args.profile, progress=True, refresh=args.refresh)
        png = out / f"{name}-{args.profile}.png"
        atomic_write_bytes(png, figure_png(EXPERIMENT_PLOTS[name](result)))  # never half a PNG
        numbers = key_numbers(name, result)
        summary[name] = {"figure": str(png), "seconds": round(time.perf_counter() - t0, 2), **numbers}
        if not args.json:
            print(f"{name}: {png} ({summary[name]['seconds']} s)")
            for k, v in numbers.items():
                print(f"  {k}: {v}")
    if args.json:
        print_json(summary[names[0]] if len(names) == 1 else summary)
    return 0


# --- entry point -----------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m convres",
        description="convres: companion of arXiv:2506.05249 (gradient descent on Transformers "
                    "with residual connections).")
    parser.add_argument("--version", action="version", version=f"convres {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, _) in _COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    run = _COMMANDS[args.command][2]
    try:
        return int(run(args) or 0)
    except BrokenPipeError:  # e.g. `python -m convres theorem | head`
        sys.stderr.close()
        return 0
    except (ValueError, TypeError, OSError) as err:
        print(f"convres {args.command}: error: {err}", file=sys.stderr)
        return 2
