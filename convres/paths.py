"""Where convres finds data and keeps its cache: one documented setting each.

* Data directory: the ``data_dir`` argument of every loader, else the environment variable
  ``CONVRES_DATA_DIR``, else ``~/.cache/convres/data`` (downloads land there).
* Cache directory for experiment results: ``CONVRES_CACHE_DIR``, else ``~/.cache/convres/results``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "cache_dir", "DATA_ENV", "CACHE_ENV"]

DATA_ENV = "CONVRES_DATA_DIR"
CACHE_ENV = "CONVRES_CACHE_DIR"


def _home_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "convres"


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data directory: ``path`` if given, else ``$CONVRES_DATA_DIR``, else ``~/.cache/convres/data``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else _home_cache() / "data"


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The results cache: ``path`` if given, else ``$CONVRES_CACHE_DIR``, else
    ``~/.cache/convres/results``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else _home_cache() / "results"
