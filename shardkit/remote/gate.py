"""The two hooks through which the loader drives a remote dataset; local datasets have neither.

* `ReadGate` — `WindowSource` calls it before copying rows (`rows`, `located`) and when the loader plans a
  chunk (`upcoming`, the exact rows to come, in order). Copying never reads a block that is not ready
  (a hole would read as zeros: silently wrong data), and blocks stay pinned until the gate's next read.
* `GroupPrefetch` — stands in for the page-cache hints of `Readahead.enter_group`: when delivery enters a
  shuffle group it pins and fetches that group's blocks and then the next `lookahead_groups` groups',
  and releases the groups before (delivery is in order, so they are finished and may be evicted).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .blocks import BlockMap
from .prefetch import CHUNK, GROUP, Fetcher, PinSet, fork_count

__all__ = ["GroupPrefetch", "ReadGate"]


def _cap(gids: np.ndarray, charge: np.ndarray, limit: int | None) -> np.ndarray:
    """The first blocks of `gids` (fetch order) whose charges add up to at most `limit` bytes."""
    if limit is None or not gids.size:
        return gids
    return gids[:int(np.searchsorted(np.cumsum(charge[gids]), limit, side="right"))]


class ReadGate:
    """Waits until the cache blocks under a read are ready; one per reader (`WindowSource`)."""

    def __init__(self, fetcher: Fetcher, blocks: BlockMap, seq_len: int, lookahead_bytes: int | None) -> None:
        self.fetcher = fetcher
        self.blocks = blocks
        self.seq_len = seq_len
        self.width = seq_len + 1
        self.lookahead_bytes = lookahead_bytes
        self._held = PinSet(fetcher, None)  # the blocks of the last read, until the next one
        self._chunk = PinSet(fetcher, CHUNK)
        # blocks the last read pinned and found ready: a read inside them needs no bookkeeping at all
        self._ok = np.zeros(blocks.num_blocks, dtype=bool)
        self._ok_ids = np.zeros(0, dtype=np.int64)
        self._ok_fork = fork_count()
        self._ok_gen = fetcher.generation
        bs, item = blocks.block_size, blocks.itemsize
        self._tokens_per_block = bs // item if bs % item == 0 and width_fits(self.width, blocks) else 0

    def _covered(self, shard: np.ndarray | int, local: np.ndarray) -> bool:
        """Whether every window lies inside its shard and inside blocks the last read holds (~10 µs)."""
        tpb = self._tokens_per_block
        if not tpb or self._ok_fork != fork_count() or self._ok_gen != self.fetcher.generation:
            return False
        end = local + (self.width - 1)
        if not bool((end < self.blocks.shard_tokens[shard]).all()):
            return False
        base = self.blocks.base[shard]
        return bool(self._ok[base + local // tpb].all()) and bool(self._ok[base + end // tpb].all())

    def _ensure(self, gids: np.ndarray) -> None:
        if self._ok_fork != fork_count():  # forked: the parent's pins are not this process's
            self._ok[:], self._ok_fork = False, fork_count()
        self._ok[self._ok_ids] = False
        self._ok_ids = np.zeros(0, dtype=np.int64)
        self.fetcher.ensure(gids, self._held)
        self._ok[gids], self._ok_ids, self._ok_gen = True, gids, self.fetcher.generation

    def rows(self, shard: int, phase: int, view_rows: np.ndarray) -> None:
        """Before gathering rows of shard `shard`'s row view (row r starts at token phase + r·seq_len)."""
        local = phase + view_rows * self.seq_len
        if not self._covered(shard, local):
            self._ensure(self.blocks.rows(shard, local, self.width))

    def located(self, shard: np.ndarray, local: np.ndarray) -> None:
        """Before copying windows at (shard, local token) pairs; a window may run into the next shard."""
        if shard.size and not self._covered(shard, local):
            self._ensure(self.blocks.rows(shard, local, self.width))

    def upcoming(self, shard: np.ndarray, local: np.ndarray) -> None:
        """The loader planned these rows (in delivery order): fetch their blocks in order of first use."""
        if shard.size:
            gids = self.blocks.rows(shard, local, self.width, ordered=True)
            self._chunk.set(_cap(gids, self.fetcher.cache.charge, self.lookahead_bytes))

    def release(self) -> None:
        """Drop every pin this reader holds (its blocks become evictable)."""
        self._held.clear()
        self._chunk.clear()


def width_fits(width: int, blocks: BlockMap) -> bool:
    """A window spans at most two cache blocks (its first and its last)."""
    return width * blocks.itemsize <= blocks.block_size


class GroupPrefetch:
    """`Readahead.enter_group` for a remote dataset: the current group's blocks, then the next groups'."""

    def __init__(self, fetcher: Fetcher, blocks: BlockMap, seq_len: int, block_samples: int, *,
                 lookahead_groups: int, lookahead_bytes: int | None) -> None:
        self.fetcher = fetcher
        self.blocks = blocks
        self.block_tokens = block_samples * seq_len
        self.lookahead_groups = lookahead_groups
        self.lookahead_bytes = lookahead_bytes
        self._window = PinSet(fetcher, GROUP)

    def gids_of(self, sample_blocks: np.ndarray) -> np.ndarray:
        """Cache blocks under shuffle blocks, in the given order (block j is tokens [j·bs·L, (j+1)·bs·L + 1))."""
        b = np.asarray(sample_blocks, dtype=np.int64)
        if not b.size:
            return b
        lo = b * self.block_tokens
        return self.blocks.token_ranges(lo, lo + self.block_tokens + 1, ordered=True)

    def enter_group(self, epoch: int, group: int, blocks: np.ndarray, next_blocks: np.ndarray | None, *,
                    later: Callable[[int], np.ndarray] | None = None) -> None:
        """Pin and fetch this group's blocks, then the next `lookahead_groups` groups' (in that order, up to
        `lookahead_bytes`); release the rest. Two or more groups ahead keep every download thread busy
        while delivery waits for the next group: with one, the threads idle at each group boundary."""
        parts = [blocks]
        if self.lookahead_groups >= 1 and next_blocks is not None:
            parts.append(next_blocks)
            if later is not None:
                parts += [later(k) for k in range(2, self.lookahead_groups + 1)]
        gids = self.gids_of(np.concatenate(parts))
        self._window.set(_cap(gids, self.fetcher.cache.charge, self.lookahead_bytes))

    def release(self) -> None:
        self._window.clear()
