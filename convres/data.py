"""Data: synthetic instances for the theory chapters and the real-data loaders (Jena Climate, SST-2).

Book chapters: *The model*, *The theorem*, *Simulations*, *Jena Climate*, *SST-2*. The data directory setting is
:func:`convres.paths.data_dir` (argument ``data_dir`` or ``$CONVRES_DATA_DIR``).

What is verified, and how:

* **Checksums.** A file is checked against a SHA-256 only where one is recorded for it: a line of
  ``<data_dir>/SHA256SUMS`` (the format of ``sha256sum``; the offline copy ships one, and
  :func:`download` adds the files it writes), or, for the offline Jena slice, whose file name is
  unique to it, :data:`JENA_FILES`. Any other file (your own SST-2 parquet, a CSV you exported) is
  read unverified; :func:`load_sst2` says which case applied in ``df.attrs["checksum"]``.
* **The Keras download** is checked when it arrives: a readable zip holding one CSV, whose CRC-32
  (zip) and size and SHA-256 are compared with :data:`JENA_CSV_SIZE` and :data:`JENA_CSV_SHA256`.
  Those two numbers come from a third-party copy of the file and could not be compared with the
  download itself, so a difference is a warning, not an error (see :func:`check_jena_zip`).
* **Content**, always: the Jena columns, the time format, finite numbers, no ``-9999`` sentinel,
  physical ranges (:data:`JENA_BOUNDS`), increasing times on a regular grid where one is asked for;
  the SST-2 schema, labels and missing values.
"""

from __future__ import annotations

import hashlib
import io
import numbers
import os
import re
import warnings
import zipfile
import zlib
from pathlib import Path

import torch

from .cache import atomic_write_bytes, atomic_write_text
from .paths import DATA_ENV
from .paths import data_dir as data_dir_setting
from .model import _is_int, generator

__all__ = ["synthetic_regression", "DataError", "DataWarning", "sha256_file", "verify_checksum",
           "read_checksums", "recorded_checksum", "standardize", "JENA_URL", "JENA_FEATURES",
           "JENA_ALL_FEATURES", "JENA_BOUNDS", "JENA_SENTINEL", "JENA_CSV_SIZE", "JENA_CSV_SHA256",
           "jena_path", "check_jena_zip", "read_jena", "load_jena", "SST2_HUB", "SST2_REVISION",
           "sst2_path", "load_sst2", "sst2_subset", "sst2_prefixes", "ppmi_embeddings", "embed_with",
           "hash_embedding", "embed_tokens", "download",
           "DATASETS"]



def _check_positive_int(name: str, v) -> None:
    """A ValueError naming ``name`` unless ``v`` is an integer >= 1 (not a bool)."""
    if not _is_int(v) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}.")


def synthetic_regression(N: int, n: int, d: int, c: int = 1, *, seed: int | torch.Generator = 0,
                         dtype=torch.float64, pooled: bool = False):
    """A random regression instance: ``X`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, d)``, and
    targets ``Y`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, c)`` (``(N, c)`` if ``pooled``).

    Gaussian ``X`` is of full rank with probability one, as the theory requires.
    """
    for name, v in (("N", N), ("n", n), ("d", d), ("c", c)):
        _check_positive_int(name, v)
    N, n, d, c = int(N), int(n), int(d), int(c)
    gen = generator(seed)
    X = torch.randn(N, n, d, generator=gen, dtype=torch.float64)
    Y = torch.randn(*((N, c) if pooled else (N, n, c)), generator=gen, dtype=torch.float64)
    return X.to(dtype), Y.to(dtype)


# --- real data: common helpers -------------------------------------------------------------------

class DataError(ValueError):
    """A data file is missing, malformed or does not cover what an experiment needs."""


class DataWarning(UserWarning):
    """Something about a data file could not be verified (the data are still used)."""


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


