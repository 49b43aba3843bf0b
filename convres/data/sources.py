"""Where the data come from: the data folder, the sources (settings: ``HF_ENDPOINT``,
``CONVRES_JENA_URL``), a resumable download with a progress bar, and the ``SHA256SUMS`` every read
checks."""

import contextlib
import functools
import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from ..cache import setting_dir, write_atomic

DATA_ENV, JENA_URL_ENV, CHECKSUMS = "CONVRES_DATA_DIR", "CONVRES_JENA_URL", "SHA256SUMS"
JENA_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/jena_climate_2009_2016.csv.zip"
#: The commit of the Hub dataset ``nyu-mll/glue`` that SST-2 is downloaded at.
SST2_REVISION = "bcdcba79d07bc864c1c254ccfcedcce55bcc9a8c"
#: The sha256 of the offline copy's Jena slice, a name no other file has (shared/data/README.md).
KNOWN_SHA256 = {"jena_climate/jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz":
                "9de67d18a184d5ea11e9a5f5ab7e0b258d30ab1233b68f47589ac79aa5c19e83"}
#: The cost policy: the most bytes a data file, or a zip member, may declare (the Keras CSV: 43 MB).
MAX_MEMBER_BYTES = 256 * 2**20
#: What reading a damaged file raises (with a reader's own errors, e.g. pyarrow's), made a :class:`DataError`.
READ_ERRORS: tuple[type[Exception], ...] = (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError)


class DataError(ValueError):
    """A data file is missing, malformed, too costly to read, or does not cover what is needed."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data folder: ``path``, else ``$CONVRES_DATA_DIR``, else ``~/.cache/convres/data``."""
    return setting_dir(DATA_ENV, "data", path)


def _hub(split: str) -> str:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/datasets/nyu-mll/glue/resolve/{SST2_REVISION}/sst2/{split}-00000-of-00001.parquet"


#: The files that are downloaded (their path in the data folder), and their sources.
SOURCES = {"jena_climate/jena_climate_2009_2016.csv.zip": lambda: os.environ.get(JENA_URL_ENV, JENA_URL),
           "sst2/train.parquet": lambda: _hub("train"), "sst2/validation.parquet": lambda: _hub("validation")}


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path`` (computed once per size and modification time)."""
    st = os.stat(path)
    return _sha256(os.fspath(path), st.st_size, st.st_mtime_ns)


def is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file; a :class:`DataError` where it is something else."""
    if path.exists() and not path.is_file():
        raise DataError(f"{path} is not a regular file (a directory?); remove it, then put the data in.")
    return path.is_file()


def read_checksums(root: Path) -> dict[str, str]:
    """The folder's ``SHA256SUMS`` (``sha256sum``'s format) as ``{relative path: sha256}``."""
    manifest, sums = root / CHECKSUMS, {}
    lines = manifest.read_text(errors="replace").splitlines() if is_file(manifest) else []
    for number, line in enumerate(lines, 1):
        match = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](?:\./)?(.+)", line)
        if match is None and line.strip() and not line.startswith("#"):
            raise DataError(f"{manifest}, line {number}: not '<sha256>  <path>'; fix or delete that line.")
        if match:
            sums[match[2]] = match[1].lower()
    return sums


@contextlib.contextmanager
def reading(path: Path, *errors: type[Exception]):
    """A block that reads ``path`` within the cost policy (its size); a damaged file (:data:`READ_ERRORS`
    and the reader's ``errors``) a :class:`DataError`."""
    if path.suffix != ".zip" and path.stat().st_size > MAX_MEMBER_BYTES:
        raise DataError(f"{path} has {path.stat().st_size:,} bytes, more than a data file may have.")
    try:
        yield
    except DataError:
        raise
    except READ_ERRORS + errors as err:
        raise DataError(f"cannot read {path} ({err}); delete it and download it again.") from None


