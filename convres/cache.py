"""Atomic files and a small on-disk cache of results keyed by configuration and package version.

Results are stored as JSON (no pickle). A key is the SHA-256 of the canonical JSON of the
configuration together with the convres version and a fingerprint of the package's source code, so
neither a new version nor an edited function ever serves stale results.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .paths import cache_dir

__all__ = ["atomic_write_bytes", "atomic_write_text", "cache_key", "cached_json", "source_fingerprint"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then a rename.

    A reader sees either the old file or the whole new one, never a half-written file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """SHA-256 (first 16 hex digits) of the source files of the ``convres`` package."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_key(config: Any) -> str:
    """SHA-256 of the canonical JSON of ``config``, the package version and
    :func:`source_fingerprint` (first 16 hex digits)."""
    blob = json.dumps({"config": config, "convres": __version__, "source": source_fingerprint()},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def cached_json(name: str, config: Any, compute: Callable[[], Any], *, directory=None,
                refresh: bool = False) -> Any:
    """Return ``compute()``, cached on disk as ``<cache>/<name>-<key>.json``.

    ``config`` must be JSON-serializable and hold everything the result depends on. A corrupt
    cache file is recomputed, never trusted.
    """
    path = cache_dir(directory) / f"{name}-{cache_key(config)}.json"
    if not refresh and path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("config") == json.loads(json.dumps(config, default=str)):
                return stored["result"]
        except (json.JSONDecodeError, KeyError, UnicodeDecodeError, AttributeError):
            pass
    result = compute()
    atomic_write_text(path, json.dumps({"config": config, "convres": __version__, "result": result},
                                       default=str))
    return result