def _require_file(path: Path, what: str) -> None:
    """Raise :class:`DataError` if ``path`` exists but is not a regular file (a directory, ...)."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise DataError(f"{what} {path} is {kind}, not a data file: remove or rename it, then put the "
                        "data file there (or download it again).")


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
    if not manifest.is_file():
        return {}
    try:
        text = manifest.read_text(encoding="utf-8")
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
        sums[_checksum_path(line)] = match.group(1).lower()
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


def _record_checksum(path: Path, data_dir=None) -> None:
    """Add (or replace) the line of ``path`` in the data directory's ``SHA256SUMS``; a manifest that
    cannot be written is a warning, not an error (the data file itself is in place)."""
    root = data_dir_setting(data_dir)
    manifest = root / CHECKSUMS
    rel = Path(path).relative_to(root).as_posix()
    try:
        lines = manifest.read_text(encoding="utf-8").splitlines() if manifest.is_file() else []
        kept = [ln for ln in lines if _checksum_path(ln) != rel]
        atomic_write_text(manifest, "\n".join([*kept, f"{sha256_file(path)}  {rel}"]) + "\n")
    except (OSError, ValueError) as err:  # unwritable, or not a text file
        warnings.warn(f"could not record the checksum of {path} in {manifest} ({err}); later reads of "
                      "it are not verified.", DataWarning, stacklevel=3)


def _fetch(url: str, dest: Path, what: str) -> bytes:
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
        bad = [n for n, ok in zip(names, finite.all(0)) if not ok]
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


# --- Jena Climate 2009-2016 ----------------------------------------------------------------------

#: The Keras/TensorFlow download the paper's experiment expects (a zip holding one CSV).
JENA_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/jena_climate_2009_2016.csv.zip"
JENA_ZIP = "jena_climate_2009_2016.csv.zip"
JENA_CSV = "jena_climate_2009_2016.csv"
JENA_TIME = "Date Time"
JENA_TIME_FORMAT = "%d.%m.%Y %H:%M:%S"
#: The 14 features of the full file, in its column order.
JENA_ALL_FEATURES = (
    "p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)", "VPact (mbar)",
    "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)", "wv (m/s)", "max. wv (m/s)",
    "wd (deg)")
#: The 11 features the book uses: every feature but the wind columns (absent from the offline slice).
JENA_FEATURES = JENA_ALL_FEATURES[:11]
#: The value the station files use for a missing reading (documented for the two wind speeds).
JENA_SENTINEL = -9999.0
#: Physically possible ranges ``(low, high)`` per column, inclusive and deliberately generous: a
#: value outside is a recording or editing error, not weather. The station (Jena, about 155 m
#: above sea level) measures pressure at its height (sea-level records are 870..1085 mbar);
#: temperatures on Earth lie in -90..60 degC; potential temperature is T (K) scaled by
#: (1000 / p)^0.286; saturation vapour pressure at 60 degC is about 200 mbar; relative humidity may
#: exceed 100 % slightly (sensor tolerance), so the deficit VPmax - VPact may be slightly negative;
#: air density at these pressures and temperatures is about 0.9..1.7 kg/m**3.
JENA_BOUNDS: dict[str, tuple[float, float]] = {
    "p (mbar)": (800.0, 1100.0),
    "T (degC)": (-90.0, 60.0),
    "Tpot (K)": (150.0, 400.0),
    "Tdew (degC)": (-100.0, 60.0),
    "rh (%)": (0.0, 105.0),
    "VPmax (mbar)": (0.0, 250.0),
    "VPact (mbar)": (0.0, 250.0),
    "VPdef (mbar)": (-10.0, 250.0),
    "sh (g/kg)": (0.0, 200.0),
    "H2OC (mmol/mol)": (0.0, 400.0),
    "rho (g/m**3)": (500.0, 2500.0),
    "wv (m/s)": (0.0, 120.0),
    "max. wv (m/s)": (0.0, 150.0),
    "wd (deg)": (0.0, 360.0),
}
#: Size and SHA-256 of ``jena_climate_2009_2016.csv`` as recorded by a Git LFS pointer of a public
#: copy (420,551 rows, quoted header, two decimals, LF). The size is the one the original Keras file
#: should have, but these bytes were never compared with the Keras download itself, so
#: :func:`check_jena_zip` warns, and does not fail, when a download differs.
JENA_CSV_SIZE = 43_153_776
JENA_CSV_SHA256 = "eb3df9da6c25039f10814ded0a14138bb0afa3612be9cf79cafdf1cf6f95172e"
#: Files looked for in ``<data_dir>/jena_climate/``, first match wins, with the SHA-256 recorded for
#: that name (``None``: none; the data directory's ``SHA256SUMS`` may still record one).
JENA_FILES: dict[str, str | None] = {
    JENA_ZIP: None,
    JENA_CSV: None,
    "jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz":
        "9de67d18a184d5ea11e9a5f5ab7e0b258d30ab1233b68f47589ac79aa5c19e83",
}


def jena_path(data_dir=None, *, download: bool = False) -> Path:
    """The Jena Climate file to read: the first of :data:`JENA_FILES` found in
    ``<data_dir>/jena_climate/``; with ``download=True`` and none found, the Keras zip is downloaded
    there and checked (:func:`check_jena_zip`). Raises :class:`DataError` if one of those names is
    a directory, and :class:`FileNotFoundError` saying how to get the data if none is there."""
    folder = data_dir_setting(data_dir) / "jena_climate"
    for name in JENA_FILES:
        _require_file(folder / name, "Jena Climate file")
        if (folder / name).is_file():
            return folder / name
    if download:
        return _download_jena(folder, data_dir)
    raise FileNotFoundError(
        f"no Jena Climate file in {folder} (looked for {', '.join(JENA_FILES)}). Download it with "
        f"`python -m convres reproduce jena --download` or convres.data.load_jena(download=True) "
        f"(about 13 MB from {JENA_URL}), or put the zip there yourself, or point the data directory "
        f"at an offline copy: set {DATA_ENV}=/path/to/data (or pass data_dir=...).")


def _jena_member(archive: zipfile.ZipFile, source) -> zipfile.ZipInfo:
    """The one CSV of a Jena zip (macOS ``__MACOSX/`` entries are ignored)."""
    csvs = [i for i in archive.infolist() if not i.is_dir() and i.filename.lower().endswith(".csv")
            and not i.filename.startswith("__MACOSX/")]
    if len(csvs) != 1:
        raise DataError(f"{source} should hold one CSV ({JENA_CSV}), but holds "
                        f"{[i.filename for i in archive.infolist()]}; download the Keras zip again.")
    return csvs[0]


def check_jena_zip(payload: bytes, source: str = "the download") -> str:
    """Check the bytes of a Keras Jena zip: a zip holding one CSV whose CRC-32 is right (a
    truncated or damaged download raises :class:`DataError`), then its size and SHA-256 against
    :data:`JENA_CSV_SIZE` and :data:`JENA_CSV_SHA256`.

    Those reference numbers are unverified (see their comment), so a difference emits a
    :class:`DataWarning` and the file is still used; its content is checked when it is read.
    Returns ``"verified"`` or ``"differs"``."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            member = _jena_member(archive, source)
            csv = archive.read(member)  # checks the CRC-32
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error) as err:
        raise DataError(f"{source} is not a readable zip ({len(payload)} bytes, starting "
                        f"{payload[:16]!r}): {err}. Nothing was saved; download it again.") from err
    size, digest = len(csv), hashlib.sha256(csv).hexdigest()
    if (size, digest) == (JENA_CSV_SIZE, JENA_CSV_SHA256):
        return "verified"
    warnings.warn(
        f"{member.filename} in {source} has {size:,} bytes and sha256 {digest}; the copy recorded in "
        f"convres.data has {JENA_CSV_SIZE:,} bytes and sha256 {JENA_CSV_SHA256}. That record comes "
        "from a third-party copy and is unverified, so the file is used; its columns, values and "
        "times are still checked when it is read.", DataWarning, stacklevel=2)
    return "differs"


