"""The command line, ``python -m convres COMMAND ...``: one ``argparse`` parser per command and mode
(each accepts only its own flags); plain text, or with ``--json`` one strict JSON document written
once complete. A failure is one line on stderr naming the problem and the fix (exit 2)."""

import argparse
import math
import sys
import time

from ._version import __version__
from .cache import dumps, setting_dir, write_atomic
from .certify import certified_run, ffn_certificate, ffn_certified_run
from .collapse import sigma_min_table
from .committed import result, run_piece
from .data import DATASETS, download
from .experiments import EXPERIMENTS, PROFILES
from .experiments.theorem import non_vacuous_steps
from .gd import gradient_descent
from .instances import certified_instance, ffn_certified_instance, synthetic_regression, theorem_instance
from .model import ACTIVATIONS, MAX_SEED, ModelConfig, init_params, memory_estimate
from .plotting import figure_png
from .runtime import check_device, check_memory
from .scope import certified_scope
from .separation import separation_report
from .show import plain
from .theory import theorem_run
from .width import fixed_data, orthonormal_data, width_condition


def number(kind: type, lo: float, hi: float | None = None, *, above: bool = False):
    """An argparse type: ``kind`` (int or float) in ``lo .. hi`` (``> lo`` with ``above``), finite."""
    def parse(text: str):
        try:
            value = kind(text)
            inside = (value > lo if above else value >= lo) and (hi is None or value <= hi)
            ok = math.isfinite(value) and inside
        except ValueError:
            ok = False
        if not ok:
            bounds = f"{'>' if above else '>='} {lo:g}" + ("" if hi is None else f" and <= {hi:g}")
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what} {bounds}, got {text!r}")
        return value
    return parse


def _fields(obj, width: int) -> str:
    return "\n".join(f"{k:>{width}}: {'unknown' if v is None else v}" for k, v in obj.items())


def _check_memory(cfg: ModelConfig, N: int, n: int) -> None:
    check_memory(memory_estimate(cfg, N, n), f"this run (N={N}, n={n}, d={cfg.d}, L={cfg.L})",
                 "use smaller sizes (--N, --n, --d, --layers)")


def _gd(args):
    cfg = ModelConfig(d=args.d, d_qk=args.d, m=args.d, c=1, L=args.layers, beta=args.beta,
                      activation=args.activation)
    _check_memory(cfg, args.N, args.n)
    X, Y = synthetic_regression(args.N, args.n, args.d, 1, seed=args.seed)
    _, h = gradient_descent(init_params(cfg, seed=args.seed + 1), X, Y, cfg, args.mu, args.steps,
                            record_every=args.steps)
    return {"status": h.status, "message": h.message, "steps": h.steps, "mu": h.mu,
            "initial_loss": float(h.loss[0]), "final_loss": float(h.loss[-1]),
            "sigma_min_Z0": float(h.sigma_min_Z[0]), "sigma_min_H0": float(h.sigma_min_H[0])}


def _theorem_run(args):
    r = theorem_run(*theorem_instance(args.seed, beta=args.beta, layers=args.layers), steps=args.steps)
    if args.json:
        return r.summary()
    lines = [f"  {a.name}: {a.text}: value {a.value:.4g}, threshold {a.threshold:.4g}, holds={a.holds}"
             for a in r.assumptions]
    return _fields(r.summary(), 20) + "\n" + "\n".join(lines)


def _theorem_certify(args):
    ffn = args.route == "ffn"
    N, n, d = (args.N or (4 if ffn else 1), args.n or (4 if ffn else 2), args.d or (8 if ffn else 1024))
    if not ffn and N * n > d:
        raise ValueError(f"--certify needs N n <= d, got N n = {N * n} > d = {d}; use a larger --d, or "
                         "--route ffn (the theorem through the FFN covers N n > d).")
    params, X, Y, cfg = (ffn_certified_instance if ffn else certified_instance)(args.seed, N=N, n=n, d=d)
    _check_memory(cfg, N, n)
    if ffn:
        cert = ffn_certificate(params, X, Y, cfg)
        run = ffn_certified_run(params, X, Y, cfg, steps=args.steps or non_vacuous_steps(cert.mu_alpha, 2000),
                                cert=cert)
    else:
        run = certified_run(params, X, Y, cfg, steps=args.steps or 60)
    return {**run.summary(), "N": N, "n": n, "d": d, "m": cfg.m, "seed": args.seed}


