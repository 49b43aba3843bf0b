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
from .sources import MAX_MEMBER_BYTES, DataError, find, verify_file, zip_member
from .sources import data_dir as data_folder

JENA_ZIP = "jena_climate_2009_2016.csv.zip"
#: The files looked for in ``<data_dir>/jena_climate/``, first match wins: the Keras zip, its CSV, and
#: the offline copy's slice.
JENA_FILES = (JENA_ZIP, "jena_climate_2009_2016.csv",
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
    if path.suffix != ".zip" and path.stat().st_size > MAX_MEMBER_BYTES:
        raise DataError(f"{path} has {path.stat().st_size:,} bytes, more than a data file may have.")
    try:
        if path.suffix != ".zip":
            return pd.read_csv(path)
        with zipfile.ZipFile(path) as archive, archive.open(zip_member(archive, path)) as f:
            return pd.read_csv(f)
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as err:
        raise DataError(f"cannot read {path} as a Jena Climate CSV ({err}); download it again.") from None


def read_jena(path: str | os.PathLike, columns=JENA_FEATURES) -> pd.DataFrame:
    """A Jena Climate CSV (plain, ``.gz`` or the Keras ``.zip``) as float64 ``columns`` indexed by
    time, every value present, numeric and in its column's range (:data:`JENA_BOUNDS`)."""
    path, columns = Path(path), list(columns)
    df = _read_csv(path)
    twice = [c[:-2] for c in df.columns if c.endswith(".1") and c[:-2] in df.columns]  # pandas' renaming
    missing = [c for c in [JENA_TIME, *columns] if c not in df.columns]
    problems = [(twice, f"names the columns {twice} twice"), (missing, f"lacks the columns {missing}"),
                (len(df) == 0, "has no rows")]
    for bad, problem in problems:
        if bad:
            raise DataError(f"{path} {problem}; it is not a Jena Climate file: download it again.")
    time = pd.to_datetime(df[JENA_TIME], format=JENA_TIME_FORMAT, errors="coerce")
    if time.isna().any():
        raise DataError(f"{path}: column {JENA_TIME!r} holds values not in the format {JENA_TIME_FORMAT!r}.")
    values = df[columns].apply(pd.to_numeric, errors="coerce").astype("float64")
    low, high = (pd.Series({c: JENA_BOUNDS[c][k] for c in columns}) for k in (0, 1))
    bad = values.isna() | (values < low) | (values > high)
    if bad.to_numpy().any():
        raise DataError(f"{path}: column(s) {[c for c in columns if bad[c].any()]} hold missing, non-numeric "
                        "or out-of-range values (JENA_BOUNDS); clean or drop those rows.")
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
    lo, hi = df.index.min() if lo is None else lo, df.index.max() if hi is None else hi
    if lo > hi:
        raise ValueError(f"start {lo} is after end {hi}.")
    if lo < df.index.min() or hi > df.index.max():
        raise DataError(f"{path} covers {df.index.min()} .. {df.index.max()}, but {lo} .. {hi} is needed; "
                        "use a window inside it, or the full file (python -m convres data).")
    df = df[(df.index >= lo) & (df.index <= hi)]
    steps = np.diff(df.index.to_numpy())
    if (steps <= np.timedelta64(0)).any():
        raise DataError(f"{path}: column {JENA_TIME!r} repeats a time or is out of order; sort the file by "
                        "it and drop duplicates first.")
    if step is None:
        return df
    spacing = pd.Timedelta(np.median(steps)) if len(steps) else step
    if step % spacing != pd.Timedelta(0):
        raise ValueError(f"freq {freq!r} is not a multiple of the rows' spacing, {spacing}.")
    df = df[(df.index - df.index.normalize()) % step == pd.Timedelta(0)]
    absent = pd.date_range(lo.ceil(step), hi.floor(step), freq=step).difference(df.index)
    if len(absent):
        raise DataError(f"{path}: {len(absent)} time(s) of the {freq} grid in {lo} .. {hi} are missing, from "
                        f"{absent[0]}; choose a window without the gap, or fill it first.")
    return df


def standardize(values, names, *, context: str = "") -> np.ndarray:
    """Column-wise z-scores ``(x - mean) / std``; a :class:`DataError` names a constant feature."""
    x, names = np.asarray(values, dtype=np.float64), [str(n) for n in names]
    if x.ndim != 2 or x.shape[1] != len(names) or x.shape[0] < 2:
        raise ValueError(f"values must be a (rows >= 2, features) array, one of names {names} per column, "
                         f"got shape {x.shape}.")
    with np.errstate(over="ignore", invalid="ignore"):
        std = x.std(0)
    checks = [(~np.isfinite(x).all(0), "hold non-finite values"), (x.max(0) == x.min(0), "are constant"),
              (~np.isfinite(std), "have a non-finite standard deviation (values too large)")]
    for bad, what in checks:
        if bad.any():
            raise DataError(f"feature(s) {[n for n, b in zip(names, bad) if b]} {what}{context}: they cannot "
                            "be standardized; clean them, use a longer window or drop them.")
    return (x - x.mean(0)) / std


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


def _windows(z: np.ndarray, target: np.ndarray, window: int, horizon: int, stride: int):
    """Windows ``z[i : i + window]`` every ``stride`` rows, each with ``target[i + window - 1 + horizon]``
    (causal). Returns ``(X, Y, target_index)``."""
    starts = np.arange(0, len(z) - window - horizon + 1, stride)
    X = np.stack([z[i:i + window] for i in starts])
    at = starts + window - 1 + horizon
    return X, target[at][:, None], at


def _time_of_day(index) -> np.ndarray:
    """``(sin, cos)`` of the hour of the day, ``2 pi (hour + minute / 60) / 24``, per row."""
    hours = (index.hour + index.minute / 60.0) * (2 * math.pi / 24)
    return np.stack([np.sin(hours), np.cos(hours)], axis=1)


def _with_age(X: np.ndarray) -> np.ndarray:
    """``X`` (windows ``(N, w, d)``) with one more column, the age ``j - (w - 1)`` of row ``j``."""
    N, w, _ = X.shape
    age = np.broadcast_to(np.arange(-(w - 1), 1, dtype=np.float64)[None, :, None], (N, w, 1))
    return np.concatenate([X, age], axis=2)


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
    values = train.to_numpy(dtype=np.float64)
    z = standardize(values, df.columns, context=f" over the training rows {s['start']} .. {s['train_end']}")
    mean, std = values.mean(0), values.std(0)
    zv = (val.to_numpy(dtype=np.float64) - mean) / std
    t = list(JENA_FEATURES).index(s["target"])
    features = tuple(JENA_FEATURES)
    if s["time_of_day"]:
        z, zv = np.hstack([z, _time_of_day(train.index)]), np.hstack([zv, _time_of_day(val.index)])
        features += ("sin(hour)", "cos(hour)")
    X, Y, at = _windows(z, z[:, t], window, horizon, stride)
    Xv, Yv, _ = _windows(zv, zv[:, t], window, horizon, val_stride)
    persistence = {part: float(np.mean((x[:, -1, t] - y[:, 0]) ** 2))
                   for part, x, y in (("train", X, Y), ("val", Xv, Yv))}
    if s["age"]:
        X, Xv, features = _with_age(X), _with_age(Xv), features + (AGE,)
    as_t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=dtype)  # noqa: E731
    return JenaTask(as_t(X), as_t(Y), as_t(Xv), as_t(Yv), len(df), len(train), len(val), float(std[t]),
                    persistence, features, train.index[at].to_numpy())


def window_count(s: dict) -> tuple[int, int]:
    """``(N, n)``: the training windows of :func:`jena_data` and their length, counted without data."""
    rows = len(pd.date_range(s["start"], s["train_end"], freq=s["freq"]))
    w, stride, horizon = (positive_int(s, k) for k in ("window", "stride", "horizon"))
    return len(range(0, rows - w - horizon + 1, stride)), w
