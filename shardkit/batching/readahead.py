"""Page-cache hints that follow the sample order: prefetch the next shuffle group, release the last.

With block shuffle a group's blocks are read completely while the loader is inside the group, so
hinting whole blocks (MADV_WILLNEED) costs no extra I/O and lets the kernel read them sequentially,
ahead of use, from a background thread. Blocks of a finished group are released (MADV_DONTNEED on
our read-only mapping drops them from this process's RSS; the page cache keeps them for others), so
the loader's resident memory does not grow with the dataset.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from ..format.dataset import Dataset

__all__ = ["Readahead", "ReadMetrics"]

_PAGE = mmap.PAGESIZE
# MADV_POPULATE_READ (Linux ≥ 5.14) also fills the page tables, so the loader thread takes no faults;
# where the kernel refuses it, WILLNEED (page cache only) is used instead.
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
try:  # libc's madvise through ctypes releases the GIL (mmap.madvise does not): hints run truly alongside
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise = _libc.madvise
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _madvise = None


_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def advise_random(tokens: np.ndarray) -> None:
    """Full shuffle: no kernel read-around on faults (MADV_RANDOM); neighbouring pages are not next."""
    if tokens.nbytes:
        _advise_range(tokens, 0, tokens.nbytes, mmap.MADV_RANDOM)


def advise_hugepage(tokens: np.ndarray) -> None:
    """Block (or no) shuffle: ask for 2 MiB pages (MADV_HUGEPAGE) on a fresh mapping.

    Each sample is a 4 KiB-ish window at a random place in its group, so with 4 KiB pages nearly every
    window costs TLB misses: copying them ran at ~3 G tok/s, against ~5 G with PMD-mapped pages. Pages
    the kernel reads for this mapping from now on (the group hints, the faults) come as 2 MiB folios
    where the file system supports them; what is already cached in small pages stays so until it is
    evicted (a finished group is, by default). Reads stay whole groups, so the coarser granularity
    costs no read amplification. Not for full shuffle, where 2 MiB reads per 4 KiB window would.
    """
    if tokens.nbytes and _MADV_HUGEPAGE is not None:
        _advise_range(tokens, 0, tokens.nbytes, _MADV_HUGEPAGE)


def _advise_range(tokens: np.ndarray, start: int, length: int, advice: int) -> bool:
    """madvise on bytes [start, start+length) of the mapping behind `tokens`; False if refused."""
    if _madvise is None:
        return False
    base = tokens.__array_interface__["data"][0]
    return _madvise(ctypes.c_void_p(base + start), ctypes.c_size_t(length), ctypes.c_int(advice)) == 0


class ReadMetrics:
    """Bytes and distinct shuffle blocks touched, per step and per epoch, plus what the hints did."""

    def __init__(self) -> None:
        self.steps = 0
        self.bytes_copied = 0
        self.step_bytes = 0
        self.epoch = -1
        self._epoch_map = np.zeros(0, dtype=bool)
        self._last: tuple[np.ndarray, int, int] = (np.zeros(0, dtype=np.int64), 0, 0)
        self._pending: tuple[np.ndarray, int, int] | None = None  # steps not yet marked in _epoch_map
        self.epoch_bytes = 0
        self.groups_entered = 0
        self.bytes_prefetched = 0
        self.bytes_released = 0

    def record_step(self, epoch: int, blocks: np.ndarray, lo: int, hi: int, row_bytes: int,
                    num_blocks: int) -> None:
        """Count a step whose rows are `blocks[lo:hi]` (their shuffle blocks); O(1) per step.

        Steps of one planned chunk are consecutive ranges of one `blocks` array: the epoch's block map is
        marked once per run of such steps (when a run ends or metrics are read), not once per step.
        """
        self.steps += 1
        self.step_bytes = (hi - lo) * row_bytes
        self.bytes_copied += self.step_bytes
        self._last = (blocks, lo, hi)
        pending = self._pending
        if epoch != self.epoch:
            self._flush()
            self.epoch, self.epoch_bytes = epoch, 0
            self._epoch_map = np.zeros(num_blocks, dtype=bool)
        elif pending is not None and (pending[0] is not blocks or pending[2] != lo):
            self._flush()
        pending = self._pending
        self._pending = (blocks, lo, hi) if pending is None else (blocks, pending[1], hi)
        self.epoch_bytes += self.step_bytes

    def _flush(self) -> None:
        if self._pending is not None:
            blocks, lo, hi = self._pending
            self._epoch_map[blocks[lo:hi]] = True
            self._pending = None

    def to_json(self) -> dict[str, int]:
        self._flush()
        blocks, lo, hi = self._last
        return {
            "steps": self.steps, "bytes_copied": self.bytes_copied, "step_bytes": self.step_bytes,
            "step_distinct_blocks": int(np.unique(blocks[lo:hi]).size), "epoch": self.epoch,
            "epoch_distinct_blocks": int(self._epoch_map.sum()), "epoch_bytes": self.epoch_bytes,
            "groups_entered": self.groups_entered, "bytes_prefetched": self.bytes_prefetched,
            "bytes_released": self.bytes_released,
        }


class Readahead:
    """Issues WILLNEED/DONTNEED for whole shuffle blocks on a background thread (never blocks the loader)."""

    def __init__(self, dataset: Dataset, seq_len: int, block_samples: int, metrics: ReadMetrics,
                 enabled: bool = True, *, evict: bool = True,
                 tokens_of: Callable[[int], np.ndarray] | None = None) -> None:
        self.dataset = dataset
        # how to reach shard s's mapped tokens: the reader's own accessor, so hints map nothing it does not track
        self._tokens_of = tokens_of or (lambda s: dataset.shards[s].tokens)
        self.block_tokens = block_samples * seq_len
        self.seq_len = seq_len
        self.metrics = metrics
        self.enabled = enabled and _madvise is not None
        self._held: deque[tuple[int, int, np.ndarray]] = deque()  # (epoch, group, blocks) hinted, oldest first
        self._lock = threading.Lock()
        self._hinted: set[int] = set()  # blocks hinted and not released since
        self._worker: threading.Thread | None = None
        self.evict = evict  # finished blocks leave the page cache too, not just this process's mapping
        self._populate_ok = True
        # a remote dataset (shardkit.remote) replaces the page-cache hints by block downloads into its cache
        self._remote = dataset.prefetch_window(seq_len, block_samples) if hasattr(dataset, "prefetch_window") else None

    def _ranges(self, blocks: np.ndarray):
        """(shard, byte start, byte length) of each block's tokens, split at shard boundaries."""
        offsets = self.dataset.token_offsets
        item = self.dataset.dtype.itemsize
        for j in np.sort(blocks).tolist():
            lo, hi = j * self.block_tokens, min((j + 1) * self.block_tokens + 1, self.dataset.num_tokens)
            s = int(np.searchsorted(offsets, lo, side="right")) - 1
            while lo < hi and s < self.dataset.num_shards:
                end = min(hi, int(offsets[s + 1]))
                a = (lo - int(offsets[s])) * item
                b = (end - int(offsets[s])) * item
                start = a - a % _PAGE
                yield s, start, b - start
                lo, s = end, s + 1

    def _advise(self, blocks: np.ndarray, advice: int) -> int:
        done = 0
        for s, start, length in self._ranges(blocks):
            tokens = self._tokens_of(s)
            n = min(length, tokens.nbytes - start)
            if n <= 0:
                continue
            if not _advise_range(tokens, start, n, advice):
                if advice != _POPULATE_READ:
                    continue
                self._populate_ok = False
                if not _advise_range(tokens, start, n, mmap.MADV_WILLNEED):
                    continue
            done += n
        return done

    def random_access(self) -> None:
        """Full shuffle: `advise_random` on every shard. Maps every shard: for readers that keep them all
        mapped (the mixture's address space); the Loader advises each mapping as it makes it instead
        (`mapping_advice` as `WindowSource.on_map`)."""
        if self.enabled:
            for shard in self.dataset.shards:
                advise_random(shard.tokens)

    def huge_pages(self) -> None:
        """`advise_hugepage` on every shard (for readers that keep them all mapped, like `random_access`)."""
        if self.enabled:
            for shard in self.dataset.shards:
                advise_hugepage(shard.tokens)

    def mapping_advice(self, full_shuffle: bool) -> Callable[[np.ndarray], None] | None:
        """What to call on each fresh shard mapping (None when hints are off). A module function, not a
        method: the reader stores it, and a reference back to this object would make a cycle that keeps
        every mapping (and descriptor) of a dropped loader alive until the garbage collector runs."""
        if not self.enabled:
            return None
        return advise_random if full_shuffle else advise_hugepage

    def _evict(self, blocks: np.ndarray) -> None:
        """Drop finished blocks from the page cache (POSIX_FADV_DONTNEED), so the cache holds the working
        set and the kernel never has to pick what to drop: under memory pressure it may pick the group
        being read. Ranks on a node read the same group at the same time, so they finish it together."""
        for s, start, length in self._ranges(blocks):
            try:
                fd = os.open(self.dataset.shards[s].bin_path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def enter_group(self, epoch: int, group: int, blocks: np.ndarray, next_blocks: np.ndarray | None, *,
                    later: Callable[[int], np.ndarray] | None = None) -> None:
        """Called when delivery reaches a new group: hint it and the next, release groups before it.

        `later(k)` gives the blocks of the k-th group after this one (k ≥ 2): a remote dataset fetches
        that far ahead (its `lookahead_groups`) so downloads never wait for delivery to enter a group.
        """
        if not self.enabled:
            return
        self.metrics.groups_entered += 1
        if self._remote is not None:
            self._remote.enter_group(epoch, group, blocks, next_blocks, later=later)
            return
        wanted = np.unique(np.concatenate([b for b in (blocks, next_blocks) if b is not None]))
        release = []
        with self._lock:
            while self._held and self._held[0][:2] != (epoch, group):  # delivery is in order: done
                # never drop blocks about to be read again (a small dataset is one group every epoch)
                old = np.setdiff1d(self._held.popleft()[2], wanted)
                if old.size:
                    release.append(old)
                    self._hinted.difference_update(old.tolist())
            todo = np.array(sorted(set(wanted.tolist()) - self._hinted), dtype=np.int64)  # hint each block once
            self._hinted.update(todo.tolist())
            self._held.append((epoch, group, blocks))
        if release or todo.size:
            # each hint thread first waits for the one before it: hints and releases happen in delivery
            # order, and two threads never update the metrics at once (a lost += was seen in CI)
            self._worker = threading.Thread(target=self._work, args=(self._worker, [todo] if todo.size else [],
                                                                     release), daemon=True)
            self._worker.start()

    def wait(self) -> None:
        """Block until the last hints were issued (tests and benchmarks; the loader never waits)."""
        if self._worker is not None:
            self._worker.join()

    def _work(self, before: threading.Thread | None, prefetch: list[np.ndarray], release: list[np.ndarray]) -> None:
        if before is not None:
            before.join()
        for blocks in release:
            self.metrics.bytes_released += self._advise(blocks, mmap.MADV_DONTNEED)
            if self.evict:
                self._evict(blocks)
        for blocks in prefetch:
            advice = _POPULATE_READ if self._populate_ok else mmap.MADV_WILLNEED
            self.metrics.bytes_prefetched += self._advise(blocks, advice)
