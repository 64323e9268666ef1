"""Copy the windows of a slab of rows into one new array: one C-level gather per slab, never per sample.

Rows of a slab may come from many shards of several sources. Their mappings (held from the `Mapper` for
the duration of the copy) are addressed as one read-only strided view whose row `r` is the window starting
`r` items after the lowest mapping, so the window at token `t` of shard `g` is row `offset[g] + t` and the
whole slab is `view[rows]`: one fancy-index, one copy. A slab of one shard uses that shard alone.

**The invariant that makes the spanning view safe:** it also covers the gaps between mappings, so only
rows whose whole window lies inside a shard that is mapped and held for the copy are ever gathered
through it; a window that runs past its shard's end gets a placeholder row and is then assembled from the
two shards. A slab touching more shards than the mapping budget is copied in parts of at most that many
shards; sources of different token dtypes are copied per dtype and cast into the slab's dtype.

Remote sources: before a copy the source's `ReadGate` waits for (and pins) the cache blocks under it — a
hole in a sparse cache file would read as zeros, silently wrong data.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import IntegrityError
from .mapper import Mapper, Mapping
from .plan import Rows

__all__ = ["Gather"]

# a shard's size (one fstat) is checked at most this long before any copy from its mapping: a truncated file
# raises instead of SIGBUS unless it shrinks within this window; slabs copied back to back (a fast consumer,
# several sources sharing each slab) share one check per shard
CHECK_VALID_NS = 200_000
# a chunk of at most this many shards checks each of them before every slab (a check of a shard the slab does
# not read is harmless) instead of counting which shards each slab reads
CHECK_ALL_SHARDS = 8


class Gather:
    """Slabs of `Rows` → token arrays of `dtype` (the sources' common dtype).

    `chunk()` prepares a whole planned chunk at once when it can (local sources of one dtype whose shards fit
    in half the mapping budget — every block-shuffled chunk of a 1 GiB-shard corpus): the shards are held
    for the chunk, the view and every row's index in it are computed with one vectorised pass, and a slab is
    then one bounds check per shard it touches plus one copy. Otherwise each slab is prepared on its own.
    """

    def __init__(self, mapper: Mapper, dtype: np.dtype, gates: dict[tuple[int, int], Any]) -> None:
        self.mapper = mapper
        self.dtype = np.dtype(dtype)
        self.gates = gates  # (source, seq_len) → ReadGate, remote sources only
        self._offset = np.zeros(mapper.num_shards, dtype=np.int64)  # scratch: item offset of each held shard
        self._dtypes = {d.dtype.str for d in mapper.datasets}
        # (view, base address, end address, mapper evictions when built, width): see _view
        self._span: tuple[np.ndarray, int, int, int, int] | None = None

    def slab(self, rows: Rows, a: int, z: int, width: int) -> np.ndarray:
        """Token rows [a, z) of `rows`, a new (z − a, width) array."""
        gid, local, inside = rows.gid[a:z], rows.local[a:z], rows.inside[a:z]
        if self.gates:
            self._wait(rows, a, z, width)
        if len(self._dtypes) > 1:
            return self._by_dtype(gid, local, inside, width)
        return self._copy(gid, local, inside, width)

    def forget(self) -> None:
        """Drop the cached spanning view (it keeps its lowest mapping alive)."""
        self._span = None

    def chunk(self, rows: Rows, slab_bounds: list[int], width: int) -> _Chunk | None:
        """The chunk's slabs prepared at once, or None when they must be gathered one by one (`slab`)."""
        if self.gates or len(self._dtypes) > 1 or not rows.size:
            return None
        lo, hi = int(rows.gid.min()), int(rows.gid.max())
        if lo == hi:
            shards = [lo]
        elif hi - lo < 4 * rows.size:  # a dense range of shard ids: count, do not sort
            shards = (np.flatnonzero(np.bincount(rows.gid - lo)) + lo).tolist()
        else:
            shards = np.unique(rows.gid).tolist()
        k = len(shards)
        if k > max(1, self.mapper.budget // 2 - 1):
            return None
        held = self.mapper.hold(shards)
        if k == 1:
            view, index, present = held[0].rows(width), rows.local, None
        else:
            view, index = self._view(shards, held, rows.gid, rows.local, width)
            if k <= CHECK_ALL_SHARDS:  # each slab checks all of them (most do touch all): nothing to count
                present = None
            else:  # which shards each slab touches: one bincount over (slab, shard) pairs, no sort
                slab_of = np.repeat(np.arange(len(slab_bounds) - 1), np.diff(slab_bounds))
                pairs = slab_of * k + np.searchsorted(np.asarray(shards), rows.gid)
                present = np.bincount(pairs, minlength=(len(slab_bounds) - 1) * k).reshape(-1, k) > 0
        crossing = None if rows.inside.all() else ~rows.inside
        return _Chunk(self, shards, held, present, view, index, crossing, rows, width)

    def _wait(self, rows: Rows, a: int, z: int, width: int) -> None:
        src = rows.src[a:z]
        for j, stream in rows.streams.items():
            gate = self.gates.get((j, width - 1))
            if gate is None:
                continue
            sel = slice(None) if len(rows.streams) == 1 else np.flatnonzero(src == j)
            try:
                gate.located(rows.gid[a:z][sel] - stream.windows.gid_base, rows.local[a:z][sel])
            except IntegrityError as e:
                e.source = j  # which source's block: a loader that skips damaged blocks replaces its rows
                raise

    def _by_dtype(self, gid: np.ndarray, local: np.ndarray, inside: np.ndarray, width: int) -> np.ndarray:
        out = np.empty((gid.size, width), dtype=self.dtype)
        ds = self.mapper._where[gid]
        for d in np.unique(ds).tolist():
            sel = np.flatnonzero(ds == d)
            out[sel] = self._copy(gid[sel], local[sel], inside[sel], width)
        return out

    def _copy(self, gid: np.ndarray, local: np.ndarray, inside: np.ndarray, width: int) -> np.ndarray:
        shards = sorted(set(gid.tolist())) if gid.size < 4096 else np.unique(gid).tolist()
        room = max(1, self.mapper.budget - 2)  # a window crossing into the next shard maps one more
        if len(shards) <= room:
            return self._gather(shards, gid, local, inside, width)
        out = np.empty((gid.size, width), dtype=self.mapper.shard(int(gid[0])).dtype)
        order = np.argsort(gid, kind="stable")
        ranks = np.searchsorted(np.asarray(shards), gid[order])  # which distinct shard each sorted row reads
        for lo in range(0, len(shards), room):
            part = order[(ranks >= lo) & (ranks < lo + room)]
            out[part] = self._gather(shards[lo:lo + room], gid[part], local[part], inside[part], width)
        return out

    def _gather(self, shards: list[int], gid: np.ndarray, local: np.ndarray, inside: np.ndarray,
                width: int) -> np.ndarray:
        held = self.mapper.hold(shards)  # mapped, and kept mapped until the copy is done
        for g, m in zip(shards, held):
            m.check_intact(self.mapper.shard(g))  # one fstat: a truncated file raises instead of SIGBUS
        crossing = [] if inside.all() else np.flatnonzero(~inside).tolist()
        if len(crossing) == gid.size:
            out = np.empty((gid.size, width), dtype=held[0].tokens.dtype)
        else:
            view, rows = self._view(shards, held, gid, local, width)
            if crossing:  # any row inside a shard stands in until the window is assembled below
                rows[crossing] = rows[int(np.argmax(inside))]
            out = view[rows]
        for j in crossing:
            self.read_across(int(gid[j]), int(local[j]), out[j])
        return out

    def _view(self, shards: list[int], held: list[Mapping], gid: np.ndarray, local: np.ndarray, width: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """(a view whose row r is the window starting r items after its base, each row's index in it)."""
        if len(held) == 1:
            return held[0].rows(width), local.copy()
        item = held[0].tokens.itemsize
        first = min(m.address for m in held if m.tokens.size)
        end = max(m.address + m.tokens.nbytes for m in held)
        span = self._span
        # the last spanning view is reused while no mapping was released since and this slab's lie inside it
        if span is None or span[3] != self.mapper.evictions or span[4] != width or first < span[1] or end > span[2]:
            lowest = next(m for m in held if m.tokens.size and m.address == first)
            n = max(1, (end - first) // item - width + 1)
            view = np.lib.stride_tricks.as_strided(lowest.tokens, shape=(n, width), strides=(item, item),
                                                   writeable=False)
            span = self._span = (view, first, end, self.mapper.evictions, width)
        base = span[1]
        # mappings are page-aligned, so every shard's first token is a whole number of items from the base
        self._offset[shards] = [(m.address - base) // item for m in held]
        rows = self._offset[gid]
        rows += local
        return span[0], rows

    def read_across(self, g: int, lo: int, out: np.ndarray) -> None:
        """A window that runs past the end of shard g, assembled from the shards after it (same dataset)."""
        at = 0
        while at < out.size:
            m = self.mapper.tokens(g)
            m.check_intact(self.mapper.shard(g))
            n = min(out.size - at, m.tokens.size - lo)
            if n > 0:
                out[at:at + n] = m.tokens[lo:lo + n]
            at, g, lo = at + max(n, 0), g + 1, 0


class _Chunk:
    """A chunk's slabs with the shards held, the view built and every row's index in it computed."""

    def __init__(self, gather: Gather, shards: list[int], held: list[Mapping], present: np.ndarray | None,
                 view: np.ndarray, index: np.ndarray, crossing: np.ndarray | None, rows: Rows, width: int) -> None:
        self.gather, self.held, self.view, self.rows, self.width = gather, held, view, rows, width
        self.checks = [(m, gather.mapper.shard(g)) for m, g in zip(held, shards)]
        # the shards every slab checks (one shard, or few enough to check them all); else per slab, a bit mask
        # of the shards it touches, each mask's list made once per chunk (most slabs touch the same few)
        self._every = list(range(len(shards))) if present is None else None
        if self._every is None and len(shards) <= 62:
            self.masks = (present.astype(np.int64) << np.arange(len(shards), dtype=np.int64)).sum(axis=1).tolist()
        else:
            self.masks = None
        self._by_mask: dict[int, list[int]] = {}  # mask → the shards (positions in `checks`) it touches
        self._checked_at = [-CHECK_VALID_NS - 1] * len(shards)  # monotonic ns of each shard's last size check
        self.present = present
        self.index = index
        self.crossing = crossing if crossing is not None and crossing.any() else None
        self._next = 0

    def slab(self, a: int, z: int) -> np.ndarray:
        """Rows [a, z) of the chunk, the next slab: bounds checks of the shards it touches, one copy."""
        touched = self._every
        if touched is None:
            if self.masks is not None:
                mask = self.masks[self._next]
                touched = self._by_mask.get(mask)
                if touched is None:
                    touched = self._by_mask[mask] = [k for k in range(len(self.checks)) if mask >> k & 1]
            else:
                touched = np.flatnonzero(self.present[self._next]).tolist()
        now = time.monotonic_ns()
        checked = self._checked_at
        for k in touched:
            if now - checked[k] > CHECK_VALID_NS:
                m, shard = self.checks[k]
                m.check_intact(shard)  # one fstat: a truncated file raises instead of SIGBUS
                checked[k] = now
        self._next += 1
        cross = None if self.crossing is None else np.flatnonzero(self.crossing[a:z])
        if cross is None or not cross.size:
            return self.view[self.index[a:z]]
        if cross.size == z - a:
            out = np.empty((z - a, self.width), dtype=self.view.dtype)
        else:  # a row of this slab inside its shard (checked above) stands in until the window is assembled
            index = self.index[a:z].copy()
            index[cross] = index[int(np.argmax(~self.crossing[a:z]))]
            out = self.view[index]
        for j in cross.tolist():
            self.gather.read_across(int(self.rows.gid[a + j]), int(self.rows.local[a + j]), out[j])
        return out
