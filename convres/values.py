"""One coercion per kind of scalar argument: Python, NumPy and 0-d real PyTorch numbers alike; a bool,
complex, string, NaN or value out of range is refused naming the argument, the range and the value."""

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import numpy as np
import torch

#: Largest seed accepted (``torch.Generator.manual_seed`` takes a 64-bit integer).
MAX_SEED = 2**63 - 1


def _scalar(v):
    """``v`` as a plain Python number when it is a 0-d dense tensor with a value or a 0-d array."""
    dense = isinstance(v, torch.Tensor) and v.layout == torch.strided and v.device.type != "meta"
    if dense and v.dim() == 0 or isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    return v


def is_int(v) -> bool:
    """Whether ``v`` is an integer (Python, NumPy or an integer 0-d tensor), not a bool."""
    v = _scalar(v)
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def is_real(v) -> bool:
    """Whether ``v`` is a real number (Python, NumPy or a real 0-d tensor), not a bool."""
    v = _scalar(v)
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _range(minimum, maximum, above: bool = False) -> str:
    low = "" if minimum is None else f" {'>' if above else '>='} {minimum}"
    return low + ("" if maximum is None else f"{' and' if low else ''} <= {maximum}")


def as_int(name: str, v, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``v`` as an ``int`` in ``[minimum, maximum]``; a ValueError naming ``name`` otherwise."""
    w = _scalar(v)
    if not is_int(w) or (minimum is not None and w < minimum) or (maximum is not None and w > maximum):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {v!r}.")
    return int(w)


def as_real(name: str, v, *, minimum: float | None = None, maximum: float | None = None,
            above: bool = False, finite: bool = True) -> float:
    """``v`` as a ``float``, finite (unless ``finite=False``), ``>= minimum`` (``> minimum`` with
    ``above=True``) and ``<= maximum``; a ValueError naming ``name`` otherwise."""
    w = _scalar(v)
    what = f"a {'finite ' if finite else ''}number{_range(minimum, maximum, above)}"
    if not is_real(w):
        raise TypeError(f"{name} must be {what}, got {type(v).__name__} {v!r}.")
    w = float(w)
    low = minimum is not None and (w <= minimum if above else w < minimum)
    if math.isnan(w) or (finite and math.isinf(w)) or low or (maximum is not None and w > maximum):
        raise ValueError(f"{name} must be {what}, got {v!r}.")
    return w


def as_float_dtype(dtype) -> torch.dtype:
    """``dtype`` if it is a real floating-point torch dtype, else a TypeError."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.is_complex:
        raise TypeError(f"dtype must be a real floating-point torch dtype (torch.float64 or "
                        f"torch.float32), got {dtype!r}.")
    return dtype


def positive_int(s: dict, key: str) -> int:
    return as_int(f"setting {key!r}", s.get(key), minimum=1)


def as_seed(name: str, v) -> int:
    return as_int(name, v, minimum=0, maximum=MAX_SEED)


def json_safe(x):
    """``x`` with NumPy and PyTorch scalars and arrays turned into Python numbers and lists, keys into
    strings and every non-finite float into ``None``: what JSON (and the book's tables) can hold."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "tolist"):
        return json_safe(x.tolist())
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _nonempty(each: Callable[[str, Any], Any]) -> Callable[[str, Any], list]:
    """The check of a non-empty list whose items pass ``each`` (item ``i`` named ``name[i]``)."""
    def check(name: str, v) -> list:
        try:
            items = [] if isinstance(v, str | bytes | Mapping) else list(v)
        except TypeError:
            items = []
        if not items:
            raise ValueError(f"{name} must be a non-empty list, got {v!r:.60}.")
        return [each(f"{name}[{i}]", x) for i, x in enumerate(items)]
    return check


#: The argument policy of the public functions (:func:`checked`): a check per kind of argument, each
#: returning the value checked; a bad value is a ValueError or TypeError naming the argument.
KINDS: dict[str, Callable[[str, Any], Any]] = {
    "size": lambda name, v: as_int(name, v, minimum=1),
    "seed": as_seed,
    "index": lambda name, v: as_int(name, v, minimum=0),
    "beta": lambda name, v: as_real(name, v, minimum=0.0),
    "positive": lambda name, v: as_real(name, v, minimum=0.0, above=True),
}
KINDS.update({f"{kind}s": _nonempty(KINDS[kind]) for kind in ("size", "seed", "beta", "positive")})


_F = TypeVar("_F", bound=Callable[..., Any])


def checked(**kinds: str | Callable[[str, Any], Any]) -> Callable[[_F], _F]:
    """A decorator: each argument named in ``kinds`` passes its check (a name of :data:`KINDS`, or a
    ``check(name, value) -> value``) before the call, and the call gets the checked value."""
    def wrap(f: _F) -> _F:
        signature = inspect.signature(f)

        @functools.wraps(f)
        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            for name, kind in kinds.items():
                if name in bound.arguments:
                    check = KINDS[kind] if isinstance(kind, str) else kind
                    bound.arguments[name] = check(name, bound.arguments[name])
            return f(*bound.args, **bound.kwargs)
        return cast(_F, call)
    return wrap
