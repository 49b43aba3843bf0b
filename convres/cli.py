"""The command line: ``python -m convres SUBCOMMAND ...`` (``--help`` lists the subcommands).

Each subcommand is a function ``run(args) -> exit status`` registered on its ``argparse``
parser with ``set_defaults``. The policies of every subcommand, held here once:

* flags: a flag that the chosen subcommand or mode does not use is an error (:data:`APPLIES`);
* values: every number goes through the coercion of :mod:`convres.values` that the API uses;
* output: plain text, or with ``--json`` always one JSON document (lists included), collected
  and written only once it is complete (never half a document); a closed or full stdout is an
  error (exit 1), never a silent exit 0 (:func:`emit`);
* failures: one line on stderr naming what was asked and what to change (exit 2); a warning
  turned into an error by ``PYTHONWARNINGS`` or ``-W`` is such a line too; Ctrl-C exits with
  status 130 and says what was kept.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import runpy
import sys
import time
import warnings
from pathlib import Path

from ._version import __version__
from .certify import certified_run
from .collapse import sigma_min_table
from .committed import PROFILE, RESULTS_DIR, paper_path, pieces, run_piece
from .data import DATASETS, download
from .experiments import EXPERIMENTS, PROFILES, run_experiment
from .files import atomic_write_bytes
from .gd import gradient_descent
from .instances import certified_instance, synthetic_regression, theorem_instance
from .model import ACTIVATIONS, MAX_SEED, ModelConfig, init_params, memory_estimate
from .paths import cache_dir, setting_path
from .plotting import figure_png
from .runtime import check_device, check_memory
from .theory import theorem_run
from .values import as_int, as_real

__all__ = ["main", "build_parser"]

#: Upper bounds of the size arguments (far beyond what the book runs; they stop typos such as
#: ``--N 10**30`` before any allocation).
LIMITS = {"N": 10**6, "n": 10**4, "d": 10**5, "layers": 1000, "steps": 10**7}


class Usage(ValueError):
    """A request that cannot be run as given (the message says what to change)."""

#: The fields of a claim in ``reproduce --json``: the report's row, and the numbers of the
#: rule (``effect``, ``ci``, ``margin``, ``units``; v3 ``agree``; protocol v4 ``id``, ``measure``,
#: ``sign_test_p``, ``sensitivity``, ``diverged``, ``subset``...; ``reason`` when inconclusive) where
#: the claim has them.
CLAIM_KEYS = ("id", "experiment", "claim", "verdict", "measure", "measurement", "evidence", "criterion",
              "figure", "effect", "ci", "interval", "margin", "units", "agree", "sign_test_p", "diverged",
              "sensitivity", "subset", "subsets", "reason")


class FigureLost(OSError):
    """A figure could not be written (the report was still printed)."""


class OutputLost(OSError):
    """stdout is closed or could not take the whole output."""


def write_json(obj) -> None:
    """Print ``obj`` as one JSON document on stdout: serialized completely first (a NaN or an
    unserializable value raises before anything is written)."""
    text = json.dumps(obj, indent=2, allow_nan=False)
    print(text)


def emit(text: str) -> None:
    """Write the whole output ``text`` to the real stdout at once and flush it; raise
    :class:`OutputLost` when stdout is closed (``>&-``), its reader went away, or the write failed
    (a full disk), so that the exit status says the output was lost."""
    if not text:
        return
    stream = sys.stdout
    if stream is None or getattr(stream, "closed", False):
        raise OutputLost("stdout is closed, so the output was lost; run it with stdout open "
                         "(or redirect it to a file).")
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError) as err:  # EPIPE, ENOSPC, EIO; ValueError: closed file
        raise OutputLost(f"the output could not be written to stdout ({getattr(err, 'strerror', None) or err}"
                         "), so it was lost.") from err


def _number(kind, lo=None, hi=None, lo_open=False):
    """An argparse type: the text read as in :mod:`convres.values` (``as_int``/``as_real``, the
    coercion of the API), the message in the command line's words."""
    def parse(text: str):
        what = "an integer" if kind is int else "a number"
        try:
            number: float = int(text.strip()) if kind is int else float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if kind is float and not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        try:
            bounds = dict(minimum=lo, maximum=hi)
            return as_int("value", number, **bounds) if kind is int else \
                as_real("value", number, above=lo_open, **bounds)
        except (TypeError, ValueError):
            fmt = "{}" if kind is int else "{:g}"
            left = ("> " if lo_open else ">= ") + fmt.format(lo)
            right = f" and <= {fmt.format(hi)}" if hi is not None else ""
            raise argparse.ArgumentTypeError(f"must be {left}{right}, got {text}") from None
    return parse


