"""Cache-block geometry and the cache's accounting rules, as pure functions over arrays.

The cache unit is a shard's checksum block (the `.sum.json` sidecar's `block_size`, 16 MiB by default):
it is the smallest range that can be verified on arrival. Blocks of all shards of a dataset are numbered
back to back (global block id = first id of the shard + block within the shard), so a contiguous token
range touches a contiguous run of ids even across a shard boundary. Nothing here does I/O, so the
accounting and eviction rules are tested alone (tests/unit/remote/test_blocks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ABSENT", "RESERVED", "PRESENT", "FS_BLOCK", "BlockMap", "charge_of", "eviction_order", "make_room",
    "used_bytes",
]

# per-block states in the cache's state file; any other byte value is damage and counts as not present
ABSENT, RESERVED, PRESENT = 0, 1, 2
FS_BLOCK = 4096


def charge_of(nbytes: int | np.ndarray) -> int | np.ndarray:
    """Bytes a block (or file) of `nbytes` is charged: rounded up to the file-system block, plus one block
    for a range that starts inside a page (a block size that is not a multiple of 4 KiB), plus one for the
    extent-tree growth that writing it into a sparse file can cause (ext4 adds a 4 KiB tree block per ~340
    extents), so the real allocation (st_blocks) never exceeds what was charged (0.05 % of 16 MiB)."""
    return (nbytes + FS_BLOCK - 1) // FS_BLOCK * FS_BLOCK + 2 * FS_BLOCK


@dataclass(frozen=True)
class BlockMap:
    """Global cache-block ids of a dataset's `.bin` files, and the byte range each stands for."""

    block_size: int
    itemsize: int
    bin_bytes: np.ndarray  # int64[shards]
    token_offsets: np.ndarray  # int64[shards + 1], the dataset's flat token offsets
    base: np.ndarray  # int64[shards + 1], first global block id of each shard
    shard_tokens: np.ndarray  # int64[shards]

    @classmethod
    def build(cls, bin_bytes: Iterable[int], block_size: int, itemsize: int) -> BlockMap:
        sizes = np.asarray(list(bin_bytes), dtype=np.int64)
        counts = -(-sizes // block_size)
        base = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(counts, out=base[1:])
        offsets = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes // itemsize, out=offsets[1:])
        return cls(block_size, itemsize, sizes, offsets, base, np.diff(offsets))

    @property
    def num_blocks(self) -> int:
        return int(self.base[-1])

    def shard_of(self, gid: int) -> int:
        return int(np.searchsorted(self.base, gid, side="right")) - 1

    def byte_range(self, gid: int) -> tuple[int, int, int]:
        """(shard, first byte, end byte) of block `gid` within its shard's `.bin`."""
        s = self.shard_of(gid)
        lo = (gid - int(self.base[s])) * self.block_size
        return s, lo, min(lo + self.block_size, int(self.bin_bytes[s]))

    def block_lengths(self) -> np.ndarray:
        """Bytes of every block (the last block of a shard is short)."""
        out = np.full(self.num_blocks, self.block_size, dtype=np.int64)
        last = self.base[1:] - 1
        has = self.base[1:] > self.base[:-1]
        out[last[has]] = self.bin_bytes[has] - (last[has] - self.base[:-1][has]) * self.block_size
        return out

    def _gid_of_token(self, tokens: np.ndarray) -> np.ndarray:
        """Block id holding each global token (tokens < the dataset's token count)."""
        s = np.searchsorted(self.token_offsets, tokens, side="right") - 1
        return self.base[s] + (tokens - self.token_offsets[s]) * self.itemsize // self.block_size

    def token_ranges(self, lo: np.ndarray, hi: np.ndarray, *, ordered: bool = False) -> np.ndarray:
        """Block ids touched by global token ranges [lo, hi) (hi > lo): sorted and distinct, or (ordered)
        distinct in order of first use, which is the order a prefetcher should fetch them in."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.minimum(np.asarray(hi, dtype=np.int64), self.token_offsets[-1])
        if not lo.size:
            return np.zeros(0, dtype=np.int64)
        first, last = self._gid_of_token(lo), self._gid_of_token(hi - 1)
        span = last - first
        if int(span.max()) <= 1:
            ids = np.stack([first, last], axis=1).reshape(-1)
        else:  # a range longer than a block (tiny blocks, or whole shuffle blocks): every id in between
            n = span + 1
            ids = np.repeat(first - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
        if not ordered:
            return np.unique(ids)
        uniq, where = np.unique(ids, return_index=True)
        return uniq[np.argsort(where, kind="stable")]

    def rows(self, shard: np.ndarray | int, local: np.ndarray, width: int, *, ordered: bool = False) -> np.ndarray:
        """Block ids read by windows of `width` tokens starting at token `local` of `shard` (a window may
        run into the next shards; those blocks are included)."""
        local = np.asarray(local, dtype=np.int64)
        if not ordered and width * self.itemsize <= self.block_size:
            # the reader's path: windows inside their shard touch their first and last block
            s = np.asarray(shard, dtype=np.int64)
            end = local + (width - 1)
            if bool((end < self.shard_tokens[s]).all()):
                base = self.base[s]
                ids = np.sort(np.concatenate([np.atleast_1d(base + local * self.itemsize // self.block_size),
                                              np.atleast_1d(base + end * self.itemsize // self.block_size)]))
                return ids[np.concatenate(([True], ids[1:] != ids[:-1]))]
        start = local + self.token_offsets[np.asarray(shard, dtype=np.int64)]
        return self.token_ranges(start, start + width, ordered=ordered)


def used_bytes(state: np.ndarray, charge: np.ndarray) -> int:
    """Bytes a dataset's blocks hold: every block not ABSENT is charged (a RESERVED block is being written
    or evicted; a damaged state byte is counted until recovery clears it, so the sum never undercounts)."""
    return int(charge[state != ABSENT].sum())


def eviction_order(state: np.ndarray, stamp: np.ndarray) -> np.ndarray:
    """PRESENT block ids, least recently used first (ties by id, so every process agrees)."""
    ids = np.flatnonzero(state == PRESENT)
    return ids[np.lexsort((ids, stamp[ids]))]


def make_room(need: int, used: int, limit: int, candidates: Iterable[tuple[int, Callable[[], bool]]]
              ) -> int | None:
    """Evict candidates (charge, try_evict) in order until `used + need <= limit`; the new `used`, or None
    when the candidates run out first (the evictions done stay done: they were unpinned, finished blocks).

    `try_evict` returns False for a block someone pins (a reader holds its lock): it is skipped, never
    waited for, so a reservation never blocks on another process's reader.
    """
    if need > limit:
        return None
    for charge, try_evict in candidates:
        if used + need <= limit:
            break
        if try_evict():
            used -= charge
    return used if used + need <= limit else None
