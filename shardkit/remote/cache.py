"""The on-disk block cache shared by every process of a node: sparse shard files, a state file, locks.

Layout of a cache directory (one per node, shared by ranks and DataLoader workers)::

    CACHE_DIR/.lock                 flock: held briefly while space is reserved or freed
    CACHE_DIR/<fingerprint[:32]>/   one dataset
        manifest.json, NAME.sum.json, NAME.idx   fetched whole and verified
        NAME.bin                    sparse file of the shard's full size; present blocks hold verified bytes
        state                       per block: state byte, last-use stamp, charge (mapped by every process)
        locks                       empty; OFD byte-range locks: byte 2i pins block i (shared = a reader,
                                    exclusive = an evictor), byte 2i + 1 is block i's download lock

A block's life: ABSENT → RESERVED (space charged under `.lock`) → bytes verified, `pwrite` →
PRESENT. Only PRESENT blocks are ever served, so a process killed mid-download leaves a RESERVED entry
whose download lock died with it; the next process to look (`recover`) punches it out. Eviction takes the
block's pin byte exclusively (it fails while any process pins it — nobody waits for a reader), marks it
RESERVED, punches the hole (`fallocate(PUNCH_HOLE)`), then ABSENT. The space in use is the sum of the
charges of all non-ABSENT blocks plus the metadata files of every dataset in the directory; a charge is
an upper bound of what the block really allocates (see `blocks.charge_of`), so the real allocated size
(st_blocks) never exceeds `limit`. OFD locks (not flock, not lockf) because they are byte-range, die with
their process, and — unlike POSIX record locks — separate threads and file descriptors of one process.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, ManifestError, ShardkitError
from ..format.atomic import atomic_write_bytes, write_errors
from ..format.manifest import MANIFEST_NAME, Manifest
from .blocks import (
    ABSENT,
    FS_BLOCK,
    PRESENT,
    RESERVED,
    BlockMap,
    charge_of,
    eviction_order,
    make_room,
    used_bytes,
)

__all__ = ["CacheError", "CacheFull", "CacheRoot", "DatasetCache", "allocated_bytes"]

_STATE_MAGIC = b"SKRCACHE"
_STATE_VERSION = 1
_HEADER = struct.Struct("<8sIIqqq")  # magic, version, reserved, num_blocks, block_size, meta_bytes
_HEADER_BYTES = 64
_META_AT = 32  # offset of meta_bytes in the header
_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_SEEK_DATA = getattr(os, "SEEK_DATA", 3)
_SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)
_SPACE = (errno.ENOSPC, errno.EDQUOT)
# serialises the per-process re-initialisation after a fork: several threads of a fresh child may notice
# the new pid at once, and two re-inits would leave a thread unlocking another descriptor than it locked
_reinit_lock = threading.Lock()


def _fresh_reinit_lock() -> None:
    global _reinit_lock
    _reinit_lock = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_fresh_reinit_lock)

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    _fallocate = _libc.fallocate
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _fallocate = None


class CacheError(ShardkitError):
    """The local cache cannot work as configured (unsupported file system, too small, damaged)."""


class CacheFull(CacheError):
    """No room right now: every block that could make room is pinned or being downloaded (by this process
    or others). A download thread meeting it waits like a block that found the cache full (`Fetcher`), a
    reader's thread in `Fetcher.with_room`."""

    def __init__(self, message: str, need: int = 0) -> None:
        super().__init__(message)
        self.need = need  # the bytes that found no room