def _atomic_download(url: str, dest: Path) -> Path:
    """Download the Keras Jena zip at ``url`` to ``dest``: fetched (:func:`_fetch`), checked
    (:func:`check_jena_zip`), then written atomically, so a failed download leaves nothing."""
    payload = _fetch(url, dest, "the Jena Climate zip")
    check_jena_zip(payload, source=url)
    atomic_write_bytes(dest, payload)
    return dest


def _download_jena(folder: Path, data_dir=None) -> Path:
    """Download the Keras zip into ``folder`` and record its checksum in the data directory's
    ``SHA256SUMS``."""
    dest = folder / JENA_ZIP
    _require_file(dest, "Jena Climate file")
    _atomic_download(JENA_URL, dest)
    _record_checksum(dest, data_dir)
    return dest


def _read_jena_csv(path: Path):
    """``pandas.read_csv`` of a plain, ``.gz`` or zipped Jena CSV, with messages naming ``path``."""
    import pandas as pd

    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive, archive.open(_jena_member(archive, path)) as f:
                return pd.read_csv(f)
        return pd.read_csv(path, compression="infer")
    except pd.errors.EmptyDataError as err:
        raise DataError(f"{path} is empty (no header, no rows): the file is truncated or was never "
                        "written; delete it and download or copy it again.") from err
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # bad zip/gzip, encoding
        raise DataError(f"cannot read {path} as a Jena Climate CSV: {err}") from err


def _first_bad(path, df, bad, columns, what: str, fix):
    """A :class:`DataError` for the boolean frame ``bad`` (rows x ``columns``): how many rows, and
    the first bad cell by data row (0-based), file line, timestamp, column and value; ``fix(column)``
    is the advice."""
    rows = bad.any(axis=1).to_numpy()
    i = int(rows.nonzero()[0][0])
    col = columns[int(bad.iloc[i].to_numpy().nonzero()[0][0])]
    cols = [c for c in columns if bad[c].any()]
    value = df[col].iloc[i]
    value = repr(value) if isinstance(value, str) else str(value)
    return DataError(
        f"{path}: {int(rows.sum())} row(s) with {what} in {cols}, the first at data row {i} (line "
        f"{i + 2}, {df[JENA_TIME].iloc[i]}), column {col!r} = {value}. {fix(col)}")


