"""Mixture weights as exact rationals: what a recipe's numbers mean, normalised to sum to 1.

**Weights** are exact rationals: a float is the decimal it prints as (0.7 is 7/10), a string may be
"1/3". The common denominator is kept when it is at most 100,000 (every weight written with ≤ 5
decimals, or small fractions); otherwise the weights are rounded (largest remainder) to multiples of
1e-5 and `weights` says which rationals are used.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..order._checks import positive_int

__all__ = [
    "MAX_DENOMINATOR",
    "as_weight",
    "normalize_weights",
    "token_to_sample_weights",
    "WeightLike",
]

MAX_DENOMINATOR = 100_000  # the longest period precomputed; finer weights are rounded to multiples of 1e-5

WeightLike = int | float | str | Fraction | Decimal


def as_weight(value: Any, what: str = "weight") -> Fraction:
    """`value` as an exact positive rational: a float is the decimal it prints as, a string may be "7/10"."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, str, Fraction, Decimal,
                                                                      np.integer, np.floating)):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    try:
        if isinstance(value, (float, np.floating)):
            if not math.isfinite(value):
                raise ValueError
            w = Fraction(repr(float(value)))
        else:
            w = Fraction(value.strip() if isinstance(value, str) else value)
    except (ValueError, ZeroDivisionError, ArithmeticError):
        raise ConfigError(f"{what} must be a finite number such as 0.7 or '7/10', got {value!r}") from None
    if w <= 0:
        raise ConfigError(f"{what} must be > 0, got {value!r}; leave a source out of the mix to exclude it")
    return w


def normalize_weights(weights: Iterable[Any], names: Sequence[str] | None = None) -> tuple[Fraction, ...]:
    """Exact weights summing to 1 on a common denominator ≤ MAX_DENOMINATOR (else rounded to its grid)."""
    ws = list(weights)
    labels = [f"the weight of {n!r}" for n in names] if names is not None else \
        [f"weight {i}" for i in range(len(ws))]
    ws = [as_weight(w, label) for w, label in zip(ws, labels)]
    if not ws:
        raise ConfigError("an interleave needs at least one source")
    total = sum(ws, Fraction(0))
    ws = [w / total for w in ws]
    if math.lcm(*(w.denominator for w in ws)) <= MAX_DENOMINATOR:
        return tuple(ws)
    scaled = [w * MAX_DENOMINATOR for w in ws]  # largest remainder; ties to the lower index
    units = [math.floor(s) for s in scaled]
    if min(units) < 1:
        i = units.index(0)
        raise ConfigError(f"{labels[i]} is {float(ws[i]):.6g} of the mix, below the resolution 1e-5; "
                          "drop the source or give it more weight")
    for i in sorted(range(len(ws)), key=lambda i: (-(scaled[i] - units[i]), i))[:MAX_DENOMINATOR - sum(units)]:
        units[i] += 1
    return tuple(Fraction(u, MAX_DENOMINATOR) for u in units)


def token_to_sample_weights(token_weights: Mapping[str, Any], seq_len: int | Mapping[str, int]) -> dict[str, Fraction]:
    """Sample shares from token shares: w_j ∝ t_j / L_j, normalized.

    Inside a phase every source is cut at the phase's one `seq_len`, so a sample holds the same number of
    tokens whatever its source and token weights *are* sample weights (the result equals the input). The
    conversion matters only for callers that mix different sample lengths.
    """
    lens = seq_len if isinstance(seq_len, Mapping) else {name: seq_len for name in token_weights}
    raw = {name: as_weight(w, f"token weight of {name!r}") / positive_int(f"seq_len of {name!r}", lens[name])
           for name, w in token_weights.items()}
    total = sum(raw.values(), Fraction(0))
    return {name: w / total for name, w in raw.items()}


# -- the order -------------------------------------------------------------------------------------------------
