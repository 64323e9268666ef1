"""Compiled loops for the per-segment work of packed rows, when numba is installed (`pip install
'shardkit[fast]'`); callers fall back to their NumPy formulation when `row_boundaries()` is None.

A stored packed batch's `cu_seqlens` is a running sum of its rows' segment lengths, and its rows are random
rows of the store. NumPy needs four passes over the segments of a run of batches and scratch arrays for
them (an index built by a running sum, a gather, a second running sum: `packed_rows.item_boundaries`); one
compiled loop reads each row's segments once and writes each boundary once, about 0.25 ns per segment
against 1.3–2 ns (docs/benchmarks.md). numba is optional because it bounds the NumPy versions it supports:
a library must not hold its users' NumPy back for a speed-up.

numba caches the compiled loop on disk (beside this module, or in its user-wide cache when that is not
writable): a process pays about 0.4 s at its first stored batch, 0.7 s on a machine's first run.
`SHARDKIT_NO_NUMBA=1` turns the kernels off (the NumPy path, e.g. to compare the two).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np

__all__ = ["row_boundaries"]

RowBoundaries = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                         tuple[np.ndarray, np.ndarray, np.ndarray]]


def _row_boundaries(seg: np.ndarray, s0: np.ndarray, counts: np.ndarray, seg_max: np.ndarray,
                    bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, ptr, longest) for the items of rows between consecutive `bounds`, with `item_boundaries`' inputs
    (row r's segment lengths seg[s0[r]:s0[r] + counts[r]], its longest seg_max[r]): item k's cu_seqlens is
    x[ptr[k]:ptr[k + 1]] (0, then the running sum of its rows' segment lengths), its max_seqlen longest[k]."""
    n = bounds.size - 1
    total = n
    for r in range(bounds[0], bounds[n]):
        total += counts[r]
    x = np.empty(total, dtype=np.int32)
    ptr = np.empty(n + 1, dtype=np.int64)
    longest = np.empty(n, dtype=np.int64)
    p = 0
    for k in range(n):
        ptr[k] = p
        x[p] = 0
        p += 1
        acc = np.int32(0)  # an item's boundaries are int32, as the NumPy path's (and flash-attn's)
        m = np.int32(0)
        for r in range(bounds[k], bounds[k + 1]):
            lo = s0[r]
            c = counts[r]
            # through slices, not offsets into the whole arrays: the loop then compiles to about half the time
            src = seg[lo:lo + c]
            dst = x[p:p + c]
            for s in range(c):
                acc += src[s]
                dst[s] = acc
            p += c
            m = max(m, seg_max[r])
        longest[k] = m
    ptr[n] = p
    return x, ptr, longest


@functools.cache
def row_boundaries() -> RowBoundaries | None:
    """`_row_boundaries` compiled, or None without numba (or with `SHARDKIT_NO_NUMBA=1`). numba is imported
    here, at the first packed batch that needs it, never by `import shardkit`."""
    if os.environ.get("SHARDKIT_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(cache=True, nogil=True, boundscheck=False)(_row_boundaries)
