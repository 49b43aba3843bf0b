"""Results too large for the book's build: the ``paper`` profile, run in pieces, committed with provenance.

Book chapter *Reproduction report*. ``python -m convres reproduce NAME --profile paper --piece K``
runs the ``K``-th block of ``piece_seeds`` evaluation seeds, writes ``results/pieces/NAME-paper-K.json``
with its provenance, and merges every piece present into ``results/NAME-paper.json`` under a lock, so
that pieces run side by side (a job array: one piece a task) all end in the merged file. What is read
back passes the checks of what is written (:func:`check_record`); a file that fails them is an error
naming it and the ``--piece`` that writes it again, never a result.
"""

import contextlib
import fcntl
import os
import platform
import subprocess
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from .cache import dumps, loads, write_atomic
from .data import fingerprint
from .experiments import EXPERIMENTS, Result, run_experiment, settings

#: The project's source tree when this package runs from one (``None`` for an installed package).
ROOT = Path(__file__).resolve().parent.parent
PROFILE = "paper"
RECORD_KEYS = {"name": str, "profile": str, "settings": dict, "data": dict, "seconds": (int, float)}


def source_checkout() -> Path | None:
    """The project's clone this package runs from: ``convres/`` beside its ``pyproject.toml``."""
    project = ROOT / "pyproject.toml"
    return ROOT if project.is_file() and 'name = "convres"' in project.read_text(errors="replace") else None


def results_dir(folder: str | os.PathLike | None = None) -> Path:
    """``folder``, else ``results/`` of the clone this package runs from (an installed one has none)."""
    if folder is not None:
        return Path(folder)
    if source_checkout() is None:
        raise ValueError(f"convres runs from {ROOT}, not from a clone of the project, so it has no results/ "
                         "folder: pass one (--results FOLDER, or folder=...).")
    return ROOT / "results"


def pieces(name: str, profile: str = PROFILE) -> list[list[int]]:
    """The evaluation seeds of ``name``'s ``profile`` in blocks of its ``piece_seeds``."""
    seeds = settings(name, profile).get("seeds")
    if not seeds:
        raise ValueError(f"{name!r} has no evaluation seeds, so it is not run in pieces; run it whole: python -m "
                         f"convres reproduce {name} --profile {profile}.")
    k = EXPERIMENTS[name].piece_seeds or len(seeds)
    return [seeds[i:i + k] for i in range(0, len(seeds), k)]


def _seed_lists(x: Any) -> Iterator[list]:
    """Every list of per-seed records (dicts with a ``"seed"``) in ``x``."""
    if isinstance(x, list) and x and all(isinstance(r, dict) and "seed" in r for r in x):
        yield x
    for v in x.values() if isinstance(x, dict) else x if isinstance(x, list) else []:
        yield from _seed_lists(v)


def merge_data(parts: list, planned: set) -> Any:
    """The data of pieces as one: lists of per-seed records of ``planned`` seeds concatenated, dicts
    (and lists of dicts of one length) merged entry by entry, anything else (tuned steps, side runs
    of other seeds) the same in every piece; else a ValueError."""
    first = parts[0]
    if all(next(_seed_lists(p), None) is p for p in parts) and {x["seed"] for p in parts for x in p} & planned:
        return [x for p in parts for x in p]
    if isinstance(first, dict) and all(isinstance(p, dict) and p.keys() == first.keys() for p in parts):
        return {k: merge_data([p[k] for p in parts], planned) for k in first}
    if isinstance(first, list) and all(isinstance(p, list) and len(p) == len(first) for p in parts) \
            and all(isinstance(x, (dict, list)) for x in first):
        return [merge_data([p[i] for p in parts], planned) for i in range(len(first))]
    if any(dumps(p, sort_keys=True) != dumps(first, sort_keys=True) for p in parts):
        raise ValueError("the pieces differ in a part that does not depend on their seeds")
    return first


def check_record(stored: Any, name: str, profile: str, seeds: list, where: Path, k: int) -> dict:
    """``stored`` if it holds a result of ``name``'s ``profile`` with today's settings for ``seeds``,
    its per-seed records those of ``seeds``; else a ValueError naming ``where`` and the fix."""
    full = settings(name, profile)
    problems = [f"no {key!r}" for key, kind in RECORD_KEYS.items()
                if not isinstance(stored, dict) or not isinstance(stored.get(key), kind)]
    if not problems:
        found = {r["seed"] for records in _seed_lists(stored["data"]) for r in records} & set(full["seeds"])
        problems = [what for bad, what in [
            ((stored["name"], stored["profile"]) != (name, profile), f"it is of {stored['name']!r}, {stored['profile']!r}"),
            ({**stored["settings"], "seeds": full["seeds"]} != full, "its settings are not those of today's code"),
            (stored["settings"]["seeds"] != seeds, f"its seeds are not {seeds}"),
            (bool(found) and found != set(seeds), f"it holds records of the seeds {sorted(found)}")] if bad]
    if problems:
        raise ValueError(f"{where} cannot be used: {'; '.join(problems)}. Compute it again: python -m convres "
                         f"reproduce {name} --profile {profile} --piece {k}")
    return stored