def read_jena(path: str | os.PathLike, columns=JENA_FEATURES, *, sha256: str | None = None,
              checksum_source: str = "the caller"):
    """Read a Jena Climate CSV (plain, ``.gz`` or the Keras ``.zip``) into a ``pandas.DataFrame``
    indexed by time (``Date Time`` parsed with ``%d.%m.%Y %H:%M:%S``) with the float64 ``columns``,
    in file order.

    Accepts the original Keras file (quoted header, 14 features) and the offline slice (unquoted
    header, 11 features). Checks every row, and raises :class:`DataError` naming the file, the first
    bad data row, its line, timestamp, column and value for: a checksum mismatch (when ``sha256`` is
    given), an empty file, a header without rows, missing columns, an unparsable time, missing or
    non-numeric values, infinite values, the ``-9999`` sentinel (:data:`JENA_SENTINEL`) and values
    outside :data:`JENA_BOUNDS`. The order of the times is checked by :func:`load_jena`, on the
    rows it selects (the full 2009-2016 file is not perfectly regular outside them).
    """
    import numpy as np
    import pandas as pd

    path = Path(path)
    _require_file(path, "Jena Climate file")
    if not path.is_file():
        raise FileNotFoundError(f"Jena Climate file {path} does not exist; see convres.data.jena_path.")
    verify_checksum(path, sha256, checksum_source)
    columns = list(columns)
    df = _read_jena_csv(path)
    missing = [c for c in [JENA_TIME, *columns] if c not in df.columns]
    if missing:
        raise DataError(
            f"{path} lacks the column(s) {missing}; it has {list(df.columns)}. Expected the Jena "
            f"Climate header ({JENA_TIME!r} then the features, e.g. {JENA_ALL_FEATURES[:2]}).")
    if len(df) == 0:
        raise DataError(f"{path} has a header but no data rows: the file is truncated; delete it and "
                        "download or copy it again.")
    try:
        time = pd.to_datetime(df[JENA_TIME], format=JENA_TIME_FORMAT)
    except (ValueError, TypeError) as err:  # name the first bad time, not pandas' advice on its arguments
        bad = pd.to_datetime(df[JENA_TIME], format=JENA_TIME_FORMAT, errors="coerce").isna().to_numpy()
        where = ""
        if bad.any():
            i = int(bad.nonzero()[0][0])
            where = f"{int(bad.sum())} time(s) are not, the first at data row {i} (line {i + 2}): " \
                    f"{df[JENA_TIME].iloc[i]!r}. "
        raise DataError(f"{path}: column {JENA_TIME!r} must hold times in the format {JENA_TIME_FORMAT!r} "
                        f"(e.g. '01.01.2009 00:10:00'); {where}Correct those times first.") from err
    values = df[columns].apply(pd.to_numeric, errors="coerce").astype("float64")
    bounds = {c: JENA_BOUNDS.get(c, (-np.inf, np.inf)) for c in columns}
    low, high = (pd.Series({c: b[k] for c, b in bounds.items()}) for k in (0, 1))
    checks = [
        (values.isna(), "missing or non-numeric values", lambda c: "Clean or drop those rows first."),
        (values.abs() == np.inf, "infinite values", lambda c: "Clean or drop those rows first."),
        (values == JENA_SENTINEL, f"the missing-reading sentinel {JENA_SENTINEL:g}",
         lambda c: "The station marks missing readings so: interpolate or drop those rows first "
                   "(or leave that column out)."),
        ((values < low) | (values > high), "values outside the physical range of their column",
         lambda c: f"{c} must lie in {bounds[c][0]:g} .. {bounds[c][1]:g} (convres.data.JENA_BOUNDS); "
                   "such a value is a recording or editing error: correct or drop those rows first."),
    ]
    for bad, what, fix in checks:
        if bad.to_numpy().any():
            raise _first_bad(path, df, bad, columns, what, fix)
    values.index = pd.DatetimeIndex(time, name=JENA_TIME)
    return values


def _check_order(path: Path, times, rows) -> None:
    """Raise :class:`DataError` unless ``times`` strictly increase; ``rows`` are their data rows."""
    import numpy as np

    step = np.diff(times.to_numpy())
    zero = np.timedelta64(0, "ns")
    if (step > zero).all():
        return
    k = int((step <= zero).nonzero()[0][0])
    a, b = int(rows[k]), int(rows[k + 1])
    if step[k] == zero:
        raise DataError(f"{path}: duplicate time {times[k]} at data rows {a} and {b} (lines {a + 2} "
                        f"and {b + 2}). Drop the duplicate rows first.")
    raise DataError(f"{path}: the times are not in increasing order: data row {b} (line {b + 2}, "
                    f"{times[k + 1]}) comes after data row {a} (line {a + 2}, {times[k]}). Sort the "
                    f"file by {JENA_TIME!r} first.")


def _timestamp(name: str, value):
    """``value`` (a string such as ``"2009-01-01 01:00"``, a ``datetime`` or a ``pandas.Timestamp``)
    as a timezone-naive ``pandas.Timestamp``; a ValueError or TypeError naming ``name`` otherwise."""
    import datetime

    import numpy as np
    import pandas as pd

    example = "'2009-01-01 01:00' (year-month-day hour:minute)"
    if not isinstance(value, (str, datetime.date, np.datetime64)):
        raise TypeError(f"{name} must be a timestamp string such as {example}, or a datetime, got {value!r}.")
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError) as err:
        raise ValueError(f"{name} {value!r} is not a timestamp ({str(err).splitlines()[0]}); use the form "
                         f"{example}.") from None
    if ts is pd.NaT:
        raise ValueError(f"{name} {value!r} is not a timestamp (NaT); use the form {example}.")
    if ts.tzinfo is not None:
        raise ValueError(f"{name} {value!r} has a time zone, but the Jena times are local station times "
                         f"without one; drop the time zone, as in {example}.")
    return ts


def _period(freq):
    """``freq`` (a string such as ``"10min"`` or ``"1h"``, or a ``timedelta``) as a positive
    ``pandas.Timedelta``; a ValueError or TypeError naming ``freq`` otherwise."""
    import datetime

    import pandas as pd

    if not isinstance(freq, (str, datetime.timedelta)):
        raise TypeError(f"freq must be a duration string such as '10min' or '1h' (or a timedelta), got "
                        f"{freq!r}.")
    try:
        step = pd.Timedelta(freq)
    except (ValueError, TypeError, OverflowError) as err:
        raise ValueError(f"freq {freq!r} is not a duration ({str(err).splitlines()[0]}); use e.g. '10min', "
                         "'1h' or '1D'.") from None
    if step is pd.NaT or step <= pd.Timedelta(0):
        raise ValueError(f"freq must be a positive duration such as '10min' or '1h', got {freq!r}.")
    return step


