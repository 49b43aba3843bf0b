"""Data: the real-data loaders (Jena Climate, SST-2), their checks and the word vectors.

Book chapters *Jena Climate* and *SST-2*. The data directory setting is
:func:`convres.paths.data_dir` (argument ``data_dir`` or ``$CONVRES_DATA_DIR``). The submodules:
:mod:`~convres.data.checksums` (checksums, downloads, errors), :mod:`~convres.data.jena`,
:mod:`~convres.data.sst2`, :mod:`~convres.data.embeddings`; their public names are re-exported
here.
"""

from __future__ import annotations

from pathlib import Path

from .checksums import *  # noqa: F403
from .checksums import __all__ as _checksums_all
from .embeddings import *  # noqa: F403
from .embeddings import __all__ as _embeddings_all
from .jena import *  # noqa: F403
from .jena import JENA_URL, jena_path
from .jena import __all__ as _jena_all
from .sst2 import *  # noqa: F403
from .sst2 import SST2_HUB, SST2_REVISION, sst2_path
from .sst2 import __all__ as _sst2_all

__all__ = [*_checksums_all, *_jena_all, *_sst2_all, *_embeddings_all, "DATASETS", "download"]


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
