"""Page-cache hints that follow the sample order, issued by one bounded background worker per loader.

Block shuffle reads a group's blocks completely while delivery is inside the group. With one rank, the
loader hints whole blocks of the current and next group when delivery enters a group (`GroupHints`), so
the kernel reads them sequentially ahead of use, and releases the blocks of finished groups
(MADV_DONTNEED on the mapping: RSS stays flat; with `evict`, POSIX_FADV_DONTNEED drops them from the page
cache too). With several ranks each rank reads only its slice of every batch, so it hints only the pages of
its own upcoming rows (`hint_rows`, once per planned chunk): W nodes no longer each read every group.

Every hint goes to the mapping the loader reads (`Mapper.peek`); a shard not mapped yet is hinted through
its file (POSIX_FADV_WILLNEED on a descriptor opened and closed at once), never mapped by the worker. Rows
read from a row store are hinted in the store's own files (`StoreFile`: a block's rows are stored
contiguously), never the dataset's, which those rows do not read.
Hints run on one thread per loader, in submission order, from a bounded queue (advisory prefetches are
dropped first when it is full; releases never are), so the thread count is constant whatever the number
of groups. A hint that fails is dropped: the loader's own read of the same bytes reports the problem.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .mapper import Mapper
from .plan import Rows, Stream

__all__ = ["GroupHints", "HintWorker", "ReadMetrics", "StoreFile", "advise_hugepage", "advise_random",
           "hint_rows", "hint_store_rows"]

_PAGE = mmap.PAGESIZE
# MADV_POPULATE_READ (Linux ≥ 5.14) also fills the page tables, so the loader thread takes no faults;
# where the kernel refuses it, WILLNEED (page cache only) is used instead.
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
try:  # libc's madvise through ctypes releases the GIL (mmap.madvise does not): hints run truly alongside
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise = _libc.madvise
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _madvise = None

HINTS_AVAILABLE = _madvise is not None
_MAX_PENDING = 4096  # queued hint ranges; past it the oldest prefetches are dropped (they are advisory)


def _advise_range(tokens: np.ndarray, start: int, length: int, advice: int) -> bool:
    """madvise on bytes [start, start+length) of the mapping behind `tokens`; False if refused."""
    if _madvise is None or length <= 0:
        return False
    base = tokens.__array_interface__["data"][0]
    return _madvise(ctypes.c_void_p(base + start), ctypes.c_size_t(length), ctypes.c_int(advice)) == 0


def advise_random(tokens: np.ndarray) -> None:
    """Full shuffle: no kernel read-around on faults (MADV_RANDOM); neighbouring pages are not next."""
    if tokens.nbytes:
        _advise_range(tokens, 0, tokens.nbytes, mmap.MADV_RANDOM)


def advise_hugepage(tokens: np.ndarray) -> None:
    """Block (or no) shuffle on one rank: ask for 2 MiB pages (MADV_HUGEPAGE) on a fresh mapping.

    Each sample is a ~4 KiB window at a random place in its group, so with 4 KiB pages nearly every window
    costs TLB misses. Reads stay whole groups, so the coarser granularity costs no read amplification. Not
    for full shuffle, nor for several ranks (each reads 1/W of a group: 2 MiB reads per window would
    multiply the bytes each node reads).
    """
    if tokens.nbytes and _MADV_HUGEPAGE is not None:
        _advise_range(tokens, 0, tokens.nbytes, _MADV_HUGEPAGE)


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

    def record_items(self, epochs: np.ndarray, bounds: np.ndarray, counted: np.ndarray, blocks: np.ndarray,
                     row_bytes: int, num_blocks: int, first: int, stop: int) -> None:
        """Count items [first, stop) of a planned chunk at once: item i is rows [bounds[i], bounds[i+1]) of
        `blocks`, in epoch `epochs[i]`; `counted[i]` says whether it is a step (a batch's first item)."""
        if stop <= first:
            return
        self._flush()
        cuts = (np.flatnonzero(np.diff(epochs[first:stop])) + 1 + first).tolist()
        for s, e in zip([first, *cuts], [*cuts, stop]):
            epoch, lo, hi = int(epochs[s]), int(bounds[s]), int(bounds[e])
            if epoch != self.epoch:
                self.epoch, self.epoch_bytes = epoch, 0
                self._epoch_map = np.zeros(num_blocks, dtype=bool)
            self._epoch_map[blocks[lo:hi]] = True
            self.bytes_copied += (hi - lo) * row_bytes
            self.epoch_bytes += (hi - lo) * row_bytes
        self.steps += int(counted[first:stop].sum())
        lo, hi = int(bounds[stop - 1]), int(bounds[stop])
        self.step_bytes = (hi - lo) * row_bytes
        self._last = (blocks, lo, hi)

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


class StoreFile(NamedTuple):
    """A row store's file as a hint addresses it: its mapping (held without a descriptor) and its path."""

    array: np.ndarray
    path: str


# a task: (kind, metrics, global shard id or a row store's file, byte start, byte length); kind "prefetch",
# "release" or "evict"
_Task = tuple[str, ReadMetrics, "int | StoreFile", int, int]


class _Queue:
    """The worker's state: everything it needs, and no reference to the loader (a dropped loader is freed)."""

    def __init__(self, mapper: Mapper) -> None:
        self.mapper = mapper
        self.tasks: deque[_Task] = deque()
        self.cv = threading.Condition()
        self.busy = False
        self.stop = False
        self.populate_ok = True


def _stop(q: _Queue) -> None:
    with q.cv:
        q.stop = True
        q.cv.notify_all()


def _run(q: _Queue) -> None:
    while True:
        with q.cv:
            while not q.tasks and not q.stop:
                q.busy = False
                q.cv.notify_all()
                q.cv.wait()
            if q.stop:
                q.busy = False
                q.tasks.clear()
                q.cv.notify_all()
                return
            task = q.tasks.popleft()
            q.busy = True
        with contextlib.suppress(Exception):  # advisory: the loader's own read reports a real problem
            _execute(q, task)


def _execute(q: _Queue, task: _Task) -> None:
    kind, metrics, target, start, length = task
    if isinstance(target, StoreFile):
        tokens: np.ndarray | None = target.array
    else:
        mapping = q.mapper.peek(target)
        tokens = None if mapping is None else mapping.tokens
    if kind == "prefetch":
        if tokens is not None:
            n = min(length, tokens.nbytes - start)
            advice = _POPULATE_READ if q.populate_ok else mmap.MADV_WILLNEED
            if not _advise_range(tokens, start, n, advice):
                if advice != _POPULATE_READ:
                    return
                q.populate_ok = False
                if not _advise_range(tokens, start, n, mmap.MADV_WILLNEED):
                    return
            metrics.bytes_prefetched += max(n, 0)
        elif _fadvise(q.mapper, target, start, length, os.POSIX_FADV_WILLNEED):  # type: ignore[arg-type]
            metrics.bytes_prefetched += length
        return
    released = 0
    if tokens is not None:
        n = min(length, tokens.nbytes - start)
        if _advise_range(tokens, start, n, mmap.MADV_DONTNEED):
            released = n
    if kind == "evict":
        if isinstance(target, StoreFile):
            evicted = _fadvise_path(target.path, start, length, os.POSIX_FADV_DONTNEED)
        else:
            evicted = _fadvise(q.mapper, target, start, length, os.POSIX_FADV_DONTNEED)
        if evicted:
            released = max(released, length)
    metrics.bytes_released += released


def _fadvise(mapper: Mapper, gid: int, start: int, length: int, advice: int) -> bool:
    """posix_fadvise on a shard's file through a descriptor opened for the call (no mapping is made)."""
    shard = mapper.shard(gid)
    if shard.compressed and "_decompressed" not in shard.__dict__:
        return False  # not decompressed yet: the loader's first read makes the local copy
    if getattr(mapper.datasets[mapper.dataset_of(gid)], "remote", False):
        return False  # a remote shard's bytes come through its block cache (GroupPrefetch)
    return _fadvise_path(shard.bin_path, start, length, advice)


def _fadvise_path(path: Any, start: int, length: int, advice: int) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, start, length, advice)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class HintWorker:
    """One thread per loader issuing hints in order; started on the first hint, stopped by `close()`."""

    def __init__(self, mapper: Mapper) -> None:
        self._q = _Queue(mapper)
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopper = weakref.finalize(self, _stop, self._q)  # a dropped worker stops its thread

    def submit(self, tasks: list[_Task]) -> None:
        if not tasks:
            return
        q = self._q
        if self._pid != os.getpid():  # a forked child: the parent's thread and condition are not ours
            self._q, self._thread, self._pid = _Queue(q.mapper), None, os.getpid()
            q = self._q
            self._stopper.detach()
            self._stopper = weakref.finalize(self, _stop, q)
        with q.cv:
            if q.stop:
                return
            q.tasks.extend(tasks)
            if len(q.tasks) > _MAX_PENDING:
                kept = [t for t in q.tasks if t[0] != "prefetch"]
                q.tasks = deque(kept + [t for t in q.tasks if t[0] == "prefetch"][-max(0, _MAX_PENDING - len(kept)):])
            q.busy = True
            q.cv.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=_run, args=(q,), name="shardkit-hints", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Block until every submitted hint was issued (tests and benchmarks; the loader never waits)."""
        q = self._q
        if self._thread is None or self._pid != os.getpid():
            return
        with q.cv:
            while q.tasks or q.busy:
                q.cv.wait(timeout=1.0)

    def close(self) -> None:
        """Stop the thread (pending hints are dropped) and wait for it."""
        if self._pid != os.getpid():  # a forked child: the thread and its lock are the parent's
            self._q, self._thread, self._pid = _Queue(self._q.mapper), None, os.getpid()
        q, thread = self._q, self._thread
        with q.cv:
            q.stop = True
            q.cv.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def _block_tasks(kind: str, stream: Stream, blocks: np.ndarray, metrics: ReadMetrics,
                 store_files: tuple[str, ...] = ("tokens",)) -> list[_Task]:
    """Tasks over the tokens of shuffle blocks (block j is samples [j·bs, (j+1)·bs), +1 token), page-aligned;
    for rows read from a row store, over those rows in the store's files `store_files`."""
    if not blocks.size:
        return []
    store = getattr(stream.windows, "store", None)
    if store is not None:
        return _store_tasks(kind, store, store_files, stream.order.block, blocks, metrics)
    bt = stream.order.block * stream.seq_len
    first = np.sort(blocks) * bt
    item = stream.windows.dataset.dtype.itemsize
    out: list[_Task] = []
    for s, lo, hi in stream.windows.token_ranges(first, first + bt + 1):
        a, b = lo * item, hi * item
        start = a - a % _PAGE
        out.append((kind, metrics, stream.windows.gid_base + s, start, b - start))
    return out


