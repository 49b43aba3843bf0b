"""Data (book chapters *Jena Climate* and *SST-2*): the loaders, their sources and word vectors."""

from pathlib import Path  # noqa: I001 (the names of a module on two lines, not twelve)

from . import jena, sources
from .embeddings import embed_with, ppmi_embeddings
from .jena import JENA_ALL_FEATURES, JENA_BOUNDS, JENA_FEATURES, jena_path, load_jena, read_jena
from .jena import timestamp
from .sources import DataError, data_dir, sha256_file
from .sst2 import SST2_SPLITS, load_sst2, sst2_path, sst2_prefixes

__all__ = ["DATASETS", "download", "fingerprint", "embed_with", "ppmi_embeddings", "JENA_ALL_FEATURES",
           "JENA_BOUNDS", "JENA_FEATURES", "jena_path", "load_jena", "read_jena", "timestamp",
           "DataError", "data_dir", "load_sst2", "sst2_path", "sst2_prefixes", "sources"]

#: The data sets the experiments read, and the files :func:`download` makes sure of for each: one of
#: the names in each tuple (the first is downloaded).
DATASETS = {"jena": (tuple(f"jena_climate/{name}" for name in jena.JENA_FILES),),
            "sst2": (("sst2/train.parquet",), ("sst2/validation.parquet",))}


def download(dataset: str, *, data_dir=None) -> Path:
    """Download what ``dataset`` (``"jena"``, ``"sst2"``) lacks in the data folder; its first file."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}.")
    root = sources.data_dir(data_dir)
    return [sources.find(root, names, download=True) for names in DATASETS[dataset]][0]


def fingerprint(data_dir=None) -> dict[str, str]:
    """``{file: sha256}`` of the data files the loaders may read now (part of an experiment's cache key)."""
    root = sources.data_dir(data_dir)
    paths = [root / "sst2" / f"{split}.parquet" for split in SST2_SPLITS]
    paths += [root / "jena_climate" / name for name in jena.JENA_FILES]
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in paths if p.is_file()}
