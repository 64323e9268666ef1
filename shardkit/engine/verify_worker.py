"""Checksum blocks of local shards, hashed on a background thread ahead of the loader (`verify_on_read`).

The loader plans a chunk of rows and then copies it slab by slab. The chunk's blocks that this loader has not
verified yet are queued here in order of first use and hashed on one thread per loader (xxh3 releases the
GIL, and the page faults of a block are taken here, not on the loader's thread) while the loader copies the
slabs before them; before a slab is copied the loader waits only for the blocks that slab reads first.

The thread never maps through the loader's `Mapper` (its descriptor budget is the loader thread's to
spend): it hashes through the loader's own mapping when one is held (`Mapper.peek` — filling the page
tables the copy will use), else through a mapping of just that block, made and dropped here. Either way
the file's size is checked first (one fstat), so a file truncated under the loader raises instead of
SIGBUS, as in the loader's copies.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from ..errors import IntegrityError
from ..format.checksums import ShardChecksums, digest_bytes
from ..format.dataset import Dataset
from ..remote.blocks import BlockMap
from .mapper import Mapper
from .readahead import _POPULATE_READ, _advise_range

__all__ = ["BlockCheck", "LocalBlocks", "VerifyWorker", "UNKNOWN", "QUEUED", "GOOD", "FAILED", "ERROR", "DAMAGED"]

# a block's state for this loader (one byte per 16 MiB block: 1.4 MB for the 12 T-token yardstick corpus):
# FAILED — hashed by the thread, did not match (the loader applies on_corrupt); DAMAGED — declared so after it
UNKNOWN, QUEUED, GOOD, FAILED, ERROR, DAMAGED = 0, 1, 2, 3, 4, 5
_SUMS_KEPT = 64  # sidecars kept parsed (one per shard; a 1 GiB shard's is ~6 KB)


class BlockCheck:
    """The outcome of hashing one block: its place, the digests, and whether they match."""

    __slots__ = ("ok", "expected", "actual", "byte_range", "shard", "block")

    def __init__(self, ok: bool, expected: str, actual: str, byte_range: tuple[int, int], shard: int, block: int
                 ) -> None:
        self.ok, self.expected, self.actual = ok, expected, actual
        self.byte_range, self.shard, self.block = byte_range, shard, block


class LocalBlocks:
    """One local dataset's checksum blocks: their state for this loader, their digests, how to hash one."""

    def __init__(self, dataset: Dataset, gid_base: int) -> None:
        self.dataset = dataset
        self.gid_base = gid_base
        self.map = BlockMap.build((s.entry.bin_bytes for s in dataset.shards), dataset.checksum_block_size,
                                  dataset.dtype.itemsize)
        self.state = np.zeros(self.map.num_blocks, dtype=np.int8)
        self._sums: OrderedDict[int, ShardChecksums] = OrderedDict()
        self._lock = threading.Lock()

    def digest(self, shard: int, i: int) -> str:
        """Block i's digest from the shard's sidecar, whose own digest is checked against the manifest."""
        sh = self.dataset.shards[shard]
        with self._lock:
            sums = self._sums.get(shard)
            if sums is not None:
                self._sums.move_to_end(shard)
        if sums is None:
            raw = _read_sidecar(sh.sum_path)
            if (got := digest_bytes(raw)) != sh.entry.sum_digest:
                raise IntegrityError(str(sh.sum_path), f"checksum sidecar digest {got} differs from the manifest's "
                                                       f"{sh.entry.sum_digest}; run `shardkit verify --full "
                                                       f"{sh.directory}`")
            sums = ShardChecksums.from_bytes(raw, str(sh.sum_path))
            with self._lock:
                self._sums[shard] = sums
                if len(self._sums) > _SUMS_KEPT:
                    self._sums.popitem(last=False)
        fc = sums.files.get(sh.entry.bin_name)
        if fc is None or i >= len(fc.blocks) or fc.size != sh.entry.bin_bytes:
            raise IntegrityError(str(sh.sum_path), f"no digest for block {i} of {sh.entry.bin_name} of "
                                                   f"{sh.entry.bin_bytes:,} bytes; run `shardkit verify --full "
                                                   f"{sh.directory}`")
        return fc.blocks[i]

    def check(self, g: int, mapper: Mapper, *, own_thread: bool, reread: bool = False) -> BlockCheck:
        """Hash block g. `own_thread`: the caller is the loader's thread and may map through `mapper`;
        `reread`: drop the block's cached pages first, so its bytes come from the device again."""
        s, lo, hi = self.map.byte_range(g)
        i = g - int(self.map.base[s])
        want = self.digest(s, i)
        shard = self.dataset.shards[s]
        held = mapper.tokens(self.gid_base + s) if own_thread else mapper.peek(self.gid_base + s)
        if held is not None:
            held.check_intact(shard)  # one fstat: a truncated file raises instead of SIGBUS
            tokens = held.tokens
            if reread:
                _advise_range(tokens, lo, hi - lo, mmap.MADV_DONTNEED)
                _fadvise_dontneed(shard.bin_path, lo, hi - lo)
            if not _advise_range(tokens, lo, hi - lo, _POPULATE_READ):  # page tables filled in one call
                _advise_range(tokens, lo, hi - lo, mmap.MADV_WILLNEED)
            got = digest_bytes(memoryview(tokens.view(np.uint8)[lo:hi]))
        else:
            got = _hash_range(shard.bin_path, shard.name, shard.entry.bin_bytes, lo, hi, reread)
        return BlockCheck(got == want, want, got, (lo, hi), s, i)


