"""Windows of `seq_len + 1` tokens over a dataset's flat token stream, copied into batch arrays.

Sample `i` is tokens [i·seq_len, i·seq_len + seq_len + 1): consecutive windows overlap by one token so
every token is a label exactly once per epoch. Windows cross document boundaries freely (the index says
where documents start) and, rarely, shard boundaries (assembled from both shards).
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
        self._tokens: list[np.ndarray | None] = [None] * dataset.num_shards
        self._views: list[tuple[np.ndarray, int] | None] = [None] * dataset.num_shards
        self._mapped: OrderedDict[int, None] = OrderedDict()  # shards in use, least recently used first
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
            self._tokens[old] = self._views[old] = None
            self.dataset.shards[old].release()

    def shard_tokens(self, s: int) -> np.ndarray:
        """Shard s's tokens over its mapping, counted against MAPPED_SHARDS (thread-safe)."""
        t = self._tokens[s]
        if t is None:
            with self._map_lock:
                t = self._tokens[s]
                if t is None:
                    self._touch(s)
                    t = self._tokens[s] = self.dataset.shards[s].tokens
                    if self.on_map is not None and t.nbytes:
                        self.on_map(t)
        return t

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

    def plan(self, shard: np.ndarray, local: np.ndarray, segments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows grouped in segments (batches): (segment fits one shard's row view, view row of each row)."""
        inside = (local + self.window) <= self._sizes[shard]
        view_rows = (local - self._phases[shard]) // self.seq_len
        if self._gate is not None:
            self._gate.upcoming(shard, local)
        same = np.minimum.reduceat(shard, segments) == np.maximum.reduceat(shard, segments)
        return same & np.logical_and.reduceat(inside, segments), view_rows

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
        if self._gate is not None:
            self._gate.located(shard, local)
        inside = (local + self.window) <= self._sizes[shard]
        first = int(shard[0]) if shard.size else 0
        for u in np.unique(shard).tolist():
            self.dataset.shards[u].check_intact()  # see gather_rows
        if shard.size and bool(inside.all()) and bool((shard == first).all()):
            view, phase = self._rows_view(first)
            out[...] = view[(local - phase) // self.seq_len]
            return
        for j, (s, lo, ok) in enumerate(zip(shard.tolist(), local.tolist(), inside.tolist())):
            if ok:
                out[j] = self.shard_tokens(s)[lo:lo + self.window]
            else:
                self._read_across(s, lo, out[j])

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