def _theorem_width(args):
    data = fixed_data(*orthonormal_data(args.N, args.n, 0.05)) if args.data == "fixed" else None
    return width_condition(args.N, args.n, args.delta, data=data).to_dict()


def _theorem_separation(args):
    if args.d_qk is None or args.n % 2:
        raise ValueError(f"separation needs --d-qk D and an even --n (balanced targets), got --d-qk "
                         f"{args.d_qk}, --n {args.n}.")
    return separation_report(args.d_qk, args.seed, mu=args.mu, N=args.N, n=args.n, d=args.d)


def _theorem_scope(args):
    rows = certified_scope("book")
    lines = [f"{r['experiment']} [{r['theorem']}]: " + ("certified" if r["certified"] else
             f"not certified: {plain(r['failing_hypothesis'])}") for r in rows]
    return rows if args.json else "\n".join(lines)


def _rank_collapse(args):
    rows = sigma_min_table(args.beta, seed=args.seed, seeds=args.seeds)
    if args.json:
        return rows
    first, last = rows[0], rows[-1]
    ratio = last["sigma_min_attn"] / first["sigma_min_attn"]
    slope = math.log(ratio) / math.log(last["d_qk"] / first["d_qk"])
    lines = [f"median over {args.seeds} instances (n = 8, d = 16, scale 1/d_QK, beta = {args.beta:g})",
             f"{'d_QK':>6}  {'sigma_min(Attn)':>16}  {'10-90 % range':>21}  {'sigma_min(Attn + beta X)':>25}"]
    for r in rows:
        spread = f"{r['sigma_min_attn_q10']:.1e} - {r['sigma_min_attn_q90']:.1e}"
        lines.append(f"{r['d_qk']:>6}  {r['sigma_min_attn']:>16.3e}  {spread:>21}  "
                     f"{r['sigma_min_residual']:>25.3e}")
    lines.append(f"median sigma_min(Attn) from d_QK = {first['d_qk']} to {last['d_qk']}: x {ratio:.3g} "
                 f"(~ d_QK^{slope:+.2f})")
    return "\n".join(lines)


def _reproduce(args):
    if args.name is None:
        rows = [{"name": n, "title": e.title, "chapter": e.chapter} for n, e in EXPERIMENTS.items()]
        return rows if args.json else "\n".join(f"{r['name']:<24} {r['title']} [{r['chapter']}]"
                                                for r in rows)
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    if names[0] not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {args.name!r}; choose one of {sorted(EXPERIMENTS)} or 'all'.")
    check_device(args.device)
    if args.piece is not None:
        return _piece(args)
    if args.results is not None:
        raise ValueError("--results is the folder of --piece; give --piece K with it, or drop it.")
    out = setting_dir("--out", "figures", "figures" if args.out is None else args.out)
    try:  # before any work
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot make this folder ({err}); pass a writable folder.") from None
    for name in set(names) & set(DATASETS) if args.download else ():
        download(name)
    report = {}
    for name in names:
        t0 = time.perf_counter()
        res = result(name, args.profile, progress=not args.json, refresh=args.refresh, device=args.device)
        png = out / f"{name}-{args.profile}.png" if res.experiment.plot else None  # a figure, if it has one
        if png:
            write_atomic(png, figure_png(res.figure(), dpi=200))
        report[name] = {"settings": res.settings, "summary": res.summary(), "claims": res.claims(),
                        "seconds": round(time.perf_counter() - t0, 2), "figure": png and str(png)}
    if args.json:
        return report[names[0]] if len(names) == 1 else report
    return "\n".join(f"{n}: {r['figure']} ({r['seconds']} s)\n{_fields(r['summary'], 16)}"
                     for n, r in report.items())


def _piece(args):
    kept = EXPERIMENTS[args.name].committed if args.name in EXPERIMENTS else ()
    if args.profile not in kept:
        other = " or ".join(f"--profile {p}" for p in kept) or "one experiment that commits a profile"
        raise ValueError(f"--piece: {args.name!r} --profile {args.profile} is computed whole, not in pieces; "
                         f"drop --piece, or give {other}.")
    if args.out or args.refresh or args.download:
        raise ValueError("--piece writes its piece into --results: drop --out, --refresh and --download.")
    path, merged = run_piece(args.name, args.piece, folder=args.results, device=args.device,
                             progress=not args.json, profile=args.profile)
    return {"piece": str(path), "pieces": merged["pieces"]}


SEED = {"type": number(int, 0, MAX_SEED - 2), "default": 0, "help": "seed of the data (weights: seed + 1)"}
BETA = {"type": number(float, 0, 1e3), "default": 1.0, "help": "residual coefficient, 0 .. 1000"}
STEPS = {"type": number(int, 1, 10**5), "default": None, "help": "gradient steps"}


