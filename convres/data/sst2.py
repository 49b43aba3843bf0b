"""SST-2 (GLUE, book chapter *SST-2*): the Hub dataset's parquet files, their checks (the cost from
the footer before the text is read) and the task an experiment reads."""

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..values import as_int, is_int
from .embeddings import embed_with, ppmi_embeddings
from .sources import MAX_MEMBER_BYTES, DataError, find, reading, verify_file
from .sources import data_dir as data_folder

SST2_SPLITS = ("train", "validation", "test")
SST2_COLUMNS = {"sentence": ("string", "large_string"), "label": ("int64",), "idx": ("int32",)}
#: The longest sentence accepted, in whitespace tokens (SST-2's longest have about 60).
MAX_TOKENS = 256


def sst2_path(split: str = "train", *, data_dir=None, download: bool = False) -> Path:
    """``<data_dir>/sst2/<split>.parquet``; with ``download``, fetched from the Hub when missing."""
    if split not in SST2_SPLITS:
        raise ValueError(f"split must be one of {SST2_SPLITS}, got {split!r}.")
    return find(data_folder(data_dir), (f"sst2/{split}.parquet",), download)


def load_sst2(split: str = "train", *, data_dir=None, download: bool = False, max_tokens: int = MAX_TOKENS):
    """One SST-2 split as a ``pandas.DataFrame`` (``sentence``, ``label``: 0/1, -1 in test, ``idx``),
    checked by its sha256 (``df.attrs["checksum"]``), its cost (the text's size in the footer, before
    it is read) and its content (a :class:`DataError`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    max_tokens = as_int("max_tokens", max_tokens, minimum=1)
    path = sst2_path(split, data_dir=data_dir, download=download)
    checked = verify_file(path, path.parents[1])
    with reading(path, pa.ArrowException):
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
        got = {c: str(schema.field(c).type) if c in schema.names else "missing" for c in SST2_COLUMNS}
        if any(got[c] not in types for c, types in SST2_COLUMNS.items()):
            raise DataError(f"{path} does not have the SST-2 schema {SST2_COLUMNS} (it has {got}); use the "
                            "parquet files of the Hub dataset nyu-mll/glue, config sst2.")
        text = schema.names.index("sentence")
        size = sum(meta.row_group(g).column(text).total_uncompressed_size for g in range(meta.num_row_groups))
        if size > MAX_MEMBER_BYTES:
            raise DataError(f"{path} holds {size:,} bytes of sentences, more than an SST-2 split may cost.")
        df = pq.read_table(path, columns=list(SST2_COLUMNS)).to_pandas()
    tokens = df["sentence"].str.split().str.len()
    for rows, what in [(df.isna().any(axis=1), "missing values"), (~df["label"].isin([-1, 0, 1]), "a label "
                       "outside -1, 0, 1"), (df["idx"].duplicated(), "the idx of an earlier row"),
                       (tokens > max_tokens, f"more than max_tokens={max_tokens} tokens")]:
        if rows.any():
            raise DataError(f"{path}: {int(rows.sum())} row(s) with {what}; drop or correct them.")
    df.attrs["checksum"] = checked
    return df


def sst2_prefixes(df, n_tokens: int, size: int | None = None):
    """``(tokens, labels, rows)``: the first ``n_tokens`` tokens of every sentence that has that many;
    with ``size``, the first ``size/2`` of each label."""
    n_tokens = as_int("n_tokens", n_tokens, minimum=1)
    if size is not None and (not is_int(size) or size < 2 or size % 2):
        raise ValueError(f"size must be an even integer >= 2 (half of each label) or None, got {size!r}.")
    tokens = df["sentence"].str.split().tolist()
    labels = df["label"].to_numpy(dtype=np.int64)
    if len(labels) and not np.isin(labels, (0, 1)).all():
        raise DataError(f"labels must be 0 or 1 (a labelled split, not 'test'), got {sorted(set(labels))}.")
    rows = np.array([i for i, t in enumerate(tokens) if len(t) >= n_tokens], dtype=np.int64)
    if len(rows) == 0:
        raise DataError(f"no sentence has at least {n_tokens} tokens.")
    if size is not None:
        rows = rows[_balanced(labels[rows], int(size), f"sentences of at least {n_tokens} tokens")]
    return [tokens[i][:n_tokens] for i in rows], labels[rows], rows


def _balanced(labels: np.ndarray, size: int, what: str) -> np.ndarray:
    """The indices, in order, of the first ``size / 2`` of ``labels`` of each label (0, 1)."""
    chosen = [np.nonzero(labels == c)[0][:size // 2] for c in (0, 1)]
    for c, found in enumerate(chosen):
        if len(found) < size // 2:
            raise DataError(f"only {len(found)} {what} of label {c}: need {size // 2}.")
    return np.sort(np.concatenate(chosen))


def unique_prefixes(tokens: list, labels, size: int, exclude=()) -> tuple[list, np.ndarray, dict]:
    """``(tokens, labels, counts)``: one row per distinct prefix, those with both labels or in
    ``exclude`` dropped, the first ``size / 2`` of each label; ``counts``: what was dropped."""
    seen: dict[tuple, set] = {}   # in the order of the first rows
    for t, y in zip(tokens, labels):
        seen.setdefault(tuple(t), set()).add(int(y))
    conflicting = {k for k, ys in seen.items() if len(ys) > 1}
    held_out = {tuple(t) for t in exclude} & seen.keys()
    label = {k: min(ys) for k, ys in seen.items() if k not in conflicting and k not in held_out}
    keys = list(label)
    what = "distinct prefixes (of one label, not in the validation split; lower 'n_train')"
    rows = [keys[i] for i in _balanced(np.array([label[k] for k in keys]), size, what)]
    counts = {"rows": len(tokens), "prefixes": len(seen), "conflicting": len(conflicting),
              "conflicting_rows": sum(tuple(t) in conflicting for t in tokens),
              "in_validation": len(held_out)}
    return [list(k) for k in rows], np.array([label[k] for k in rows], dtype=np.int64), counts


#: Words whose nearest neighbours the SST-2 chapter shows (a look at what the embeddings carry).
SST2_PROBE_WORDS = ("good", "bad", "funny", "boring")


class SST2Task(NamedTuple):
    """The SST-2 task: ``X`` ``(N, n, d)``, ``Y`` ``(N, 1)`` (+-1), ``labels``, the same for the
    validation split, the tokens, the vocabulary and ``info``."""

    X: torch.Tensor
    Y: torch.Tensor
    labels: np.ndarray
    X_val: torch.Tensor
    Y_val: torch.Tensor
    labels_val: np.ndarray
    tokens: list
    tokens_val: list
    vocab: list
    info: dict


def _neighbours(vocab, vectors, words, k: int = 5) -> dict:
    index = {t: i for i, t in enumerate(vocab)}
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-300)
    return {w: [vocab[j] for j in np.argsort(-(unit @ unit[index[w]]), kind="stable") if j != index[w]][:k]
            for w in words if w in index}


def sst2_data(s: dict, data_dir=None, dtype=torch.float32) -> SST2Task:
    """The book's SST-2 task: :func:`unique_prefixes` of ``n_tokens`` tokens and the validation split,
    in PPMI-SVD vectors of the training text standardized over the training tokens."""
    n_tokens = as_int("setting 'n_tokens'", s.get("n_tokens"), minimum=1)
    n_train = as_int("setting 'n_train'", s.get("n_train"), minimum=1)
    train, val = load_sst2("train", data_dir=data_dir), load_sst2("validation", data_dir=data_dir)
    if n_train % 2:
        raise ValueError(f"setting 'n_train' must be even (half of each label), got {n_train}.")
    tokens_val, labels_val, _ = sst2_prefixes(val, n_tokens, s.get("n_val"))
    every, every_label, _ = sst2_prefixes(train, n_tokens)
    tokens, labels, counts = unique_prefixes(every, every_label, n_train, tokens_val)
    if s.get("embedding", "ppmi") != "ppmi":
        raise ValueError(f"setting 'embedding' must be 'ppmi', got {s.get('embedding')!r}.")
    vocab, vectors = ppmi_embeddings(train["sentence"].str.split().tolist(), s["d"],
                                     vocab_size=s["vocab_size"], seed=s["emb_seed"])
    X, (mean, std), oov = embed_with(tokens, vocab, vectors, dtype=dtype)
    Xv, _, oov_val = embed_with(tokens_val, vocab, vectors, mean=mean, std=std, dtype=dtype)
    target = lambda y: torch.tensor(2.0 * y - 1.0, dtype=dtype)[:, None]  # noqa: E731
    info = {"vocab_size": len(vocab), "oov_train": oov, "oov_val": oov_val,
            "neighbours": _neighbours(vocab, vectors, SST2_PROBE_WORDS),
            "examples": [{"label": int(y), "tokens": t} for t, y in zip(tokens[:4], labels[:4])],
            "train_sentences": int(len(train)), "val_sentences": int(len(val)),
            "deduplication": counts}
    return SST2Task(X, target(labels), labels, Xv, target(labels_val), labels_val, tokens, tokens_val,
                    list(vocab), info)