def _spacing(index):
    """The most common time step between consecutive rows of ``index`` (``None`` for < 2 rows)."""
    import numpy as np
    import pandas as pd

    steps = np.diff(index.to_numpy())
    steps = steps[steps > np.timedelta64(0, "ns")]
    if len(steps) == 0:
        return None
    values, counts = np.unique(steps, return_counts=True)
    return pd.Timedelta(values[counts.argmax()])


def load_jena(start: str | None = None, end: str | None = None, *, data_dir=None,
              columns=JENA_FEATURES, freq: str | None = None, download: bool = False):
    """Jena Climate rows with ``start <= time <= end`` (timestamps like ``"2009-01-01 01:00"``).

    With ``freq="1h"`` only the rows on exact multiples of that period are kept (hourly rows).
    Rows are selected by timestamp, never by row number, so the full Keras file and the offline
    slice give the same rows where they overlap. Every row of the file is checked by
    :func:`read_jena` (against the checksum recorded for it, if any: :func:`recorded_checksum`).
    Raises :class:`DataError` when the file does not cover ``[start, end]``, or when the selected
    rows are out of time order, hold a duplicate time, or (with ``freq``) miss a time of the grid,
    naming the first such time.
    """
    import pandas as pd

    lo, hi = (None if t is None else _timestamp(name, t) for name, t in (("start", start), ("end", end)))
    step = None if freq is None else _period(freq)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"start {start!r} is after end {end!r}.")
    path = jena_path(data_dir, download=download)
    sha, source = recorded_checksum(path, data_dir, JENA_FILES)
    df = read_jena(path, columns, sha256=sha, checksum_source=source or "convres.data")
    lo = df.index.min() if lo is None else lo
    hi = df.index.max() if hi is None else hi
    if lo > hi:
        raise ValueError(f"start {start!r} is after end {end!r}.")
    if lo < df.index.min() or hi > df.index.max():
        raise DataError(
            f"{path} covers {df.index.min()} .. {df.index.max()}, but {lo} .. {hi} is needed. "
            "Use a window inside the file, or the full file (convres.data.load_jena(download=True)).")
    keep = (df.index >= lo) & (df.index <= hi)
    window = df.index[keep]
    if step is not None:
        keep &= (df.index - df.index.normalize()) % step == pd.Timedelta(0)
    rows = keep.nonzero()[0]
    df = df[keep]
    _check_order(path, df.index, rows)
    if step is not None:
        expected = pd.date_range(lo.ceil(step), hi.floor(step), freq=step)
        absent = expected.difference(df.index)
        spacing = _spacing(window.sort_values()) if len(absent) else None
        if spacing is not None and step % spacing != pd.Timedelta(0):
            raise ValueError(f"freq {freq!r} is not a multiple of the spacing of the rows of {path} "
                             f"({spacing}), so no grid of that period fits them; use a multiple of "
                             "it, e.g. '10min' or '1h'.")
        if len(absent):
            raise DataError(
                f"{path}: the rows at every {freq} in {lo} .. {hi} are irregular: {len(absent)} "
                f"time(s) missing, the first {absent[0]} ({len(df)} rows, {len(expected)} expected). "
                "The file has a gap there: choose a window without it, or fill the gap first.")
    return df


# --- SST-2 (GLUE) --------------------------------------------------------------------------------

SST2_HUB = ("nyu-mll/glue", "sst2")
#: The commit of the Hub dataset ``nyu-mll/glue`` that downloads use (``revision=``), so a later
#: edit of the dataset cannot change the book's data. It could not be checked from the machine
#: this was written on (no access to the Hub); it is the revision that several independent public
#: projects pin for ``nyu-mll/glue`` and that appears in ``datasets`` cache paths of that dataset
#: (``glue/sst2/0.0.0/<revision>``). Check it with
#: ``huggingface_hub.HfApi().dataset_info("nyu-mll/glue", revision=SST2_REVISION).sha``.
SST2_REVISION = "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c"
SST2_SPLITS = ("train", "validation", "test")
SST2_COLUMNS = {"sentence": "string", "label": "int64", "idx": "int32"}
#: SHA-256 of the parquet files of the offline copy (its data/README.md). Used only to *recognize*
#: that copy when no ``SHA256SUMS`` is there; a file that differs is not called corrupt (it may be
#: your own, or a Hub download written by ``datasets``), it is just not verified.
SST2_SHA256 = {
    "train": "143e0b2ae3a7e6687030bd42daa5bdeec6a7da8089e1aa0a45c8004f213e782f",
    "validation": "9ee822c3eeb0912f2525efcd219bdb8aef421366ad9cc20c6e2e72b700b98777",
    "test": "3c9b0d26aec29935e5055727d6fe7a4bc5e7c7a20c7bd4399ffad1b1a6303c2a",
}


