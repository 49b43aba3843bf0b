"""The one file policy of the package: atomic writes, and reads of regular files only.

Every file convres writes (cache entries, downloads, checksum manifests, reports, figures) goes
through :func:`atomic_write_bytes`: a reader sees the old file or the whole new one, never half of
it. Every file it reads that a user or another program could have put there (cache entries,
checksum manifests) goes through :func:`read_regular`: only a regular file is opened (a FIFO, a
device such as ``/dev/zero``, a socket or a directory is refused before a byte is read), its size
is capped, and a symbolic link is followed only when its target stays inside the expected folder.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import tempfile
import time
from pathlib import Path

__all__ = ["FileRefused", "atomic_write_bytes", "atomic_write_text", "read_regular",
           "STALE_TMP_SECONDS"]

#: Temporary files of :func:`atomic_write_bytes` older than this (seconds) belong to a writer that
#: was killed; the next write into the same folder removes them.
STALE_TMP_SECONDS = 3600


class FileRefused(OSError):
    """A file that is not a regular file inside its folder, or larger than allowed, was not read."""


def _umask() -> int:
    """The process umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def _remove_stale_temporaries(path: Path, max_age: float = STALE_TMP_SECONDS) -> None:
    """Delete ``.<name>.*.tmp`` files next to ``path`` last modified more than ``max_age`` s ago
    (left by a writer that was killed); files that vanish or cannot be removed are skipped."""
    pattern = os.path.join(glob.escape(str(path.parent)), f".{glob.escape(path.name)}.*.tmp")
    cutoff = time.time() - max_age
    for tmp in glob.glob(pattern):
        try:
            info = os.lstat(tmp)
            if info.st_mtime < cutoff and stat.S_ISREG(info.st_mode):
                os.unlink(tmp)
        except OSError:
            pass


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, flushed to disk,
    then a rename. The file gets the mode a plain ``open`` would give (``0o666`` less the umask).
    An existing file, link, FIFO or device at ``path`` is replaced (the rename replaces the entry
    itself, never what a link points to); a directory there is refused with :class:`FileRefused`."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise FileRefused(f"{path} is a directory, not a file; remove it (or choose another path) "
                          "and try again.")
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0o600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_regular(path: str | os.PathLike, *, max_bytes: int, folder: str | os.PathLike | None = None,
                 what: str = "file") -> bytes:
    """The bytes of ``path``, read only if it is a regular file of at most ``max_bytes`` bytes.

    A symbolic link is followed only when its target lies inside ``folder`` (default: the folder
    of ``path``). The file is opened without blocking (a FIFO never hangs the reader) and checked
    on the open descriptor, so a file swapped between the check and the read is still checked.
    Raises :class:`FileNotFoundError` when it does not exist and :class:`FileRefused` (naming
    ``what``, the path and the reason) for anything else it will not read.
    """
    path = Path(path)
    root = Path(folder if folder is not None else path.parent).resolve()
    real = path.resolve()
    if path.is_symlink() and not real.is_relative_to(root):
        raise FileRefused(f"{what} {path} is a link to {real}, outside {root}; convres does not "
                          "follow links out of its folder. Replace the link by the file itself.")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{what} {path} is not a regular file (a directory, FIFO, device or "
                              "socket); remove it, convres will write a new one.")
        if info.st_size > max_bytes:
            raise FileRefused(f"{what} {path} has {info.st_size:,} bytes, more than the "
                              f"{max_bytes:,} allowed for it; remove it if it is not yours.")
        chunks, left = [], max_bytes + 1
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise FileRefused(f"{what} {path} grew beyond {max_bytes:,} bytes while it was read.")
        return data
    finally:
        os.close(fd)