def verify_file(path: Path, root: Path) -> str:
    """Check ``path``, in the data folder ``root``, against its recorded sha256; say what was checked."""
    rel, sums = path.relative_to(root).as_posix(), read_checksums(root)
    expected, where = (sums[rel], root / CHECKSUMS) if rel in sums else (KNOWN_SHA256.get(rel), "convres")
    if expected is None:
        return f"not verified: no sha256 is recorded for it in {root / CHECKSUMS}"
    if sha256_file(path) != expected:
        raise DataError(f"{path}: its sha256 is not the {expected} of {where}; the file is damaged or "
                        "another one: delete it and download it again (or, if it is yours, remove its line).")
    return f"sha256 matches {where}"


def zip_csv(archive: zipfile.ZipFile, where: Path) -> zipfile.ZipInfo:
    """The one CSV of a zip, its declared size within the cost policy (an encrypted member or an unknown
    compression raises when it is opened)."""
    csvs = [i for i in archive.infolist() if i.filename.endswith(".csv") and "__MACOSX" not in i.filename]
    if len(csvs) != 1 or csvs[0].file_size > MAX_MEMBER_BYTES:
        raise DataError(f"{where} holds {len(csvs)} CSV file(s), not one of at most {MAX_MEMBER_BYTES:,} "
                        "bytes; it is not the Keras zip of Jena Climate: delete it and download it again.")
    return csvs[0]


def find(root: Path, names: tuple[str, ...], download: bool = False) -> Path:
    """The first of ``names`` (paths in the data folder ``root``) that is there, else, with ``download``,
    the first fetched (:func:`fetch`); else a FileNotFoundError saying how to get it."""
    for path in (root / name for name in names):
        if is_file(path):
            return path
    if download and names[0] in SOURCES:
        return fetch(names[0], root)
    raise FileNotFoundError(f"{root / names[0]} not found: run `python -m convres data` (or download=True) "
                            f"to download it, or set {DATA_ENV} to an offline copy.")


def fetch(rel: str, root: Path) -> Path:
    """``root/rel`` (a file of :data:`SOURCES`) downloaded into ``rel.part`` (the next try resumes it), its
    sha256 recorded in ``SHA256SUMS``; a zip must hold one CSV (:func:`zip_csv`) before it takes its name."""
    dest, url = root / rel, SOURCES[rel]()
    fix = f"without network, put the file at {dest}, or set {DATA_ENV} to an offline copy holding {rel}"
    if rel.startswith("sst2/") and os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        raise DataError(f"{rel} is missing and HF_HUB_OFFLINE is set, so it is not downloaded from {url}; "
                        f"unset HF_HUB_OFFLINE, or {fix}.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        _download(url, part, rel)
        if rel.endswith(".zip"):  # a captive portal's page is no zip; a wrong zip keeps its .part name
            with zipfile.ZipFile(part) as archive:
                zip_csv(archive, part)
    except (OSError, http.client.HTTPException, zipfile.BadZipFile) as err:  # URLError, timeouts, ...
        kept = f" What arrived is kept in {part}: the next try resumes it." if part.exists() else ""
        raise DataError(f"could not download {rel} from {url} ({getattr(err, 'reason', None) or err}); "
                        f"{fix}.{kept}") from None
    os.replace(part, dest)
    sums = {**read_checksums(root), rel: sha256_file(dest)}
    write_atomic(root / CHECKSUMS, "".join(f"{sha}  {name}\n" for name, sha in sorted(sums.items())))
    return dest


def _download(url: str, part: Path, rel: str) -> None:
    from tqdm.auto import tqdm

    have = part.stat().st_size if part.is_file() else 0
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={have}-"}),
                                          timeout=60)  # noqa: S310 (a source of SOURCES)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the part is already whole
            return
        raise
    have = have if response.status == 206 else 0   # a 200 sends the whole file again
    total = int(response.headers.get("Content-Length") or 0) + have
    with response, open(part, "ab" if have else "wb") as f, \
            tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=rel) as bar:
        for block in iter(lambda: response.read(1 << 20), b""):
            f.write(block)
            bar.update(len(block))
