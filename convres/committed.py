"""Committed results (book chapter *Reproduction report*): the profiles too large for the book's
build (``Experiment.committed``), run in pieces (``python -m convres reproduce NAME --profile P --piece
K``: ``results/pieces/NAME-P-K.json``) and merged under a lock into ``results/NAME-P.json`` with
provenance. What is read back passes the checks of what is written (:func:`read_record`)."""

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
from .experiments.base import protocol_stamp, run_context
from .experiments.sst2 import prepare

#: The project's source tree, when this package runs from one (:func:`source_checkout`).
ROOT = Path(__file__).resolve().parent.parent
#: The schema of a result file: its fields and their types.
SCHEMA: dict[str, type | tuple[type, ...]] = {"name": str, "profile": str, "settings": dict, "data": dict,
                                              "seconds": (int, float)}


def source_checkout() -> Path | None:
    """The project's source tree this package runs from (its ``pyproject.toml`` names convres)."""
    project = ROOT / "pyproject.toml"
    return ROOT if project.is_file() and 'name = "convres"' in project.read_text(errors="replace") else None


def results_dir(folder: str | os.PathLike | None = None) -> Path:
    """``folder``, else ``results/`` of the source tree (an installed package has none)."""
    if folder is None and source_checkout() is None:
        raise ValueError(f"convres runs from {ROOT}, not from the project's source tree, so it has no "
                         "results/ folder: pass one (--results FOLDER).")
    return Path(folder) if folder is not None else ROOT / "results"


def pieces(name: str, profile: str = "paper") -> list[list[int]]:
    """The evaluation seeds of ``name``'s ``profile`` in blocks of its ``piece_seeds``."""
    seeds = settings(name, profile).get("seeds")
    if not seeds:
        raise ValueError(f"{name!r} has no evaluation seeds, so it is not run in pieces; run it whole: "
                         f"python -m convres reproduce {name} --profile {profile}")
    k = EXPERIMENTS[name].piece_seeds or len(seeds)
    return [seeds[i:i + k] for i in range(0, len(seeds), k)]


def _per_seed(x: Any) -> bool:
    """Whether ``x`` is a list of per-seed records (dicts with a ``"seed"``)."""
    return isinstance(x, list) and bool(x) and all(isinstance(r, dict) and "seed" in r for r in x)


def merge_data(parts: list) -> Any:
    """The data of pieces as one: what every piece holds alike once (tuned steps, side runs); lists of
    per-seed records concatenated; dicts (and lists of containers of one length) merged entry by
    entry; else a ValueError."""
    first = parts[0]
    same = all(dumps(p, sort_keys=True) == dumps(first, sort_keys=True) for p in parts)
    if not same and all(_per_seed(p) for p in parts):  # the pieces' own runs
        return [r for p in parts for r in p]
    if isinstance(first, dict) and all(isinstance(p, dict) and p.keys() == first.keys() for p in parts):
        return {k: merge_data([p[k] for p in parts]) for k in first}
    if isinstance(first, list) and all(isinstance(p, list) and len(p) == len(first) for p in parts) \
            and all(isinstance(x, (dict, list)) for x in first):
        return [merge_data([p[i] for p in parts]) for i in range(len(first))]
    if not same:
        raise ValueError("the pieces differ in a part that does not depend on their seeds")
    return first


def read_record(path: Path, name: str, profile: str, seeds: list | None, k: int) -> dict:
    """The result at ``path`` if it is strict JSON of :data:`SCHEMA` with a provenance, of ``name``'s
    ``profile`` with today's settings for ``seeds`` (``None``: those of its ``pieces``); else a
    ValueError naming ``path`` and the ``--piece`` that writes it again."""
    stored: Any = None
    try:
        stored = loads(path.read_bytes(), str(path)) if path.is_file() else None
        problems = [f"no {key!r}" for key, kind in SCHEMA.items()
                    if not isinstance(stored, dict) or not isinstance(stored.get(key), kind)]
    except (OSError, ValueError) as err:
        stored, problems = None, [str(err)]
    if not problems:
        if seeds is None:  # a merged file: the seeds of the pieces it lists
            listed = stored.get("pieces")
            done: Any = listed.get("done") if isinstance(listed, dict) else None
            blocks = pieces(name, profile)
            if isinstance(done, list) and done == sorted(set(done)) and set(done) <= set(range(len(blocks))):
                seeds = [s for j in done for s in blocks[j]]
        full = settings(name, profile)
        checks = [(seeds is None, "no list of the pieces it holds"),
                  ("provenance" not in stored, "no provenance"),
                  ((stored["name"], stored["profile"]) != (name, profile), "it is of another experiment"),
                  ({**stored["settings"], "seeds": full["seeds"]} != full, "its settings are not today's"),
                  (stored["settings"]["seeds"] != seeds, f"its seeds are not {seeds}")]
        problems = [what for bad, what in checks if bad]
    if problems:
        raise ValueError(f"{path} cannot be used: {'; '.join(problems)}. Compute it again: python -m convres "
                         f"reproduce {name} --profile {profile} --piece {k}")
    return stored


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the source tree's own clone (git run there only, hooks and fsmonitor off)."""
    root = source_checkout()
    if root is None or not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root), "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
    asks = (["rev-parse", "HEAD"], ["status", "--porcelain", "--", "convres"])
    try:
        head, dirty = (subprocess.run([*git, *ask], capture_output=True, text=True, timeout=10, check=True)
                       .stdout.strip() for ask in asks)
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+uncommitted convres/ changes" if dirty else "")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def piece_path(name: str, k: int, folder, profile: str = "paper") -> Path:
    return results_dir(folder) / "pieces" / f"{name}-{profile}-{k}.json"


