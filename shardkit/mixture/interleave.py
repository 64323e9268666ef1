"""Weighted interleaving per position: which source the n-th sample of a stream comes from, in O(1).

**Per position (`Interleave`).** The c-th sample of source j sits in [⌊c·D/a_j⌋, ⌈(c+1)·D/a_j⌉), found by
earliest-deadline-first over one period of D positions (Hall's condition holds, EDF is optimal for unit
jobs), so every prefix is within 1 and every window of L consecutive positions within 2 — within 1 for
every window is impossible for k ≥ 3 (a balanced word; Fraenkel), which is why batches are planned above.

The quota order it builds is also the row order inside a batch (`batch_interleave`).
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..order._checks import index_array, nonneg_int
from .weights import normalize_weights

_MAX_POSITION = 1 << 62

__all__ = [
    "Interleave",
    "quota_order",
]

_BLOCK = 64  # counts_before keeps per-source totals every _BLOCK positions of the period


def quota_order(units: Sequence[int]) -> np.ndarray:
    """One period of the quota order: source j's c-th sample lands in [⌊c·D/a_j⌋, ⌈(c+1)·D/a_j⌉).

    Earliest deadline first over those windows, ties to the lower source index. Hall's condition holds
    (any L consecutive positions must hold at most Σ_j w_j·L = L samples whose windows lie inside them) and
    EDF is optimal for unit jobs, so every deadline is met — the assertion below documents that.
    """
    period, k = sum(units), len(units)
    out = np.empty(period, dtype=np.int32 if k > 32767 else np.int16)
    count = [0] * k
    ready: list[tuple[int, int]] = []  # (deadline, source) of each source's next sample, once released
    waiting = [(0, j) for j in range(k)]  # (release, source)
    push, pop = heapq.heappush, heapq.heappop
    for n in range(period):
        while waiting and waiting[0][0] <= n:
            _, j = pop(waiting)
            push(ready, (-(-(count[j] + 1) * period // units[j]), j))
        deadline, j = pop(ready)
        assert deadline > n, "quota order missed a deadline"  # impossible, see the docstring
        out[n] = j
        count[j] += 1
        if count[j] < units[j]:
            push(waiting, (count[j] * period // units[j], j))
    return out


@lru_cache(maxsize=64)
def _tables(units: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source per position, its counter within the period, per-source totals before every block)."""
    source = quota_order(units)
    order = np.argsort(source, kind="stable")
    starts = np.concatenate([[0], np.cumsum(units)[:-1]])
    counter = np.empty(len(source), dtype=np.int32)
    counter[order] = np.arange(len(source)) - np.repeat(starts, units)
    k, blocks_in = len(units), len(source) // _BLOCK + 1  # block b starts at position b·_BLOCK
    per_block = np.bincount(np.arange(len(source)) // _BLOCK * k + source, minlength=blocks_in * k)
    blocks = np.zeros((blocks_in, k), dtype=np.int64)
    blocks[1:] = per_block.reshape(blocks_in, k).cumsum(axis=0)[:-1]
    for table in (source, counter, blocks):
        table.setflags(write=False)
    return source, counter, blocks


class Interleave:
    """Which source each position of a stream comes from, and that source's running sample counter.

    The position-level order, for consumers that need one; a phase plans its batches with
    `BatchInterleave`, which keeps every batch within 1 (this order keeps windows within 2).

    After any n positions source j has given ⌊w_j·n⌋ or ⌈w_j·n⌉ samples (|count − w_j·n| < 1), so any L
    consecutive positions — a batch, a rank's slice — hold w_j·L ± (less than 2) of source j's samples.
    """

    def __init__(self, weights: Iterable[Any]) -> None:
        self.weights: tuple[Fraction, ...] = normalize_weights(weights)
        self.denominator = math.lcm(*(w.denominator for w in self.weights))  # the period of the order
        self.units: tuple[int, ...] = tuple(int(w * self.denominator) for w in self.weights)
        self._source, self._counter, self._blocks = _tables(self.units)
        self._units = np.array(self.units, dtype=np.int64)

    @property
    def num_sources(self) -> int:
        return len(self.weights)

    def counts_before(self, n: int) -> np.ndarray:
        """Samples each source contributes among positions [0, n): exact, O(k + 64), for any n ≤ 2**62."""
        n = nonneg_int("position", n)
        if n > _MAX_POSITION:
            raise ConfigError(f"position {n} is beyond the supported range [0, 2**62]")
        q, r = divmod(n, self.denominator)
        b = r // _BLOCK
        tail = np.bincount(self._source[b * _BLOCK:r], minlength=self.num_sources)
        return q * self._units + self._blocks[b] + tail

    def assign(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """(source, counter) per position: counter = how many earlier positions went to the same source.

        O(1) per position, vectorised; `counter[i] == counts_before(p)[source[i]]` for p = positions[i].
        """
        pos = index_array(positions, _MAX_POSITION + 1, "position")
        q, r = np.divmod(pos, self.denominator)
        source = self._source[r].astype(np.int64)
        return source, q * self._units[source] + self._counter[r]

    def __repr__(self) -> str:
        return f"Interleave(weights={[str(w) for w in self.weights]})"
