"""The blend's sample-to-dataset assignment, built lazily in chunks from checkpointed counts.

megatron-core builds `dataset_index` / `dataset_sample_index` for the whole blend before the first sample
(helpers.cpp, in C++). The greedy choice for sample `i` depends only on each dataset's count before `i`, so
the assignment of chunk `c` (samples `[c·C, (c+1)·C)`) is a pure function of the counts at its start. A
rank computes the chunks up to the samples it reads, from the nearest checkpoint: the counts at the start
of every chunk it has passed are kept in memory, and every `CHECKPOINT_STRIDE` samples they are stored in
the index cache, so a resume at consumed sample `n` replays at most one stride. A complete assignment in the
cache (`BlendOrder.arrays`) is used directly.

A vectorised speculative evaluation (guess a block's counts from closed forms, verify every sample with
Megatron's float formula, accept up to the first mismatch) was measured and rejected: the guesses tried
(`ceil(w·(i−1))`, largest-remainder apportionment) hold for about ten samples at a time on uneven weights,
which makes it slower than this loop (docs/megatron.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .blend import blend_chunk, check_blend_width
from .cache import IndexCache

__all__ = ["BlendChunks", "CHUNK", "CHECKPOINT_STRIDE"]

CHUNK = 1 << 18  # samples per lazily built chunk (about 0.1 s of the loop)
CHECKPOINT_STRIDE = 1 << 24  # samples between counts stored in the index cache
_KEEP = 4  # chunks kept in memory (a rank reads forward; a few behind cover a batch across a chunk edge)


class BlendChunks:
    """`locate(ids)` of a blend: (dataset, sample within it) per blended sample id, built as far as needed."""

    def __init__(self, normalized: Sequence[float], size: int, cache: IndexCache, depends_on: Mapping[str, object],
                 check: Callable[[np.ndarray], None] | None = None, *, chunk: int = CHUNK,
                 stride: int = CHECKPOINT_STRIDE) -> None:
        check_blend_width(len(normalized))
        if chunk < 1 or stride % chunk:
            raise ValueError(f"the checkpoint stride {stride} must be a multiple of the chunk {chunk}")
        self.chunk_size, self.stride = chunk, stride
        self.weights = [float(w) for w in normalized]
        self.size = size
        self.cache = cache
        self.depends_on = dict(depends_on)
        self.check = check  # called with the counts at the end of each new chunk (room in each dataset)
        self.counts: dict[int, list[int]] = {0: [0] * len(self.weights)}  # chunk → counts at its start
        self.chunks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.built = 0  # chunks computed by this object (tests, metrics)

    def _checkpoint_key(self, sample: int) -> dict[str, object]:
        return {**self.depends_on, "kind": "BlendCounts", "at": sample}

    def _start_counts(self, c: int) -> tuple[int, list[int]]:
        """The latest chunk ≤ c whose start counts are known (memory, then the cache's checkpoints)."""
        known = max(k for k in self.counts if k <= c)
        per = self.stride // self.chunk_size
        for s in range(c // per, known // per, -1):  # stored checkpoints past the one in memory
            found = self.cache.peek(self._checkpoint_key(s * self.stride))
            if found is not None:
                self.counts[s * per] = found["counts"].astype(np.int64).tolist()
                return s * per, self.counts[s * per]
        return known, self.counts[known]

    def chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(dataset_index, dataset_sample_index) of chunk `c`."""
        got = self.chunks.get(c)
        if got is not None:
            self.chunks.move_to_end(c)
            return got
        k, counts = self._start_counts(c)
        per = self.stride // self.chunk_size
        while True:
            start = k * self.chunk_size
            di, dsi, after = blend_chunk(self.weights, start, counts, min(self.chunk_size, self.size - start))
            self.built += 1
            if self.check is not None:
                self.check(np.asarray(after, dtype=np.int64))
            self.counts[k + 1] = after
            if (k + 1) % per == 0:
                self.cache.put(self._checkpoint_key((k + 1) * self.chunk_size), {"counts": np.asarray(after, dtype=np.int64)})
            if k == c:
                break
            k, counts = k + 1, after
        self.chunks[c] = (di, dsi)
        while len(self.chunks) > _KEEP:
            self.chunks.popitem(last=False)
        return di, dsi

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, sample within it) of blended sample ids (any order; each chunk built once per call)."""
        ids = np.asarray(ids, dtype=np.int64)
        d = np.empty(ids.shape, dtype=np.int64)
        j = np.empty(ids.shape, dtype=np.int64)
        which = ids // self.chunk_size
        for c in np.unique(which).tolist():
            sel = which == c
            di, dsi = self.chunk(int(c))
            d[sel] = di[ids[sel] - c * self.chunk_size]
            j[sel] = dsi[ids[sel] - c * self.chunk_size]
        return d, j

    def whole(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole assignment (every chunk, in order)."""
        n = -(-self.size // self.chunk_size)
        parts = [self.chunk(c) for c in range(n)]
        if not parts:
            return np.empty(0, np.int16), np.empty(0, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