def sst2_path(split: str = "train", *, data_dir=None, download: bool = False,
              revision: str = SST2_REVISION) -> Path:
    """``<data_dir>/sst2/<split>.parquet``; with ``download=True`` and no file, the split is
    loaded from the Hub (``datasets.load_dataset("nyu-mll/glue", "sst2", revision=revision)``),
    saved there and its checksum recorded in the data directory's ``SHA256SUMS``. Raises
    :class:`DataError` if that path is a directory, or if the download fails."""
    if split not in SST2_SPLITS:
        raise ValueError(f"split must be one of {SST2_SPLITS}, got {split!r}.")
    path = data_dir_setting(data_dir) / "sst2" / f"{split}.parquet"
    _require_file(path, "SST-2 file")
    if path.is_file():
        return path
    if download:
        atomic_write_bytes(path, _hub_parquet(split, revision, path))
        _record_checksum(path, data_dir)
        return path
    raise FileNotFoundError(
        f"SST-2 file {path} not found. Download it with `python -m convres reproduce sst2 --download` "
        f"or convres.data.load_sst2(download=True) (loads {SST2_HUB[0]!r}, config {SST2_HUB[1]!r}, "
        f"from the Hugging Face Hub, a few MB), or point the data directory at an offline copy: set "
        f"{DATA_ENV}=/path/to/data (or pass data_dir=...).")


def _hub_parquet(split: str, revision: str, dest: Path) -> bytes:
    """One SST-2 split from the Hub at ``revision``, as parquet bytes; failures name the dataset,
    the revision and the offline alternative."""
    try:
        from datasets import load_dataset
    except ImportError as err:
        raise DataError("downloading SST-2 needs the `datasets` package (pip install datasets), or "
                        f"put {dest.name} at {dest} yourself.") from err
    try:
        ds = load_dataset(*SST2_HUB, split=split, revision=revision)
    except Exception as err:  # datasets and huggingface_hub raise many types (network, offline, 404)
        raise DataError(
            f"could not load {SST2_HUB[0]!r}, config {SST2_HUB[1]!r}, split {split!r} at revision "
            f"{revision} from the Hugging Face Hub: {type(err).__name__}: {err}. Without network, "
            f"put the parquet file of that split at {dest}, or point the data directory at an offline "
            f"copy: set {DATA_ENV}=/path/to/data (or pass data_dir=...).") from err
    buf = io.BytesIO()
    ds.to_parquet(buf)
    return buf.getvalue()


def _sst2_checksum(path: Path, split: str, data_dir, verify: bool) -> str:
    """Check ``path`` against the checksum recorded for it, if any; say what was checked."""
    if not verify:
        return "not checked (verify=False)"
    sha, source = recorded_checksum(path, data_dir)
    if sha is not None:
        verify_checksum(path, sha, source)
        return f"sha256 matches {source}"
    if sha256_file(path) == SST2_SHA256.get(split):
        return "sha256 matches the offline copy (convres.data.SST2_SHA256)"
    return f"not verified: no checksum is recorded for this file (no line in {CHECKSUMS})"


def load_sst2(split: str = "train", *, data_dir=None, download: bool = False, verify: bool = True):
    """One SST-2 split as a ``pandas.DataFrame`` with columns ``sentence`` (str), ``label``
    (0/1, -1 in test) and ``idx``, read from the parquet layout of the Hub dataset.

    With ``verify=True`` the file is checked against the SHA-256 recorded for it in the data
    directory's ``SHA256SUMS`` (a mismatch raises :class:`DataError`); a file with no recorded
    checksum is read unverified. ``df.attrs["checksum"]`` says which case applied. Always raises
    :class:`DataError` for an unreadable file, wrong columns, missing values or labels outside
    ``{-1, 0, 1}``.
    """
    import pyarrow.parquet as pq

    path = sst2_path(split, data_dir=data_dir, download=download)
    checked = _sst2_checksum(path, split, data_dir, verify)
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise DataError(f"cannot read {path} as parquet: {err}") from err
    got = {f.name: str(f.type) for f in table.schema}
    wrong = {c: got.get(c, "missing") for c, t in SST2_COLUMNS.items() if got.get(c) not in (t, "large_string" if t == "string" else t)}
    if wrong:
        raise DataError(
            f"{path} does not have the SST-2 schema {SST2_COLUMNS}: {wrong} (has {got}). "
            "Expected the parquet files of the Hub dataset nyu-mll/glue, config sst2.")
    df = table.select(list(SST2_COLUMNS)).to_pandas()
    if df.isna().any(axis=None):
        i = int(df.isna().any(axis=1).to_numpy().nonzero()[0][0])
        raise DataError(f"{path}: {int(df.isna().any(axis=1).sum())} row(s) with missing values, the first at row {i}.")
    if not df["label"].isin([-1, 0, 1]).all():
        raise DataError(f"{path}: labels must be 0, 1 (or -1 in test), got {sorted(df['label'].unique())[:5]}.")
    df.attrs["checksum"] = checked
    return df


