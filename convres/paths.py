"""Where convres finds data and keeps its cache: one documented setting each, validated in one place.

* Data directory: the ``data_dir`` argument of every loader, else the environment variable
  ``CONVRES_DATA_DIR``, else ``$XDG_CACHE_HOME/convres/data`` (``~/.cache/convres/data``);
  downloads land there.
* Cache directory for experiment results: the ``directory`` argument, else ``CONVRES_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/convres/results`` (``~/.cache/convres/results``).

The policy for every path setting (:func:`setting_path`): an empty value, or one with a NUL byte,
is an error naming the setting (an empty ``XDG_CACHE_HOME`` is ignored, as the XDG specification
says, and so is a relative one); ``~`` and ``~user`` are expanded, and a ``~user`` that names no
user is an error naming the setting, never a folder called ``~user`` in the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "cache_dir", "setting_path", "PathSettingError", "DATA_ENV", "CACHE_ENV",
           "XDG_ENV"]

DATA_ENV = "CONVRES_DATA_DIR"
CACHE_ENV = "CONVRES_CACHE_DIR"
XDG_ENV = "XDG_CACHE_HOME"


class PathSettingError(ValueError):
    """A path setting (an argument or an environment variable) that cannot name a folder."""


def setting_path(value: str | os.PathLike, setting: str) -> Path:
    """``value`` as a path, ``~`` expanded; a :class:`PathSettingError` naming ``setting`` (e.g.
    ``"CONVRES_CACHE_DIR"`` or ``"data_dir"``) when it is empty, holds a NUL byte, is not a
    string or path, or starts with ``~user`` for a user that does not exist."""
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise PathSettingError(f"{setting} must be a path (str or pathlib.Path), got "
                               f"{type(value).__name__} {value!r}.")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise PathSettingError(f"{setting} must be a text path, got {text!r}.")
    if not text.strip():
        fix = "pass a folder" if setting.startswith("-") or setting.isidentifier() and setting.islower() \
            else f"set it to a folder, e.g. {setting}=$HOME/.cache/convres, or unset it for the default"
        raise PathSettingError(f"{setting} is empty ({text!r}); {fix}.")
    if "\0" in text:
        raise PathSettingError(f"{setting} holds a NUL byte ({text!r}); no folder has such a name.")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # Python 3.11: "Could not determine home directory."
        path = Path(text)
    if str(path).startswith("~"):
        user = text[1:].split(os.sep, 1)[0]
        raise PathSettingError(f"{setting}={text!r}: there is no user {user!r} whose home '~{user}' "
                               f"could stand for; write the folder out in full.")
    return path


def _home_cache() -> Path:
    """``$XDG_CACHE_HOME/convres``; an unset, empty or relative ``XDG_CACHE_HOME`` means
    ``~/.cache`` (the XDG base-directory specification ignores a relative one)."""
    xdg = os.environ.get(XDG_ENV, "")
    if xdg.strip() and "\0" not in xdg and (xdg.startswith("~") or Path(xdg).is_absolute()):
        return setting_path(xdg, XDG_ENV) / "convres"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        home = Path()
    if not home.is_absolute():
        raise PathSettingError(f"no home folder is known (HOME is unset or relative) and {XDG_ENV} is "
                               f"not an absolute path; set {CACHE_ENV} and {DATA_ENV}, or HOME.")
    return home / ".cache" / "convres"


def _resolve(path, env: str, default: str, argument: str) -> Path:
    if path is not None:
        return setting_path(path, argument)
    if env in os.environ:
        return setting_path(os.environ[env], env)
    return _home_cache() / default


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data directory: ``path`` if given, else ``$CONVRES_DATA_DIR``, else
    ``$XDG_CACHE_HOME/convres/data`` (``~/.cache/convres/data``); checked by :func:`setting_path`."""
    return _resolve(path, DATA_ENV, "data", "data_dir")


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The results cache: ``path`` if given, else ``$CONVRES_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/convres/results`` (``~/.cache/convres/results``); checked by
    :func:`setting_path`."""
    return _resolve(path, CACHE_ENV, "results", "directory")
