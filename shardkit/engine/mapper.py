"""Shard mappings of every dataset a loader reads: one per shard, a true LRU, under a descriptor budget.

Each mapping of a `.bin` (and of an `.idx`, for document fields) holds one file descriptor and one
`vm.max_map_count` slot until the last array made from it is gone. A 44,704-shard corpus, or a mixture of
several thousand-shard sources, cannot keep them all, so the mapper keeps at most `budget` mappings and
releases the least recently used one when it needs another. The budget defaults to a quarter of the
process's `RLIMIT_NOFILE` soft limit (at most 1,024): the rest is left to the trainer, torch's workers
and sockets.

Index checks are kept apart from mappings: a shard's `.idx` is validated once per file identity (inode,
size, modification time — 24 bytes per shard, like the manifest entry) and a remapped index is not parsed
again unless the file changed.

Mapping happens on the loader's thread only; the hint worker (`readahead.py`) looks mappings up with
`peek` and never creates one, so it cannot push the count past the budget.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset, Shard

__all__ = ["Mapper", "Mapping", "default_budget", "MIN_BUDGET"]

MIN_BUDGET = 4  # a window crossing a shard boundary needs two shards at once; slabs are split to fit
_MAX_DEFAULT = 1024


def default_budget() -> int:
    """Mappings a loader may hold: a quarter of `ulimit -n` (soft), at least MIN_BUDGET, at most 1,024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_BUDGET, min(_MAX_DEFAULT, soft // 4))


def check_budget(value: Any) -> int | None:
    """`max_open_shards` as given by a user: None (the default budget) or an integer ≥ MIN_BUDGET."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_BUDGET:
        raise ConfigError(f"max_open_shards must be an integer ≥ {MIN_BUDGET} (mappings held at once, one "
                          f"file descriptor each) or None for a quarter of `ulimit -n`; got {value!r}")
    return value


@dataclass(frozen=True)
class Mapping:
    """One shard's tokens over one mapping; `address` is the first token's, `mm` keeps the descriptor."""

    tokens: np.ndarray
    address: int
    mm: Any
    views: dict[int, np.ndarray] = field(default_factory=dict)  # window width → row view (row r = token r)

    def rows(self, width: int) -> np.ndarray:
        """A read-only view whose row r is the window of `width` tokens starting at token r (made once)."""
        v = self.views.get(width)
        if v is None:
            item = self.tokens.itemsize
            n = max(1, self.tokens.size - width + 1)
            v = self.views[width] = np.lib.stride_tricks.as_strided(self.tokens, shape=(n, width),
                                                                    strides=(item, item), writeable=False)
        return v

    def check_intact(self, shard: Shard) -> None:
        """IntegrityError if the file shrank under the mapping (touching the lost pages would be SIGBUS)."""
        if self.mm is not None:
            shard.check_intact(self.mm)


class Mapper:
    """Global shard ids (`gid = base[dataset] + shard`) → mappings, at most `budget` held at once."""

    def __init__(self, datasets: Sequence[Dataset], budget: int | None = None) -> None:
        self.datasets = list(datasets)
        counts = [d.num_shards for d in self.datasets]
        self.base = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.num_shards = int(self.base[-1])
        self.budget = budget if budget is not None else default_budget()
        self._where = np.repeat(np.arange(len(counts), dtype=np.int64), counts)  # gid → dataset index
        self._maps: dict[tuple[str, int], Any] = {}  # (kind, gid) → Mapping or index arrays
        self._lru: OrderedDict[tuple[str, int], None] = OrderedDict()
        # an index is checked once per file identity: (inode, size, mtime_ns) of the .idx when it was checked
        self._checked = np.full((self.num_shards, 3), -1, dtype=np.int64)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.maps_made = 0  # mappings created (a shard re-entered after release counts again)
        self.evictions = 0  # mappings released: a view spanning several mappings is valid while this holds
        self.on_map: dict[int, Callable[[np.ndarray], None]] = {}  # dataset index → advice for a new mapping

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a Mapper holds live mappings; pickle the loader, which reopens them in the new process")

    def shard(self, gid: int) -> Shard:
        d = int(self._where[gid])
        return self.datasets[d].shards[gid - int(self.base[d])]

    def dataset_of(self, gid: int) -> int:
        return int(self._where[gid])

    # -- the LRU ------------------------------------------------------------------------------------------------
    def _after_fork(self) -> None:
        """A forked child inherits the mappings (valid) but maybe a lock held by a thread it does not have."""
        if self._pid != os.getpid():
            self._pid, self._lock = os.getpid(), threading.Lock()

    def _use(self, key: tuple[str, int]) -> Any:
        """The cached value of `key` (marked most recently used), or None."""
        self._after_fork()
        with self._lock:
            got = self._maps.get(key)
            if got is not None:
                self._lru.move_to_end(key)
            return got

    def _put(self, key: tuple[str, int], value: Any) -> None:
        self._after_fork()
        with self._lock:
            self._maps[key] = value
            self._lru[key] = None
            while len(self._lru) > self.budget:
                old, _ = self._lru.popitem(last=False)
                del self._maps[old]  # the mapping closes when no array made from it is left
                self.evictions += 1

    def tokens(self, gid: int) -> Mapping:
        """Shard `gid`'s tokens, mapped now if they are not (the least recently used mapping may go)."""
        got = self._use(("bin", gid))
        if got is None:
            shard = self.shard(gid)
            mm = shard.map_bin()
            tokens = shard.tokens_of(mm)
            got = Mapping(tokens, tokens.__array_interface__["data"][0], mm)
            advise = self.on_map.get(self.dataset_of(gid))
            if advise is not None and tokens.nbytes:
                advise(tokens)
            self.maps_made += 1
            self._put(("bin", gid), got)
        return got

    def hold(self, gids: Sequence[int]) -> list[Mapping]:
        """Mappings of several shards at once (a slab's): the caller keeps them alive for its copy."""
        if len(gids) > self.budget:
            raise ConfigError(f"{len(gids)} shards at once exceed the mapping budget of {self.budget}")
        return [self.tokens(g) for g in gids]

    def peek(self, gid: int) -> Mapping | None:
        """Shard `gid`'s mapping if one is held now (never maps: for the hint worker)."""
        self._after_fork()
        with self._lock:
            return self._maps.get(("bin", gid))

    def doc_starts(self, gid: int) -> np.ndarray:
        """Token offsets of shard `gid`'s documents within it, from the mapped `.idx` (no private copy).

        Documents lie back to back (the index check guarantees it), so a document's byte pointer divided by
        the item size is its first token; the array is a view of the mapped file, evictable page cache.
        """
        got = self._use(("idx", gid))
        if got is None:
            shard = self.shard(gid)
            st = os.stat(shard.idx_path)
            ident = (st.st_ino, st.st_size, st.st_mtime_ns)
            known = tuple(int(v) for v in self._checked[gid]) == ident
            idx = shard.load_index(check=not known)
            self._checked[gid] = ident
            got = idx.pointers
            self._put(("idx", gid), got)
        return got

    def held(self) -> int:
        """Mappings held now (bin and idx)."""
        self._after_fork()
        with self._lock:
            return len(self._lru)

    def clear(self) -> None:
        """Release every mapping (their descriptors close once no array made from them is left)."""
        self._after_fork()
        with self._lock:
            self._maps.clear()
            self._lru.clear()
            self.evictions += 1
