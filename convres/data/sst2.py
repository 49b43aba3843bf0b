"""SST-2 (GLUE): the parquet files, their checks and the sentences an experiment reads.

Book chapter *SST-2*. The download is pinned to one commit of the Hub dataset
(:data:`SST2_REVISION`); a file is verified against the checksum recorded for it, if any, and its
schema, labels and missing values are always checked.
"""

from __future__ import annotations

import io
from pathlib import Path

from ..files import atomic_write_bytes
from ..paths import DATA_ENV
from ..paths import data_dir as data_dir_setting
from ..values import as_int, is_int
from .checksums import (
    CHECKSUMS,
    DataError,
    record_checksum,
    recorded_checksum,
    require_file,
    sha256_file,
    verify_checksum,
)

__all__ = ["SST2_HUB", "SST2_REVISION", "SST2_SPLITS", "SST2_SHA256", "sst2_path", "load_sst2",
           "sst2_prefixes"]


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
    require_file(path, "SST-2 file")
    if path.is_file():
        return path
    if download:
        atomic_write_bytes(path, _hub_parquet(split, revision, path))
        record_checksum(path, data_dir)
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


#: The longest sentence :func:`load_sst2` accepts, in whitespace tokens: SST-2's own longest
#: sentences have about 60; a much longer one would make every later step (co-occurrence counts,
#: padding) cost in proportion to its length or its square.
MAX_TOKENS = 256


def _check_content(path: Path, df, max_tokens: int) -> None:
    """The content policy of a split: no duplicated ``idx`` (a file appended to itself, or two
    splits concatenated), and no sentence longer than ``max_tokens`` whitespace tokens (counted
    before anything is padded or paired)."""
    dup = df["idx"].duplicated()
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        raise DataError(f"{path}: {int(dup.sum())} row(s) repeat an idx of an earlier row, the first at row "
                        f"{i} (idx {int(df['idx'].iloc[i])}); every SST-2 row has its own idx. Drop the "
                        "duplicated rows first.")
    lengths = df["sentence"].str.count(r"\S+")
    if len(lengths) and int(lengths.max()) > max_tokens:
        i = int(lengths.to_numpy().argmax())
        raise DataError(f"{path}: row {i} has {int(lengths.iloc[i]):,} tokens, more than max_tokens="
                        f"{max_tokens} (SST-2's sentences have at most about 60); such a row would make "
                        "the data steps cost in proportion to its length squared. Drop or shorten it, or "
                        "pass a larger max_tokens=... to load_sst2.")


def load_sst2(split: str = "train", *, data_dir=None, download: bool = False, verify: bool = True,
              max_tokens: int = MAX_TOKENS):
    """One SST-2 split as a ``pandas.DataFrame`` with columns ``sentence`` (str), ``label``
    (0/1, -1 in test) and ``idx``, read from the parquet layout of the Hub dataset.

    With ``verify=True`` the file is checked against the SHA-256 recorded for it in the data
    directory's ``SHA256SUMS`` (a mismatch raises :class:`DataError`); a file with no recorded
    checksum is read unverified. ``df.attrs["checksum"]`` says which case applied. Always raises
    :class:`DataError` for an unreadable file, wrong columns, missing values, labels outside
    ``{-1, 0, 1}``, a repeated ``idx`` or a sentence of more than ``max_tokens`` tokens.
    """
    import pyarrow.parquet as pq

    max_tokens = as_int("max_tokens", max_tokens, minimum=1)

    path = sst2_path(split, data_dir=data_dir, download=download)
    checked = _sst2_checksum(path, split, data_dir, verify)
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise DataError(f"cannot read {path} as parquet: {err}") from err
    got = {f.name: str(f.type) for f in table.schema}
    wrong = {c: got.get(c, "missing") for c, t in SST2_COLUMNS.items()
             if got.get(c) not in (t, "large_string" if t == "string" else t)}
    if wrong:
        raise DataError(
            f"{path} does not have the SST-2 schema {SST2_COLUMNS}: {wrong} (has {got}). "
            "Expected the parquet files of the Hub dataset nyu-mll/glue, config sst2.")
    df = table.select(list(SST2_COLUMNS)).to_pandas()
    if df.isna().any(axis=None):
        i = int(df.isna().any(axis=1).to_numpy().nonzero()[0][0])
        raise DataError(f"{path}: {int(df.isna().any(axis=1).sum())} row(s) with missing values, the first "
                        f"at row {i}.")
    if not df["label"].isin([-1, 0, 1]).all():
        raise DataError(f"{path}: labels must be 0, 1 (or -1 in test), got "
                        f"{sorted(df['label'].unique())[:5]}.")
    _check_content(path, df, max_tokens)
    df.attrs["checksum"] = checked
    return df


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

    n_tokens = as_int("n_tokens", n_tokens, minimum=1)
    if size is not None and (not is_int(size) or size < 2 or size % 2):
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
