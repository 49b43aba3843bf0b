"""Results too large for the book's build: the ``paper`` profile, run in pieces, committed with provenance.

Book chapters: *Reproduction report* and the experiment chapters (section "At a larger scale").
``python -m convres reproduce NAME --profile paper --piece K`` runs piece ``K`` of experiment
``NAME``: the ``paper`` settings with the evaluation seeds restricted to the ``K``-th block of
:attr:`~convres.experiments.base.Experiment.piece_seeds` seeds (the step sizes are tuned on the
probe seeds in every piece, so every piece chooses the same steps). A piece is written to
``results/pieces/NAME-paper-K.json`` with its provenance, and ``results/NAME-paper.json`` is then
assembled from every piece present (:func:`merge_data`): the per-seed records concatenated, the
rest taken from the first piece. A piece never computed is listed as missing, never filled in.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from .experiments import EXPERIMENTS, Result, run_experiment, settings
from .experiments.base import protocol_stamp
from .files import atomic_write_text, read_regular

__all__ = ["RESULTS_DIR", "PROFILE", "pieces", "merge_data", "provenance", "run_piece", "assemble",
           "load_paper_result", "piece_path", "paper_path"]

#: The committed results of a clone: ``results/`` beside the package.
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
#: The profile whose results are committed.
PROFILE = "paper"
#: The largest committed file read back (bytes).
MAX_BYTES = 64 * 2 ** 20


def pieces(name: str, profile: str = PROFILE) -> list[list[int]]:
    """The evaluation seeds of ``name``'s ``profile`` in blocks of ``piece_seeds`` (one block
    when the experiment does not set it)."""
    seeds = settings(name, profile)["seeds"]
    k = EXPERIMENTS[name].piece_seeds or len(seeds)
    return [seeds[i:i + k] for i in range(0, len(seeds), k)]


def _is_seed_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, dict) and "seed" in x for x in value)


def _same(a: Any, b: Any) -> bool:
    """Equal, numbers to a relative 1e-9 (round-off of another device or thread count)."""
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, int):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) or a != a and b != b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def merge_data(parts: Sequence[Any], where: str = "data") -> Any:
    """The data of several pieces as one. A list of per-seed records (dicts with a ``"seed"``)
    is the concatenation of the pieces' lists (their seeds disjoint), or the first piece's when
    every piece holds the same list (records of seeds of their own, e.g. a side experiment); a
    dict, or a list of dicts of the same length in every piece, is merged entry by entry;
    anything else (tuned steps, baselines, shapes) must be the same in every piece. Anything
    else is a :class:`ValueError` naming where (``where``) the pieces disagree."""
    first = parts[0]
    if _is_seed_records(first) and all(_is_seed_records(p) for p in parts):
        if all(_same(p, first) for p in parts):
            return first
        seeds = [{x["seed"] for x in p} for p in parts]
        if sum(map(len, seeds)) != len(set().union(*seeds)):
            raise ValueError(f"the pieces share seeds at {where}: they are not blocks of one run.")
        return [x for p in parts for x in p]
    if isinstance(first, dict) and all(isinstance(p, dict) and p.keys() == first.keys() for p in parts):
        return {k: merge_data([p[k] for p in parts], f"{where}.{k}") for k in first}
    if isinstance(first, list) and first and all(isinstance(x, dict) for x in first) \
            and all(isinstance(p, list) and len(p) == len(first) for p in parts):
        return [merge_data([p[i] for p in parts], f"{where}[{i}]") for i in range(len(first))]
    if not all(_same(p, first) for p in parts):
        raise ValueError(f"the pieces differ at {where}, which does not depend on the seeds of a piece in "
                         "an experiment that can be run in pieces; this experiment cannot be merged.")
    return first


@lru_cache(maxsize=1)
def _git_commit() -> str | None:
    """The commit of the clone when this process first asks (its source is the source that runs:
    a later commit does not change the code of a running process)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=RESULTS_DIR.parent, capture_output=True,
                             text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "convres"], cwd=RESULTS_DIR.parent,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+uncommitted convres/ changes" if dirty else "")