positive_float = _number(float, 0, lo_open=True)
beta_value = _number(float, 0, 1e3)
seed_value = _number(int, 0, MAX_SEED - 1)  # the weights use seed + 1


def size(name: str):
    return _number(int, 1, LIMITS[name])


def _check_memory(cfg: ModelConfig, N: int, n: int, configs: int = 1) -> None:
    """Refuse a run whose estimated memory exceeds what this machine has available (the cost
    policy of :func:`convres.runtime.check_memory`)."""
    check_memory(memory_estimate(cfg, N, n, configs=configs),
                 f"this run (N={N}, n={n}, d={cfg.d}, L={cfg.L})",
                 "use smaller sizes (--N, --n, --d, --layers)")


# --- gd ------------------------------------------------------------------------------------------

def _gd(args) -> int:
    cfg = ModelConfig(d=args.d, d_qk=args.d, m=args.d, c=1, L=args.layers, beta=args.beta,
                      activation=args.activation)
    _check_memory(cfg, args.N, args.n)
    X, Y = synthetic_regression(args.N, args.n, args.d, 1, seed=args.seed)
    _, h = gradient_descent(init_params(cfg, seed=args.seed + 1), X, Y, cfg,
                            args.mu, args.steps, record_every=args.steps)
    summary = {"status": h.status, "message": h.message, "steps": h.steps, "mu": h.mu,
               "initial_loss": float(h.loss[0]) if len(h.loss) else None,
               "final_loss": float(h.loss[-1]) if len(h.loss) else None,
               "sigma_min_Z0": float(h.sigma_min_Z[0]) if len(h.sigma_min_Z) else None,
               "sigma_min_H0": float(h.sigma_min_H[0]) if len(h.sigma_min_H) else None}
    if args.json:
        write_json(summary)
    else:
        print("\n".join(f"{k:>14}: {v}" for k, v in summary.items()))
    return 0


# --- theorem -------------------------------------------------------------------------------------

