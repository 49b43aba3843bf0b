"""What every experiment shares: the :class:`Experiment` record, the :class:`Result` and the helpers."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import functools
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..cache import cached_json, digest
from ..model import ModelConfig
from ..protocol import ALTERNATIVES, BOOTSTRAP_DRAWS, CHECKS, CLAIMS, MIN_UNITS, RERUN_FACTOR, TAG, Claim
from ..show import plain
from ..stats import Estimate, censored, estimate, grade, tune_step
from ..values import is_int, is_real, json_safe
from ..values import positive_int as positive_int  # the runners' import

PROFILES = ("book", "paper", "smoke")
#: Version of the layout of the results; part of the cache key (bump it when a runner changes).
RESULT_FORMAT = 5
#: The fields every :meth:`Result.summary` starts with (``None`` where one does not apply).
SUMMARY_KEYS = ("n_train", "n_val", "rows", "regimes", "seeds", "steps", "wall_seconds", "dtype", "device")
#: Settings that must be non-empty lists.
LIST_SETTINGS = ("betas", "seeds", "depths", "eta_grid", "d_qks", "regimes")


@dataclasses.dataclass(frozen=True)
class Shape:
    """One model of an experiment (:mod:`convres.scope`): ``cfg`` on ``N`` sequences of ``n`` tokens."""

    label: str
    cfg: ModelConfig
    N: int
    n: int
    note: str = ""


def profiles(book: dict, *, paper: dict | None = None, smoke: dict) -> dict[str, dict]:
    """The settings per profile (:data:`PROFILES`): ``book``, and ``paper`` and ``smoke`` as changes to it."""
    return {"book": book, "paper": {**book, **(paper or {})}, "smoke": {**book, **smoke}}


def _no_report(result: Result) -> dict:
    return {"settings": None, "spread": [], "runs": len(result.data.get("runs", [])), "deviations": []}


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment: settings per profile, ``run(settings, progress=, data_dir=, device=) -> data``
    and the hooks of its summary, report, figure and scope; ``piece_seeds`` per committed piece."""

    name: str
    title: str
    chapter: str
    profiles: Mapping[str, dict]
    run: Callable[..., dict]
    key_numbers: Callable[[Result], dict] = lambda result: {}
    claims: Callable[[Result], list] = lambda result: []
    plot: Callable[[Result], Any] | None = None
    shapes: Callable[[dict], list] = lambda settings: []
    report: Callable[[Result], dict] = _no_report
    paper: str = ""
    in_report: bool = True
    in_scope: bool = False
    piece_seeds: int | None = None
    committed: tuple[str, ...] = ("paper",)

    @property
    def page(self) -> str:
        """The chapter's page name, e.g. ``"simulations"`` for ``book/simulations.md``."""
        return self.chapter.removeprefix("book/").removesuffix(".md")


def computation(name: str, title: str, chapter: str, settings: Mapping[str, dict],
                **hooks: Any) -> Callable[[Callable[..., dict]], Experiment]:
    """A decorator: ``run(settings, **_) -> data`` as an :class:`Experiment` without claims."""
    return lambda run: Experiment(name, title, chapter, settings, run, in_report=False, **hooks)


@dataclasses.dataclass
class Result:
    """A finished experiment: its record, profile, settings, the runner's data and its wall time."""

    experiment: Experiment
    profile: str
    settings: dict
    data: dict
    seconds: float
    _memo: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def _once(self, what: str, compute):
        """``compute()`` once per result; a copy each call."""
        if what not in self._memo:
            self._memo[what] = compute()
        return copy.deepcopy(self._memo[what])

    @property
    def name(self) -> str:
        return self.experiment.name

    def summary(self) -> dict:
        """The fields of :data:`SUMMARY_KEYS`, then the key numbers, JSON-ready (non-finite: ``None``)."""
        return self._once("summary", self._summary)

    def _summary(self) -> dict:
        s = self.settings
        head = dict.fromkeys(SUMMARY_KEYS)
        head.update(seeds=len(s["seeds"]) if "seeds" in s else None, steps=s.get("steps"),
                    wall_seconds=round(float(self.seconds), 1), dtype=s.get("dtype", "float64"),
                    device=self.data.get("device", "cpu"))
        return json_safe({**head, **self.experiment.key_numbers(self)})

    def claims(self) -> list[dict]:
        """The experiment's rows of the reproduction report."""
        return self._once("claims", lambda: [dict(experiment=self.name, **row)
                                             for row in self.experiment.claims(self)])

    def figure(self):
        """The experiment's figure (matplotlib)."""
        if self.experiment.plot is None:
            raise ValueError(f"experiment {self.name!r} has no figure.")
        return self.experiment.plot(self)

    def report(self) -> dict:
        """The experiment's rows of the report's tables (``Experiment.report``)."""
        return self.experiment.report(self)

    def to_json(self) -> dict:
        return {"name": self.name, "profile": self.profile, "settings": self.settings, "data": self.data,
                "seconds": self.seconds}