def _hash_range(path: os.PathLike[str], name: str, size: int, lo: int, hi: int, reread: bool) -> str:
    """xxh3-128 of bytes [lo, hi) of a file, through a mapping of just that range."""
    with open(path, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        if actual < size:
            raise IntegrityError(name, f"{os.fspath(path)} is {actual:,} bytes, the manifest records {size:,}: the "
                                       "dataset was modified under a running reader; restore it or re-pack",
                                 byte_range=(actual, size), expected=str(size), actual=str(actual))
        if reread:
            os.posix_fadvise(f.fileno(), lo, hi - lo, os.POSIX_FADV_DONTNEED)
        start = lo - lo % mmap.ALLOCATIONGRANULARITY
        mm = mmap.mmap(f.fileno(), hi - start, offset=start, access=mmap.ACCESS_READ)
    try:
        mm.madvise(mmap.MADV_WILLNEED)
        view = memoryview(mm)
        try:
            return digest_bytes(view[lo - start:])
        finally:
            view.release()
    finally:
        mm.close()


def _read_sidecar(path: os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise IntegrityError(str(path), f"cannot read the checksum sidecar ({e.strerror})") from None


def _fadvise_dontneed(path: os.PathLike[str], offset: int, length: int) -> None:
    """Drop a file range's cached pages (clean pages no other process maps)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class VerifyWorker:
    """One thread hashing queued blocks in order; the loader waits for a block's state before reading it."""

    def __init__(self, mapper: Mapper, blocks: dict[int, LocalBlocks]) -> None:
        self.mapper = mapper
        self.blocks = blocks
        self.hashed = [0, 0]  # blocks, bytes hashed by this process
        self._reset()

    def _reset(self) -> None:
        """Fresh per-process state (at start, and in a forked child: the thread is not inherited)."""
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[int, int]] = deque()
        self._errors: dict[tuple[int, int], BaseException] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        for b in self.blocks.values():  # a parent's queued blocks are this process's to hash again
            b.state[b.state == QUEUED] = UNKNOWN

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def submit(self, keys: list[tuple[int, int]], *, urgent: bool = True) -> None:
        """Queue blocks not verified yet, in the order given (the order the loader will first read them):
        `urgent` ones (a planned chunk's) before everything queued, the others (the next group's) after."""
        self._check_fork()
        with self._cond:
            todo = []
            for d, g in keys:
                st = self.blocks[d].state
                if st[g] == UNKNOWN or (urgent and st[g] == QUEUED):
                    st[g] = QUEUED
                    todo.append((d, g))
            if urgent:
                self._queue.extendleft(reversed(todo))  # a block queued before is skipped when reached again
            else:
                self._queue.extend(todo)
            if self._queue:
                if self._thread is None or not self._thread.is_alive():
                    self._closed = False
                    self._thread = threading.Thread(target=self._run, name="shardkit-verify", daemon=True)
                    self._thread.start()
                self._cond.notify()

    def wait(self, d: int, g: int) -> int:
        """Block g's state once hashed (hashing it here if it was never queued); raises what hashing raised."""
        self._check_fork()
        st = self.blocks[d].state
        with self._cond:
            while st[g] == QUEUED and self._thread is not None and self._thread.is_alive():
                self._cond.wait(0.5)
            err = self._errors.pop((d, g), None)
            if st[g] == ERROR:
                st[g] = UNKNOWN  # the next read tries again
            state = int(st[g])
        if err is not None:
            raise err
        if state in (UNKNOWN, QUEUED):  # never queued, or the thread stopped: hash it on this thread
            check = self.blocks[d].check(g, self.mapper, own_thread=True)
            self.count_hashed(check)
            st[g] = GOOD if check.ok else FAILED
            state = int(st[g])
        return state

    def count_hashed(self, check: BlockCheck) -> None:
        """Count a block hashed (by this thread, or a re-read on the loader's): the bytes verified metric."""
        self.hashed[0] += 1
        self.hashed[1] += check.byte_range[1] - check.byte_range[0]

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                d, g = self._queue.popleft()
                st = self.blocks[d].state
                if st[g] != QUEUED:  # queued twice (urgent, then reached again): done already
                    continue
            try:
                check = self.blocks[d].check(g, self.mapper, own_thread=False)
                new = GOOD if check.ok else FAILED
            except BaseException as e:  # noqa: BLE001 - handed to the loader's thread, which raises it
                check, new = None, ERROR
                with self._cond:
                    self._errors[(d, g)] = e
            with self._cond:
                if check is not None:
                    self.count_hashed(check)
                st[g] = new
                self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread (queued blocks go back to unknown: hashed again if read again)."""
        if self._pid != os.getpid():
            return
        with self._cond:
            self._closed = True
            self._queue.clear()
            for b in self.blocks.values():
                b.state[b.state == QUEUED] = UNKNOWN
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        self._thread = None


def stop_worker(worker: Any) -> None:
    """The finalizer of a dropped verifier: must not refer to the verifier itself."""
    worker.close()
