"""Data: synthetic instances for the theory chapters and the real-data loaders (Jena Climate, SST-2).

Book chapters: *The model*, *The theorem*, *Simulations*, *Jena Climate*, *SST-2*. The data directory setting is
:func:`convres.paths.data_dir` (argument ``data_dir`` or ``$CONVRES_DATA_DIR``).
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import torch

from .cache import atomic_write_bytes
from .paths import DATA_ENV
from .paths import data_dir as data_dir_setting
from .model import _generator

__all__ = ["synthetic_regression", "DataError", "sha256_file", "verify_checksum", "JENA_URL",
           "JENA_FEATURES", "JENA_ALL_FEATURES", "jena_path", "read_jena", "load_jena", "SST2_HUB",
           "sst2_path", "load_sst2", "sst2_subset", "hash_embedding", "embed_tokens", "download",
           "DATASETS"]


def synthetic_regression(N: int, n: int, d: int, c: int = 1, *, seed: int | torch.Generator = 0,
                         dtype=torch.float64, pooled: bool = False):
    """A random regression instance: ``X`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, d)``, and
    targets ``Y`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, c)`` (``(N, c)`` if ``pooled``).

    Gaussian ``X`` is of full rank with probability one, as the theory requires.
    """
    for name, v in (("N", N), ("n", n), ("d", d), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}.")
    gen = _generator(seed)
    X = torch.randn(N, n, d, generator=gen, dtype=torch.float64)
    Y = torch.randn(*((N, c) if pooled else (N, n, c)), generator=gen, dtype=torch.float64)
    return X.to(dtype), Y.to(dtype)


# --- real data: common helpers -------------------------------------------------------------------

class DataError(ValueError):
    """A data file is missing, malformed or does not cover what an experiment needs."""


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the bytes of ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def verify_checksum(path: str | os.PathLike, expected: str | None) -> None:
    """Raise :class:`DataError` unless the SHA-256 of ``path`` is ``expected`` (``None``: no check)."""
    if expected is None:
        return
    got = sha256_file(path)
    if got != expected:
        raise DataError(
            f"checksum mismatch for {path}: sha256 is {got}, expected {expected}. The file is corrupt "
            "or not the published one; delete it and download it again (see convres.data).")


def _atomic_download(url: str, dest: Path) -> Path:
    """Download ``url`` to ``dest`` (a temporary file, then a rename); never reached offline."""
    import urllib.request


    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (fixed https URL)
        atomic_write_bytes(dest, response.read())
    return dest


# --- Jena Climate 2009-2016 ----------------------------------------------------------------------

#: The Keras/TensorFlow download the paper's experiment expects (a zip holding one CSV).
JENA_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/jena_climate_2009_2016.csv.zip"
JENA_TIME = "Date Time"
JENA_TIME_FORMAT = "%d.%m.%Y %H:%M:%S"
#: The 14 features of the full file, in its column order.
JENA_ALL_FEATURES = (
    "p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)", "VPact (mbar)",
    "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)", "wv (m/s)", "max. wv (m/s)",
    "wd (deg)")
#: The 11 features the book uses: every feature but the wind columns (absent from the offline slice).
JENA_FEATURES = JENA_ALL_FEATURES[:11]
#: Files looked for in ``<data_dir>/jena_climate/``, first match wins, with their SHA-256 when known.
#: The full file's checksum is not published by Keras, so it is not checked; the offline slice's is.
JENA_FILES: dict[str, str | None] = {
    "jena_climate_2009_2016.csv.zip": None,
    "jena_climate_2009_2016.csv": None,
    "jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz":
        "9de67d18a184d5ea11e9a5f5ab7e0b258d30ab1233b68f47589ac79aa5c19e83",
}


def jena_path(data_dir=None, *, download: bool = False) -> Path:
    """The Jena Climate file to read: the first of :data:`JENA_FILES` found in
    ``<data_dir>/jena_climate/``; with ``download=True`` and none found, the Keras zip is downloaded
    there. Raises :class:`FileNotFoundError` saying how to get the data otherwise."""
    folder = data_dir_setting(data_dir) / "jena_climate"
    for name in JENA_FILES:
        if (folder / name).is_file():
            return folder / name
    if download:
        return _atomic_download(JENA_URL, folder / "jena_climate_2009_2016.csv.zip")
    raise FileNotFoundError(
        f"no Jena Climate file in {folder} (looked for {', '.join(JENA_FILES)}). Download it with "
        f"`python -m convres reproduce jena --download` or convres.data.load_jena(download=True) "
        f"(about 13 MB from {JENA_URL}), or put the zip there yourself, or point the data directory "
        f"at an offline copy: set {DATA_ENV}=/path/to/data (or pass data_dir=...).")


def read_jena(path: str | os.PathLike, columns=JENA_FEATURES, *, sha256: str | None = None):
    """Read a Jena Climate CSV (plain, ``.gz`` or the Keras ``.zip``) into a ``pandas.DataFrame``
    indexed by time (``Date Time`` parsed with ``%d.%m.%Y %H:%M:%S``) with the float64 ``columns``.

    Accepts the original Keras file (quoted header, 14 features) and the offline slice (unquoted
    header, 11 features). Raises :class:`DataError` for a checksum mismatch, missing columns, an
    unparsable time, non-increasing times or NaN rows (naming the first bad row).
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Jena Climate file {path} does not exist; see convres.data.jena_path.")
    verify_checksum(path, sha256)
    columns = list(columns)
    try:
        df = pd.read_csv(path, compression="infer")
    except (ValueError, OSError, zipfile.BadZipFile) as err:  # bad zip, empty file, ...
        raise DataError(f"cannot read {path} as a Jena Climate CSV: {err}") from err
    missing = [c for c in [JENA_TIME, *columns] if c not in df.columns]
    if missing:
        raise DataError(
            f"{path} lacks the column(s) {missing}; it has {list(df.columns)}. Expected the Jena "
            f"Climate header ({JENA_TIME!r} then the features, e.g. {JENA_ALL_FEATURES[:2]}).")
    try:
        time = pd.to_datetime(df[JENA_TIME], format=JENA_TIME_FORMAT)
    except (ValueError, TypeError) as err:
        raise DataError(f"{path}: column {JENA_TIME!r} is not in the format {JENA_TIME_FORMAT!r}: {err}") from err
    values = df[columns].apply(pd.to_numeric, errors="coerce").astype("float64")
    bad = values.isna().any(axis=1).to_numpy()
    if bad.any():
        i = int(bad.nonzero()[0][0])
        raise DataError(
            f"{path}: {int(bad.sum())} row(s) with missing or non-numeric values in {columns}, the "
            f"first at data row {i} ({df[JENA_TIME].iloc[i]}). Clean or drop those rows first.")
    values.index = pd.DatetimeIndex(time, name=JENA_TIME)
    return values