#: The list settings whose values must be distinct and pass a test: ``{key: (what, test)}``.
VALUE_RULES = {"seeds": ("integers >= 0", lambda v: is_int(v) and v >= 0),
               "betas": ("finite numbers >= 0", lambda v: is_real(v) and math.isfinite(v) and v >= 0),
               "eta_grid": ("finite numbers > 0", lambda v: is_real(v) and math.isfinite(v) and v > 0)}


def check_settings(name: str, s: dict) -> None:
    """Refuse settings that would run nothing or silently mean something else."""
    for key in LIST_SETTINGS:
        if key in s and (not isinstance(s[key], list) or not s[key]):
            raise ValueError(f"setting {key!r} of {name!r} must be a non-empty list, got {s[key]!r}.")
    for key, (what, ok) in VALUE_RULES.items():
        v = s.get(key, [])
        if not all(ok(x) for x in v) or len(set(v)) != len(v):
            raise ValueError(f"setting {key!r} of {name!r} must hold distinct {what}, got {v!r}.")
    if set(s.get("seeds", [])) & set(s.get("probe_seeds", [])):
        raise ValueError(f"setting 'probe_seeds' of {name!r} ({s['probe_seeds']}) must not share a seed with "
                         f"'seeds' ({s['seeds']}): the steps are chosen on seeds that are not evaluated.")


def output_rows(cfg: ModelConfig, X: torch.Tensor) -> int:
    """``R``, the output rows the loss sums over (``N`` pooled, ``N n`` per token): ``mu = eta / R``."""
    return X.shape[0] if cfg.pool == "mean" else X.shape[0] * X.shape[1]


def finite_list(x) -> list:
    """The values of ``x`` as floats, non-finite ones as ``None`` (JSON)."""
    return json_safe(np.asarray(x, dtype=np.float64))


def dtype_of(s: dict, key: str = "dtype") -> torch.dtype:
    """The dtype a setting names: ``"float64"`` (default) or ``"float32"``."""
    name = s.get(key, "float64")
    if name not in ("float64", "float32"):
        raise ValueError(f"setting {key!r} must be 'float64' or 'float32', got {name!r}.")
    return getattr(torch, name)


def stable(h) -> bool:
    """Not diverged and the loss at the end of the run not above its start."""
    return bool(h.status != "diverged" and len(h.loss) > 1 and h.loss[-1] <= h.loss[0])


def spread(values) -> dict:
    """Median, min and max of ``values`` (``None`` entries dropped), with their count."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if len(v) == 0:
        return {"median": None, "min": None, "max": None, "count": 0}
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()), "count": int(len(v))}


def level_steps(r: dict, horizon: int) -> float | None:
    """A run's steps to the level (censored at ``horizon``), at least 1; ``None`` if diverged."""
    return None if r["status"] == "diverged" else max(1.0, censored(r["steps_to_level"], horizon)[0])


def rerun_diverged(steps: Mapping, run: Callable, times: int, *, follows: Mapping | None = None,
                   diverged: Callable = lambda r: r["status"] == "diverged") -> tuple[dict, dict]:
    """The runs ``run({arm: eta}) -> {arm: records}`` with reruns (protocol v4, section 1): an arm with
    a diverged record reruns at ``RERUN_FACTOR`` its step, ``times`` at most, ``follows`` ``{arm:
    other}`` with ``other``. Returns ``{arm: records}`` and ``{arm: [(eta, diverged records)]}``."""
    out: dict = {}
    failed: dict = {arm: [] for arm in steps}
    pending = dict(steps)
    for attempt in range(times + 1):
        again = {}
        for arm, records in run(pending).items():
            out[arm] = records
            bad = [r for r in records if diverged(r)]
            if bad and attempt < times:
                failed[arm].append((pending[arm], bad))
                again[arm] = pending[arm] * RERUN_FACTOR
        for arm, other in (follows or {}).items():
            if other in again and arm not in again:
                again[arm] = again[other] * RERUN_FACTOR
        pending = dict(sorted(again.items()))
        if not pending:
            break
    return out, failed


def tune_arms(arms: Sequence, grid: Sequence[float], probe_runs: Callable[[list, int], Mapping], *,
              horizon: int, max_horizon: int, extend: int = 8) -> dict:
    """``{arm: tune_step(...)}`` from ``probe_runs(pairs, T)``, no pair probed twice."""
    table: dict = {}

    def fill(pairs: list, T: int) -> None:
        missing = [p for p in pairs if (p, T) not in table]
        if missing:
            table.update({(p, T): runs for p, runs in probe_runs(missing, T).items()})

    def probe(arm, etas: list[float], T: int) -> list:
        fill([(arm, e) for e in etas], T)
        return [table[((arm, e), T)] for e in etas]

    fill([(a, float(e)) for a in arms for e in sorted(grid)], horizon)
    return {a: tune_step(functools.partial(probe, a), grid, horizon=horizon, max_horizon=max_horizon,
                         extend=extend) for a in arms}