def size(hi: int, default=None) -> dict:
    return {"type": number(int, 1, hi), "default": default}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m convres", allow_abbrev=False, description="convres: "
                                     "the companion of arXiv:2506.05249 (residual Transformers).")
    parser.add_argument("--version", action="version", version=f"convres {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(sub, name: str, run, text: str, **flags):
        p = sub.add_parser(name, help=text, description=text, allow_abbrev=False)  # --d is no --delta
        p.add_argument("--json", action="store_true", help="print one JSON document")
        for flag, options in flags.items():
            p.add_argument(f"--{flag}".replace("_", "-"), **options)
        p.set_defaults(run=run)
        return p

    command(commands, "gd", _gd, "gradient descent on a random synthetic instance", seed=SEED, beta=BETA,
            layers=size(1000, 1), N=size(10**6, 4), n=size(10**4, 4), d=size(10**5, 16),
            mu={"type": number(float, 0, above=True), "default": 0.005, "help": "step size"},
            steps=size(10**7, 500), activation={"choices": sorted(ACTIVATIONS), "default": "relu"})
    theorem = commands.add_parser("theorem", allow_abbrev=False, help="the theorem's checks: run, certify, "
                                  "width, scope, separation")
    modes = theorem.add_subparsers(required=True)
    command(modes, "run", _theorem_run, "GD at the theorem's step size, its contraction checked each step",
            seed=SEED, beta=BETA, layers=size(20, 1), steps={**STEPS, "default": 300})
    command(modes, "certify", _theorem_certify, "certify an instance, then run GD at mu = 1/L_upper",
            seed=SEED, steps=STEPS, route={"choices": ("main", "ffn"), "default": "main"}, N=size(64),
            n=size(64), d=size(8192))
    command(modes, "width", _theorem_width, "d_min(N, n, delta) of the width theorem", N=size(64, 1),
            n=size(64, 2), delta={"type": number(float, 0, above=True), "default": 0.05},
            data={"choices": ("random", "fixed"), "default": "random", "help": "Gaussian data, or fixed "
                  "data (orthonormal tokens, ||Y||_F = 0.05, zero-padded to width d)"})
    command(modes, "scope", _theorem_scope, "which experiment lies inside which theorem; which is certified")
    command(modes, "separation", _theorem_separation, "the certified separation at d_QK: a plateau without "
            "the residual, linear convergence with it, on one draw", d_qk=size(65536), seed=SEED,
            mu={"type": number(float, 0, above=True), "default": None, "help": "the plateau's step "
                "(default: the residual arm's certified step)"},
            N=size(64, 1), n=size(64, 2), d=size(8192, 1024))
    command(commands, "rank-collapse", _rank_collapse, "median sigma_min(Attn(X)) and sigma_min(Attn(X) + "
            "beta X) over Gaussian instances", beta=BETA, seeds=size(1000, 16),
            seed={**SEED, "type": number(int, 0, MAX_SEED - 1000)})
    p = command(commands, "reproduce", _reproduce, "run an experiment of the book (cached), write its figure",
                profile={"choices": PROFILES, "default": "book"}, out={"help": "folder of the figures"},
                refresh={"action": "store_true"}, download={"action": "store_true", "help": "get the data"},
                device={"default": "cpu", "help": "cpu, or cuda (a GPU)"},
                piece={"type": number(int, 0), "help": "of a committed profile: compute piece K"},
                results={"help": "with --piece: the results folder (default: results/ of the clone)"})
    p.add_argument("name", nargs="?", help="an experiment, or 'all' (none: list them)")
    p = command(commands, "data", lambda a: {name: str(download(name)) for name in a.names or DATASETS},
                "download the data sets missing from the data folder")
    p.add_argument("names", nargs="*", help=f"{', '.join(DATASETS)} (default: all)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:  # --help, or a usage error argparse has already printed
        return int(done.code or 0)
    try:
        out = args.run(args)
        text = dumps(out, indent=2) if args.json else out if isinstance(out, str) else _fields(out, 20)
        if sys.stdout is None:  # Python started with stdout closed
            raise OSError("stdout is closed, so the output was lost; run it with stdout open")
        print(text, flush=True)
    except (ValueError, OSError) as err:
        print(f"convres {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"convres {args.command}: interrupted (finished results stay in the cache).", file=sys.stderr)
        return 130
    return 0
