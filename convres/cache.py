"""Atomic files and a small on-disk cache of results keyed by configuration and package version.

Results are stored as JSON (no pickle). A key is the SHA-256 of the canonical JSON of the
configuration together with the convres version and a fingerprint of the package's source code, so
neither a new version nor an edited function ever serves stale results.

The cache never costs a result: its directory is checked before anything is computed, and when it
cannot be written the result is still returned, with one :class:`CacheWarning` naming the setting
``CONVRES_CACHE_DIR``. An entry that is not what was stored (garbage, truncated, too deeply
nested, another configuration, rejected by the caller's ``check``, or a result that no longer
matches the SHA-256 stored with it, e.g. after a hand edit) is recomputed, with a
:class:`CacheWarning` naming the file. (The checksum finds edits and damage, not an adversary who
can write the cache folder and recompute it.)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ._version import __version__
from .files import FileRefused, atomic_write_bytes, atomic_write_text, read_regular
from .paths import CACHE_ENV, cache_dir

__all__ = ["atomic_write_bytes", "atomic_write_text", "cache_key", "cached_json", "source_fingerprint",
           "CacheWarning", "MAX_ENTRY_BYTES"]

#: The largest cache entry that is read (bytes); a larger file is not a convres entry.
MAX_ENTRY_BYTES = 256 * 2**20


class CacheWarning(UserWarning):
    """The cache could not be used (the result is still returned) or an entry was recomputed."""


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """SHA-256 (first 16 hex digits) of the source files of the ``convres`` package (every
    ``.py`` file of the package and its subpackages)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_key(config: Any) -> str:
    """SHA-256 of the canonical JSON of ``config``, the package version and
    :func:`source_fingerprint` (first 16 hex digits)."""
    blob = json.dumps({"config": config, "convres": __version__, "source": source_fingerprint()},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


#: Cache folders already warned about in this process (the warning is given once per folder).
_warned_folders: set[str] = set()


def _warn_unusable(folder: Path, reason: str) -> None:
    """One :class:`CacheWarning` per folder: results are computed but not cached."""
    if str(folder) in _warned_folders:
        return
    _warned_folders.add(str(folder))
    warnings.warn(f"convres cache: cannot write to {folder} ({reason}); results are computed and "
                  f"returned but not cached. Set {CACHE_ENV} to a writable folder (or pass "
                  "directory=...).", CacheWarning, stacklevel=3)


def _unusable_reason(folder: Path, path: Path) -> str | None:
    """Why ``path`` cannot be written in ``folder`` (``None``: it can). Creates ``folder`` and
    writes and removes a small probe file there, so that a read-only mount, a missing permission or a
    regular file in the way is found before anything is computed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            return f"the entry {path.name} is a directory; remove it"
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".convres-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        return "it exists and is not a directory"
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


_MISSING = object()


def _result_digest(result: Any) -> str:
    """SHA-256 of the canonical JSON (sorted keys) of a result as JSON gives it back."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stored_result(path: Path, config: Any, check: Callable[[Any], Any] | None) -> Any:
    """The result stored at ``path`` for ``config``, or ``_MISSING``. An entry that is unreadable,
    not JSON, too deeply nested, not of the form ``{"config", "result"}``, written for another
    configuration, or rejected by ``check`` gives one :class:`CacheWarning` naming the file."""
    try:
        raw = read_regular(path, max_bytes=MAX_ENTRY_BYTES, what="cache entry")
    except FileNotFoundError:
        return _MISSING
    except FileRefused as err:
        return _reject(path, str(err))
    except OSError:  # unreadable (reported by _unusable_reason)
        return _MISSING
    try:
        stored = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
        return _reject(path, f"not valid JSON: {type(err).__name__}")
    if not isinstance(stored, dict) or "config" not in stored or "result" not in stored:
        return _reject(path, "not a cache entry (no 'config' and 'result')")
    if stored["config"] != json.loads(json.dumps(config, default=str)):
        return _reject(path, "written for another configuration")
    if check is not None:
        try:
            ok = check(stored["result"])
        except Exception as err:  # the caller's check raises whatever its test hits (KeyError, ...)
            return _reject(path, f"result rejected by the check: {type(err).__name__}: {err}")
        if ok is False:
            return _reject(path, "result rejected by the check")
    if stored.get("sha256") != _result_digest(stored["result"]):
        return _reject(path, "its result does not match the sha256 stored with it: edited or damaged")
    return stored["result"]


def _reject(path: Path, reason: str) -> object:
    warnings.warn(f"convres cache: ignoring {path} ({reason}); recomputing it.", CacheWarning,
                  stacklevel=4)
    return _MISSING


def cached_json(name: str, config: Any, compute: Callable[[], Any], *, directory=None,
                refresh: bool = False, check: Callable[[Any], Any] | None = None) -> Any:
    """Return ``compute()``, cached on disk as ``<cache>/<name>-<key>.json``.

    ``config`` must be JSON-serializable and hold everything the result depends on. ``check``, if
    given, is called with a stored result before it is served: raising (any exception) or
    returning ``False`` marks the entry as not of the expected form. Such an entry, a corrupt one,
    or one whose result differs from the SHA-256 written with it, is recomputed with a
    :class:`CacheWarning` naming the file. The cache directory is checked
    before ``compute()`` runs; if it cannot be written (or the write fails anyway), the result is
    returned uncached with one :class:`CacheWarning` naming ``CONVRES_CACHE_DIR``.
    """
    folder = cache_dir(directory)
    path = folder / f"{name}-{cache_key(config)}.json"
    if not refresh:
        result = _stored_result(path, config, check)
        if result is not _MISSING:
            return result
    reason = _unusable_reason(folder, path)
    if reason is not None:
        _warn_unusable(folder, reason)
    result = compute()
    if reason is None:
        entry = json.loads(json.dumps({"config": config, "convres": __version__, "result": result},
                                      default=str))  # the entry as a later read will see it
        text = json.dumps({**entry, "sha256": _result_digest(entry["result"])})
        try:
            atomic_write_text(path, text)
        except OSError as err:
            _warn_unusable(folder, err.strerror or type(err).__name__)
    return result
