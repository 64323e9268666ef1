"""Windows of `seq_len + 1` tokens over a dataset's flat token stream, copied into batch arrays.

Sample `i` is tokens [i·seq_len, i·seq_len + seq_len + 1): consecutive windows overlap by one token so
every token is a label exactly once per epoch. Windows cross document boundaries freely (the index says
where documents start) and, rarely, shard boundaries (assembled from both shards).

Rows are copied by one C-level gather per slab, never per sample: through a shard's row view when a
slab's windows all lie in one shard, else through a view spanning the mappings of every shard the slab
touches (`gather`). A block-shuffled batch of a many-shard dataset mixes rows of several shards (a
group's blocks are spread over the dataset), so this second path is the common one at scale.

**The invariant that makes the spanning view safe:** it also covers the gaps between mappings, so only
rows whose whole window lies inside a shard that is mapped and held for the duration of the copy are
ever gathered through it; windows that run past their shard's end get a placeholder row and are then
assembled from the two shards. (The mixture loader's `AddressSpace` rests on the same invariant.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset

__all__ = ["MAPPED_SHARDS", "WindowSource", "num_windows"]

# shards kept mapped at once (least recently used released first): a block-shuffled group touches a few
# shards, an epoch touches all of them — without a bound a 40,000-shard corpus runs out of file descriptors
# (ulimit -n 1024) or of vm.max_map_count
MAPPED_SHARDS = 128


def num_windows(num_tokens: int, seq_len: int) -> int:
    return max(0, (num_tokens - 1) // seq_len)


class WindowSource:
    """Copies windows into preallocated rows; per-sample work is one slice copy, never per token."""

    def __init__(self, dataset: Dataset, seq_len: int) -> None:
        if seq_len < 1:
            raise ConfigError(f"seq_len must be ≥ 1, got {seq_len}")
        self.dataset = dataset
        self.seq_len = seq_len
        self.window = seq_len + 1
        self.num_samples = num_windows(dataset.num_tokens, seq_len)
        if self.num_samples == 0:
            raise ConfigError(f"{dataset.path}: {dataset.num_tokens:,} tokens hold no window of seq_len + 1 = "
                              f"{self.window:,} tokens; use a smaller seq_len or more data")
        self._offsets = dataset.token_offsets
        self._sizes = np.diff(self._offsets)
        # each shard's first window start, as a local token offset (windows start at global multiples of seq_len)
        self._phases = (-self._offsets[:-1]) % seq_len
        # (tokens, address of the first token) of each mapped shard: one tuple, read atomically by any thread
        self._maps: list[tuple[np.ndarray, int] | None] = [None] * dataset.num_shards
        self._views: list[tuple[np.ndarray, int] | None] = [None] * dataset.num_shards
        self._mapped: OrderedDict[int, None] = OrderedDict()  # shards in use, least recently used first
        self._item = dataset.dtype.itemsize
        self._span: tuple[np.ndarray, int, int] | None = None  # (view, first byte, end byte) it may address
        self._slab_addr = np.zeros(dataset.num_shards, dtype=np.int64)  # scratch of `gather` (loader thread)
        self.on_map: Callable[[np.ndarray], None] | None = None  # e.g. madvise a fresh mapping (full shuffle)
        self._map_lock = threading.Lock()  # the readahead thread maps through shard_tokens too
        # remote datasets (shardkit.remote) only: reads wait for their cache blocks; None keeps local reads as they are
        self._gate = dataset.read_gate(seq_len) if hasattr(dataset, "read_gate") else None

    def _touch(self, s: int) -> None:
        """Mark shard s used; release the least recently used beyond MAPPED_SHARDS."""
        mapped = self._mapped
        if s in mapped:
            mapped.move_to_end(s)
            return
        mapped[s] = None
        while len(mapped) > MAPPED_SHARDS:
            old, _ = mapped.popitem(last=False)
            self._maps[old] = self._views[old] = None
            self.dataset.shards[old].release()

    def shard_tokens(self, s: int) -> np.ndarray:
        """Shard s's tokens over its mapping, counted against MAPPED_SHARDS (thread-safe)."""
        return self._mapping(s)[0]

    def _mapping(self, s: int) -> tuple[np.ndarray, int]:
        """(tokens, address of the first token) of shard s, mapped now if it is not (thread-safe)."""
        m = self._maps[s]
        if m is None:
            with self._map_lock:
                m = self._maps[s]
                if m is None:
                    self._touch(s)
                    t = self.dataset.shards[s].tokens
                    m = self._maps[s] = (t, t.__array_interface__["data"][0])
                    if self.on_map is not None and t.nbytes:
                        self.on_map(t)
        return m

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard index, start within shard) of each sample's first token."""
        starts = np.asarray(sample_ids, dtype=np.int64) * self.seq_len
        shard = np.searchsorted(self._offsets, starts, side="right") - 1
        return shard, starts - self._offsets[shard]

    def fill(self, sample_ids: np.ndarray, out: np.ndarray) -> None:
        """Copy the windows of `sample_ids` into the rows of `out` (shape (n, seq_len + 1))."""
        shard, local = self.locate(sample_ids)
        self.fill_located(shard, local, out)

    def _rows_view(self, s: int) -> tuple[np.ndarray, int]:
        """Shard s as a 2-D read-only view whose row r is the window starting at local token phase + r·seq_len.

        Windows start at global multiples of seq_len, so inside one shard they share one phase; gathering
        rows of this view is a single C-level copy per batch instead of one slice copy per sample.
        """
        v = self._views[s]
        if v is None:
            toks = self.shard_tokens(s)
            phase = int(-self._offsets[s] % self.seq_len)
            n = max(0, (toks.size - phase - 1) // self.seq_len)
            item = toks.itemsize
            view = np.lib.stride_tricks.as_strided(toks[phase:], shape=(n, self.window),
                                                   strides=(self.seq_len * item, item), writeable=False)
            v = self._views[s] = (view, phase)
        return v

    def plan(self, shard: np.ndarray, local: np.ndarray, segments: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For rows grouped in segments (slabs): (segment fits one shard's row view, view row of each row,
        whether each row's window lies inside its shard)."""
        inside = (local + self.window) <= self._sizes[shard]
        view_rows = (local - self._phases[shard]) // self.seq_len
        if self._gate is not None:
            self._gate.upcoming(shard, local)
        same = np.minimum.reduceat(shard, segments) == np.maximum.reduceat(shard, segments)
        return same & np.logical_and.reduceat(inside, segments), view_rows, inside

    def gather_rows(self, shard: int, view_rows: np.ndarray) -> np.ndarray:
        """Whole windows of one shard as a new (n, seq_len + 1) array: one C-level gather, one copy."""
        if self._gate is not None:
            self._gate.rows(shard, self._rows_view(shard)[1], view_rows)
        view = self._rows_view(shard)[0]
        # one fstat per slab: a shard truncated under the reader raises IntegrityError instead of the
        # SIGBUS that touching the mapping past the new end would deliver
        self.dataset.shards[shard].check_intact()
        return view[view_rows]

    def fill_located(self, shard: np.ndarray, local: np.ndarray, out: np.ndarray) -> None:
        """`fill` for windows already located (the loader locates a whole chunk in one call)."""
        out[...] = self.gather(shard, local)

    def gather(self, shard: np.ndarray, local: np.ndarray, inside: np.ndarray | None = None) -> np.ndarray:
        """The windows at (shard, local start) pairs as a new (n, seq_len + 1) array, in the given order.

        One C-level gather over the shard's row view (one shard) or a spanning view (several; see the
        module docstring); only windows that run past their shard's end are assembled row by row.
        `inside` is `plan`'s, when the caller has it.
        """
        if self._gate is not None:
            self._gate.located(shard, local)
        if inside is None:
            inside = (local + self.window) <= self._sizes[shard]
        shards = sorted(set(shard.tolist()))  # a slab touches few shards: cheaper than np.unique
        held = [self._mapping(s) for s in shards]  # mapped, and kept mapped until the copy is done
        for s in shards:
            self.dataset.shards[s].check_intact()  # see gather_rows
        crossing = [] if inside.all() else np.flatnonzero(~inside).tolist()
        if len(crossing) == shard.size:
            out = np.empty((shard.size, self.window), dtype=self.dataset.dtype)
        else:
            if len(shards) == 1:
                view, phase = self._rows_view(shards[0])
                rows = (local - phase) // self.seq_len
            else:
                view, base = self._spanning_view(shards, held)
                self._slab_addr[shards] = [a // self._item for _, a in held]  # page-aligned: whole items
                rows = self._slab_addr[shard]
                rows += local
                rows -= base // self._item
            if crossing:  # any row inside a shard stands in until the window is assembled below
                rows[crossing] = rows[int(np.argmax(inside))]
            out = view[rows]
        for j in crossing:
            self._read_across(int(shard[j]), int(local[j]), out[j])
        return out

    def _spanning_view(self, shards: list[int], held: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, int]:
        """(view whose row r is the window starting r items after address `base`, base) over the `held`
        mappings of `shards`; reused while later slabs' mappings stay inside the range it was built for."""
        first = min(a for _, a in held)
        end = max(a + int(self._sizes[s]) * self._item for s, (_, a) in zip(shards, held))
        span = self._span
        if span is None or first < span[1] or end > span[2]:
            # mappings are page-aligned, so every shard's first token is a whole number of items from `first`
            lowest = next(t for t, a in held if a == first)
            rows = max(1, (end - first) // self._item - self.window + 1)
            view = np.lib.stride_tricks.as_strided(lowest, shape=(rows, self.window),
                                                   strides=(self._item, self._item), writeable=False)
            span = self._span = (view, first, end)
        return span[0], span[1]

    def _read_across(self, s: int, lo: int, out: np.ndarray) -> None:
        """A window that runs past the end of shard s, assembled from the shards after it."""
        at = 0
        while at < out.size:
            t = self.shard_tokens(s)
            self.dataset.shards[s].check_intact()
            n = min(out.size - at, t.size - lo)
            out[at:at + n] = t[lo:lo + n]
            at, s, lo = at + n, s + 1, 0

    def doc_starts(self, sample_id: int) -> np.ndarray:
        """Positions 1..seq_len inside the window where a new document begins (sorted, int64)."""
        g0 = int(sample_id) * self.seq_len
        g1 = g0 + self.seq_len  # a start at the window's last token still splits the last label
        s = int(np.searchsorted(self._offsets, g0, side="right")) - 1
        found = []
        while s < self.dataset.num_shards and int(self._offsets[s]) <= g1:
            with self._map_lock:
                self._touch(s)  # the document index counts against the mapped-shard bound too
            base = int(self._offsets[s])
            docs = self.dataset.shards[s].doc_offsets[:-1] + base
            lo, hi = np.searchsorted(docs, [g0 + 1, g1 + 1])
            found.append(docs[lo:hi] - g0)
            s += 1
        return np.concatenate(found) if found else np.zeros(0, np.int64)