def committed_path(name: str, folder=None, profile: str = "paper") -> Path:
    """The merged file of ``name``'s committed ``profile``: ``results/NAME-PROFILE.json``."""
    return results_dir(folder) / f"{name}-{profile}.json"


@contextlib.contextmanager
def shared_store(folder: Path, commit: str | None) -> Iterator[None]:
    """Within it, the shared parts of a run (tuned steps, checks) are kept in ``folder/shared/`` with
    ``commit``, committed with the pieces (:func:`~convres.experiments.base.shared_by_pieces`)."""
    (folder / "shared").mkdir(exist_ok=True)
    with run_context(commit=commit, store=folder / "shared"):
        yield


def prepare_part(part: str, *, folder=None, device=None, profile: str = "paper") -> Any:
    """SST-2's shared ``part`` (e.g. ``"tune L=10, isometric"``) computed into ``results/shared/``."""
    with shared_store(results_dir(folder), git_commit()):
        return prepare(profile, part, device=device)


def run_piece(name: str, k: int, *, folder=None, device=None, progress: bool = False,
              profile: str = "paper") -> tuple[Path, dict]:
    """Compute piece ``k`` of ``name``, write it with its provenance, merge the pieces present."""
    blocks, path = pieces(name, profile), piece_path(name, k, folder, profile)
    if not 0 <= k < len(blocks):
        raise ValueError(f"{name!r} has pieces 0 to {len(blocks) - 1} in the {profile!r} profile, got {k}.")
    path.parent.mkdir(parents=True, exist_ok=True)  # before the work: an OSError naming the folder
    if not path.parent.resolve().is_relative_to(path.parents[1].resolve()):
        raise ValueError(f"{path.parent} is a link out of {path.parents[1]}; make it a folder of its own.")
    commit = git_commit()  # the code that runs is the clone's now
    with shared_store(path.parents[1], commit):
        res = run_experiment(name, profile, overrides={"seeds": blocks[k]}, progress=progress, device=device)
    command = f"python -m convres reproduce {name} --profile {profile} --piece {k}" + \
        ("" if device in (None, "cpu") else f" --device {device}")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    write_atomic(path, dumps({**res.to_json(), "piece": k, "provenance": {
        "commit": commit, "command": command, "wall_seconds": round(res.seconds, 1), "machine": machine,
        "python": platform.python_version(), "torch": torch.__version__, "device": res.data.get("device"),
        "data": fingerprint(), "shared": res.data.get("shared", []), "protocol": protocol_stamp()}}))
    return path, assemble(name, path.parents[1], profile) or {}


def assemble(name: str, folder=None, profile: str = "paper") -> dict | None:
    """The pieces present merged into ``NAME-PROFILE.json`` under a lock (``None``: no piece)."""
    blocks, folder, full = pieces(name, profile), results_dir(folder), settings(name, profile)
    with _locked(folder):
        done = [k for k in range(len(blocks)) if piece_path(name, k, folder, profile).exists()]
        parts = [read_record(piece_path(name, k, folder, profile), name, profile, blocks[k], k) for k in done]
        if not parts:
            return None
        try:
            data = merge_data([p["data"] for p in parts])
        except ValueError as err:
            raise ValueError(f"the pieces {done} of {name!r} in {folder} cannot be merged ({err}); compute "
                             "the odd one again (--piece K).") from None
        seeds = [s for k in done for s in blocks[k]]
        out = {"name": name, "profile": profile, "settings": {**full, "seeds": seeds}, "data": data,
               "seconds": sum(p["seconds"] for p in parts),
               "pieces": {"total": len(blocks), "done": done, "planned_seeds": full["seeds"],
                          "missing": [k for k in range(len(blocks)) if k not in done]},
               "provenance": [{"piece": k, **p.get("provenance", {})} for k, p in zip(done, parts)]}
        write_atomic(committed_path(name, folder, profile), dumps(out))
    return out


def load_committed(name: str, folder=None, profile: str = "paper") -> tuple[Result, dict] | None:
    """The committed result (:func:`read_record`) with its ``pieces`` and ``provenance``, or ``None``."""
    path = committed_path(name, folder, profile)
    settings(name, profile)  # an unknown name is an error, not "nothing committed"
    if not (path.exists() or path.is_symlink()):
        return None
    stored = read_record(path, name, profile, None, 0)
    res = Result(EXPERIMENTS[name], stored["profile"], stored["settings"], stored["data"], stored["seconds"])
    return res, {"pieces": stored["pieces"], "provenance": stored.get("provenance", [])}


def result(name: str, profile: str = "book", **options) -> Result:
    """The committed file (every piece present) of a committed profile, else (or with ``refresh``)
    :func:`~convres.experiments.run_experiment` with ``options``."""
    settings(name, profile)  # an unknown name or profile is an error
    if profile not in EXPERIMENTS[name].committed or options.get("refresh"):
        return run_experiment(name, profile, **options)
    loaded = load_committed(name, profile=profile)
    if loaded is None or loaded[1]["pieces"]["missing"]:
        missing = loaded[1]["pieces"]["missing"] if loaded else list(range(len(pieces(name, profile))))
        raise ValueError(f"{committed_path(name, profile=profile)} lacks the pieces {missing} of {name!r}'s "
                         f"{profile!r} run; compute each: python -m convres reproduce {name} --profile "
                         f"{profile} --piece K")
    return loaded[0]
