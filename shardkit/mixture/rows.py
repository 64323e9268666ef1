"""The rows of one chunk of batches (one phase): sample ids, where each window lives, and the copy.

Everything per row is computed once per chunk with array operations — per source one `SampleOrder` call
and one `locate` — and the rows are then copied slab by slab, one gather per slab over all sources
(`gather.AddressSpace`), exactly like the single-source loader copies one dataset. Python work per row
happens only for the rare windows that cross a shard boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..batching import BatchFields, assemble
from ..order import ShuffleMode
from .assign import Assigner
from .cursor import Cursor
from .gather import AddressSpace
from .sources import SourceStream

__all__ = ["ChunkRows"]


class _DocRows:
    """Duck-types WindowSource for `assemble`: row r's documents come from its own source."""

    def __init__(self, seq_len: int, streams: list[SourceStream], sample_ids: np.ndarray) -> None:
        self.seq_len, self._streams, self._ids = seq_len, streams, sample_ids.tolist()

    def doc_starts(self, row: int) -> np.ndarray:
        return self._streams[row].window.doc_starts(self._ids[row])


class ChunkRows:
    """Phase positions [lo, hi) of each of `batches` (global indices, one phase), concatenated."""

    def __init__(self, assign: Assigner, cursor: Cursor, space: AddressSpace | None,
                 streams: dict[tuple[int, int], SourceStream], dtype: np.dtype, phase: int, batches: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> None:
        self.length = cursor.plan.phases[phase].seq_len
        self.width = self.length + 1
        self.dtype = dtype
        self.src, counter = assign.rows(phase, batches, lo, hi)
        pos = cursor.positions(phase, self.src, counter)
        self.ids = np.empty_like(pos)
        self.shard = np.empty_like(pos)
        self.local = np.empty_like(pos)
        view = space.view(self.width) if space is not None else None
        self.view = view[0] if view is not None else None
        self.rows = np.empty_like(pos) if view is not None else None
        self.slow = np.zeros(pos.size, dtype=bool)
        self.streams: dict[int, SourceStream] = {}
        self.hints: list[tuple[SourceStream, np.ndarray, np.ndarray]] = []  # (stream, epochs, positions)
        present = np.unique(self.src).tolist()
        for j in present:
            stream = self.streams[j] = streams[(j, self.length)]
            sel = np.flatnonzero(self.src == j) if len(present) > 1 else slice(None)
            sid, epochs, within = stream.sample_ids(pos[sel])
            self.hints.append((stream, epochs, within))
            shard, local = stream.window.locate(sid)
            self.ids[sel], self.shard[sel], self.local[sel] = sid, shard, local
            if view is not None:
                rows, inside = space.rows(j, shard, local, self.width)  # type: ignore[union-attr]
                self.rows[sel] = np.where(inside, rows, view[1])  # type: ignore[index]
                self.slow[sel] = ~inside
        self.any_slow = bool(self.slow.any())  # most chunks have none: no per-slab search then

    def fill(self, a: int, z: int) -> np.ndarray:
        """Token rows [a, z) of the chunk: one gather, then the rare windows that cross a shard boundary."""
        if self.view is not None:
            slab = self.view[self.rows[a:z]]  # type: ignore[index]
            for r in (np.flatnonzero(self.slow[a:z]).tolist() if self.any_slow else ()):
                self._fill_one(a + r, slab[r:r + 1])
            return slab
        slab = np.empty((z - a, self.width), dtype=self.dtype)  # sources of different dtypes: per source
        src = self.src[a:z]
        for j, stream in self.streams.items():
            sel = np.flatnonzero(src == j)
            if sel.size:
                part = np.empty((sel.size, self.width), dtype=stream.window.dataset.dtype)
                stream.window.fill_located(self.shard[a:z][sel], self.local[a:z][sel], part)
                slab[sel] = part
        return slab

    def _fill_one(self, row: int, out: np.ndarray) -> None:
        stream = self.streams[int(self.src[row])]
        stream.window.fill_located(self.shard[row:row + 1], self.local[row:row + 1], out)

    def assemble(self, tokens: np.ndarray, rows: slice, fields: BatchFields) -> dict[str, Any]:
        """A batch dict for chunk rows `rows` (whose tokens are `tokens`), with the per-row `source`."""
        src, ids = self.src[rows], self.ids[rows]
        if fields.needs_docs:
            docs = _DocRows(self.length, [self.streams[j] for j in src.tolist()], ids)
            out = assemble(tokens, np.arange(src.size), docs, fields)  # type: ignore[arg-type]
        else:
            out = assemble(tokens, ids, self.streams[int(src[0])].window, fields)
        out["source"] = src
        return out

    def hint(self, entered: dict[tuple[int, int], tuple[int, int]]) -> None:
        """Readahead for the groups the chunk enters (its first and last per source) and the next ones;
        `entered` remembers each stream's current (epoch, group) across chunks."""
        for stream, epochs, within in self.hints:
            if not stream.readahead.enabled or stream.order.mode is ShuffleMode.FULL:
                continue
            order, key = stream.order, (stream.index, stream.seq_len)
            for x in sorted({0, within.size - 1}):
                e, g = int(epochs[x]), int(order.group_of_position(within[x:x + 1])[0])
                if entered.get(key) == (e, g):
                    continue
                entered[key] = (e, g)
                stream.readahead.enter_group(
                    e, g, order.blocks_of_group(e, g), order.blocks_of_group(*order.group_after(e, g)),
                    later=lambda k, o=order, e=e, g=g: o.blocks_of_group(*o.group_after(e, g, k)))