def _load(path: Path, name: str, profile: str, k: int) -> Any:
    try:
        return loads(path.read_bytes(), str(path)) if path.is_file() else None
    except (OSError, ValueError) as err:
        raise ValueError(f"{err}. Compute it again: python -m convres reproduce {name} --profile {profile} "
                         f"--piece {k}") from None


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the clone this package runs from (git in that clone only, without its hooks or
    file-system monitor); ``None`` outside one."""
    root = source_checkout()
    if root is None or not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root), "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "convres"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+uncommitted convres/ changes" if dirty else "")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def piece_path(name: str, k: int, folder: Path, profile: str = PROFILE) -> Path:
    return Path(folder) / "pieces" / f"{name}-{profile}-{k}.json"


def paper_path(name: str, folder: Path | None = None, profile: str = PROFILE) -> Path:
    return results_dir(folder) / f"{name}-{profile}.json"


def run_piece(name: str, k: int, *, folder=None, device=None, progress: bool = False,
              profile: str = PROFILE) -> tuple[Path, dict]:
    """Compute piece ``k`` of ``name``, write it with its provenance, merge the pieces present."""
    blocks, folder = pieces(name, profile), results_dir(folder)
    if not 0 <= k < len(blocks):
        raise ValueError(f"{name!r} has pieces 0 to {len(blocks) - 1} in the {profile!r} profile, got {k}.")
    path = piece_path(name, k, folder, profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"the results folder {folder} cannot be written ({err}); pass a writable one.") from None
    if not path.parent.resolve().is_relative_to(Path(folder).resolve()):
        raise ValueError(f"{path.parent} is a link out of {folder}; convres writes only inside it: make it a "
                         "folder of its own.")
    commit = git_commit()  # before the work: the code that runs is the clone's now
    res = run_experiment(name, profile, overrides={"seeds": blocks[k]}, progress=progress, device=device)
    command = f"python -m convres reproduce {name} --profile {profile} --piece {k}" + \
        (f" --device {device}" if device not in (None, "cpu") else "")
    write_atomic(path, dumps({**res.to_json(), "piece": k, "provenance": {
        "commit": commit, "command": command, "wall_seconds": round(res.seconds, 1), "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "torch": torch.__version__, "device": res.data.get("device", "cpu"), "data": fingerprint(),
        "shared": res.data.get("shared", [])}}))
    return path, assemble(name, folder, profile)


def assemble(name: str, folder=None, profile: str = PROFILE) -> dict | None:
    """Merge the pieces of ``name`` present in ``folder`` into ``NAME-PROFILE.json`` under a lock on
    the folder; return the merged record (``pieces``: those done and those missing)."""
    blocks, folder = pieces(name, profile), results_dir(folder)
    with _locked(folder):
        done = [k for k in range(len(blocks)) if piece_path(name, k, folder, profile).exists()]
        parts = [check_record(_load(piece_path(name, k, folder, profile), name, profile, k), name, profile,
                              blocks[k], piece_path(name, k, folder, profile), k) for k in done]
        for k, p in zip(done, parts):
            if not isinstance(p.get("provenance"), dict):
                raise ValueError(f"{piece_path(name, k, folder, profile)} has no provenance; compute it again: "
                                 f"python -m convres reproduce {name} --profile {profile} --piece {k}")
        try:
            data = merge_data([p["data"] for p in parts], set(settings(name, profile)["seeds"])) if parts else {}
        except ValueError as err:
            raise ValueError(f"the pieces {done} of {name!r} in {folder} cannot be merged ({err}); compute "
                             "the odd one again with --piece K.") from None
        out = {"name": name, "profile": profile, "settings": {**settings(name, profile),
               "seeds": [s for k in done for s in blocks[k]]}, "data": data,
               "seconds": sum(p["seconds"] for p in parts), "pieces": {"total": len(blocks), "done": done,
               "missing": [k for k in range(len(blocks)) if k not in done], "planned_seeds": settings(name, profile)["seeds"]},
               "provenance": [{"piece": k, **p["provenance"]} for k, p in zip(done, parts)]}
        if done:
            write_atomic(paper_path(name, folder, profile), dumps(out))
    return out if done else None


def load_paper_result(name: str, folder=None, profile: str = PROFILE) -> tuple[Result, dict] | None:
    """The committed ``profile`` result of ``name`` and its ``pieces`` and ``provenance``, checked as
    when it was written (:func:`check_record`); ``None`` when nothing is committed."""
    path, blocks = paper_path(name, folder, profile), pieces(name, profile)
    if not (path.exists() or path.is_symlink()):
        return None
    stored = _load(path, name, profile, 0)
    done = stored.get("pieces", {}).get("done") if isinstance(stored, dict) else None
    if not isinstance(done, list) or not done or sorted(set(done)) != done or not set(done) <= set(range(len(blocks))):
        raise ValueError(f"{path} cannot be used: it lists no pieces of {name!r}. Compute a piece again to merge "
                         f"them anew: python -m convres reproduce {name} --profile {profile} --piece 0")
    check_record(stored, name, profile, [s for k in done for s in blocks[k]], path, done[0])
    res = Result(EXPERIMENTS[name], stored["profile"], stored["settings"], stored["data"], stored["seconds"])
    return res, {"pieces": stored["pieces"], "provenance": stored.get("provenance", [])}