def load_jena(start: str | None = None, end: str | None = None, *, data_dir=None,
              columns=JENA_FEATURES, freq: str | None = None, download: bool = False):
    """Jena Climate rows with ``start <= time <= end`` (timestamps like ``"2009-01-01 01:00"``).

    With ``freq="1h"`` only the rows on exact multiples of that period are kept (hourly rows).
    Rows are selected by timestamp, never by row number, so the full Keras file and the offline
    slice give the same rows where they overlap. Raises :class:`DataError` when the file does not
    cover ``[start, end]`` or the selected rows are not on a regular grid (gaps or duplicates).
    """
    import pandas as pd

    path = jena_path(data_dir, download=download)
    df = read_jena(path, columns, sha256=JENA_FILES.get(path.name))
    lo = pd.Timestamp(start) if start is not None else df.index.min()
    hi = pd.Timestamp(end) if end is not None else df.index.max()
    if lo > hi:
        raise ValueError(f"start {start!r} is after end {end!r}.")
    if lo < df.index.min() or hi > df.index.max():
        raise DataError(
            f"{path} covers {df.index.min()} .. {df.index.max()}, but {lo} .. {hi} is needed. "
            "Use a window inside the file, or the full file (convres.data.load_jena(download=True)).")
    df = df[(df.index >= lo) & (df.index <= hi)]
    if freq is not None:
        step = pd.Timedelta(freq)
        df = df[(df.index - df.index.normalize()) % step == pd.Timedelta(0)]
        expected = pd.date_range(lo.ceil(step), hi.floor(step), freq=step)
        if len(df) != len(expected) or not (df.index == expected).all():
            dup = int(df.index.duplicated().sum())
            raise DataError(
                f"{path}: the rows at every {freq} in {lo} .. {hi} are irregular ({len(df)} rows, "
                f"{len(expected)} expected, {dup} duplicate times); choose another window.")
    return df


# --- SST-2 (GLUE) --------------------------------------------------------------------------------

SST2_HUB = ("nyu-mll/glue", "sst2")
SST2_SPLITS = ("train", "validation", "test")
SST2_COLUMNS = {"sentence": "string", "label": "int64", "idx": "int32"}
#: SHA-256 of the parquet files of the offline copy (its data/README.md). A split downloaded from the
#: Hub and written by ``datasets`` may differ byte-wise, so only files of exactly these sizes
#: (:data:`_SST2_SIZES`) are checked.
SST2_SHA256 = {
    "train": "143e0b2ae3a7e6687030bd42daa5bdeec6a7da8089e1aa0a45c8004f213e782f",
    "validation": "9ee822c3eeb0912f2525efcd219bdb8aef421366ad9cc20c6e2e72b700b98777",
    "test": "3c9b0d26aec29935e5055727d6fe7a4bc5e7c7a20c7bd4399ffad1b1a6303c2a",
}


