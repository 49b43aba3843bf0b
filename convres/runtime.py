"""Where and how PyTorch runs: the device, the intra-op threads (experiments run with one: at the
book's sizes more cost more than they save) and the cost policy (:func:`check_memory`)."""

import contextlib
import os
from collections.abc import Iterator

import torch

from .values import as_int


class CostRefused(ValueError):
    """A request whose estimated memory exceeds what its device has: refused before allocating."""


def available_memory(device=None) -> int | None:
    """Bytes available now on ``device`` (the CPU by default): free CUDA memory, or the machine's
    available physical memory (``/proc/meminfo``); ``None`` where it cannot be told."""
    if device is not None and torch.device(device).type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except (RuntimeError, AssertionError, ValueError):
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, ValueError, IndexError, StopIteration):  # no /proc (macOS): not told
        return None


def check_memory(need: int, what: str, change: str, *, device=None) -> None:
    """Refuse (:class:`CostRefused`), before allocating, ``need`` bytes beyond :func:`available_memory`."""
    avail = available_memory(device)
    if avail is not None and need > avail:
        raise CostRefused(f"{what} needs about {_gib(need)} of memory, but {_gib(avail)} are "
                          f"available on this machine; {change}.")


def _gib(b: float) -> str:
    return f"{b / 2**30:.3g} GiB" if b >= 2**27 else f"{b / 2**20:.3g} MiB"


def check_device(device) -> torch.device:
    """``device`` (``None``: the CPU) as a :class:`torch.device` this build and machine have."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    cuda = dev is not None and dev.type == "cuda"
    if dev is None or dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index is not None) \
            or (cuda and (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"device {device!r} is not available here: use 'cpu', or 'cuda' (or 'cuda:0', ...) "
                         "on a machine with an NVIDIA GPU and a CUDA build of PyTorch.")
    return dev


def max_threads() -> int:
    """The largest number of threads :func:`torch_threads` accepts: 4 per CPU of this machine."""
    return 4 * (os.cpu_count() or 1)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a block with ``n`` PyTorch intra-op threads (1 .. :func:`max_threads`), then restore the
    previous number; ``None`` leaves it alone. Process-wide: not while other threads run PyTorch."""
    threads = None if n is None else as_int("threads", n, minimum=1, maximum=max_threads())
    before = torch.get_num_threads()
    torch.set_num_threads(before if threads is None else threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
