"""Jena Climate 2009-2016 (book chapter *Jena Climate*): the file, its content checks (physical ranges,
:data:`JENA_BOUNDS`), the rows selected by time, and :func:`jena_data`'s windows
(:class:`~convres.data.jena.JenaTask`)."""

import datetime
import math
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from ..values import positive_int
from .sources import DataError, find, reading, verify_file, zip_csv
from .sources import data_dir as data_folder

#: The files looked for in ``<data_dir>/jena_climate/``, first match wins: the Keras zip, its CSV, and
#: the offline copy's slice.
JENA_FILES = ("jena_climate_2009_2016.csv.zip", "jena_climate_2009_2016.csv",
              "jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz")
JENA_TIME, JENA_TIME_FORMAT = "Date Time", "%d.%m.%Y %H:%M:%S"
#: Physically possible ranges per column, generous (relative humidity may slightly exceed 100 %); the
#: file's missing-reading sentinel -9999 lies outside every one.
JENA_BOUNDS = {"p (mbar)": (800.0, 1100.0), "T (degC)": (-90.0, 60.0), "Tpot (K)": (150.0, 400.0),
               "Tdew (degC)": (-100.0, 60.0), "rh (%)": (0.0, 105.0), "VPmax (mbar)": (0.0, 250.0),
               "VPact (mbar)": (0.0, 250.0), "VPdef (mbar)": (-10.0, 250.0), "sh (g/kg)": (0.0, 200.0),
               "H2OC (mmol/mol)": (0.0, 400.0), "rho (g/m**3)": (500.0, 2500.0), "wv (m/s)": (0.0, 120.0),
               "max. wv (m/s)": (0.0, 150.0), "wd (deg)": (0.0, 360.0)}
#: The 14 features of the full file, in its column order, and the 11 the book uses (no wind).
JENA_ALL_FEATURES = tuple(JENA_BOUNDS)
JENA_FEATURES = JENA_ALL_FEATURES[:11]


def jena_path(data_dir: str | os.PathLike | None = None, *, download: bool = False) -> Path:
    """The first of :data:`JENA_FILES` in ``<data_dir>/jena_climate/``, downloaded when asked."""
    return find(data_folder(data_dir), tuple(f"jena_climate/{name}" for name in JENA_FILES), download)


def _read_csv(path: Path) -> pd.DataFrame:
    """The CSV at ``path``, or the one CSV of a zip, whose declared size is checked before it is read."""
    if path.suffix != ".zip":
        return pd.read_csv(path)
    with zipfile.ZipFile(path) as archive, archive.open(zip_csv(archive, path)) as f:
        return pd.read_csv(f)


def read_jena(path: str | os.PathLike, columns=JENA_FEATURES) -> pd.DataFrame:
    """A Jena Climate CSV (plain, ``.gz`` or the Keras ``.zip``) as float64 ``columns`` indexed by
    time, every value present, numeric and in its column's range (:data:`JENA_BOUNDS`)."""
    path, columns = Path(path), list(columns)
    with reading(path):
        df = _read_csv(path)
    twice = [c[:-2] for c in df.columns if c.endswith(".1") and c[:-2] in df.columns]  # pandas' renaming
    missing = [c for c in [JENA_TIME, *columns] if c not in df.columns]
    problems = [(twice, f"names the columns {twice} twice"), (missing, f"lacks the columns {missing}"),
                (len(df) == 0, "has no rows")]
    for bad, problem in problems:
        if bad:
            raise DataError(f"{path} {problem}; it is not a Jena Climate file: download it again.")
    time = pd.to_datetime(df[JENA_TIME], format=JENA_TIME_FORMAT, errors="coerce")
    values = df[columns].apply(pd.to_numeric, errors="coerce").astype("float64")
    low, high = (pd.Series({c: JENA_BOUNDS[c][k] for c in columns}) for k in (0, 1))
    bad = (values.isna() | (values < low) | (values > high)).assign(**{JENA_TIME: time.isna()})
    if bad.to_numpy().any():
        raise DataError(f"{path}: column(s) {list(bad.columns[bad.any()])} hold missing, non-numeric or "
                        f"out-of-range values (JENA_BOUNDS; times as {JENA_TIME_FORMAT!r}); clean or drop "
                        "those rows.")
    values.index = pd.DatetimeIndex(time, name=JENA_TIME)
    return values


