"""Data files: checksums, downloads and the errors of the data loaders.

Book appendix on the data (README, section *Data*). A file is checked against a SHA-256 only
where one is recorded for it: a line of ``<data_dir>/SHA256SUMS`` (the format of ``sha256sum``;
the offline copy ships one, and :func:`convres.data.download` adds the files it writes), or a
built-in record for a file name unique to one published file. Any other file is read unverified.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path

from ..files import FileRefused, atomic_write_text, read_regular
from ..paths import DATA_ENV
from ..paths import data_dir as data_dir_setting

__all__ = ["DataError", "DataWarning", "CHECKSUMS", "sha256_file", "verify_checksum", "require_file",
           "read_checksums", "recorded_checksum", "record_checksum", "fetch", "standardize"]


class DataError(ValueError):
    """A data file is missing, malformed or does not cover what an experiment needs."""


class DataWarning(UserWarning):
    """Something about a data file could not be verified (the data are still used)."""


#: The largest checksum manifest that is read (bytes).
MAX_MANIFEST_BYTES = 1 << 20

#: The checksum manifest of a data directory: ``<sha256>  <path relative to the directory>`` lines.
CHECKSUMS = "SHA256SUMS"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def verify_checksum(path: str | os.PathLike, expected: str | None, source: str = "convres.data") -> None:
    """Raise :class:`DataError` unless the SHA-256 of ``path`` is ``expected`` (``None``: no check).

    ``source`` says where ``expected`` is recorded, for the message.
    """
    if expected is None:
        return
    got = sha256_file(path)
    if got != expected.lower():
        own = (f"remove its line from {source}" if source.endswith(CHECKSUMS) else
               "give it another name (this one is reserved for the published file)")
        raise DataError(
            f"checksum mismatch for {path}: sha256 is {got}, but {source} records {expected}. The "
            "file is corrupt or not the recorded one: delete it and download it again (or copy the "
            f"offline copy again); if it is your own file, {own}.")


#: The largest data file that is read (bytes): the full Jena CSV has about 43 MB, SST-2 a few MB.
MAX_DATA_BYTES = 4 * 2**30


def require_file(path: Path, what: str, max_bytes: int = MAX_DATA_BYTES) -> None:
    """Raise :class:`DataError` if ``path`` exists but is not a regular file (a directory, a FIFO,
    a device, ...; links are followed) or has more than ``max_bytes`` bytes: the file policy of
    the data readers (the cache's is :func:`convres.files.read_regular`)."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise DataError(f"{what} {path} is {kind}, not a data file: remove or rename it, then put the "
                        "data file there (or download it again).")
    if path.is_file() and path.stat().st_size > max_bytes:
        raise DataError(f"{what} {path} has {path.stat().st_size:,} bytes, more than the {max_bytes:,} "
                        "a data file of convres may have; it is not the published file.")


_CHECKSUM_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def _checksum_path(line: str) -> str | None:
    """The path of a ``SHA256SUMS`` line (``None`` for any other line)."""
    match = _CHECKSUM_LINE.match(line)
    return Path(match.group(2)).as_posix().removeprefix("./") if match else None


def read_checksums(data_dir=None) -> dict[str, str]:
    """The ``SHA256SUMS`` manifest of the data directory as ``{relative path: sha256}`` (``{}`` if
    there is none). Lines are ``sha256sum``'s: 64 hex digits, two spaces (or space and ``*``), the
    path relative to the data directory. Blank lines and ``#`` comments are skipped; any other
    line raises :class:`DataError` naming it."""
    manifest = data_dir_setting(data_dir) / CHECKSUMS
    try:
        text = read_regular(manifest, max_bytes=MAX_MANIFEST_BYTES, what="checksum file").decode("utf-8")
    except FileNotFoundError:
        return {}
    except FileRefused as err:
        raise DataError(f"{err} Without a usable {CHECKSUMS} nothing could be verified.") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{manifest} is not a text file of checksums ({err}); fix or delete it.") from err
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _CHECKSUM_LINE.match(line)
        if match is None:
            raise DataError(f"{manifest}, line {number}: expected '<sha256>  <path>' (as written by "
                            f"sha256sum), got {line[:80]!r}. Fix or delete that line.")
        sums[Path(match.group(2)).as_posix().removeprefix("./")] = match.group(1).lower()
    return sums