def _store_tasks(kind: str, store: Any, names: tuple[str, ...], block_rows: int, blocks: np.ndarray,
                 metrics: ReadMetrics) -> list[_Task]:
    """Tasks over the rows of shuffle blocks in a row store's files (a block's rows are contiguous there)."""
    lo = np.unique(blocks) * block_rows
    return _row_range_tasks(kind, store, names, lo, np.minimum(lo + block_rows, store.rows), metrics)


def _row_range_tasks(kind: str, store: Any, names: tuple[str, ...], lo: np.ndarray, hi: np.ndarray,
                     metrics: ReadMetrics) -> list[_Task]:
    """Tasks over rows [lo[i], hi[i]) (ascending, disjoint) of a row store's files `names`, page-aligned;
    ranges that touch or share a page are one task."""
    out: list[_Task] = []
    for name in names:
        array = getattr(store, name)
        file = StoreFile(array, str(store.directory / f"{name}.bin"))
        row_bytes = array.strides[0]
        start, end = lo * row_bytes, hi * row_bytes
        start -= start % _PAGE
        heads = np.flatnonzero(np.r_[True, start[1:] > end[:-1]])  # a range not touching the one before
        tails = np.r_[heads[1:], start.size] - 1
        for a, z in zip(start[heads].tolist(), end[tails].tolist()):
            if z > a:
                out.append((kind, metrics, file, a, z - a))
    return out


