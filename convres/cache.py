"""The results cache (:func:`cached_json`) and the package's one JSON writer (:func:`dumps`): strict
JSON, a non-finite number written as ``null`` (a diverged or censored value, never a measurement)."""

import ast
import hashlib
import json
import os
import tempfile
import warnings
from functools import cache
from pathlib import Path
from typing import Any

from ._version import __version__
from .values import json_safe

CACHE_ENV = "CONVRES_CACHE_DIR"
_ROOT = Path(__file__).resolve().parent


class CacheWarning(UserWarning):
    """A cache entry was not served (the message says why) and is recomputed."""


def dumps(obj: Any, **options: Any) -> str:
    """``obj`` as strict JSON, compact unless ``options`` (of ``json.dumps``) give an ``indent``."""
    options.setdefault("separators", None if "indent" in options else (",", ":"))
    return json.dumps(json_safe(obj), allow_nan=False, **options)


def loads(text: str | bytes, where: str) -> Any:
    """Strict JSON ``text`` (``NaN`` and ``Infinity`` refused); a ValueError naming ``where``."""
    def _refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a JSON number")
    try:
        return json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{where} is not valid JSON ({err})") from None


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` to ``path`` by a temporary file and ``os.replace`` (a link there is replaced)."""
    fd, tmp = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{Path(path).name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0o600 is not a plain file's mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def setting_dir(env: str, default: str, path: str | os.PathLike | None = None) -> Path:
    """``path``, else ``$env``, else ``$XDG_CACHE_HOME/convres/default`` (``~/.cache/...``)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    home = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    folder = path if path is not None else os.environ.get(env) or home / "convres" / default
    return Path(folder).expanduser()


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The results cache: ``path``, else ``$CONVRES_CACHE_DIR``; created, or an OSError naming it."""
    folder = setting_dir(CACHE_ENV, "results", path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"{CACHE_ENV}: the results cache {folder} cannot be used ({err}); set "
                      f"{CACHE_ENV} to a writable folder.") from None
    return folder.resolve()


def _imports(module: str) -> set[str]:
    """The ``convres`` modules that ``module``'s own file imports (absolute or relative)."""
    path = _file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(p for p in (base, node.module) if p)
            out |= {name, *(f"{name}.{a.name}" for a in node.names)}
    return {m for m in out if m.split(".")[0] == "convres" and _file(m).is_file()}


def _file(module: str) -> Path:
    """The file of ``convres`` module ``module`` (a package: its ``__init__.py``)."""
    path = _ROOT.joinpath(*module.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def source_fingerprint(module: str = "") -> str:
    """16 hex digits of the SHA-256 of the package's ``.py`` files: every one, or (``module``, a module of
    the package) the files that ``module`` imports, directly or not, with the ``__init__.py`` of their
    packages (hashed, their imports not followed: they only gather names)."""
    files = set(_ROOT.rglob("*.py"))
    if module.startswith("convres.") and _file(module).is_file():      # else: every file
        seen, todo = set(), [module]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += _imports(m)
        parents = {".".join(m.split(".")[:k]) for m in seen for k in range(1, m.count(".") + 1)}
        files = {_file(m) for m in seen | parents}
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def digest(obj: Any) -> str:
    """The SHA-256 of ``obj``'s JSON (keys sorted)."""
    return hashlib.sha256(dumps(obj, sort_keys=True).encode()).hexdigest()


def cached_json(name: str, config: Any, compute, *, directory=None, refresh: bool = False,
                source: bool | str = True) -> Any:
    """``compute()`` as :func:`loads` reads it back, kept as ``<cache>/<name>-<key>.json``, the key
    :func:`digest` of ``config`` and (``source``) the version and :func:`source_fingerprint` (of the
    module ``source`` names, else of every file); an entry is served only as written (this
    ``config``, its result's sha256)."""
    module = source if isinstance(source, str) else ""
    code = {"convres": __version__, "source": source_fingerprint(module)} if source else {}
    path = cache_dir(directory) / f"{name}-{digest({'config': config, **code})[:16]}.json"
    if not refresh and path.is_file():
        try:
            stored = loads(path.read_bytes(), str(path))
            if not isinstance(stored, dict) or stored.get("config") != loads(dumps(config), name):
                raise ValueError("not an entry of this configuration")
            if stored.get("sha256") != digest(stored.get("result")):
                raise ValueError("its result does not match the sha256 written with it")
            return stored["result"]
        except (OSError, ValueError) as err:
            warnings.warn(f"convres cache: ignoring {path} ({err}); recomputing it.", CacheWarning,
                          stacklevel=2)
    result = loads(dumps(compute()), name)
    write_atomic(path, dumps({"config": config, "convres": __version__, "result": result,
                              "sha256": digest(result)}))
    return result