THEOREM_EPILOG = """\
output fields (book chapters 'The theorem' and 'Assumptions'):
  status             the run: max_steps, converged or diverged (then nothing is verified)
  alpha              the rate (sigma_nn_H0 / 2)^2 of part (a)
  sigma_nn_H0        sigma_Nn(H_0), the N n-th singular value of the stacked last hidden matrix
                     (0 when N n > d)
  mu, mu_max         step size used; mu_max = 1/(2 L_hat), L_hat ESTIMATED from sampled
                     Hessian-vector products (not a certified smoothness bound)
  sigma_min_Z0, sigma_max_Z0  extreme singular values of the stacked attention output Z_0
  assumptions_hold   the checked assumptions (A0)-(A4) hold (says nothing about part (b') or
                     about mu <= 1/L_B, which part (a) also needs)
  rho                4 sqrt(2 Phi_0) / sigma_0, the left side of part (b') (exact)
  r_sigma_upper, r_sigma_lower  bounds on the radius where sigma_Nn(H) >= sigma_0 / 2
  mu_certified       1/L_upper when the instance is certified (rho < r_sigma_lower), else null
  run_step_certified the run's mu is at most mu_certified
  part_b_holds       part (b') (A5): false = certified to fail (rho >= r_sigma_upper),
                     true = certified to hold for this run's step (run_step_certified),
                     null = not decided
  violations, max_excess  steps where Phi_{t+1}/Phi_t > 1 - mu alpha + 1e-9, and the largest
                     excess (null when the run diverged: nothing was verified)
  initial_loss, final_loss, steps, checked_steps, observed_steps  the run (observed_steps: steps
                     at which every hypothesis of part (a) was measured to hold)
The plain run uses the chapter's fixed instance (N = 2, n = 4, d = 16): --N, --n and --d belong
to --certify and --width-condition.

with --certify (book chapter 'Certified constants and a certified instance'; an instance of the
certified regime: branch scale 0.01, readout scale 0.1, attention scale 1/d_QK, gelu, d_QK = d,
m = d/4, targets +-1; defaults N = 1, n = 2, d = 1024; GD with mu = 1/L_upper):
  route              main (the theorem through W_U) or ffn (with --route ffn)
  certified          every hypothesis of part (b') is established by rigorous bounds computed
                     before the run (float64 round-off aside): ratio < 1
  ratio              rho / r_sigma_lower (certified iff < 1); a failed certificate is a result
  r_sigma_lower      certified lower bound on r_sigma; L_upper, J_upper: certified upper bounds
                     of L_B and J_B on the ball of radius `radius`
  mu, alpha, mu_alpha  mu = 1/L_upper, alpha = (sigma_0/2)^2: Phi_t <= (1 - mu alpha)^t Phi_0
  violations         on a certified instance, steps (while Phi_t > 1e-20 Phi_0) where a certified
                     claim failed: the per-step contraction, the envelope, ||theta_t - theta_0||
                     <= rho, or the singular values above their floor; null when not certified
  observed_violations  the same count on an instance that is not certified (observations only:
                     nothing is certified there); null when certified
  envelope_final     (1 - mu alpha)^steps initial_loss; N, n, d, m: the sizes

with --certify --route ffn (book chapter 'The theorem through the FFN'; the theorem through the
FFN's W_2, per token, N n > d allowed: m = 4096, W_1 gain 300, branch scale 0.001, readout
scale 4, attention scale 1/d_QK, gelu, targets +-1; defaults N = 4, n = 4, d = 8; the default
steps are the fewest with mu alpha T >= ln(1/0.9), at most 2000): the same fields, with
  sigma_0            sigma_M0 sigma_U0, so that alpha = (sigma_0 / 4)^2 = alpha'
  rho                8 sqrt(2 Phi_0) / (sigma_M0 sigma_U0)
  r_sigma_lower      r'_lo: the radius on which sigma_rows(M) >= sigma_M0/2 and sigma_1(W_U) >=
                     sigma_U0/2 are certified; r_M: its part from the FFN activations
  rate_ceiling       1 / (16 kappa(M_0)^2), an upper bound of any such certified mu alpha

with --width-condition (book chapter 'A width theorem'; defaults N = 1, n = 2, --delta 0.05):
  d_min              for every d >= d_min, an instance of the certified regime of width d is
                     certified (by --certify) with probability >= 1 - delta over the data and the
                     initialization; null if none up to 2^40
  ratio, ratio_below the worst-case certificate ratio at d_min (< 1) and at d_min - 1 (>= 1)
  rho, r_sigma_lower, sigma_0, R0  the worst-case values at d_min (bounds, not measurements)
  mu_alpha           a lower bound of the certified rate at every certified instance of width d_min
  K, t               the number of events of the union bound, the fluctuation of each group

with --scope (book chapter 'The theorem through the FFN'): one row per experiment model and
theorem: experiment, configuration, theorem, certified, failing_hypothesis (null when
certified), ratio (the certificate ratio where one is computed, the worst over the seeds)
"""


def _print_fields(summary: dict, width: int) -> None:
    """One line per field, names right-aligned in ``width`` columns; ``None`` prints as unknown."""
    for k, v in summary.items():
        print(f"{k:>{width}}: {'unknown' if v is None else v}")


def _theorem(args) -> int:
    # which flags each mode takes is the policy of APPLIES (checked in main before this runs)
    if args.certify:
        return _theorem_certify(args)
    if args.width_condition:
        return _theorem_width(args)
    if args.scope:
        return _theorem_scope(args)
    steps = 300 if args.steps is None else args.steps
    r = theorem_run(*theorem_instance(args.seed, beta=args.beta, layers=args.layers), steps=steps)
    summary = r.summary()
    if args.json:
        write_json(summary)
        return 0
    _print_fields(summary, 20)
    b = r.part_b
    print(f"  part (b') needs rho = {b['rho']:.4g} < r <= r_sigma, and r_sigma <= {b['r_sigma_upper']:.4g}")
    for a in r.assumptions:
        print(f"  {a.name}: {a.statement}: value {a.value:.4g}, "
              f"threshold {a.threshold:.4g}, holds={a.holds}")
    return 0