def allocated_bytes(path: Path) -> int:
    """Bytes really allocated (st_blocks) by every file under `path`: what the limit bounds."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def _punch(fd: int, start: int, length: int, where: str) -> None:
    if length <= 0:
        return
    if _fallocate is None or _fallocate(fd, _PUNCH, start, length) != 0:
        err = ctypes.get_errno() if _fallocate is not None else errno.ENOSYS
        raise CacheError(f"{where}: cannot punch a hole in the cache file ({os.strerror(err)}); the block cache "
                         "needs a file system with FALLOC_FL_PUNCH_HOLE (ext4, xfs, btrfs, tmpfs): choose "
                         "another cache_dir")


def _flock_struct(kind: int, start: int) -> bytes:
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, start, 1, 0)


def ofd_lock(fd: int, kind: int, start: int, *, wait: bool) -> bool:
    """An OFD lock on byte `start` of `fd` (fcntl.F_RDLCK / F_WRLCK / F_UNLCK); False if busy and not waiting."""
    cmd = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    try:
        fcntl.fcntl(fd, cmd, _flock_struct(kind, start))
        return True
    except OSError as e:
        if not wait and e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


class CacheRoot:
    """One cache directory with a byte limit, shared by every process that names it (one object per process)."""

    _instances: dict[Path, CacheRoot] = {}
    _instances_lock = threading.Lock()

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.datasets: dict[str, DatasetCache] = {}
        self._pid = -1
        self._reinit()
        with self.space_errors(f"creating {self.path / '.probe'}"):
            self._probe_punch()

    @classmethod
    def get(cls, path: str | os.PathLike[str], limit: int) -> CacheRoot:
        p = Path(path).expanduser().absolute()
        if not isinstance(limit, int) or limit <= 0:
            raise ConfigError(f"cache_limit must be a positive number of bytes, got {limit!r}")
        with cls._instances_lock:
            root = cls._instances.get(p)
            if root is None:
                try:
                    p.mkdir(parents=True, exist_ok=True)
                    root = cls._instances[p] = cls(p, limit)
                except CacheError:
                    raise
                except OSError as e:  # read-only file system, a regular file in the path, no permission
                    raise CacheError(f"{p}: cannot be used as the remote cache directory ({e.strerror or e}); "
                                     "pass a writable cache_dir (or set SHARDKIT_REMOTE_CACHE_DIR)") from None
            root.limit = limit
            return root

    def _reinit(self) -> None:
        """(Re)open the lock file: after a fork the child must not share the parent's open file description.
        The pid is set last: another thread sees the new process only once its lock and descriptor exist."""
        self._thread_lock = threading.Lock()
        self._lock_fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._pid = os.getpid()

    def _probe_punch(self) -> None:
        probe = self.path / f".probe-{os.getpid()}"
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:  # a hole in an empty file allocates nothing, yet the call fails where punching is unsupported
            os.ftruncate(fd, FS_BLOCK)
            _punch(fd, 0, FS_BLOCK, str(self.path))
        finally:
            os.close(fd)
            probe.unlink()

    @contextlib.contextmanager
    def space_errors(self, what: str) -> Iterator[None]:
        """Turn a full file system (ENOSPC, EDQUOT) under the block into a CacheError that says what to do:
        a cache_limit above what the file system holds cannot be kept by eviction."""
        try:
            yield
        except OSError as e:
            if e.errno not in _SPACE:
                raise
            try:
                st = os.statvfs(self.path)
                free = st.f_bavail * st.f_frsize
            except OSError:
                free = 0
            held, file = allocated_bytes(self.path), getattr(e, "path", None) or e.filename
            if file and str(file) not in what:
                what = f"{what} ({file})"
            room = held + free
            why = (f"it has room for about {room:,} bytes of cache ({held:,} held, {free:,} free), less than "
                   f"cache_limit {self.limit:,}, so eviction cannot keep it from filling" if room < self.limit else
                   f"the cache holds {held:,} bytes of its cache_limit {self.limit:,} and other files take the rest")
            fix = f"lower cache_limit to at most {room:,} bytes or free space on that file system" if room else (
                "free space on that file system (none of it is left for the cache)")
            raise CacheError(f"{self.path}: the cache's file system is full ({what}: {e.strerror} "
                             f"({errno.errorcode.get(e.errno or 0, e.errno)})): {why}; {fix}, then run again "
                             "(blocks already cached stay valid)") from e

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The accounting lock: threads of this process, then processes (flock on `.lock`)."""
        if self._pid != os.getpid():
            with _reinit_lock:
                if self._pid != os.getpid():
                    self._reinit()
        lock, fd = self._thread_lock, self._lock_fd  # unlock exactly what was locked
        with lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    # -- accounting (call under `locked()`) --------------------------------------------------------------------
    def _all_datasets(self) -> list[DatasetCache]:
        """Every dataset in the directory, including ones only other processes have opened."""
        for entry in os.scandir(self.path):
            if entry.is_dir() and entry.name not in self.datasets and (Path(entry.path) / "state").exists():
                try:
                    self.datasets[entry.name] = DatasetCache.open_existing(self, Path(entry.path))
                except (ShardkitError, OSError, ValueError):
                    continue  # a damaged or half-created directory holds nothing we can account or evict
        return list(self.datasets.values())

    def used(self) -> int:
        return sum(ds.used() for ds in self._all_datasets())

    def make_room(self, need: int, *, skip: DatasetCache | None = None, skip_gid: int = -1) -> bool:
        """Evict finished blocks (least recently used first, across datasets) until `need` more bytes fit."""
        datasets = self._all_datasets()
        used = sum(ds.used() for ds in datasets)
        if used + need <= self.limit:
            return True
        datasets.sort(key=lambda d: d.key)  # least recently used first across datasets; ties alike everywhere
        ids = [eviction_order(ds.state, ds.stamp) for ds in datasets]
        stamps = np.concatenate([ds.stamp[i] for ds, i in zip(datasets, ids)])
        which = np.concatenate([np.full(i.size, k, dtype=np.int64) for k, i in enumerate(ids)])
        gids = np.concatenate(ids)
        order = np.lexsort((gids, which, stamps)).tolist()
        cands = ((int(datasets[k].charge[g]), (lambda ds=datasets[k], g=g: ds.try_evict(g)))
                 for k, g in ((int(which[j]), int(gids[j])) for j in order)
                 if not (datasets[k] is skip and g == skip_gid))
        if make_room(need, used, self.limit, cands) is not None:
            return True
        # what is left may be entries of killed processes: clear them and try once more
        if sum(ds.clear_stale() for ds in datasets):
            return self.make_room(need, skip=skip, skip_gid=skip_gid)
        return False


