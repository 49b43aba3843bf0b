"""The book's experiments (arXiv:2506.05249: simulations, Jena Climate, SST-2; every size, seed and
step the book's choice): their records, profiles ``book``, ``paper``, ``smoke`` and cached results."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping

from ..cache import cached_json
from ..data import fingerprint
from ..data.sst2 import sst2_data
from ..protocol import GRADES as VERDICTS  # the verdicts a claim can get, in the report's order
from ..runtime import check_device, torch_threads
from . import jena, rank_collapse, simulations, sst2, theorem
from .base import PROFILES, RESULT_FORMAT, SUMMARY_KEYS, Experiment, Result, check_settings, run_context
from .jena import jena_data

__all__ = ["Experiment", "Result", "EXPERIMENTS", "PROFILES", "VERDICTS", "SUMMARY_KEYS", "settings",
           "run_experiment", "claims", "jena_data", "sst2_data"]

#: Every experiment of the book, by name.
EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    simulations.EXPERIMENT, jena.EXPERIMENT, sst2.EXPERIMENT, rank_collapse.EXPERIMENT, *theorem.RECORDS)}
#: The module whose code each experiment runs: the results cache keys its result on that code.
CODE = {name: e.run.__module__ for name, e in EXPERIMENTS.items()}


def settings(name: str, profile: str = "book") -> dict:
    """A copy of the settings of experiment ``name`` under ``profile``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}.")
    if profile not in EXPERIMENTS[name].profiles:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(EXPERIMENTS[name].profiles)}.")
    return copy.deepcopy(EXPERIMENTS[name].profiles[profile])


def run_experiment(name: str, profile: str = "book", *, progress: bool = False, refresh: bool = False,
                   data_dir=None, overrides: dict | None = None, device=None) -> Result:
    """Experiment ``name``'s :class:`Result` under ``profile`` and ``overrides``, cached (with the data)."""
    s = settings(name, profile)  # an unknown name or profile: a ValueError
    e = EXPERIMENTS[name]
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of settings or None, got {type(overrides).__name__}.")
    if overrides:
        unknown = sorted(set(overrides) - set(s))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown} for {name!r}; known: {sorted(s)}.")
        s.update(copy.deepcopy(overrides))
    check_settings(name, s)
    dev = check_device(device)
    files, code = fingerprint(data_dir), CODE.get(name, True)   # an experiment added later: all the code
    key = {"experiment": name, "settings": s, "format": RESULT_FORMAT, "device": str(dev), "data": files}

    def compute():
        t0 = time.perf_counter()
        # keeps a piece's commit and store; one thread: small models run fastest so (appendix Performance)
        with run_context(data=files, shared=[], module=code) as context, torch_threads(1):
            data = e.run(s, progress=progress, data_dir=data_dir, device=dev)
        data.update(device=str(dev), shared=context["shared"])
        return Result(e, profile, s, data, time.perf_counter() - t0).to_json()

    stored = cached_json(f"experiment-{name}", key, compute, refresh=refresh, source=code)
    return Result(e, stored["profile"], stored["settings"], stored["data"], stored["seconds"])


def claims(results: Mapping[str, Result]) -> list[dict]:
    """Every row of the reproduction report, from ``results`` (name -> :class:`Result`)."""
    unknown = sorted(set(results) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"results has unknown experiment(s) {unknown}; expected keys among "
                         f"{sorted(EXPERIMENTS)}.")
    return [row for name in EXPERIMENTS if name in results for row in results[name].claims()]
