"""megatron-core's split string ("969,30,1") and the document range each split takes from a prefix."""

from __future__ import annotations

import re
from enum import Enum

import numpy as np

from ..errors import ConfigError

__all__ = ["Split", "split_matrix", "split_documents"]


class Split(Enum):
    """megatron.core.datasets.utils.Split, by the same values."""

    train = 0
    valid = 1
    test = 2


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """`parse_and_normalize_split` + `convert_split_vector_to_split_matrix`: book-ends of each split."""
    parts = [float(x) for x in re.findall(r"[.0-9]+", split)]
    if len(parts) > 3 or not parts or sum(parts) <= 0:
        raise ConfigError(f"split {split!r}: expected up to three non-negative ratios such as '969,30,1'")
    parts += [0.0] * (3 - len(parts))
    vec = (np.asarray(parts, dtype=np.float64) / np.sum(np.asarray(parts, dtype=np.float64))).tolist()
    ends = [0]
    for v in vec:
        ends.append(ends[-1] + v)
    out: list[tuple[float, float] | None] = []
    for lo, hi in zip(ends[:-1], ends[1:], strict=True):
        out.append(None if hi <= lo else (lo, hi))
    return out


def split_documents(num_sequences: int, bookend: tuple[float, float]) -> tuple[int, int]:
    """The [begin, end) sequence ids of a prefix that a split exposes (Python's round, as Megatron)."""
    beg = int(round(bookend[0] * float(num_sequences)))
    end = int(round(bookend[1] * float(num_sequences)))
    return beg, end