def sst2_subset(df, size: int, n_tokens: int):
    """The book's fixed SST-2 training subset: in file order, the first ``size/2`` negative and
    the first ``size/2`` positive sentences with exactly ``n_tokens`` whitespace tokens.

    GLUE's SST-2 is already lower-cased and PTB-tokenized, so splitting on whitespace recovers its
    tokens. Equal length means no padding and no mask: the model sees exactly the theory's ``X``.
    Returns ``(tokens, labels)``: a list of token lists and a ``numpy`` array of 0/1.
    """
    import numpy as np

    if not _is_int(size) or size < 2 or size % 2:
        raise ValueError(f"size must be an even integer >= 2, got {size!r}.")
    _check_positive_int("n_tokens", n_tokens)
    size, n_tokens = int(size), int(n_tokens)
    tokens = df["sentence"].str.split()
    keep = tokens.str.len() == n_tokens
    chosen = []
    for label in (0, 1):
        rows = df.index[keep & (df["label"] == label)][: size // 2]
        if len(rows) < size // 2:
            raise DataError(f"only {len(rows)} sentences with label {label} and {n_tokens} tokens; "
                            f"need {size // 2}.")
        chosen.extend(rows)
    chosen.sort()
    return [tokens[i] for i in chosen], df.loc[chosen, "label"].to_numpy(dtype=np.int64)


def sst2_prefixes(df, n_tokens: int, size: int | None = None):
    """The first ``n_tokens`` whitespace tokens of every sentence of ``df`` that has at least that
    many, in file order; with ``size``, only the first ``size/2`` negative and the first ``size/2``
    positive of them (a balanced subset). Book chapter *SST-2*.

    One length for every sentence means no padding and no mask: the model sees exactly the fixed
    input ``X`` of the theory. GLUE's SST-2 is lower-cased and PTB-tokenized, so splitting on
    whitespace recovers its tokens. Returns ``(tokens, labels, rows)``: the token lists, a
    ``numpy`` array of 0/1 and the row positions in ``df`` they come from.
    """
    import numpy as np

    _check_positive_int("n_tokens", n_tokens)
    if size is not None and (not _is_int(size) or size < 2 or size % 2):
        raise ValueError(f"size must be an even integer >= 2 (half of each label) or None (every "
                         f"qualifying sentence), got {size!r}.")
    n_tokens = int(n_tokens)
    tokens = df["sentence"].str.split().tolist()
    labels = df["label"].to_numpy(dtype=np.int64)
    if len(labels) and not np.isin(labels, (0, 1)).all():
        raise DataError(f"labels must be 0 or 1 (a labelled split, not 'test'), got "
                        f"{sorted(set(labels.tolist()))[:5]}.")
    keep = np.array([len(t) >= n_tokens for t in tokens], dtype=bool)
    if size is None:
        rows = np.nonzero(keep)[0]
        if len(rows) == 0:
            raise DataError(f"no sentence has at least {n_tokens} tokens.")
    else:
        chosen = []
        for label in (0, 1):
            found = np.nonzero(keep & (labels == label))[0][: int(size) // 2]
            if len(found) < int(size) // 2:
                raise DataError(f"only {len(found)} sentences with label {label} and at least "
                                f"{n_tokens} tokens; need {int(size) // 2}.")
            chosen.append(found)
        rows = np.sort(np.concatenate(chosen))
    return [tokens[i][:n_tokens] for i in rows], labels[rows], rows


def ppmi_embeddings(sentences, d: int, *, vocab_size: int = 5000, smoothing: float = 0.75,
                    seed: int = 0, iterations: int = 4):
    """Word vectors from unlabelled text: a truncated SVD of the positive pointwise mutual
    information (PPMI) of word co-occurrence within a sentence (book chapter *SST-2*).

    The vocabulary is the ``vocab_size`` most frequent tokens (ties in alphabetical order);
    ``C[w, c]`` counts the ordered pairs of positions ``(i, j)``, ``i != j``, of one sentence with
    token ``w`` at ``i`` and ``c`` at ``j``. With the context distribution raised to ``smoothing``
    (Levy, Goldberg and Dagan 2015), ``PPMI[w, c] = max(0, log(P(w, c) / (P(w) P_s(c))))``. The
    vectors are ``U_d S_d^(1/2)`` of its ``d`` leading singular triples, found by subspace
    iteration from a Gaussian start drawn with ``seed`` (``iterations`` rounds); each column's sign
    is fixed so that its largest entry is positive. No labels are used; the same text gives the
    same vectors.

    Returns ``(vocab, vectors)``: the token list and a float64 ``numpy`` array ``(len(vocab), d)``.
    """
    import numpy as np

    _check_positive_int("d (the embedding dimension)", d)
    if not _is_int(vocab_size) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}.")
    if isinstance(smoothing, bool) or not isinstance(smoothing, numbers.Real) or not 0 < smoothing <= 1:
        raise ValueError(f"smoothing must be a number in (0, 1], got {smoothing!r}.")
    _check_positive_int("iterations", iterations)
    sentences = [list(s) for s in sentences]
    if not sentences or not all(sentences):
        raise ValueError("sentences must be a non-empty list of non-empty token lists.")
    counts: dict[str, int] = {}
    for s in sentences:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    vocab = sorted(counts, key=lambda t: (-counts[t], t))[: int(vocab_size)]
    V = len(vocab)
    if d > V:
        raise ValueError(f"d = {d} exceeds the vocabulary ({V} distinct tokens); use d <= {V}.")
    index = {t: i for i, t in enumerate(vocab)}
    width = max(len(s) for s in sentences)
    ids = np.full((len(sentences), width), -1, dtype=np.int64)
    for k, s in enumerate(sentences):
        ids[k, :len(s)] = [index.get(t, -1) for t in s]
    codes = []
    for lag in range(1, width):      # every pair of positions (i, i + lag), both orders
        a, b = ids[:, :-lag].ravel(), ids[:, lag:].ravel()
        ok = (a >= 0) & (b >= 0)
        codes += [a[ok] * V + b[ok], b[ok] * V + a[ok]]
    C = np.bincount(np.concatenate(codes), minlength=V * V).reshape(V, V).astype(np.float64)
    del codes
    total = C.sum()
    if total == 0:
        raise ValueError("no two vocabulary tokens share a sentence: the text is too short.")
    p_w = C.sum(1) / total
    p_c = C.sum(0) ** smoothing
    p_c = p_c / p_c.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(C / total) - np.log(p_w)[:, None] - np.log(p_c)[None, :]
    M = np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0)
    rng = np.random.default_rng(int(seed))
    k = min(V, d + 16)
    Q = np.linalg.qr(M @ rng.standard_normal((V, k)))[0]
    for _ in range(int(iterations)):
        Q = np.linalg.qr(M @ (M.T @ Q))[0]
    U, S, _ = np.linalg.svd(Q.T @ M, full_matrices=False)
    vectors = (Q @ U[:, :d]) * np.sqrt(S[:d])
    flip = np.sign(vectors[np.abs(vectors).argmax(0), np.arange(d)])
    return vocab, vectors * flip