class GroupHints:
    """What one stream hints when delivery enters a shuffle group: the group and the next one (one rank),
    releases of the groups before it, or the remote cache's downloads (`GroupPrefetch`)."""

    def __init__(self, stream: Stream, worker: HintWorker, metrics: ReadMetrics, *, local: bool,
                 whole_groups: bool, evict: bool, remote: Any = None, store_files: tuple[str, ...] = ("tokens",)
                 ) -> None:
        self.stream = stream
        self.store_files = store_files  # a row store's files the rows read (tokens; positions and masks too)
        self.worker = worker
        self.metrics = metrics
        self.local = local and HINTS_AVAILABLE
        self.whole_groups = whole_groups
        self.release_kind = "evict" if evict else "release"
        self.remote = remote
        self._held: deque[tuple[int, int, np.ndarray]] = deque()  # (epoch, group, blocks), oldest first
        self._hinted: set[int] = set()  # blocks hinted and not released since
        self.current: tuple[int, int] | None = None
        # told the next group's blocks on entering a group (verify_on_read hashes them ahead)
        self.on_enter: Callable[[Stream, np.ndarray], None] | None = None

    def enter(self, epoch: int, group: int) -> None:
        """Delivery reaches (epoch, group): hint it and the next, release the groups before it."""
        if self.current == (epoch, group):
            return
        self.current = (epoch, group)
        order = self.stream.order
        self.metrics.groups_entered += 1
        blocks = order.blocks_of_group(epoch, group)
        nxt = order.blocks_of_group(*order.group_after(epoch, group))
        if self.on_enter is not None:
            self.on_enter(self.stream, nxt)
        if self.remote is not None:
            self.remote.enter_group(epoch, group, blocks, nxt,
                                    later=lambda k: order.blocks_of_group(*order.group_after(epoch, group, k)))
            return
        if not self.local:
            return
        wanted = np.unique(np.concatenate([blocks, nxt]))
        release = []
        while self._held and self._held[0][:2] != (epoch, group):  # delivery is in order: done
            # never drop blocks about to be read again (a small dataset is one group every epoch)
            old = np.setdiff1d(self._held.popleft()[2], wanted)
            if old.size:
                release.append(old)
                self._hinted.difference_update(old.tolist())
        self._held.append((epoch, group, blocks))
        tasks: list[_Task] = []
        for old in release:
            tasks += _block_tasks(self.release_kind, self.stream, old, self.metrics, self.store_files)
        if self.whole_groups:
            todo = np.array(sorted(set(wanted.tolist()) - self._hinted), dtype=np.int64)  # hint each block once
            self._hinted.update(todo.tolist())
            tasks += _block_tasks("prefetch", self.stream, todo, self.metrics, self.store_files)
        self.worker.submit(tasks)