def _parsed(kind, value, types):
    """``kind(value)`` when ``value`` is one of ``types`` and parses, else ``pd.NaT``."""
    try:
        return kind(value) if isinstance(value, types) else pd.NaT
    except (ValueError, TypeError, OverflowError):
        return pd.NaT


def timestamp(name: str, value) -> pd.Timestamp:
    """``value`` (``"2009-01-01 01:00"``, a ``datetime``) as a time-zone-naive ``pandas.Timestamp``."""
    ts = _parsed(pd.Timestamp, value, (str, datetime.date, np.datetime64))
    if ts is pd.NaT or ts.tzinfo is not None:
        raise ValueError(f"{name} {value!r} is not a timestamp (without a zone) such as '2009-01-01 01:00'.")
    return ts


def load_jena(start=None, end=None, *, data_dir=None, columns=JENA_FEATURES, freq=None, download=False):
    """The rows with ``start <= time <= end``, chosen by time; with ``freq="1h"``, those of that
    grid, which must be complete. The file is checked by its sha256 and :func:`read_jena`."""
    lo, hi = (None if t is None else timestamp(n, t) for n, t in (("start", start), ("end", end)))
    step = None if freq is None else _parsed(pd.Timedelta, freq, (str, datetime.timedelta))
    if step is pd.NaT or (step is not None and step <= pd.Timedelta(0)):
        raise ValueError(f"freq {freq!r} is not a positive duration; use e.g. '10min', '1h' or '1D'.")
    path = jena_path(data_dir, download=download)
    verify_file(path, path.parents[1])
    df = read_jena(path, columns)
    first, last = df.index.min(), df.index.max()
    lo, hi = first if lo is None else lo, last if hi is None else hi
    if not first <= lo <= hi <= last:
        raise DataError(f"start {lo} .. end {hi} is not a window of {path}, which covers {first} .. {last}; "
                        "use a window inside it, or the full file (python -m convres data).")
    df = df[(df.index >= lo) & (df.index <= hi)]
    if not (df.index.is_monotonic_increasing and df.index.is_unique):
        raise DataError(f"{path}: column {JENA_TIME!r} repeats a time or is out of order; sort the file by "
                        "it and drop duplicates first.")
    if step is None:
        return df
    df = df[(df.index - df.index.normalize()) % step == pd.Timedelta(0)]
    absent = pd.date_range(lo.ceil(step), hi.floor(step), freq=step).difference(df.index)
    if len(absent):
        raise DataError(f"{path}: {len(absent)} time(s) of the freq={freq!r} grid in {lo} .. {hi} are "
                        f"missing, from {absent[0]}; choose a window without the gap, or fill it first.")
    return df


# --- the task: windows of the past, the target one horizon ahead ---------------------------------
#: The name of the positional feature: the age of a row in rows, 0 for the latest.
AGE = "age (rows)"


class JenaTask(NamedTuple):
    """The Jena task: windows ``X`` ``(N, window, d)``, targets ``Y`` ``(N, 1)``, the same held out,
    row counts, the target's std, the persistence MSE, the features and the targets' times."""

    X: torch.Tensor
    Y: torch.Tensor
    X_val: torch.Tensor
    Y_val: torch.Tensor
    rows: int
    train_rows: int
    val_rows: int
    target_std: float
    persistence: dict
    features: tuple
    target_times: np.ndarray