def _theorem_certify(args) -> int:
    from .certify import ffn_certificate, ffn_certified_run
    from .experiments.theorem import non_vacuous_steps
    from .instances import ffn_certified_instance

    ffn = args.route == "ffn"
    default = (4, 4, 8) if ffn else (1, 2, 1024)
    N, n, d = (default[i] if getattr(args, k) is None else getattr(args, k) for i, k in enumerate("Nnd"))
    if not ffn and N * n > d:
        raise Usage(f"--certify needs N n <= d, got N n = {N * n} > d = {d}; use a larger --d, or "
                    "--route ffn (the theorem through the FFN covers N n > d).")
    params, X, Y, cfg = (ffn_certified_instance if ffn else certified_instance)(args.seed, N=N, n=n, d=d)
    _check_memory(cfg, N, n)
    if ffn:
        cert = ffn_certificate(params, X, Y, cfg)
        steps = non_vacuous_steps(cert.mu_alpha, 2000) if args.steps is None else args.steps
        run = ffn_certified_run(params, X, Y, cfg, steps=steps, cert=cert)
    else:
        run = certified_run(params, X, Y, cfg, steps=60 if args.steps is None else args.steps)
    summary = {**run.summary(), "N": N, "n": n, "d": d, "m": cfg.m, "seed": args.seed}
    if args.json:
        write_json(summary)
        return 0
    _print_fields(summary, 19)
    return 0


def _theorem_width(args) -> int:
    from .width import width_condition

    delta = 0.05 if args.delta is None else args.delta
    if not 0 < delta < 1:
        raise Usage(f"--delta must be in (0, 1), got {delta:g}.")
    N, n = 1 if args.N is None else args.N, 2 if args.n is None else args.n
    out = width_condition(N, n, delta).to_dict()
    if args.json:
        write_json(out)
        return 0
    _print_fields(out, 13)
    return 0


def _theorem_scope(args) -> int:
    from .scope import certified_scope

    rows = certified_scope("book")
    if args.json:
        write_json(rows)
        return 0
    for r in rows:
        verdict = "certified" if r["certified"] else f"not certified: {r['failing_hypothesis']}"
        print(f"{r['experiment']} [{r['theorem']}]: {verdict}")
    return 0


# --- rank-collapse -------------------------------------------------------------------------------

def _rank_collapse(args) -> int:
    rows = sigma_min_table(args.beta, seed=args.seed, seeds=args.seeds)
    if args.json:
        write_json(rows)
        return 0
    k = args.seeds
    print(f"median over {k} instances (n = 8, d = 16, scale 1/d_QK, beta = {args.beta:g})")
    print(f"{'d_QK':>6}  {'sigma_min(Attn)':>16}  {'10-90 % range':>21}  {'sigma_min(Attn + beta X)':>25}")
    for r in rows:
        rng = f"{r['sigma_min_attn_q10']:.1e} - {r['sigma_min_attn_q90']:.1e}"
        print(f"{r['d_qk']:>6}  {r['sigma_min_attn']:>16.3e}  {rng:>21}  {r['sigma_min_residual']:>25.3e}")
    first, last = rows[0], rows[-1]
    ratio = last["sigma_min_attn"] / first["sigma_min_attn"]
    slope = math.log(ratio) / math.log(last["d_qk"] / first["d_qk"])
    print(f"median sigma_min(Attn) from d_QK = {first['d_qk']} to {last['d_qk']}: x {ratio:.3g} (~ "
          f"d_QK^{slope:+.2f}); "
          "median sigma_min(Attn + beta X): x "
          f"{last['sigma_min_residual'] / first['sigma_min_residual']:.3g}")
    return 0


# --- reproduce -----------------------------------------------------------------------------------

