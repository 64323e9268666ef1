"""Reusable row buffers: batches are views of slabs, and a slab is refilled only when no view is alive.

A fresh allocation costs a page fault per 4 KiB on first write — at small batches that is most of the
copy time. Recycling slabs whose views are all gone keeps the loader at memcpy speed without ever
overwriting a batch the caller still holds (a kept batch keeps its slab out of the pool).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["SlabPool"]


class SlabPool:
    def __init__(self, max_free: int = 4) -> None:
        self._slabs: list[np.ndarray] = []
        self.max_free = max_free

    def take(self, rows: int, width: int, dtype: np.dtype) -> np.ndarray:
        for i in range(len(self._slabs)):
            # 2 references = the pool's list + getrefcount's own argument: no view of it is alive
            if sys.getrefcount(self._slabs[i]) <= 2:
                slab = self._slabs[i]
                if slab.shape[0] >= rows and slab.shape[1] == width and slab.dtype == dtype:
                    self._slabs.append(self._slabs.pop(i))
                    return slab[:rows]
        slab = np.empty((rows, width), dtype=dtype)
        self._slabs.append(slab)
        if len(self._slabs) > self.max_free:
            self._slabs.pop(0)  # forget the oldest (it lives on while its views do)
        return slab