def embed_with(sentences, vocab, vectors, *, mean=None, std=None, dtype=torch.float64):
    """``X`` of shape ``(N, n, d)`` from equal-length token lists and a table ``vocab -> vectors``
    (e.g. :func:`ppmi_embeddings`), every coordinate standardized as ``(v - mean) / std``.

    ``mean`` and ``std`` (length ``d``) default to the statistics of the in-vocabulary tokens of
    ``sentences`` themselves; pass the training ones to embed held-out text the same way. A token
    outside the vocabulary gets the zero vector (after standardization: the mean). Returns
    ``(X, (mean, std), oov)`` with ``oov`` the fraction of tokens outside the vocabulary.
    """
    import numpy as np

    lengths = {len(s) for s in sentences}
    if not lengths or 0 in lengths:
        raise ValueError("sentences must be a non-empty list of non-empty token lists.")
    if len(lengths) != 1:
        raise ValueError(f"all sentences must have the same number of tokens, got lengths {sorted(lengths)}.")
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(vocab):
        raise ValueError(f"vectors must be a (len(vocab), d) array, got shape {vectors.shape} for "
                         f"{len(vocab)} tokens.")
    index = {t: i for i, t in enumerate(vocab)}
    ids = np.array([[index.get(t, -1) for t in s] for s in sentences], dtype=np.int64)
    known = ids >= 0
    if mean is None or std is None:
        if not known.any():
            raise ValueError("no token of sentences is in the vocabulary: cannot standardize.")
        seen = vectors[ids[known]]
        mean, std = seen.mean(0), seen.std(0)
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if not (np.isfinite(std).all() and (std > 0).all()):
        raise ValueError("every embedding coordinate needs a finite, positive standard deviation.")
    table = np.vstack([(vectors - mean) / std, np.zeros((1, vectors.shape[1]))])
    X = table[np.where(known, ids, len(vocab))]
    return torch.tensor(X, dtype=dtype), (mean, std), float(1.0 - known.mean())


def hash_embedding(token: str, d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """A frozen Gaussian embedding of ``token``: ``d`` i.i.d. ``N(0, 1)`` entries drawn from a
    generator seeded with the SHA-256 of ``"<seed>:<token>"``. The same token always gets the same
    vector, on every machine, without a vocabulary."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}.")
    _check_positive_int("d (the embedding dimension)", d)
    if not _is_int(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}.")
    digest = hashlib.sha256(f"{int(seed)}:{token}".encode("utf-8")).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return torch.randn(int(d), generator=gen, dtype=torch.float64).to(dtype)


def embed_tokens(sentences, d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """``X`` of shape ``(N, n, d)`` from equal-length token lists, with :func:`hash_embedding`."""
    lengths = {len(s) for s in sentences}
    if not lengths or 0 in lengths:
        raise ValueError("sentences must be a non-empty list of non-empty token lists.")
    if len(lengths) != 1:
        raise ValueError(f"all sentences must have the same number of tokens, got lengths {sorted(lengths)}.")
    table = {t: hash_embedding(t, d, seed, torch.float64) for s in sentences for t in s}
    return torch.stack([torch.stack([table[t] for t in s]) for s in sentences]).to(dtype)


# --- downloads for the command line -------------------------------------------------------------

#: The real data sets the experiments read, and what ``download`` fetches for each.
DATASETS = {
    "jena": f"the Keras zip of Jena Climate 2009-2016 (about 13 MB, {JENA_URL})",
    "sst2": f"the SST-2 training and validation splits of the Hugging Face dataset {SST2_HUB[0]}, config "
            f"{SST2_HUB[1]}, revision {SST2_REVISION[:12]} (a few MB, saved as sst2/train.parquet and "
            "sst2/validation.parquet)",
}


def download(dataset: str, *, data_dir=None) -> Path:
    """Make sure ``dataset`` (``"jena"`` or ``"sst2"``) is in the data directory, downloading it if
    missing (see :data:`DATASETS`); return its path. A file already there is kept as it is.

    Used by ``python -m convres reproduce NAME --download``. For SST-2 both the training and the
    validation split are fetched; the path of the training split is returned.
    """
    if dataset == "jena":
        return jena_path(data_dir, download=True)
    if dataset == "sst2":
        path = sst2_path("train", data_dir=data_dir, download=True)
        sst2_path("validation", data_dir=data_dir, download=True)  # the SST-2 chapter's accuracy
        return path
    raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}.")
