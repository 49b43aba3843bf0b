"""Data: synthetic instances for the theory chapters (real-data loaders live beside them).

Book chapters: *The model*, *The theorem*, *Simulations*. The data directory setting is
:func:`convres.config.data_dir` (argument ``data_dir`` or ``$CONVRES_DATA_DIR``).
"""

from __future__ import annotations

import torch

from .model import _generator

__all__ = ["synthetic_regression"]


def synthetic_regression(N: int, n: int, d: int, c: int = 1, *, seed: int | torch.Generator = 0,
                         dtype=torch.float64, pooled: bool = False):
    """A random regression instance: ``X`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, d)``, and
    targets ``Y`` with i.i.d. ``N(0, 1)`` entries, shape ``(N, n, c)`` (``(N, c)`` if ``pooled``).

    Gaussian ``X`` is of full rank with probability one, as the theory requires.
    """
    for name, v in (("N", N), ("n", n), ("d", d), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}.")
    gen = _generator(seed)
    X = torch.randn(N, n, d, generator=gen, dtype=torch.float64)
    Y = torch.randn(*((N, c) if pooled else (N, n, c)), generator=gen, dtype=torch.float64)
    return X.to(dtype), Y.to(dtype)
