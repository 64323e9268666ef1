"""Argument checks shared by the order modules: one wording for every ConfigError they raise."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["as_int", "positive_int", "nonneg_int", "index_array"]


def as_int(name: str, value: Any) -> int:
    """`value` as a Python int (NumPy integers accepted); bools and floats are refused, not truncated."""
    if isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def positive_int(name: str, value: Any) -> int:
    v = as_int(name, value)
    if v < 1:
        raise ConfigError(f"{name} must be a positive integer, got {v}")
    return v


def nonneg_int(name: str, value: Any) -> int:
    v = as_int(name, value)
    if v < 0:
        raise ConfigError(f"{name} must be ≥ 0, got {v}")
    return v


def index_array(values: Any, stop: int | None, what: str) -> np.ndarray:
    """`values` as an int64 array, every element in [0, stop) (or ≥ 0 when `stop` is None)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise ConfigError(f"{what} must be integers, got an array of dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ConfigError(f"{what} {int(arr.max())} does not fit in int64")
    arr = arr.astype(np.int64, copy=False)
    if arr.size:
        lo = int(arr.min())
        if lo < 0:
            raise ConfigError(f"{what} must be ≥ 0, got {lo}")
        if stop is not None:
            hi = int(arr.max())
            if hi >= stop:
                raise ConfigError(f"{what} {hi} is out of range: expected values in [0, {stop})")
    return arr
