"""The command line: ``python -m convres SUBCOMMAND ...`` (``--help`` lists the subcommands).

Each subcommand is a pair of functions registered with :func:`command`: one adds its arguments to
an ``argparse`` parser, one runs it and returns the exit status. Output is plain text, or one JSON
object with ``--json`` where the subcommand offers it.
"""

from __future__ import annotations

import argparse
import json
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
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


# --- gd: one gradient-descent run on a synthetic instance -----------------------------------------

def _gd_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the weights (default 0)")
    p.add_argument("--beta", type=nonnegative_float, default=1.0, help="residual coefficient (default 1)")
    p.add_argument("--layers", type=positive_int, default=1, help="number of blocks L (default 1)")
    p.add_argument("--N", type=positive_int, default=4, help="number of sequences (default 4)")
    p.add_argument("--n", type=positive_int, default=4, help="tokens per sequence (default 4)")
    p.add_argument("--d", type=positive_int, default=16, help="feature dimension (default 16)")
    p.add_argument("--mu", type=positive_float, default=0.005, help="step size (default 0.005)")
    p.add_argument("--steps", type=positive_int, default=500, help="number of steps (default 500)")
    p.add_argument("--activation", default="relu", help="FFN activation (relu, gelu, tanh, softplus)")
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


# --- entry point -----------------------------------------------------------------------------------

def _import_subcommands() -> None:
    """Import the modules that register further subcommands (kept lazy for a fast ``--help``)."""
    import importlib
    for module in _SUBCOMMAND_MODULES:
        importlib.import_module(module, __package__)


#: Modules whose import registers a subcommand with :func:`command`.
_SUBCOMMAND_MODULES: list[str] = []


def build_parser() -> argparse.ArgumentParser:
    _import_subcommands()
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
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"convres {args.command}: error: {err}", file=sys.stderr)
        return 2
