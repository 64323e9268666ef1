"""This process's side of the block cache: pins, background downloads in priority order, and the wait.

Three kinds of requests share one queue, most urgent first: blocks a reader is waiting for (URGENT), the
exact upcoming rows of the loader's planned chunk in order of first use (CHUNK), and the blocks of the
current and next shuffle group (GROUP). A block is *ready* for this process once it is pinned (an OFD
shared lock: no process can evict it) and known to hold verified bytes — downloaded and checked here, or
found PRESENT and re-checked here against its digest (so a damaged cache entry is refetched, never
served). Only the threads that read (the "owner" side: `ensure`, `PinSet.set`) change pins; download
threads only mark blocks ready, so a pin can never disappear under a reader.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .blocks import PRESENT, RESERVED
from .cache import CacheError, CacheFull, DatasetCache, ofd_lock

__all__ = ["URGENT", "CHUNK", "GROUP", "Fetcher", "PinSet"]

T = TypeVar("T")

URGENT, CHUNK, GROUP = 0, 1, 2
_forks = [0]  # bumped in every forked child: a cheap "am I still the process that set this up?" check
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


def fork_count() -> int:
    return _forks[0]
_PARK_RETRY = 0.5  # seconds between retries of prefetches that found the cache full


class Fetcher:
    """Downloads and pins one dataset's cache blocks for this process (one per dataset and process)."""

    def __init__(self, cache: DatasetCache, download: Callable[[int], bytes], verify: Callable[[int], bool], *,
                 workers: int = 4, stall_timeout: float = 300.0, prepare: Callable[[int], object] | None = None
                 ) -> None:
        self.cache = cache
        self.n = cache.blocks.num_blocks
        self._download = download
        self._verify = verify
        self._prepare = prepare  # fetches what checking block g needs (its shard's sidecar) before space is taken
        self.workers = max(1, workers)
        self.stall_timeout = stall_timeout
        self.metrics = {"blocks_downloaded": 0, "bytes_downloaded": 0, "blocks_verified": 0,
                        "corrupt_refetched": 0, "waits": 0, "wait_seconds": 0.0, "window_pins_dropped": 0}
        self._pinsets: weakref.WeakSet[PinSet] = weakref.WeakSet()
        self._pid = -1
        self._reset()

    def _reset(self) -> None:
        """Fresh per-process state (at start and in a forked child: pins and threads are not inherited)."""
        self._pid = os.getpid()
        self._fork = fork_count()
        self.generation = getattr(self, "generation", 0) + 1
        self.refs = np.zeros(self.n, dtype=np.int32)
        self.ready = np.zeros(self.n, dtype=bool)
        self._cond = threading.Condition(threading.Lock())
        self._owner = threading.RLock()
        self._heap: list[tuple[int, int, int]] = []
        self._queued: dict[int, int] = {}
        self._busy: set[int] = set()
        self._parked: set[int] = set()
        self._nospace: set[int] = set()
        self._errors: dict[int, tuple[int, BaseException]] = {}  # block: (its attempt's number, error)
        self._attempts = 0  # download attempts begun by this process (numbered from 1)
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._freed = False
        self._deferred: list[np.ndarray] = []
        self.cache.check_fork()

    def _check_fork(self) -> None:
        if self._fork != _forks[0]:
            self._reset()

    # -- pins (owner side) ---------------------------------------------------------------------------------------
    def pin(self, gids: np.ndarray) -> None:
        """Pin blocks for this process: the OFD lock first, so a block counted as pinned is really locked."""
        with self._owner:
            for g in gids[self.refs[gids] == 0].tolist():
                ofd_lock(self.cache.pin_fd, fcntl.F_RDLCK, 2 * g, wait=True)
            with self._cond:
                self.refs[gids] += 1

    def unpin(self, gids: np.ndarray) -> None:
        if not gids.size:
            return
        with self._owner:
            with self._cond:
                self.refs[gids] -= 1
                zero = gids[self.refs[gids] == 0]
                self.ready[zero] = False
                if zero.size:  # evictable now: prefetches that found the cache full may fit
                    self._freed = True
                    self._cond.notify_all()
            for g in zero.tolist():
                ofd_lock(self.cache.pin_fd, fcntl.F_UNLCK, 2 * g, wait=False)

    def request(self, gids: np.ndarray, prio: int) -> None:
        """Queue pinned blocks for download/verification, in the order given."""
        with self._cond:
            todo = gids[~self.ready[gids]].tolist()
            for g in todo:
                if self._queued.get(g, 99) > prio and g not in self._busy:
                    self._queued[g] = prio
                    heapq.heappush(self._heap, (prio, next(self._seq), g))
                    self._parked.discard(g)
            if todo:
                self._start_workers()
                self._cond.notify_all()

    def _defer_release(self, box: list[Any]) -> None:
        """A PinSet was dropped (called by its finaliser, on any thread): release its pins at the next owner call."""
        if box[1] == self.generation and box[0].size:
            self._deferred.append(box[0])

    def _drain(self) -> None:
        while self._deferred:
            self.unpin(self._deferred.pop())

    def ensure(self, gids: np.ndarray, held: PinSet) -> None:
        """Pin `gids` in place of `held`'s previous read, and wait until all are ready (bytes verified).

        Raises the download's error (naming URL and block) if a block cannot be had.
        """
        self._check_fork()
        if self._closed:
            raise CacheError(f"{self.cache.dir}: the remote dataset was closed; open it again to read")
        self.cache.touch(gids)
        cur = held.gids
        if cur.size == gids.size and bool((cur == gids).all()) and bool(self.ready[gids].all()):
            return  # the same blocks as the last read: pinned by it, so ready cannot have been cleared
        with self._owner:
            held.set(gids)
            if not self.ready[gids].all():
                self._wait(gids)

    def _wait(self, gids: np.ndarray) -> None:
        started = time.monotonic()
        self.metrics["waits"] += 1
        asked: dict[int, int] = {}  # block: the attempts begun before this read first asked for it
        stalled_since: float | None = None
        try:
            while True:
                with self._cond:
                    missing = gids[~self.ready[gids]].tolist()
                    if not missing:
                        return
                    full = [g for g in missing if g in self._nospace]
                    self._nospace.difference_update(full)
                    for g in missing:
                        since = asked.setdefault(g, self._attempts)
                        attempt, err = self._errors.pop(g, (0, None))
                        # only an attempt begun after this read asked is its verdict: an earlier one (a prefetch,
                        # perhaps on a disk that was full then) gets one more, urgent, attempt first
                        if err is not None and attempt > since:
                            raise err
                if full:
                    if self._drop_window_pins(keep=gids):
                        stalled_since = None
                    else:  # other processes' pins fill the cache: wait for them to move on
                        self._check_fits(gids)
                        stalled_since = stalled_since or time.monotonic()
                        if time.monotonic() - stalled_since > self.stall_timeout:
                            raise CacheError(
                                f"{self.cache.root.path}: cache_limit {self.cache.root.limit:,} bytes is full of "
                                f"blocks other readers pin, and a read needs {len(full)} more; raise cache_limit "
                                "(it should hold two shuffle groups per distinct reader position)")
                        time.sleep(0.05)
                self.request(np.asarray(missing, dtype=np.int64), URGENT)
                with self._cond:
                    if not self.ready[gids].all() and not (set(missing) & (self._nospace | set(self._errors))):
                        self._cond.wait(timeout=0.5)
        finally:
            self.metrics["wait_seconds"] += time.monotonic() - started

    def with_room(self, fn: Callable[[], T]) -> T:
        """`fn()` on a reader's thread, where fn writes a metadata file into the cache (a shard's index or
        checksum sidecar): while the cache is full of pinned blocks (CacheFull), give up this process's
        prefetch pins, then wait for other processes to move on, as a read of blocks does, up to stall_timeout.

        Called outside the metadata locks fn takes: download threads need them to make progress."""
        stalled_since: float | None = None
        while True:
            try:
                return fn()
            except CacheFull as e:
                self._check_fork()
                with self._owner:
                    if self._drop_window_pins(keep=np.zeros(0, dtype=np.int64)):
                        stalled_since = None
                        continue
                self._check_room(e.need, f"a metadata file of {e.need:,} bytes")
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > self.stall_timeout:
                    raise CacheError(f"{e} (waited {self.stall_timeout:g} s for other readers to release their "
                                     "blocks)") from None
                time.sleep(0.05)

    def _check_room(self, need: int, what: str) -> None:
        """Metadata alone leaving no room for `need` bytes can never be helped by waiting: say so at once."""
        root, meta = self.cache.root, self._metadata_bytes()
        if need + meta > root.limit:
            raise CacheError(f"{root.path}: {what} does not fit in cache_limit {root.limit:,} beside the cached "
                             f"metadata ({meta:,} bytes); raise cache_limit to at least {need + meta:,} bytes")

    def _check_fits(self, gids: np.ndarray) -> None:
        """A single read whose blocks exceed the whole cache can never proceed: say so at once."""
        root, meta = self.cache.root, self._metadata_bytes()
        need = int(self.cache.charge[gids].sum())
        if need + meta > root.limit:
            raise CacheError(
                f"{root.path}: one read touches {gids.size} cache blocks ({need:,} bytes with metadata "
                f"{meta:,}), more than cache_limit {root.limit:,}; raise cache_limit to at least "
                f"{need + meta:,} bytes: with shuffle='block' a read draws from a whole shuffle group, so the cache "
                "should hold two groups (block_samples × group_blocks samples each); with shuffle='full', the "
                "whole dataset")

    def _metadata_bytes(self) -> int:
        """What every dataset in the cache directory charges for its metadata files (never evicted)."""
        with self.cache.root.locked():
            return sum(ds.meta_bytes for ds in self.cache.root._all_datasets())

    def _drop_window_pins(self, keep: np.ndarray) -> bool:
        """The cache cannot hold what a read needs: give up this process's prefetch pins (not `keep`)."""
        dropped = False
        for w in list(self._pinsets):
            if w.prio is None:
                continue  # a reader's current read
            extra = np.setdiff1d(w.gids, keep)
            if extra.size:
                w._box[0] = np.intersect1d(w.gids, keep)
                self.unpin(extra)
                self.metrics["window_pins_dropped"] += int(extra.size)
                dropped = True
        return dropped

    # -- download threads ----------------------------------------------------------------------------------------
    def _start_workers(self) -> None:
        while len(self._threads) < self.workers:
            t = threading.Thread(target=self._work, name=f"shardkit-fetch-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the download threads (a download in progress finishes first)."""
        with self._cond:
            self._closed = True
            self.generation += 1  # readers' cached "ready" knowledge is void: their pins go with the descriptors
            self._cond.notify_all()
        if self._pid == os.getpid():
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(timeout)

    def _next(self) -> tuple[int, int, int] | None:
        with self._cond:
            last_retry = time.monotonic()
            while True:
                if self._closed or self._pid != os.getpid():
                    return None
                if self._parked and (self._freed or time.monotonic() - last_retry >= _PARK_RETRY):
                    self._freed = False
                    for g in self._parked:
                        if self.refs[g] > 0:
                            self._queued[g] = GROUP
                            heapq.heappush(self._heap, (GROUP, next(self._seq), g))
                    self._parked.clear()
                    last_retry = time.monotonic()
                while self._heap:
                    prio, _, g = heapq.heappop(self._heap)
                    if self._queued.get(g) != prio:
                        continue  # superseded by a more urgent entry
                    del self._queued[g]
                    if self.ready[g] or g in self._busy or self.refs[g] == 0:
                        continue  # done, being fetched, or nobody wants it any more
                    self._busy.add(g)
                    self._attempts += 1
                    return prio, g, self._attempts
                self._cond.wait(timeout=_PARK_RETRY)

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            prio, g, attempt = job
            try:
                self._fetch(g, prio)
            except CacheFull:  # no room for a metadata file the block needs: wait as for the block itself
                with self._cond:
                    (self._nospace if prio == URGENT else self._parked).add(g)
            except BaseException as e:  # handed to the reader that waits for this block
                with self._cond:
                    self._errors[g] = (attempt, e)
            finally:
                with self._cond:
                    self._busy.discard(g)
                    self._cond.notify_all()

    def _mark_ready(self, g: int) -> None:
        with self._cond:
            if self.refs[g] > 0:
                self.ready[g] = True

    def _fetch(self, g: int, prio: int) -> None:
        cache = self.cache
        if self._prepare is not None:  # before the block is reserved: its charge must not crowd the sidecar out
            self._prepare(g)
        with cache._inflight_lock:
            cache.inflight.add(g)
        ofd_lock(cache.own_fd, fcntl.F_WRLCK, 2 * g + 1, wait=True)  # another process may be downloading it
        try:
            if cache.state[g] == PRESENT:
                if self._verify(g):
                    self.metrics["blocks_verified"] += 1
                    self._mark_ready(g)
                    return
                self.metrics["corrupt_refetched"] += 1  # damaged entry: rewrite it with verified bytes
                data = self._download(g)
                cache.state[g] = RESERVED
                cache.write(g, data)
                self._count(data)
                self._mark_ready(g)
                return
            if not cache.reserve(g):
                with self._cond:
                    (self._nospace if prio == URGENT else self._parked).add(g)
                return
            try:
                data = self._download(g)
            except BaseException:
                cache.drop(g)
                raise
            cache.write(g, data)
            self._count(data)
            self._mark_ready(g)
        finally:
            with contextlib.suppress(OSError):
                ofd_lock(cache.own_fd, fcntl.F_UNLCK, 2 * g + 1, wait=False)
            with cache._inflight_lock:
                cache.inflight.discard(g)

    def _count(self, data: bytes) -> None:
        self.metrics["blocks_downloaded"] += 1
        self.metrics["bytes_downloaded"] += len(data)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {**self.metrics, "pinned": int((self.refs > 0).sum()), "ready": int(self.ready.sum())}


class PinSet:
    """Blocks this process keeps pinned for one purpose (a reader's last read, a prefetch window), replaced
    as a whole; with a priority, what it pins is also fetched, in the order given. Dropping the object
    releases its pins (deferred to the next owner call: a finaliser must not take locks)."""

    def __init__(self, fetcher: Fetcher, prio: int | None) -> None:
        self.fetcher = fetcher
        self.prio = prio
        self._box: list[Any] = [np.zeros(0, dtype=np.int64), fetcher.generation]
        fetcher._pinsets.add(self)
        weakref.finalize(self, fetcher._defer_release, self._box)

    @property
    def gids(self) -> np.ndarray:
        return self._box[0] if self._box[1] == self.fetcher.generation else np.zeros(0, dtype=np.int64)

    def set(self, gids: np.ndarray) -> None:
        """Pin `gids` (and request them in this order), release what the previous set held beyond them."""
        f = self.fetcher
        f._check_fork()
        with f._owner:
            f._drain()
            if self._box[1] != f.generation:  # forked: the parent's pins are not ours
                self._box[:] = [np.zeros(0, dtype=np.int64), f.generation]
                f._pinsets.add(self)
            cur, new = set(self._box[0].tolist()), gids.tolist()
            f.pin(np.fromiter((g for g in set(new) if g not in cur), dtype=np.int64))
            f.unpin(np.fromiter(cur.difference(new), dtype=np.int64))
            self._box[0] = np.unique(gids)
            if self.prio is not None:
                f.request(gids, self.prio)

    def clear(self) -> None:
        self.set(np.zeros(0, dtype=np.int64))
