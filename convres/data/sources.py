"""Where the data come from: the data folder, the download sources, the fetcher and the checksums.

Book appendix on the data (README, *Data*). The sources are settings, so that a mirror can stand in
for them: ``HF_ENDPOINT`` for the Hugging Face Hub (SST-2, at the pinned :data:`SST2_REVISION`)
and ``CONVRES_JENA_URL`` for the Keras zip of Jena Climate. A download shows a progress bar,
resumes its ``.part`` file, and its sha256 is recorded in the data folder's ``SHA256SUMS``; every
read checks a file against its line there, or against :data:`KNOWN_SHA256`.
"""

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
#: The sha256 of the offline copy's Jena slice, whose name no other file has (data/README.md).
KNOWN_SHA256 = {"jena_climate/jena_climate_2009_2016_SUBSET_2009-01-01_to_2009-01-28_12cols.csv.gz":
                "9de67d18a184d5ea11e9a5f5ab7e0b258d30ab1233b68f47589ac79aa5c19e83"}
#: The cost policy of a zip: the largest member it may declare (bytes; the Keras CSV has 43 MB).
MAX_MEMBER_BYTES = 256 * 2**20
SUPPORTED = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


class DataError(ValueError):
    """A data file is missing, malformed, too costly to read, or does not cover what is needed."""


class DataWarning(UserWarning):
    """Something about a data file could not be verified (the data are still used)."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data folder: ``path``, else ``$CONVRES_DATA_DIR``, else ``~/.cache/convres/data``."""
    return setting_dir(DATA_ENV, "data", path)


def _hub(name: str) -> str:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/datasets/nyu-mll/glue/resolve/{SST2_REVISION}/sst2/{name}-00000-of-00001.parquet"


#: The files that can be downloaded (their path in the data folder) and their sources.
SOURCES = {"jena_climate/jena_climate_2009_2016.csv.zip": lambda: os.environ.get(JENA_URL_ENV, JENA_URL),
           "sst2/train.parquet": lambda: _hub("train"), "sst2/validation.parquet": lambda: _hub("validation")}


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path`` (computed once per size and modification time)."""
    st = os.stat(path)
    return _sha256(os.fspath(path), st.st_size, st.st_mtime_ns)


def read_checksums(root: Path) -> dict[str, str]:
    """``SHA256SUMS`` of the data folder ``root`` as ``{relative path: sha256}`` (``sha256sum``'s format)."""
    manifest = root / CHECKSUMS
    if not manifest.exists():
        return {}
    if not manifest.is_file():
        raise DataError(f"{manifest} is not a regular file, so nothing could be verified; remove it.")
    sums = {}
    for number, line in enumerate(manifest.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        match = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](?:\./)?(.+)", line)
        if match is None and line.strip() and not line.startswith("#"):
            raise DataError(f"{manifest}, line {number}: expected '<sha256>  <path>' as sha256sum writes it; "
                            "fix or delete that line.")
        if match:
            sums[match[2]] = match[1].lower()
    return sums


def verify_file(path: Path, root: Path) -> str:
    """Check ``path`` (inside the data folder ``root``) against its recorded sha256; say what was checked."""
    rel = path.relative_to(root).as_posix()
    sums = read_checksums(root)
    expected, where = (sums[rel], root / CHECKSUMS) if rel in sums else (KNOWN_SHA256.get(rel), "KNOWN_SHA256")
    if expected is None:
        return f"not verified: no sha256 is recorded for it in {root / CHECKSUMS}"
    if sha256_file(path) != expected:
        raise DataError(f"{path}: its sha256 is not the {expected} recorded in {where}; the file is damaged or "
                        "another one: delete it and download it again (or remove its line there if it is yours).")
    return f"sha256 matches {where}"


def zip_member(archive: zipfile.ZipFile, where: Path) -> zipfile.ZipInfo:
    """The one CSV of a zip, checked against the cost policy before a byte of it is read."""
    csvs = [i for i in archive.infolist() if i.filename.lower().endswith(".csv") and "__MACOSX" not in i.filename]
    if len(csvs) != 1:
        raise DataError(f"{where} holds {len(csvs)} CSV files, not one; it is not the Keras zip of Jena Climate.")
    member = csvs[0]
    for bad, what in [(member.flag_bits & 1, "is encrypted"),
                      (member.compress_type not in SUPPORTED, f"uses compression {member.compress_type}, "
                                                              "which is not supported"),
                      (member.file_size > MAX_MEMBER_BYTES, f"declares {member.file_size:,} bytes, more than "
                                                            f"the {MAX_MEMBER_BYTES:,} a data file may have")]:
        if bad:
            raise DataError(f"{where}: {member.filename} {what}; delete the zip and download it again.")
    return member


def fetch(rel: str, root: Path, check=None) -> Path:
    """``root/rel`` (a file of :data:`SOURCES`), downloaded first if it is not there, the download
    passing ``check(path)`` (if given) before it takes that name."""
    dest, url = root / rel, SOURCES[rel]()
    if dest.is_file():
        return dest
    offline = rel.startswith("sst2/") and os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
    fix = (f"without network, put the file at {dest}, or set {DATA_ENV} to a folder holding {rel} (an "
           "offline copy)")
    if offline:
        raise DataError(f"{rel} is not in the data folder and HF_HUB_OFFLINE is set, so it is not downloaded "
                        f"from {url}; unset HF_HUB_OFFLINE to download it, or {fix}.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    try:
        _download(url, part, have, rel)
        if check is not None:
            check(part)
    except (OSError, http.client.HTTPException, zipfile.BadZipFile) as err:  # URLError, timeouts, ...
        reason = getattr(err, "reason", None) or err
        raise DataError(f"could not download {rel} from {url} ({reason}); {fix}. What arrived is kept in "
                        f"{part}, and the next try resumes it.") from None
    os.replace(part, dest)
    sums = {**read_checksums(root), rel: sha256_file(dest)}
    write_atomic(root / CHECKSUMS, "".join(f"{sha}  {name}\n" for name, sha in sorted(sums.items())))
    return dest


def _download(url: str, part: Path, have: int, rel: str) -> None:
    from tqdm.auto import tqdm

    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)  # noqa: S310 (a source of SOURCES)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the part is already whole
            return
        raise
    with response, open(part, "ab" if response.status == 206 else "wb") as f, \
            tqdm(total=int(response.headers.get("Content-Length") or 0) + (have if response.status == 206 else 0),
                 initial=have if response.status == 206 else 0, unit="B", unit_scale=True, desc=rel) as bar:
        for block in iter(lambda: response.read(1 << 20), b""):
            f.write(block)
            bar.update(len(block))