def hint_store_rows(worker: HintWorker, rows: Rows, metrics_of: Callable[[int], ReadMetrics],
                    names: tuple[str, ...]) -> int:
    """`hint_rows` for rows read from row stores: the pages of the chunk's own rows in the stores' files
    `names` (several ranks: only this rank's share); returns bytes hinted."""
    if not rows.size or not HINTS_AVAILABLE:
        return 0
    tasks: list[_Task] = []
    for j, stream in rows.streams.items():
        store = getattr(stream.windows, "store", None)
        ids = np.unique(rows.ids[rows.rows_of(j)])
        if store is None or not ids.size:
            continue
        new = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1] + 1])  # runs of consecutive rows
        ends = ids[np.r_[new[1:], ids.size] - 1] + 1
        tasks += _row_range_tasks("prefetch", store, names, ids[new], ends, metrics_of(j))
    worker.submit(tasks)
    return sum(t[4] for t in tasks)


def hint_rows(worker: HintWorker, rows: Rows, metrics_of: Callable[[int], ReadMetrics], itemsize: int,
              width: int) -> int:
    """Hint the pages of a chunk's own rows (several ranks: only this rank's share); returns bytes hinted."""
    if not rows.size or not HINTS_AVAILABLE:
        return 0
    start = rows.local * itemsize
    start -= start % _PAGE
    end = (rows.local + width) * itemsize
    order = np.lexsort((start, rows.gid))
    gid, start, end, src = rows.gid[order], start[order], end[order], rows.src[order]
    # merge overlapping or touching page ranges of the same shard
    key = gid << 42  # shard first, then bytes (a shard is far below 4 TiB): one running maximum per shard
    run_end = np.maximum.accumulate(key + end)
    new = np.ones(gid.size, dtype=bool)
    new[1:] = (key[1:] + start[1:]) > run_end[:-1]
    heads = np.flatnonzero(new)
    tails = np.r_[heads[1:], gid.size] - 1
    tasks: list[_Task] = []
    total = 0
    for h, t in zip(heads.tolist(), tails.tolist()):
        lo, hi = int(start[h]), int(end[h:t + 1].max())
        tasks.append(("prefetch", metrics_of(int(src[h])), int(gid[h]), lo, hi - lo))
        total += hi - lo
    worker.submit(tasks)
    return total