def _reproduce(args) -> int:
    if args.list or args.name is None:
        if args.json:
            write_json([{"name": name, "title": e.title, "chapter": e.chapter}
                        for name, e in EXPERIMENTS.items()])
            return 0
        for name, e in EXPERIMENTS.items():
            print(f"{name:<17} {e.title}  [{e.chapter}]")
        print(f"{'all':<17} every experiment above")
        return 0
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    if names[0] not in EXPERIMENTS:
        raise Usage(f"unknown experiment {args.name!r}; choose one of {sorted(EXPERIMENTS)} or 'all' (see "
                    "--list).")
    if args.piece is not None:
        return _reproduce_piece(args)
    out = setting_path(args.out, "--out")
    try:  # before any work: --out must be (or become) a writable folder
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Usage(f"--out {out}: {out if out.exists() else 'a parent of it'} is an existing file, not a "
                    "folder; pass a folder for the PNG figures (e.g. --out figures).") from None
    except OSError as err:
        raise Usage(f"--out {out}: cannot create this folder ({err.strerror}); pass a writable "
                    "folder.") from None
    check_device(args.device)  # before any work: an unknown or absent device is a usage error
    if args.download:
        for name in names:
            if name in DATASETS:
                path = download(name)
                if not args.json:
                    print(f"{name}: data in {path}")
    report: dict[str, dict] = {}
    lost: list[str] = []
    for name in names:
        t0 = time.perf_counter()
        res = run_experiment(name, args.profile, progress=not args.json, refresh=args.refresh,
                             device=args.device)
        args.kept.append(name)
        png = out / f"{name}-{args.profile}.png"
        try:
            atomic_write_bytes(png, figure_png(res.figure(), dpi=200))  # never half a PNG
            figure: str | None = str(png)
        except OSError as err:  # a directory in the way, a full disk: the report is still printed
            lost.append(f"--out {out}: the figure {png} could not be written ({err.strerror or err})")
            figure = None
        report[name] = {"settings": res.settings, "summary": res.summary(),
                        "claims": [{k: c[k] for k in CLAIM_KEYS if k in c} for c in res.claims()],
                        "seconds": round(time.perf_counter() - t0, 2), "figure": figure}
        if not args.json:
            print(f"{name}: {png if figure else 'no figure'} ({report[name]['seconds']} s)")
            for k, v in report[name]["summary"].items():
                print(f"  {k}: {v}")
    if args.json:
        write_json(report[names[0]] if len(names) == 1 else report)
    if lost:
        raise FigureLost("; ".join(lost) + "; the results are cached and the report is complete, "
                         "\"figure\" is null there: free space or remove what is in the way, then run "
                         "it again (it is read from the cache).")
    return 0


def _reproduce_piece(args) -> int:
    if args.profile != PROFILE or args.name == "all":
        raise Usage(f"--piece computes one piece of one experiment's {PROFILE!r} profile: pass an experiment "
                    f"name and --profile {PROFILE} (got {args.name!r}, --profile {args.profile}).")
    blocks = pieces(args.name, args.profile)
    if args.piece >= len(blocks):
        raise Usage(f"--piece {args.piece}: {args.name!r} has pieces 0 to {len(blocks) - 1} (seeds "
                    f"{blocks}).")
    folder = RESULTS_DIR if args.results is None else setting_path(args.results, "--results")
    check_device(args.device)
    path, stored = run_piece(args.name, args.piece, folder=folder, device=args.device,
                             progress=not args.json, profile=args.profile)
    assembled = paper_path(args.name, folder, args.profile)
    if args.json:
        write_json({"piece": str(path), "assembled": str(assembled),
                    "pieces": stored["pieces"]})
    else:
        print(f"{args.name}: piece {args.piece} (seeds {blocks[args.piece]}) in {path}; "
              f"{assembled} holds pieces {stored['pieces']['done']} of "
              f"{stored['pieces']['total']}")
    return 0


# --- bench ---------------------------------------------------------------------------------------

#: The repository that holds this package's source, when it is run from a clone (editable install).
REPOSITORY = Path(__file__).resolve().parent.parent
#: The benchmark: one fixed path of that repository, never searched for.
BENCH_SCRIPT = REPOSITORY / "benchmarks" / "gd_speed.py"


def _source_checkout() -> bool:
    """Whether this package runs from its repository: ``convres/`` lies next to a
    ``pyproject.toml`` that declares the project ``convres`` (an installed wheel has no such file
    next to it, so a ``benchmarks/`` folder that happens to lie in ``site-packages`` is never run)."""
    project = REPOSITORY / "pyproject.toml"
    try:
        text = project.read_text(encoding="utf-8") if project.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return False
    return 'name = "convres"' in text and (REPOSITORY / "convres" / "cli.py").resolve() == \
        Path(__file__).resolve()


def _bench(args) -> int:
    if not _source_checkout() or not BENCH_SCRIPT.is_file() or BENCH_SCRIPT.is_symlink():
        raise Usage(f"the benchmark is a script of the repository (benchmarks/{BENCH_SCRIPT.name}), not "
                    "part of the installed package; run it from a clone: python benchmarks/gd_speed.py")
    try:
        return int(runpy.run_path(str(BENCH_SCRIPT))["main"](args.options) or 0)
    except SystemExit as done:  # the script's own argument errors (already printed)
        return done.code if isinstance(done.code, int) else 2