def provenance(command: str, seconds: float, device: str) -> dict:
    """Where and how a piece was computed: ``commit``, ``command``, ``wall_seconds``, ``machine``,
    ``torch``, the device and the ``protocol`` stamp (``None`` before the tag)."""
    return {"commit": _git_commit(), "command": command, "wall_seconds": round(float(seconds), 1),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} "
                       f"{platform.release()}", "torch": torch.__version__, "device": device,
            "protocol": protocol_stamp()}


def piece_path(name: str, k: int, folder: Path = RESULTS_DIR, profile: str = PROFILE) -> Path:
    return Path(folder) / "pieces" / f"{name}-{profile}-{k}.json"


def paper_path(name: str, folder: Path = RESULTS_DIR, profile: str = PROFILE) -> Path:
    return Path(folder) / f"{name}-{profile}.json"


def run_piece(name: str, k: int, *, folder: Path = RESULTS_DIR, device=None, progress: bool = False,
              profile: str = PROFILE) -> tuple[Path, dict]:
    """Compute piece ``k`` of ``name`` (cached like every experiment), write it with its
    provenance, re-assemble ``NAME-paper.json``; return the piece's path and the assembled
    record (:func:`assemble`)."""
    blocks = pieces(name, profile)
    if not 0 <= k < len(blocks):
        raise ValueError(f"experiment {name!r} has pieces 0 to {len(blocks) - 1} in the {profile!r} "
                         f"profile, got {k}.")
    _git_commit()  # before the work, while the clone holds the code that runs
    res = run_experiment(name, profile, overrides={"seeds": blocks[k]}, progress=progress, device=device)
    command = f"python -m convres reproduce {name} --profile {profile} --piece {k}" + \
        (f" --device {device}" if device not in (None, "cpu") else "")
    out = {**res.to_json(), "piece": k, "provenance": provenance(command, res.seconds, str(device or "cpu"))}
    path = piece_path(name, k, folder, profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(out, separators=(",", ":")))
    merged = assemble(name, folder, profile)
    assert merged is not None  # the piece just written is present
    return path, merged


def _read(path: Path) -> dict:
    return json.loads(read_regular(path, max_bytes=MAX_BYTES).decode("utf-8"))


def assemble(name: str, folder: Path = RESULTS_DIR, profile: str = PROFILE) -> dict | None:
    """Merge the pieces of ``name`` present in ``folder`` into ``NAME-paper.json`` and return
    the merged record (none present: nothing written, ``None``). Its ``pieces`` lists those done
    and those missing; ``settings["seeds"]`` holds only the seeds computed."""
    blocks = pieces(name, profile)
    done = [k for k in range(len(blocks)) if piece_path(name, k, folder, profile).is_file()]
    if not done:
        return None
    parts = [_read(piece_path(name, k, folder, profile)) for k in done]
    full = settings(name, profile)
    for k, p in zip(done, parts):
        if {**p["settings"], "seeds": full["seeds"]} != full or p["settings"]["seeds"] != blocks[k]:
            raise ValueError(f"{piece_path(name, k, folder, profile)} was computed with other settings "
                             f"than the {profile!r} profile of {name!r} has now; recompute it with "
                             f"--piece {k}.")
    out = {"name": name, "profile": profile,
           "settings": {**full, "seeds": [sd for p in parts for sd in p["settings"]["seeds"]]},
           "data": merge_data([p["data"] for p in parts]), "seconds": sum(p["seconds"] for p in parts),
           "pieces": {"total": len(blocks), "done": done,
                      "missing": [k for k in range(len(blocks)) if k not in done],
                      "planned_seeds": full["seeds"]},
           "provenance": [dict(piece=k, **p["provenance"]) for k, p in zip(done, parts)]}
    atomic_write_text(paper_path(name, folder, profile), json.dumps(out, separators=(",", ":")))
    return out


def load_paper_result(name: str, folder: Path = RESULTS_DIR,
                      profile: str = PROFILE) -> tuple[Result, dict] | None:
    """The committed ``profile`` result of ``name`` as a :class:`Result` and its ``pieces`` and
    ``provenance`` (``None`` when nothing is committed)."""
    path = paper_path(name, folder, profile)
    if not path.is_file():
        return None
    stored = _read(path)
    res = Result(EXPERIMENTS[name], stored["profile"], stored["settings"], stored["data"], stored["seconds"])
    return res, {"pieces": stored["pieces"], "provenance": stored["provenance"]}