def jena_data(s: dict, data_dir=None, dtype=torch.float64) -> JenaTask:
    """The :class:`JenaTask`: the rows of ``[start, end]`` at ``freq``, split at ``train_end`` and
    standardized over the training rows, with optional hour-of-day and age features, in windows."""
    window, stride, horizon, val_stride = (positive_int(s, k) for k in ("window", "stride", "horizon",
                                                                        "val_stride"))
    if s.get("target") not in JENA_FEATURES:
        raise ValueError(f"setting 'target' must be one of {JENA_FEATURES}, got {s.get('target')!r}.")
    split = timestamp("setting 'train_end'", s["train_end"])
    if not timestamp("setting 'start'", s["start"]) < split < timestamp("setting 'end'", s["end"]):
        raise ValueError(f"setting 'train_end' ({s['train_end']}) must lie strictly between start "
                         f"({s['start']}) and end ({s['end']}).")
    df = load_jena(s["start"], s["end"], data_dir=data_dir, columns=JENA_FEATURES, freq=s["freq"])
    train, val = df[df.index <= split], df[df.index > split]
    need = window + horizon
    for part, rows in (("training", train), ("held-out", val)):
        if len(rows) < need:
            raise DataError(f"{len(rows)} {part} rows, but a window of {window} rows with a target "
                            f"{horizon} rows after it needs {need}; move 'train_end' or shorten the window.")
    constant = [c for c in JENA_FEATURES if train[c].max() == train[c].min()]
    if constant:
        raise DataError(f"feature(s) {constant} are constant over the training rows {s['start']} .. "
                        f"{s['train_end']}: they cannot be standardized; use a longer window or drop them.")
    values = train.to_numpy(dtype=np.float64)
    mean, std, t = values.mean(0), values.std(0), JENA_FEATURES.index(s["target"])
    features = JENA_FEATURES + ("sin(hour)", "cos(hour)") * bool(s["time_of_day"]) + (AGE,) * bool(s["age"])

    def windows(rows: pd.DataFrame, stride: int):
        """``(X, Y, at)``: windows of the z-scores of ``rows`` every ``stride`` rows (with ``(sin, cos)`` of
        ``2 pi hour / 24`` and the age ``j - (w - 1)`` of row ``j`` when asked), each with the target
        ``horizon`` rows after its last row (causal), at the row ``at``."""
        z = (rows.to_numpy(dtype=np.float64) - mean) / std
        if s["time_of_day"]:
            hours = (rows.index.hour + rows.index.minute / 60.0) * (2 * math.pi / 24)
            z = np.hstack([z, np.stack([np.sin(hours), np.cos(hours)], axis=1)])
        starts = np.arange(0, len(z) - window - horizon + 1, stride)
        X = np.stack([z[i:i + window] for i in starts])
        if s["age"]:
            age = np.arange(-(window - 1), 1, dtype=np.float64)[None, :, None]
            X = np.concatenate([X, np.broadcast_to(age, (len(X), window, 1))], axis=2)
        at = starts + window - 1 + horizon
        return X, z[at, t][:, None], at

    (X, Y, at), (Xv, Yv, _) = windows(train, stride), windows(val, val_stride)
    persistence = {part: float(np.mean((x[:, -1, t] - y[:, 0]) ** 2))
                   for part, x, y in (("train", X, Y), ("val", Xv, Yv))}
    as_t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=dtype)  # noqa: E731
    return JenaTask(as_t(X), as_t(Y), as_t(Xv), as_t(Yv), len(df), len(train), len(val), float(std[t]),
                    persistence, features, train.index[at].to_numpy())


def window_count(s: dict) -> tuple[int, int]:
    """``(N, n)``: the training windows of :func:`jena_data` and their length, counted without data."""
    rows = len(pd.date_range(s["start"], s["train_end"], freq=s["freq"]))
    w, stride, horizon = (positive_int(s, k) for k in ("window", "stride", "horizon"))
    return len(range(0, rows - w - horizon + 1, stride)), w
