"""Where and how PyTorch runs: the device and the number of intra-op threads.

Book appendix *Performance*. For models as small as the book's, thread synchronization costs more
than it saves, so experiments run with one thread (:func:`torch_threads`).
"""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Iterator

import torch

__all__ = ["check_device", "torch_threads", "max_threads"]


def check_device(device) -> torch.device:
    """``device`` as a :class:`torch.device` usable by this PyTorch build, or a ValueError.

    Accepts ``None`` (the CPU), a ``torch.device`` or a name such as ``"cpu"``, ``"cuda"`` or
    ``"cuda:1"``. Raises ValueError, naming the device and the fix, for an unknown device name, or
    for ``cuda`` (``mps``) when this PyTorch build or machine has no such device.
    """
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
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not 1 <= n <= max_threads():
        raise ValueError(f"threads must be an integer in 1 .. {max_threads()} (4 per CPU here) or None, "
                         f"got {n!r}.")
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)
