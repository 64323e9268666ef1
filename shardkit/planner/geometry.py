"""How many bytes a node reads from storage per row of a source: page geometry of overlapping windows.

A sample of `L` tokens is the window of `L + 1` tokens starting at token `i·L` of its shard, so windows
overlap by one token and a 4 KiB page is covered by one, two or more of them. A node whose ranks read a
fraction `f` of a shuffle group's samples (spread over the group by the shuffle) reads a page from storage
when any sample covering it is one of its own: with `k` samples covering the page, with probability
`1 − (1 − f)^k`. The engine reads no more than that: several ranks hint only their own rows' pages and map
the shards `MADV_RANDOM` (no kernel read-around); one rank reads whole groups (`f = 1`: every page once).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

PAGE = 4096

__all__ = ["PAGE", "bytes_per_sample", "coverage"]


@lru_cache(maxsize=256)
def coverage(seq_len: int, itemsize: int) -> np.ndarray:
    """For each page of one period of the layout: how many windows cover it (int64 array)."""
    stride, width = seq_len * itemsize, (seq_len + 1) * itemsize
    period = stride * PAGE // math.gcd(stride, PAGE)  # the layout repeats every `period` bytes
    p = np.arange(period // PAGE, dtype=np.int64)
    last = -(-(p + 1) * PAGE // stride) - 1  # the last window starting before the page ends
    first = (p * PAGE - width) // stride + 1  # the first window ending after the page starts
    out = last - first + 1
    out.setflags(write=False)
    return out


def bytes_per_sample(seq_len: int, itemsize: int, share: float) -> float:
    """Expected storage bytes a node reads per sample of the source's stream (all ranks' samples counted),
    when its ranks read a fraction `share` of every group: stride × mean over pages of 1 − (1 − share)^k."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    k = coverage(seq_len, itemsize)
    touched = 1.0 - np.power(1.0 - share, k.astype(np.float64))
    return float(seq_len * itemsize * touched.mean())