# --- entry point ---------------------------------------------------------------------------------

# --- the flag policy ------------------------------------------------------------------------------

#: For each subcommand, its modes and the flags (argparse ``dest``) each mode uses. A flag given
#: to a mode that does not use it is an error (:func:`check_flags`): nothing is silently ignored.
APPLIES: dict[str, dict[str, set[str]]] = {
    "gd": {"": {"seed", "beta", "layers", "N", "n", "d", "mu", "steps", "activation", "json"}},
    "theorem": {"": {"seed", "beta", "layers", "steps", "json"},
                "--certify": {"certify", "seed", "steps", "route", "N", "n", "d", "json"},
                "--width-condition": {"width_condition", "delta", "N", "n", "json"},
                "--scope": {"scope", "json"}},
    "rank-collapse": {"": {"beta", "seeds", "seed", "json"}},
    "reproduce": {"--list": {"list", "json"},
                  "NAME": {"name", "profile", "out", "refresh", "download", "json", "device"},
                  "--piece": {"name", "profile", "piece", "results", "json", "device"}},
}
#: The flags that choose a mode, per subcommand (at most one of them at a time).
MODE_FLAGS = {"theorem": ("--certify", "--width-condition", "--scope")}


def _mode(args) -> str:
    """The mode of the parsed ``args`` (a key of ``APPLIES[args.command]``)."""
    if args.command == "reproduce":
        return "--list" if args.list or args.name is None else "--piece" if args.piece is not None else "NAME"
    if args.command == "theorem":
        chosen = [f for f in MODE_FLAGS["theorem"] if getattr(args, f[2:].replace("-", "_"))]
        if len(chosen) > 1:
            raise Usage(f"choose one of {', '.join(MODE_FLAGS['theorem'])}, got {' and '.join(chosen)}.")
        return chosen[0] if chosen else ""
    return ""


def check_flags(args, options: dict[str, str]) -> None:
    """Raise :class:`Usage` naming every flag given that the chosen mode does not use, and the
    modes that do. ``options`` maps a ``dest`` to its flag (``--width-condition``)."""
    table = APPLIES.get(args.command)
    if table is None:
        return
    mode = _mode(args)
    given = set(getattr(args, "given_", set())) | ({"name"} if getattr(args, "name", None) else set())
    unused = sorted(d for d in given if d not in table[mode])
    if not unused:
        return
    def run(m: str) -> str:
        return f"`{args.command} {m}`" if m else f"the plain `{args.command}`"
    parts = []
    for dest in unused:
        users = [run(m) for m, flags in table.items() if dest in flags]
        flag = options.get(dest, dest)
        parts.append(f"{flag} (used only by {' and '.join(users)})" if users else flag)
    one = len(unused) == 1
    raise Usage(f"{', '.join(parts)} {'does' if one else 'do'} not apply to {run(mode)} and would be "
                f"ignored; drop {'it' if one else 'them'}, or choose the mode that uses "
                f"{'it' if one else 'them'}.")