def recorded_checksum(path: Path, data_dir=None, builtin: dict[str, str | None] | None = None,
                      builtin_source: str = "convres.data.JENA_FILES"):
    """``(sha256, where it is recorded)`` for ``path``, or ``(None, None)`` if none is recorded.

    Looked up in the data directory's ``SHA256SUMS``, then in ``builtin`` (file name -> sha256, for
    names unique to one published file; ``builtin_source`` names that table in messages)."""
    root = data_dir_setting(data_dir)
    try:
        rel = Path(path).relative_to(root).as_posix()
    except ValueError:
        rel = None
    if rel is not None:
        sums = read_checksums(root)
        if rel in sums:
            return sums[rel], str(root / CHECKSUMS)
    if builtin and builtin.get(Path(path).name):
        return builtin[Path(path).name], builtin_source
    return None, None


def record_checksum(path: Path, data_dir=None) -> None:
    """Add (or replace) the line of ``path`` in the data directory's ``SHA256SUMS``; a manifest that
    cannot be written is a warning, not an error (the data file itself is in place)."""
    root = data_dir_setting(data_dir)
    manifest = root / CHECKSUMS
    rel = Path(path).relative_to(root).as_posix()
    try:
        lines = read_regular(manifest, max_bytes=MAX_MANIFEST_BYTES, what="checksum file").decode(
            "utf-8").splitlines() if manifest.is_file() else []
        kept = [ln for ln in lines if _checksum_path(ln) != rel]
        atomic_write_text(manifest, "\n".join([*kept, f"{sha256_file(path)}  {rel}"]) + "\n")
    except (OSError, ValueError) as err:  # unwritable, or not a text file
        warnings.warn(f"could not record the checksum of {path} in {manifest} ({err}); later reads of "
                      "it are not verified.", DataWarning, stacklevel=3)


def fetch(url: str, dest: Path, what: str) -> bytes:
    """The bytes at ``url``; any network or HTTP failure raises :class:`DataError` naming ``url``
    and the offline alternative (put the file at ``dest`` yourself, or set ``$CONVRES_DATA_DIR``)."""
    import http.client
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (fixed https URL)
            return response.read()
    except (OSError, http.client.HTTPException, ValueError) as err:  # URLError, HTTPError, timeouts
        raise DataError(
            f"could not download {what} from {url}: {getattr(err, 'reason', None) or err}. Without "
            f"network, fetch that file on another machine and put it at {dest}, or point the data "
            f"directory at an offline copy: set {DATA_ENV}=/path/to/data (a folder holding "
            f"{dest.parent.name}/{dest.name}, or pass data_dir=...).") from err


def standardize(values, names, *, context: str = ""):
    """Column-wise z-scores ``(x - mean) / std`` of a ``(rows, features)`` array, with numpy's
    ``mean(0)`` and population ``std(0)`` (as the Jena chapter does), as a float64 array.

    Checks that ``values`` is 2-D with one name per column and at least two rows, that every value
    is finite, and that no feature is constant or has a non-finite standard deviation (values so
    large that their squares overflow). Raises :class:`DataError` naming the features (``context``,
    e.g. ``" over 2009-01-01 .. 2009-01-28"``, is added to the message).
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    names = [str(n) for n in names]
    if x.ndim != 2 or x.shape[1] != len(names):
        raise ValueError(f"values must be a (rows, features) array with one of names {names} per "
                         f"column, got shape {x.shape}.")
    if x.shape[0] < 2:
        raise DataError(f"{x.shape[0]} row(s){context}: at least 2 are needed to standardize.")
    finite = np.isfinite(x)
    if not finite.all():
        row, col = map(int, np.argwhere(~finite)[0])
        bad = [n for n, ok in zip(names, np.all(finite, axis=0)) if not ok]
        raise DataError(f"feature(s) {bad} hold non-finite values{context} (the first at row {row}, "
                        f"{names[col]!r} = {x[row, col]}): clean the data first.")
    constant = x.max(0) == x.min(0)
    if constant.any():
        raise DataError(f"feature(s) {[n for n, c in zip(names, constant) if c]} are constant{context}: "
                        "they cannot be standardized; use a longer window or drop them.")
    with np.errstate(over="ignore", invalid="ignore"):
        std = x.std(0)
        z = (x - x.mean(0)) / std
    if not np.isfinite(std).all():
        raise DataError(f"feature(s) {[n for n, s in zip(names, std) if not np.isfinite(s)]} have a "
                        f"non-finite standard deviation{context} (values too large to square): "
                        "rescale or clean them first.")
    return z
