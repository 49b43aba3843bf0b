"""How the theory's inequalities are checked along a run.

``Phi_{t+1} <= (1 - mu alpha_t) Phi_t`` by :func:`contraction_check` (:func:`tolerance`,
:data:`LOSS_FLOOR`), hypotheses as :class:`Hypothesis`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .show import plain

__all__ = ["FLOAT_TOL", "LOSS_FLOOR", "tolerance", "finite_fields", "Hypothesis", "Contraction",
           "contraction_check"]

#: Relative round-off tolerance of float64 losses: a measured ratio may exceed a bound by this much.
FLOAT_TOL = 1e-9

#: Steps whose loss is below ``LOSS_FLOOR * Phi_0`` are not checked (float64 round-off dominates).
LOSS_FLOOR = 1e-20


def tolerance(dtype: torch.dtype = torch.float64) -> float:
    """The relative tolerance of losses in ``dtype``: :data:`FLOAT_TOL` in float64, else ``100 eps``."""
    return FLOAT_TOL if dtype == torch.float64 else 100 * torch.finfo(dtype).eps


def finite_fields(d: dict) -> dict:
    """``d`` with every non-finite float replaced by ``None`` (JSON has no infinity)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One hypothesis on one instance: ``holds`` iff ``value`` meets ``threshold`` (``None``: not
    decided); ``kind`` ``"certified"``, ``"observed"``, ``"estimated"`` (can only refute) or
    ``"exact"``; ``tex`` the statement with ``$...$`` TeX."""

    name: str
    tex: str
    value: float | None
    threshold: float
    holds: bool | None
    kind: str = "exact"
    note: str = ""

    @property
    def text(self) -> str:
        return plain(self.tex)

    def to_dict(self) -> dict:
        v = self.value
        return {**dataclasses.asdict(self), "text": self.text,
                "value": None if v is None or not math.isfinite(v) else float(v),
                "holds": None if self.holds is None else bool(self.holds)}


@dataclasses.dataclass(frozen=True)
class Contraction:
    """``Phi_{t+1} <= (1 - rate_t) Phi_t`` at the ``steps`` with ``Phi_t > LOSS_FLOOR Phi_0``:
    ``excess = Phi_{t+1}/Phi_t - (1 - rate_t)``, ``violations`` above ``tolerance``."""

    steps: np.ndarray
    excess: np.ndarray
    tolerance: float
    checked_steps: int
    violations: int
    max_excess: float

    @property
    def holds(self) -> bool:
        """At least one step was checked and none violated the bound."""
        return self.checked_steps > 0 and self.violations == 0


def contraction_check(loss, rate, *, tol: float = FLOAT_TOL, floor: float = LOSS_FLOOR) -> Contraction:
    """The :class:`Contraction` of ``Phi_0 .. Phi_T`` for ``rate = mu alpha`` (or one per step)."""
    loss = np.asarray(loss, dtype=np.float64)
    T = max(len(loss) - 1, 0)
    rate = np.broadcast_to(np.asarray(rate, dtype=np.float64), (T,))
    live = np.nonzero(loss[:T] > floor * loss[0])[0] if T else np.zeros(0, dtype=int)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = loss[live + 1] / loss[live] - (1 - rate[live])
    return Contraction(steps=live, excess=excess, tolerance=float(tol), checked_steps=int(len(live)),
                       violations=int((excess > float(tol)).sum()),
                       max_excess=float(excess.max()) if len(excess) else math.nan)