def _track_given(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Make every option of ``parser``'s subcommands record its ``dest`` in ``args.given_`` when
    it is given on the command line; return ``dest -> flag``."""
    options: dict[str, str] = {}
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for sub in subparsers:
        for p in sub.choices.values():
            for action in p._actions:
                if not action.option_strings or isinstance(action, argparse._HelpAction):
                    if action.dest == "name":
                        options["name"] = "NAME"
                    continue
                options[action.dest] = max(action.option_strings, key=len)
                base = type(action)

                class Given(base):  # type: ignore[valid-type, misc]
                    def __call__(self, parser, namespace, values, option_string=None):
                        super().__call__(parser, namespace, values, option_string)
                        given = set(getattr(namespace, "given_", set()))
                        namespace.given_ = given | {self.dest}

                action.__class__ = Given
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m convres",
        description="convres: companion of arXiv:2506.05249 (gradient descent on Transformers "
                    "with residual connections).")
    parser.add_argument("--version", action="version", version=f"convres {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("gd", help="run gradient descent on a random synthetic instance and summarize it")
    p.add_argument("--seed", type=seed_value, default=0, help="seed of the data (weights: seed + 1; default "
                                                              "0)")
    p.add_argument("--beta", type=beta_value, default=1.0, help="residual coefficient, 0 .. 1000 (default 1)")
    p.add_argument("--layers", type=size("layers"), default=1, help="number of blocks L (default 1)")
    p.add_argument("--N", type=size("N"), default=4, metavar="SEQUENCES", help="number of sequences N "
                                                                               "(default 4)")
    p.add_argument("--n", type=size("n"), default=4, metavar="TOKENS", help="tokens per sequence n (default "
                                                                            "4)")
    p.add_argument("--d", type=size("d"), default=16, metavar="FEATURES", help="feature dimension d (default "
                                                                               "16)")
    p.add_argument("--mu", type=positive_float, default=0.005, help="step size (default 0.005)")
    p.add_argument("--steps", type=size("steps"), default=500, help="number of steps (default 500)")
    p.add_argument("--activation", default="relu", choices=sorted(ACTIVATIONS),
                   help="FFN activation (default relu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_gd)

    p = sub.add_parser("theorem", help="run GD with the theorem's step size and check Phi_{t+1} <= "
                       "(1 - mu alpha) Phi_t at every step (book chapter 'The theorem'); --certify, "
                       "--width-condition, --scope: the certificate, the width theorem, the scope",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=THEOREM_EPILOG)
    p.add_argument("--seed", type=seed_value, default=0, help="seed of the data (weights: seed + 1; default "
                                                              "0)")
    p.add_argument("--beta", type=beta_value, default=1.0, help="residual coefficient, 0 .. 1000 (default 1)")
    p.add_argument("--layers", type=_number(int, 1, 20), default=1, help="number of blocks L, 1 .. 20 "
                                                                         "(default 1)")
    p.add_argument("--steps", type=_number(int, 1, 10**5), default=None,
                   help="gradient steps T (default 300; 60 with --certify; with --route ffn the fewest "
                        "with mu alpha T >= ln(1/0.9), at most 2000)")
    p.add_argument("--certify", action="store_true",
                   help="certify an instance of the certified regime before the run (rigorous bounds), "
                        "then run GD with mu = 1/L_upper and check the certified envelope at every step")
    p.add_argument("--route", choices=("main", "ffn"), default=None,
                   help="with --certify: the theorem through W_U (main, default) or through the FFN's "
                        "W_2 (ffn: N n > d allowed)")
    p.add_argument("--width-condition", action="store_true",
                   help="print d_min(N, n, delta) of the width theorem: every width d >= d_min is "
                        "certified with probability >= 1 - delta (nothing is run)")
    p.add_argument("--delta", type=positive_float, default=None,
                   help="with --width-condition: the probability of failure, in (0, 1) (default 0.05)")
    p.add_argument("--scope", action="store_true",
                   help="which experiment configuration lies inside which theorem, and which is "
                        "certified (from the experiments' settings)")
    p.add_argument("--N", type=_number(int, 1, 64), default=None, metavar="SEQUENCES",
                   help="with --certify or --width-condition: number of sequences N (default 1; 4 with "
                        "--route ffn)")
    p.add_argument("--n", type=_number(int, 1, 64), default=None, metavar="TOKENS",
                   help="with --certify or --width-condition: tokens per sequence n (default 2; 4 with "
                        "--route ffn)")
    p.add_argument("--d", type=_number(int, 1, 8192), default=None, metavar="FEATURES",
                   help="with --certify: width d = d_QK (m = d/4; default 1024; 8 with --route ffn, "
                        "m = 4096)")
    p.add_argument("--json", action="store_true", help="print one JSON object (a list with --scope)")
    p.set_defaults(func=_theorem)

    p = sub.add_parser("rank-collapse", help="median over K Gaussian instances of sigma_min(Attn(X)) and "
                       "sigma_min(Attn(X) + beta X) for growing d_QK (scale 1/d_QK)")
    p.add_argument("--beta", type=beta_value, default=1.0, help="residual coefficient, 0 .. 1000 (default 1)")
    p.add_argument("--seeds", type=_number(int, 1, 1000), default=16,
                   help="number K of Gaussian instances, 1 .. 1000 (default 16)")
    p.add_argument("--seed", type=_number(int, 0, MAX_SEED - 1000), default=0,
                   help="first seed: instances seed, ..., seed + K - 1 (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows (medians over K instances)")
    p.set_defaults(func=_rank_collapse)

    p = sub.add_parser("reproduce", help="run an experiment of the book (cached; --list lists them) and "
                                         "write "
                       "its figure; --json prints settings, summary and claims")
    p.add_argument("name", nargs="?", help="an experiment of --list, or 'all'")
    p.add_argument("--list", action="store_true", help="list the experiments and their chapters")
    p.add_argument("--profile", choices=list(PROFILES), default="book",
                   help="book: the settings of the book's chapters (default); paper: larger; smoke: a "
                        "seconds-long check of the code (its numbers mean nothing)")
    p.add_argument("--out", default="figures", help="folder for the PNG figures (default ./figures)")
    p.add_argument("--refresh", action="store_true", help="recompute even if a cached result exists")
    p.add_argument("--download", action="store_true",
                   help="first download missing real data (jena, sst2) into the data directory "
                        "($CONVRES_DATA_DIR, default ~/.cache/convres/data)")
    p.add_argument("--json", action="store_true", help="print settings, summary and claims as one JSON "
                                                       "object")
    p.add_argument("--device", default="cpu",
                   help="where gradient descent runs: cpu (default) or cuda (a CUDA build of PyTorch "
                        "and a GPU; results are cached per device)")
    p.add_argument("--piece", type=_number(int, lo=0), default=None, metavar="K",
                   help="with --profile paper: compute piece K of the experiment (a block of its seeds), "
                        "write it to RESULTS/pieces/ and re-assemble RESULTS/NAME-paper.json")
    p.add_argument("--results", default=None, metavar="RESULTS",
                   help="folder of the committed results (default: results/ of this clone)")
    p.set_defaults(func=_reproduce)

    p = sub.add_parser("bench", help="time convres.gradient_descent against a plain PyTorch loop "
                       "(runs benchmarks/gd_speed.py; --help there)", add_help=False)
    p.add_argument("options", nargs=argparse.REMAINDER)
    p.set_defaults(func=_bench)
    return parser


def _warning_line(message, category, filename, lineno, line=None) -> str:
    return f"convres: {category.__name__}: {message}\n"


def _kept(args) -> str:
    """What an interrupt leaves behind, in words."""
    if args.command not in ("reproduce", "bench"):
        return "nothing was cached"
    where = cache_dir()
    kept = getattr(args, "kept", [])
    if kept:
        return (f"the finished result(s) {', '.join(kept)} are kept in the cache ({where}); the run in "
                "progress was not cached")
    return "nothing new was cached (the run in progress is not kept)"


def _error(where: str, text: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{where}: error: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _warning_line  # one line on stderr (stdout stays clean for --json)
    parser = build_parser()
    options = _track_given(parser)
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":  # every option belongs to the benchmark script
        args.options = rest + args.options
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            parser.print_help()
        return 2
    where = f"convres {args.command}"
    args.kept = []
    buffer = io.StringIO()
    try:
        check_flags(args, options)
        with contextlib.redirect_stdout(buffer):
            try:
                code = int(args.func(args) or 0)
            finally:
                text = buffer.getvalue()
        emit(text)
        return code
    except OutputLost as err:
        _error(where, str(err))
        return 1
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(f"{where}: interrupted; {_kept(args)}", file=sys.stderr)
        return 130
    except FigureLost as err:
        try:
            emit(buffer.getvalue())
        except OutputLost as lost:
            _error(where, f"{err}; {lost}")
            return 1
        _error(where, str(err))
        return 2
    except Warning as w:  # PYTHONWARNINGS=error or -W error turned a warning into an exception
        _error(where, f"{type(w).__name__} (a warning turned into an error by PYTHONWARNINGS or -W): {w}")
        return 2
    except MemoryError:
        print(f"{where}: error: out of memory; use smaller sizes (--N, --n, --d, --layers).", file=sys.stderr)
        return 2
    except OverflowError as err:
        print(f"{where}: error: a number overflowed ({err}); use a smaller --beta or smaller sizes.",
              file=sys.stderr)
        return 2
    except ArithmeticError as err:  # a division by zero or a floating-point trap on a degenerate instance
        print(f"{where}: error: the computation failed ({type(err).__name__}: {err}); the instance is "
              "degenerate or too large: use a smaller --beta, smaller sizes or another --seed.",
              file=sys.stderr)
        return 2
    except RuntimeError as err:
        if "allocate" in str(err) or "memory" in str(err).lower():
            print(f"{where}: error: out of memory; use smaller sizes (--N, --n, --d, --layers).",
                  file=sys.stderr)
            return 2
        print(f"{where}: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError) as err:
        print(f"{where}: error: {err}", file=sys.stderr)
        return 2