def sst2_path(split: str = "train", *, data_dir=None, download: bool = False) -> Path:
    """``<data_dir>/sst2/<split>.parquet``; with ``download=True`` and no file, the split is
    loaded from the Hub (``datasets.load_dataset("nyu-mll/glue", "sst2")``) and saved there."""
    if split not in SST2_SPLITS:
        raise ValueError(f"split must be one of {SST2_SPLITS}, got {split!r}.")
    path = data_dir_setting(data_dir) / "sst2" / f"{split}.parquet"
    if path.is_file():
        return path
    if download:
        from datasets import load_dataset

        ds = load_dataset(*SST2_HUB, split=split)
        buf = io.BytesIO()
        ds.to_parquet(buf)
        atomic_write_bytes(path, buf.getvalue())
        return path
    raise FileNotFoundError(
        f"SST-2 file {path} not found. Download it with `python -m convres reproduce sst2 --download` "
        f"or convres.data.load_sst2(download=True) (loads {SST2_HUB[0]!r}, config {SST2_HUB[1]!r}, "
        f"from the Hugging Face Hub, a few MB), or point the data directory at an offline copy: set "
        f"{DATA_ENV}=/path/to/data (or pass data_dir=...).")


def load_sst2(split: str = "train", *, data_dir=None, download: bool = False, verify: bool = True):
    """One SST-2 split as a ``pandas.DataFrame`` with columns ``sentence`` (str), ``label``
    (0/1, -1 in test) and ``idx``, read from the parquet layout of the Hub dataset.

    With ``verify=True`` the SHA-256 is checked when the file has the size of the known offline
    file of that split (:data:`SST2_SHA256`). Raises :class:`DataError` for wrong columns, missing values or labels
    outside ``{-1, 0, 1}``.
    """
    import pyarrow.parquet as pq

    path = sst2_path(split, data_dir=data_dir, download=download)
    if verify and split in SST2_SHA256 and os.path.getsize(path) == _SST2_SIZES.get(split):
        verify_checksum(path, SST2_SHA256[split])
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
    return df


#: Sizes of the known SST-2 parquet files (a file of another size is a user's own file: not checked).
_SST2_SIZES = {"train": 2_970_520, "validation": 71_471, "test": 143_030}


def sst2_subset(df, size: int, n_tokens: int):
    """The book's fixed SST-2 training subset: in file order, the first ``size/2`` negative and
    the first ``size/2`` positive sentences with exactly ``n_tokens`` whitespace tokens.

    GLUE's SST-2 is already lower-cased and PTB-tokenized, so splitting on whitespace recovers its
    tokens. Equal length means no padding and no mask: the model sees exactly the theory's ``X``.
    Returns ``(tokens, labels)``: a list of token lists and a ``numpy`` array of 0/1.
    """
    import numpy as np

    if isinstance(size, bool) or not isinstance(size, int) or size < 2 or size % 2:
        raise ValueError(f"size must be an even integer >= 2, got {size!r}.")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive integer, got {n_tokens!r}.")
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


def hash_embedding(token: str, d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """A frozen Gaussian embedding of ``token``: ``d`` i.i.d. ``N(0, 1)`` entries drawn from a
    generator seeded with the SHA-256 of ``"<seed>:<token>"``. The same token always gets the same
    vector, on every machine, without a vocabulary."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}.")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d (the embedding dimension) must be a positive integer, got {d!r}.")
    digest = hashlib.sha256(f"{seed}:{token}".encode("utf-8")).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return torch.randn(d, generator=gen, dtype=torch.float64).to(dtype)


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
    "sst2": f"the SST-2 training split of the Hugging Face dataset {SST2_HUB[0]}, config {SST2_HUB[1]} "
            "(a few MB, saved as sst2/train.parquet)",
}


def download(dataset: str, *, data_dir=None) -> Path:
    """Make sure ``dataset`` (``"jena"`` or ``"sst2"``) is in the data directory, downloading it if
    missing (see :data:`DATASETS`); return its path. A file already there is kept as it is.

    Used by ``python -m convres reproduce NAME --download``.
    """
    if dataset == "jena":
        return jena_path(data_dir, download=True)
    if dataset == "sst2":
        return sst2_path("train", data_dir=data_dir, download=True)
    raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}.")