def spread_row(configuration: str, measurement: str, values, fmt: str) -> dict:
    """A row of the report's spread table: the :func:`spread` of ``values`` (or a spread made)."""
    v = values if isinstance(values, dict) else spread(values)
    return {"configuration": configuration, "measurement": measurement, "median": v["median"],
            "min": v["min"], "max": v["max"], "seeds": v["count"], "format": fmt}


def probe_count(s: dict, step_sizes: list[dict]) -> int:
    """The probe runs of the tunings ``step_sizes``: one per step of a grid and probe seed."""
    return sum(len(t["grid"]) for t in step_sizes) * len(s["probe_seeds"])


def step_table(step_sizes: list[dict], keys: Sequence[str]) -> list[dict]:
    """The step tunings with their fields ``keys`` only (``None`` where one lacks a field)."""
    return [{k: t.get(k) for k in keys} for t in step_sizes]


#: The run in progress (``run_experiment``): its data files' fingerprint, the shared parts used and
#: the commit of the code (set by ``convres.committed.run_piece``; ``None`` elsewhere) and the runner's
#: module (the results cache keys a shared part on that module's code).
RUN_CONTEXT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("run_context", default=None)


@contextlib.contextmanager
def run_context(**values: Any) -> Iterator[dict]:
    """Within it, :data:`RUN_CONTEXT` is the current context updated with ``values`` (yielded)."""
    context = {**(RUN_CONTEXT.get() or {}), **values}
    token = RUN_CONTEXT.set(context)
    try:
        yield context
    finally:
        RUN_CONTEXT.reset(token)


def shared_by_pieces(what: str, s: dict, device, compute: Callable[[], Any], **context: Any) -> Any:
    """``compute()``, a part that uses no evaluation seed, cached on ``s`` less ``seeds``, ``device``,
    the data and ``context`` with its commit and CPU seconds: in ``RUN_CONTEXT["store"]`` (keyed
    without the source) where a committed run names one, else in the results cache."""
    run = RUN_CONTEXT.get() or {"data": {}, "shared": []}
    config = {"settings": {k: v for k, v in s.items() if k != "seeds"}, **context, "device": str(device),
              "data": run["data"]}

    def made() -> dict:
        t0 = time.process_time()
        value = compute()
        seconds = round(time.process_time() - t0, 1)
        return {"value": value, "commit": run.get("commit"), "cpu_seconds": seconds}

    store = run.get("store")
    code = run.get("module", True) if store is None else False      # a store is keyed without the source
    part = cached_json(what, config, made, directory=store, source=code)
    value = part.pop("value")
    run["shared"].append({"what": what, "key": digest(config)[:16], "sha256": digest(value), **part})
    return value


# --- protocol v4: the design checks, the claim records and the protocol's stamp, as the JSON holds them ---

#: Written by the coordinator right after tagging ``protocol-v4``: ``{"tag", "commit", "date"}``.
STAMP_FILE = Path(__file__).resolve().parents[2] / "results" / "protocol.json"


def protocol_stamp(path: Path = STAMP_FILE) -> dict | None:
    """The tag's ``{"tag", "commit", "date"}`` read from ``path``; ``None`` before it is written."""
    if not path.is_file():
        return None
    try:
        s = json.loads(path.read_text())
        ok = (s["tag"] == TAG and re.fullmatch(r"[0-9a-f]{40}", str(s["commit"]))
              and re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ].*)?", str(s["date"])))
        why = f"got {s!r}"
    except (OSError, ValueError, LookupError, TypeError) as err:
        ok, why = False, f"{type(err).__name__}: {err}"
    if not ok:
        raise ValueError(f"{path} must hold {{'tag': {TAG!r}, 'commit': 40 hex digits, 'date': "
                         f"'YYYY-MM-DD...'}} ({why}); write it again from `git show {TAG}`.")
    return {k: s[k] for k in ("tag", "commit", "date")}


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """A design check of ``convres.protocol.CHECKS`` as measured before the evaluation runs."""

    name: str
    value: float
    threshold: float
    passed: bool

    def to_json(self) -> dict:
        return {"name": self.name, "passed": self.passed, "value": self.value, "threshold": self.threshold}


