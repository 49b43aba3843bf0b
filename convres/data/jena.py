"""Jena Climate 2009-2016: the file, its checks and the rows an experiment reads.

Book chapter *Jena Climate*. The Keras download is checked when it arrives (a readable zip with one
CSV whose CRC-32, size and SHA-256 are compared with the record of a third-party copy: a
difference is a warning); the content of every file is checked when it is read: the columns, the
time format, finite numbers, no ``-9999`` sentinel, physical ranges (:data:`JENA_BOUNDS`), and
increasing times on a regular grid where one is asked for.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
import zipfile
import zlib
from pathlib import Path

from ..files import atomic_write_bytes
from ..paths import DATA_ENV
from ..paths import data_dir as data_dir_setting
from .checksums import (
    DataError,
    DataWarning,
    fetch,
    record_checksum,
    recorded_checksum,
    require_file,
    verify_checksum,
)

__all__ = ["JENA_URL", "JENA_FEATURES", "JENA_ALL_FEATURES", "JENA_BOUNDS", "JENA_SENTINEL",
           "JENA_CSV_SIZE", "JENA_CSV_SHA256", "JENA_FILES", "jena_path", "check_jena_zip", "read_jena",
           "load_jena", "timestamp"]


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
        require_file(folder / name, "Jena Climate file")
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
    payload = fetch(url, dest, "the Jena Climate zip")
    check_jena_zip(payload, source=url)
    atomic_write_bytes(dest, payload)
    return dest


def _download_jena(folder: Path, data_dir=None) -> Path:
    """Download the Keras zip into ``folder`` and record its checksum in the data directory's
    ``SHA256SUMS``."""
    dest = folder / JENA_ZIP
    require_file(dest, "Jena Climate file")
    _atomic_download(JENA_URL, dest)
    record_checksum(dest, data_dir)
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


def _check_unique_columns(path: Path, names) -> None:
    """Raise :class:`DataError` when the header names a column twice (pandas reads the second
    ``T (degC)`` as ``T (degC).1``, so which one is meant would be a guess)."""
    import re

    names = [str(c) for c in names]
    mangled = (re.fullmatch(r"(.*)\.(\d+)", c) for c in names)
    twice = sorted({m.group(1) for m in mangled if m and m.group(1) in names})
    if twice:
        raise DataError(f"{path}: the header names the column(s) {twice} twice (or more); which one holds "
                        "the data cannot be told. Remove or rename the duplicate column(s) first.")


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
    require_file(path, "Jena Climate file")
    if not path.is_file():
        raise FileNotFoundError(f"Jena Climate file {path} does not exist; see convres.data.jena_path.")
    verify_checksum(path, sha256, checksum_source)
    columns = list(columns)
    df = _read_jena_csv(path)
    _check_unique_columns(path, df.columns)
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


def timestamp(name: str, value):
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

    lo, hi = (None if t is None else timestamp(name, t) for name, t in (("start", start), ("end", end)))
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