class DatasetCache:
    """One dataset's directory in the cache, as seen by this process."""

    def __init__(self, root: CacheRoot, directory: Path, manifest: Manifest) -> None:
        self.root = root
        self.dir = directory
        self.key = directory.name
        self.manifest = manifest
        self.blocks = BlockMap.build([e.bin_bytes for e in manifest.shards], manifest.checksum_block_size,
                                     manifest.token_dtype.itemsize)
        self.inflight: set[int] = set()  # blocks this process is downloading (its own locks do not exclude it)
        self._inflight_lock = threading.Lock()
        self._data_fds: dict[int, int] = {}
        self.fetcher: Any = None  # this process's prefetch.Fetcher and dataset._Remote (one each per dataset)
        self.remote_source: Any = None
        self._pid = -1
        self._map_state()
        self._reinit()

    # -- opening -----------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, root: CacheRoot, directory: Path, manifest: Manifest, manifest_bytes: bytes) -> DatasetCache:
        """Open (creating if needed) the directory of `manifest`, its state file and its sparse shard files."""
        with root.locked(), root.space_errors(f"creating the cache files of dataset {manifest.fingerprint[:16]}"):
            existing = root.datasets.get(directory.name)
            if existing is not None:
                return existing
            directory.mkdir(parents=True, exist_ok=True)
            meta = 0
            if not (directory / MANIFEST_NAME).exists():
                atomic_write_bytes(directory / MANIFEST_NAME, manifest_bytes)
            meta += int(charge_of(len(manifest_bytes)))
            bm = BlockMap.build([e.bin_bytes for e in manifest.shards], manifest.checksum_block_size,
                                manifest.token_dtype.itemsize)
            state_path = directory / "state"
            if not _state_ok(state_path, bm):
                # a new (or rebuilt) state: charge the metadata files already here too
                for f in os.scandir(directory):
                    if f.is_file() and f.name not in (MANIFEST_NAME, "state") and not f.name.endswith(".bin"):
                        meta += int(charge_of(f.stat().st_size))
                n = bm.num_blocks
                size = _state_size(n)
                meta += int(charge_of(size))
                if not root.make_room(meta):
                    raise CacheError(f"{root.path}: cache_limit {root.limit:,} bytes cannot hold the metadata of "
                                     f"{manifest.fingerprint[:16]} ({meta:,} bytes); raise cache_limit")
                raw = bytearray(size)
                _HEADER.pack_into(raw, 0, _STATE_MAGIC, _STATE_VERSION, 0, n, bm.block_size, meta)
                charges = np.frombuffer(raw, dtype=np.int64, count=n, offset=_charges_at(n))
                charges[:] = charge_of(bm.block_lengths())
                atomic_write_bytes(state_path, bytes(raw))
            (directory / "locks").touch()
            for e in manifest.shards:  # sparse files of full size: only written blocks allocate space
                p = directory / e.bin_name
                fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    if os.fstat(fd).st_size != e.bin_bytes:
                        os.ftruncate(fd, e.bin_bytes)
                finally:
                    os.close(fd)
            ds = root.datasets[directory.name] = cls(root, directory, manifest)
            ds.recover()
            return ds

    @classmethod
    def open_existing(cls, root: CacheRoot, directory: Path) -> DatasetCache:
        """A dataset another process put in the cache (to account for and evict its blocks)."""
        manifest = Manifest.load(directory)
        bm = BlockMap.build([e.bin_bytes for e in manifest.shards], manifest.checksum_block_size,
                            manifest.token_dtype.itemsize)
        if not _state_ok(directory / "state", bm):
            raise ManifestError(str(directory / "state"), "cache state file does not match the manifest")
        return cls(root, directory, manifest)

    def _map_state(self) -> None:
        n = self.blocks.num_blocks
        fd = os.open(self.dir / "state", os.O_RDWR)
        try:
            self._state_map = mmap.mmap(fd, _state_size(n))
        finally:
            os.close(fd)
        self.state = np.frombuffer(self._state_map, dtype=np.uint8, count=n, offset=_HEADER_BYTES)
        self.stamp = np.frombuffer(self._state_map, dtype=np.int64, count=n, offset=_stamps_at(n))
        self.charge = np.frombuffer(self._state_map, dtype=np.int64, count=n, offset=_charges_at(n))
        self._meta = np.frombuffer(self._state_map, dtype=np.int64, count=1, offset=_META_AT)

    def _reinit(self) -> None:
        """Per-process lock descriptors: pins through one, downloads/evictions through the other, so this
        process's own evictor conflicts with its own readers' pins. The pid is set last (see CacheRoot)."""
        self.pin_fd = os.open(self.dir / "locks", os.O_RDWR)
        self.own_fd = os.open(self.dir / "locks", os.O_RDWR)
        self._inflight_lock = threading.Lock()
        self.inflight = set()
        self._pid = os.getpid()

    def close(self) -> None:
        """Close this process's descriptors (which drops every lock it holds) and forget the dataset."""
        with self.root.locked():
            self.root.datasets.pop(self.key, None)
        for fd in [self.pin_fd, self.own_fd, *self._data_fds.values()]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._data_fds.clear()
        self.fetcher = self.remote_source = None

    def check_fork(self) -> None:
        if self._pid != os.getpid():
            with _reinit_lock:  # once per child, whichever of its threads gets here first
                if self._pid != os.getpid():
                    for fd in (self.pin_fd, self.own_fd):
                        with contextlib.suppress(OSError):
                            os.close(fd)  # the parent's descriptions stay open in the parent: its locks survive
                    self._reinit()

    # -- bookkeeping -------------------------------------------------------------------------------------------
    @property
    def meta_bytes(self) -> int:
        return int(self._meta[0])

    def add_meta(self, delta: int) -> None:
        """Charge (or release) metadata bytes; call under the root lock."""
        self._meta[0] = max(0, int(self._meta[0]) + delta)

    def used(self) -> int:
        return self.meta_bytes + used_bytes(self.state, self.charge)

    def reserve_meta(self, nbytes: int) -> None:
        """Charge a metadata file about to be written (evicting finished blocks for it)."""
        with self.root.locked():
            if not self.root.make_room(nbytes):
                raise CacheFull(f"{self.root.path}: cache_limit {self.root.limit:,} bytes is full of blocks in "
                                f"use; no room for {nbytes:,} bytes of metadata: raise cache_limit", nbytes)
            self.add_meta(nbytes)

    def release_meta(self, nbytes: int) -> None:
        with self.root.locked():
            self.add_meta(-nbytes)

    def data_fd(self, shard: int) -> int:
        fd = self._data_fds.get(shard)
        if fd is None:
            fd = self._data_fds[shard] = os.open(self.dir / self.manifest.shards[shard].bin_name, os.O_RDWR)
        return fd

    def where(self, gid: int) -> str:
        s, lo, hi = self.blocks.byte_range(gid)
        return f"{self.dir / self.manifest.shards[s].bin_name} bytes [{lo}, {hi})"

    def touch(self, gids: np.ndarray) -> None:
        self.stamp[gids] = time.time_ns()

    # -- transitions -------------------------------------------------------------------------------------------
    def reserve(self, gid: int) -> bool:
        """ABSENT → RESERVED if its charge fits (evicting finished blocks); the caller holds the download lock."""
        with self.root.locked():
            if self.state[gid] != ABSENT:
                return True  # a stale RESERVED entry (its owner died) is charged already
            if not self.root.make_room(int(self.charge[gid]), skip=self, skip_gid=gid):
                return False
            self.state[gid] = RESERVED
            return True

    def write(self, gid: int, data: bytes, *, durable: bool = False) -> None:
        """Put verified bytes in place, then mark the block PRESENT.

        No fsync by default: a process killed after `pwrite` leaves its bytes in the page cache, and after a
        power loss a PRESENT block whose bytes did not reach the disk fails the digest check that every
        process makes when it first pins a block it did not download — so it is refetched, never served.
        """
        s, lo, _ = self.blocks.byte_range(gid)
        fd = self.data_fd(s)
        view = memoryview(data)
        done = 0
        try:
            with self.root.space_errors(f"writing {self.where(gid)}"), write_errors(self.where(gid), "write"):
                while done < len(view):
                    done += os.pwrite(fd, view[done:], lo + done)
                if durable:
                    os.fdatasync(fd)
        except BaseException:
            # a torn write (a full disk fails it part way) is punched out and the block is ABSENT again; if
            # even that fails it stays RESERVED, which is never served and cleared by the next recovery
            with contextlib.suppress(ShardkitError, OSError):
                self.drop(gid)
            raise
        self.stamp[gid] = time.time_ns()
        self.state[gid] = PRESENT

    def punch(self, gid: int) -> None:
        """Free a block's bytes: the file-system pages wholly inside it, and pages it shares with a neighbour
        only when that neighbour is ABSENT (call under the root lock).

        A page at the shard's end is freed whole (a punch ending at an unaligned end of file would leave
        it allocated, and uncharged)."""
        s, lo, hi = self.blocks.byte_range(gid)
        first, last = int(self.blocks.base[s]), int(self.blocks.base[s + 1]) - 1
        a, b = lo, hi
        if lo % FS_BLOCK:
            shared = gid > first and self.state[gid - 1] != ABSENT
            a = lo - lo % FS_BLOCK + (FS_BLOCK if shared else 0)
        if hi % FS_BLOCK:
            shared = gid < last and self.state[gid + 1] != ABSENT
            b = hi - hi % FS_BLOCK + (0 if shared else FS_BLOCK)
        if b > a:
            _punch(self.data_fd(s), a, b - a, self.where(gid))

    def drop(self, gid: int) -> None:
        """RESERVED → ABSENT after a failed download (the caller holds the download lock)."""
        with self.root.locked():  # the punch may take pages shared with an ABSENT neighbour: keep it ABSENT
            self.punch(gid)
            self.state[gid] = ABSENT

    def try_evict(self, gid: int) -> bool:
        """Evict a block nobody pins or downloads (call under the root lock); False when it is in use."""
        with self._inflight_lock:
            if gid in self.inflight:
                return False
        if not ofd_lock(self.own_fd, fcntl.F_WRLCK, 2 * gid, wait=False):
            return False
        try:
            if not ofd_lock(self.own_fd, fcntl.F_WRLCK, 2 * gid + 1, wait=False):
                return False
            try:
                if self.state[gid] == ABSENT:
                    return False
                self.state[gid] = RESERVED
                self.punch(gid)
                self.state[gid] = ABSENT
                return True
            finally:
                ofd_lock(self.own_fd, fcntl.F_UNLCK, 2 * gid + 1, wait=False)
        finally:
            ofd_lock(self.own_fd, fcntl.F_UNLCK, 2 * gid, wait=False)

    def _clear_if_stale(self, gid: int) -> bool:
        with self._inflight_lock:
            if gid in self.inflight:
                return False
        if not ofd_lock(self.own_fd, fcntl.F_WRLCK, 2 * gid + 1, wait=False):
            return False  # a live process is writing or evicting it
        try:
            if self.state[gid] == PRESENT:
                return False
            self.punch(gid)
            self.state[gid] = ABSENT
            return True
        finally:
            ofd_lock(self.own_fd, fcntl.F_UNLCK, 2 * gid + 1, wait=False)

    def clear_stale(self) -> int:
        """Clear entries left by killed processes (RESERVED with no live download lock, damaged state bytes)."""
        ids = np.flatnonzero((self.state != ABSENT) & (self.state != PRESENT)).tolist()
        return sum(self._clear_if_stale(g) for g in ids)

    def recover(self) -> None:
        """Make the files agree with the state (call under the root lock): stale entries cleared, and bytes
        allocated for blocks the state calls ABSENT (a torn write, a damaged state byte) punched out."""
        self.clear_stale()
        bm = self.blocks
        for s, e in enumerate(self.manifest.shards):
            if e.bin_bytes == 0:
                continue
            fd = self.data_fd(s)
            pos = 0
            while pos < e.bin_bytes:
                try:
                    start = os.lseek(fd, pos, _SEEK_DATA)
                except OSError:
                    break  # no data after pos (ENXIO)
                end = os.lseek(fd, start, _SEEK_HOLE)
                first = int(bm.base[s]) + start // bm.block_size
                last = int(bm.base[s]) + (max(end, start + 1) - 1) // bm.block_size
                for g in range(first, last + 1):
                    if self.state[g] == ABSENT:
                        self._clear_if_stale(g)
                pos = max(end, start + 1)


def _state_size(n: int) -> int:
    return _charges_at(n) + 8 * n


def _stamps_at(n: int) -> int:
    return _HEADER_BYTES + (n + 7) // 8 * 8


def _charges_at(n: int) -> int:
    return _stamps_at(n) + 8 * n


def _state_ok(path: Path, bm: BlockMap) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(head) != _HEADER.size or size != _state_size(bm.num_blocks):
        return False
    magic, version, _, n, block, _ = _HEADER.unpack(head)
    return magic == _STATE_MAGIC and version == _STATE_VERSION and n == bm.num_blocks and block == bm.block_size