def design_check(name: str, value: float) -> CheckResult:
    """Check ``name`` (a key of ``convres.protocol.CHECKS``) on its measured ``value``."""
    if name not in CHECKS:
        raise ValueError(f"unknown design check {name!r}; the protocol's are {sorted(CHECKS)}.")
    if not is_real(value) or not math.isfinite(value):
        raise ValueError(f"design check {name!r} needs a finite number ({CHECKS[name].text}), "
                         f"got {value!r}.")
    return CheckResult(name, float(value), float(CHECKS[name].threshold), CHECKS[name].passes(float(value)))


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    """A graded :class:`convres.protocol.Claim`: estimate, verdict, subsets' verdicts, sensitivity."""

    claim: Claim
    estimate: Estimate
    verdict: str
    reason: str
    subset: tuple[str, ...]
    subsets: Mapping[str, str]
    sensitivity: tuple[dict, ...]

    @property
    def id(self) -> str:
        return self.claim.id

    def to_json(self) -> dict:
        e = self.estimate
        return json_safe({"id": self.id, "measure": plain(self.claim.measure), "effect": e.effect,
                          "ci": None if e.lo is None else [e.lo, e.hi], "interval": e.method,
                          "margin": self.claim.margin, "units": e.units, "sign_test_p": e.sign_test_p,
                          "verdict": self.verdict, "sensitivity": list(self.sensitivity),
                          "diverged": e.diverged, "subset": list(self.subset), "subsets": dict(self.subsets),
                          **({"reason": self.reason} if self.reason else {})})

    def row(self, **extra: Any) -> dict:
        """The report's row: the JSON, ``claim``, ``tex`` and ``extra`` (``figure``, ``criterion``, ...)."""
        return {"claim": self.claim.text, "tex": self.claim.tex, **self.to_json(), **extra}


def claim_record(claim_id: str, effects: Sequence, *, profile: str, checks: Sequence[CheckResult],
                 strata: Sequence | None = None,
                 sensitivity: Mapping[tuple[str, str], Sequence] | None = None,
                 sensitivity_strata: Mapping[tuple[str, str], Sequence] | None = None,
                 draws: int = BOOTSTRAP_DRAWS,
                 estimator: Callable[[Any], tuple[Estimate, dict]] | None = None) -> ClaimRecord:
    """Claim ``claim_id`` graded by protocol v4 from one effect per unit (``None``: diverged), the
    units' ``strata``, the design ``checks`` and ``sensitivity`` ``{(measure, protocol): effects}``
    (their strata ``strata`` unless ``sensitivity_strata`` names others); ``estimator(effects) ->
    (estimate, {subset: estimate})`` in place of :func:`convres.stats.estimate`."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim {claim_id!r}; the protocol's are {list(CLAIMS)}.")
    if profile not in MIN_UNITS:
        raise ValueError(f"profile must be one of {list(MIN_UNITS)}, got {profile!r}.")
    c, ran = CLAIMS[claim_id], {ch.name: ch for ch in checks}
    missing = [n for n in c.checks if n not in ran]
    if missing:
        raise ValueError(f"claim {claim_id} needs the design checks {missing}: run them before grading "
                         "(protocol section 3) and pass their CheckResults.")
    if c.subsets and strata is None and estimator is None:
        raise ValueError(f"claim {claim_id} names the subsets {c.subsets}: pass strata, one label per "
                         "effect.")
    alt = dict(sensitivity or {})
    if set(alt) != set(c.alternatives):
        raise ValueError(f"claim {claim_id} needs its alternatives {list(c.alternatives)} and no others in "
                         f"sensitivity, got {list(alt)}; a change is a protocol deviation.")
    failed = [n for n in c.checks if not ran[n].passed]

    def graded(eff, strata=strata):
        kw: dict[str, Any] = dict(min_units=MIN_UNITS[profile], draws=draws, bound=c.bound)
        labels = [str(s) for s in strata] if strata is not None else []
        est, subs = estimator(eff) if estimator else (estimate(eff, strata=strata, **kw), {
            s: estimate([e for e, k in zip(eff, labels) if k == s], **kw) for s in c.subsets})
        return est, subs, grade(est, c.margin, rule=c.rule, failed=failed, subsets=subs, every=c.every)
    est, subs, g = graded(effects)
    sens = tuple({"measure": m, "tex": ALTERNATIVES.get(m, m), "protocol": p,
                  "verdict": graded(alt[(m, p)], (sensitivity_strata or {}).get((m, p), strata))[2].verdict}
                 for m, p in c.alternatives)
    by_subset = {s: grade(e, c.margin, rule=c.rule, failed=failed).verdict for s, e in subs.items()}
    return ClaimRecord(c, est, g.verdict, g.reason, g.subset, by_subset, sens)


def protocol_summary(checks: Sequence[CheckResult]) -> dict:
    """``{"design_checks", "protocol"}`` for a summary (``commit``, ``date``: ``None`` before the stamp)."""
    s = protocol_stamp() or {"tag": TAG, "commit": None, "date": None}
    return {"design_checks": [ch.to_json() for ch in checks], "protocol": s}
