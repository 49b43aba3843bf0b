"""Where and how PyTorch runs: the device, the number of intra-op threads, and what a run may cost.

Experiments run with one thread (:func:`torch_threads`): at the book's sizes more threads cost more
than they save. The cost policy (:func:`check_memory`): an entry point that allocates in proportion to
its arguments refuses, before allocating, more than the device has, naming the estimate and the fix.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from .values import as_int

__all__ = ["check_device", "torch_threads", "max_threads", "available_memory", "check_memory",
           "CostRefused"]


class CostRefused(ValueError):
    """A request whose estimated memory exceeds what its device has: refused before allocating."""


def available_memory(device=None) -> int | None:
    """Bytes of memory available now on ``device`` (the CPU by default): free CUDA memory, or the
    available physical memory of the machine; ``None`` where it cannot be told."""
    dev = torch.device("cpu") if device is None else torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AssertionError, ValueError):
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(need: int, what: str, change: str, *, device=None) -> None:
    """Refuse (:class:`CostRefused`) a computation ``what`` estimated to need ``need`` bytes when
    more than the memory available on ``device`` (:func:`available_memory`); the message gives the
    estimate, what is available and ``change``, the argument or flag to change."""
    avail = available_memory(device)
    if avail is not None and need > avail:
        raise CostRefused(f"{what} needs about {_gib(need)} of memory, but {_gib(avail)} are "
                          f"available on this machine; {change}.")


def _gib(b: float) -> str:
    return f"{b / 2**30:.3g} GiB" if b >= 2**27 else f"{b / 2**20:.3g} MiB"


def check_device(device) -> torch.device:
    """``device`` (``None``: the CPU, a ``torch.device`` or a name such as ``"cuda:1"``) as a
    :class:`torch.device` this build and machine have, or a ValueError naming it and the fix."""
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', or a torch.device, got "
                        f"{type(device).__name__}.")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use 'cpu', or 'cuda' (or 'cuda:0', ...) on a "
                         "machine with an NVIDIA GPU and a CUDA build of PyTorch.") from None
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError(f"device {device!r}: this PyTorch build ({torch.__version__}) has no CUDA "
                             "support; use device 'cpu', or install a CUDA build of PyTorch.")
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: PyTorch was built with CUDA but no CUDA device is "
                             "available on this machine (driver or GPU missing); use device 'cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here "
                             f"(indices 0..{torch.cuda.device_count() - 1}).")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r}: Apple's MPS backend is not available here; use 'cpu'.")
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r} is not supported by convres; use 'cpu' or 'cuda'.")
    elif dev.index is not None:  # torch accepts 'cpu:1' and runs on the one CPU device
        raise ValueError(f"device {device!r}: the CPU has no numbered devices; use 'cpu'.")
    return dev


def max_threads() -> int:
    """The largest number of threads :func:`torch_threads` accepts: 4 per CPU of this machine."""
    return 4 * (os.cpu_count() or 1)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a block with ``n`` PyTorch intra-op threads (1 .. :func:`max_threads`), then restore the
    previous number. ``None`` leaves the setting alone. The setting is process-wide: do not use this
    while other Python threads run PyTorch code."""
    if n is None:
        yield
        return
    try:
        n = as_int("threads", n, minimum=1, maximum=max_threads())
    except ValueError:
        raise ValueError(f"threads must be an integer in 1 .. {max_threads()} (4 per CPU here) or None, "
                         f"got {n!r}.") from None
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
