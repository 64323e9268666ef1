"""Read side of compressed shards: byte ranges on demand, and a verified decompressed copy for mapping.

A compressed shard is `NAME.bin.zst` (see `zstd_frames`: independent frames of `frame_size` bytes). Two
ways to read it:

* **Ranges** — `decompress_range(source, lo, hi)` / `FrameRanges` decompress only the frames covering
  uncompressed bytes `[lo, hi)`, from a path or any seekable file object (an fsspec remote file works);
  `FrameRanges.compressed_span(lo, hi)` says which bytes of the `.zst` those frames occupy, so a remote
  block cache can fetch exactly them first; `fetch_tail` + `decode_span` turn one fetched span (plus the
  file's tail, fetched once) into verified uncompressed bytes without further fetches.
* **Whole shard** — `DecompressCache.materialize` decompresses the shard once into a plain `.bin` in a
  per-user cache directory (temp file → checked against the shard's uncompressed block checksums →
  fsync → rename), which `Shard.tokens` then maps like any shard: the loader's hot path is unchanged.
  Cache entries sit under the dataset's fingerprint and are named by the shard's sidecar digest (which
  covers the uncompressed and compressed digests), so a re-packed or changed shard never meets a stale
  entry. An entry is a derived file that anyone with write access to the cache could change, so it is
  verified against the sidecar's block checksums when a process first uses it (one read of the entry; the
  result is remembered per inode, size and mtime) and rebuilt if it does not match: a damaged or
  poisoned entry is never served, and `verify --deep` never blames the dataset for one. Processes that
  open the same shard at once (DataLoader workers) take a lock: one decompresses, the others map its result.

Cache location: `cache_dir` if given, else `$SHARDKIT_CACHE_DIR/decompressed`, else
`$XDG_CACHE_HOME/shardkit/decompressed`, else `~/.cache/shardkit/decompressed`. Entries are never
evicted automatically; deleting the directory is always safe (it is re-made on the next open).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import stat
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError, IntegrityError, ManifestError
from .checksums import BlockHasher, FileChecksums, ShardChecksums, digest_bytes, file_block_digests
from .manifest import ShardEntry
from .zstd_frames import FOOTER_SIZE, FramedReader, FrameIndex

__all__ = [
    "CACHE_FORMAT",
    "DecompressCache",
    "FrameRanges",
    "RangeFile",
    "check_frame_index",
    "decode_span",
    "decompress_range",
    "fetch_tail",
    "default_cache_dir",
    "decompress_shard",
    "iter_frames",
    "shard_checksums",
]

CACHE_FORMAT = 2  # bump when the cache layout changes: old entries are then simply not found


def default_cache_dir() -> Path:
    """Where decompressed shards are cached unless a `cache_dir` is given (same root as the tokenizer cache)."""
    if os.environ.get("SHARDKIT_CACHE_DIR"):
        root = Path(os.environ["SHARDKIT_CACHE_DIR"])
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardkit"
    return root / "decompressed"


def _default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# -- byte ranges ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FrameRanges:
    """Maps uncompressed byte ranges of one framed file to its frames and to compressed byte spans."""

    index: FrameIndex

    def frames(self, lo: int, hi: int) -> range:
        """Frames covering uncompressed bytes `[lo, hi)` (empty for an empty range)."""
        size = self.index.uncompressed_size
        if not 0 <= lo <= hi <= size:
            raise ConfigError(f"byte range [{lo}, {hi}) is outside [0, {size}]")
        if lo == hi:
            return range(0)
        bs = self.index.block_size
        return range(lo // bs, (hi - 1) // bs + 1)

    def compressed_span(self, lo: int, hi: int) -> tuple[int, int]:
        """Bytes `[start, end)` of the `.zst` holding the frames of uncompressed `[lo, hi)`: what to fetch."""
        fr = self.frames(lo, hi)
        if not fr:
            return 0, 0
        first, last = self.index.frames[fr.start], self.index.frames[fr.stop - 1]
        return first.offset, last.offset + last.length

    @property
    def tail_span(self) -> tuple[int, int]:
        """Bytes of the skippable index frame + footer (what `FramedReader` reads on open)."""
        start = self.index.index_offset - 8
        return start, self.index.file_size


class RangeFile(io.RawIOBase):
    """A read-only seekable file over `fetch(offset, length) -> bytes`, e.g. an HTTP range GET or a block cache.

    Lets `FramedReader` (and `decompress_range`) read a `.zst` that lives elsewhere, through whatever
    fetching and caching the caller already has: opening reads the footer and index (two small reads at
    the end), each frame is then one `fetch` of its compressed span.
    """

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, name: str = "<range file>") -> None:
        super().__init__()
        self._fetch, self._size, self._pos, self.name = fetch, size, 0, name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = max(0, min(len(buffer), self._size - self._pos))
        if n == 0:
            return 0
        data = self._fetch(self._pos, n)
        got = len(data)
        memoryview(buffer).cast("B")[:got] = data
        self._pos += got
        return got


def fetch_tail(fetch: Callable[[int, int], bytes], file_size: int) -> tuple[int, bytes]:
    """`(offset, bytes)` of a framed file's index frame and footer, in two fetches: the footer, then the rest.

    The bytes are checked (digests, layout) when `decode_span` parses them; fetch them once per file.
    """
    if file_size < 8 + FOOTER_SIZE:
        raise IntegrityError("<framed file>", f"truncated: {file_size} bytes is smaller than an empty framed file")
    footer = fetch(file_size - FOOTER_SIZE, FOOTER_SIZE)
    index_offset = int.from_bytes(footer[24:32], "little")  # footer field 3 (docs/format.md)
    start = index_offset - 8
    if not 0 <= start <= file_size - FOOTER_SIZE:
        raise IntegrityError("<framed file>", f"footer names index offset {index_offset}, outside the file of "
                                              f"{file_size} bytes (corrupted footer?)")
    return start, fetch(start, file_size - FOOTER_SIZE - start) + footer


def decode_span(tail: tuple[int, bytes], span_start: int, span: bytes, lo: int, hi: int, *,
                name: str = "<framed file>") -> bytes:
    """Verified uncompressed bytes `[lo, hi)` from `span` (compressed bytes at `span_start` of the file).

    `tail` is `fetch_tail`'s result; `span` must cover `FrameRanges(index).compressed_span(lo, hi)` (a
    shorter one is an error naming the missing bytes). Nothing is fetched; safe to call from any thread.
    """
    tail_at, tail_bytes = tail
    size = tail_at + len(tail_bytes)

    def serve(offset: int, n: int) -> bytes:
        if offset >= tail_at:
            return tail_bytes[offset - tail_at:offset - tail_at + n]
        if span_start <= offset and offset + n <= span_start + len(span):
            return span[offset - span_start:offset - span_start + n]
        raise ConfigError(f"{name}: bytes [{offset}, {offset + n}) are needed but the span given covers "
                          f"[{span_start}, {span_start + len(span)})")

    try:
        reader = FramedReader(RangeFile(serve, size, name), cache_frames=0, name=name)
    except ConfigError:  # only a damaged footer reads outside the tail (a scan for its magic)
        raise IntegrityError(name, "the footer is damaged (no magic at the end of the tail bytes)") from None
    with reader as r:
        if not 0 <= lo <= hi <= r.uncompressed_size:
            raise ConfigError(f"{name}: byte range [{lo}, {hi}) is outside [0, {r.uncompressed_size}]")
        return r.read(lo, hi - lo)


def decompress_range(source: str | os.PathLike[str] | BinaryIO, byte_lo: int, byte_hi: int) -> bytes:
    """Uncompressed bytes `[byte_lo, byte_hi)` of a framed `.zst` (path or seekable file object), verified.

    Decompresses only the frames the range covers. For many reads of one file keep a `FramedReader`
    open instead: this opens (and validates the index of) the file on every call.
    """
    with FramedReader(source, cache_frames=0) as r:
        if not 0 <= byte_lo <= byte_hi <= r.uncompressed_size:
            raise ConfigError(f"{r.name}: byte range [{byte_lo}, {byte_hi}) is outside [0, {r.uncompressed_size}]")
        return r.read(byte_lo, byte_hi - byte_lo)


def iter_frames(path: Path, *, threads: int = 1, name: str | None = None) -> Iterator[tuple[int, bytes]]:
    """`(i, uncompressed bytes)` of every frame in order, verified; frames decode in `threads` threads.

    Each thread has its own reader (a reader serializes its reads); at most 2 × threads frames are in
    flight, so memory stays at a few frames however large the file.
    """
    with FramedReader(path, cache_frames=0, name=name) as head:
        n = head.num_frames
        if threads <= 1 or n <= 1:
            yield from head.iter_frames()
            return
        local = threading.local()
        readers: list[FramedReader] = []
        lock = threading.Lock()

        def one(i: int) -> bytes:
            r = getattr(local, "reader", None)
            if r is None:
                r = local.reader = FramedReader(path, cache_frames=0, name=name)
                with lock:
                    readers.append(r)
            start, end = head.index.frame_range(i)
            return r.read(start, end - start)

        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="unzstd") as pool:
                pending: deque[tuple[int, Future[bytes]]] = deque()
                for i in range(n):
                    pending.append((i, pool.submit(one, i)))
                    if len(pending) >= 2 * threads:
                        j, fut = pending.popleft()
                        yield j, fut.result()
                while pending:
                    j, fut = pending.popleft()
                    yield j, fut.result()
        finally:
            for r in readers:
                r.close()


# -- checks shared by the loader, verify and `shardkit decompress` --------------------------------------

def shard_checksums(directory: Path, entry: ShardEntry) -> ShardChecksums:
    """The shard's sidecar, trusted only if its digest is the manifest's."""
    path = directory / entry.sum_name
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ManifestError(str(path), f"cannot read checksum sidecar ({e.strerror})") from None
    actual = digest_bytes(raw)
    if actual != entry.sum_digest:
        raise IntegrityError(entry.name, f"{entry.sum_name} changed since the manifest was written",
                             expected=entry.sum_digest, actual=actual)
    return ShardChecksums.from_bytes(raw, str(path))


def check_frame_index(index: FrameIndex, entry: ShardEntry, where: str) -> None:
    """The framed file's footer must describe this shard: its uncompressed size and frame size."""
    c = entry.compression
    if c is None:
        raise ConfigError(f"shard {entry.name} is not compressed")
    if index.uncompressed_size != entry.bin_bytes:
        raise IntegrityError(where, f"frame index holds {index.uncompressed_size:,} uncompressed bytes, the "
                                    f"manifest records {entry.bin_bytes:,}",
                             expected=str(entry.bin_bytes), actual=str(index.uncompressed_size))
    if index.block_size != c.frame_size:
        raise IntegrityError(where, f"frame size {index.block_size:,} differs from the manifest's "
                                    f"{c.frame_size:,}", expected=str(c.frame_size), actual=str(index.block_size))


def decompress_shard(directory: Path, entry: ShardEntry, out: BinaryIO, *, threads: int | None = None) -> None:
    """Write the shard's uncompressed bytes to `out`, checking every frame and every uncompressed block.

    Raises `IntegrityError` naming the shard and the frame or block (byte range) that is wrong; what was
    written to `out` by then must be discarded by the caller.
    """
    sums = shard_checksums(directory, entry)
    expected = sums.files.get(entry.bin_name)
    if expected is None:
        raise IntegrityError(entry.name, f"{entry.sum_name} has no checksums of the uncompressed {entry.bin_name}")
    zst = directory / entry.zst_name
    with FramedReader(zst, cache_frames=0) as r:
        check_frame_index(r.index, entry, str(zst))
    hasher = BlockHasher(sums.block_size)
    for _, data in iter_frames(zst, threads=threads or _default_threads()):
        out.write(data)
        hasher.update(data)
    got = hasher.finish()
    mismatch = _first_mismatch(got, expected, sums.block_size)
    if mismatch is not None:
        i, rng = mismatch
        raise IntegrityError(entry.name, f"decompressed {entry.bin_name} block {i} does not match its checksum "
                                         f"(the frames decode cleanly: the .zst was replaced by another file?)",
                             byte_range=rng, expected=expected.blocks[i] if i < len(expected.blocks) else None,
                             actual=got.blocks[i] if i < len(got.blocks) else None)


def _first_mismatch(got: FileChecksums, expected: FileChecksums, block_size: int
                    ) -> tuple[int, tuple[int, int]] | None:
    if got.size != expected.size:
        lo = min(got.size, expected.size)
        return lo // block_size, (lo, max(got.size, expected.size))
    for i, (a, b) in enumerate(zip(got.blocks, expected.blocks)):
        if a != b:
            return i, got.block_range(i, block_size)
    return None


# -- the decompressed cache -----------------------------------------------------------------------------

class DecompressCache:
    """Verified decompressed copies of compressed shards, one plain file per shard content."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, threads: int | None = None,
                 fingerprint: str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.threads = threads
        self.fingerprint = fingerprint
        self._checked: set[tuple[int, int, int, int]] = set()  # (dev, inode, size, mtime) of verified entries

    def path_for(self, entry: ShardEntry) -> Path:
        """The entry's cache file: under the dataset's fingerprint, named by the sidecar digest."""
        base = self.root / f"v{CACHE_FORMAT}"
        if self.fingerprint:
            base = base / self.fingerprint[:32]
        return base / f"{entry.name}-{entry.sum_digest}-{entry.bin_bytes}.bin"

    def _ready(self, path: Path, size: int, directory: Path, entry: ShardEntry) -> bool:
        """Whether `path` is a regular file of `size` bytes whose blocks match the shard's sidecar."""
        try:
            st = path.lstat()
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in self._checked:
            return True
        if not self._matches(path, directory, entry):
            return False
        self._checked.add(key)
        return True

    def _matches(self, path: Path, directory: Path, entry: ShardEntry) -> bool:
        sums = shard_checksums(directory, entry)
        expected = sums.files.get(entry.bin_name)
        if expected is None:
            raise IntegrityError(entry.name, f"{entry.sum_name} has no checksums of the uncompressed {entry.bin_name}")
        try:
            got = file_block_digests(path, sums.block_size)
        except OSError:
            return False
        return _first_mismatch(got, expected, sums.block_size) is None

    def materialize(self, directory: Path, entry: ShardEntry) -> Path:
        """The shard's plain `.bin` in the cache, decompressed and verified now unless already there."""
        final = self.path_for(entry)
        if self._ready(final, entry.bin_bytes, directory, entry):
            return final
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(final.with_name(final.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(f"cannot use the decompression cache {final.parent} ({e.strerror}); pass a "
                              f"writable cache_dir (or set SHARDKIT_CACHE_DIR), or run `shardkit decompress` "
                              "to make a plain copy of the dataset") from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # one process decompresses; the others wait, then map it
            if self._ready(final, entry.bin_bytes, directory, entry):
                return final
            fd, tmp = tempfile.mkstemp(prefix=f".{entry.name}-", suffix=".tmp", dir=final.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    decompress_shard(directory, entry, out, threads=self.threads)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, final)
                st = final.lstat()
                self._checked.add((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))  # verified as written
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            return final
        finally:
            os.close(lock_fd)

    @contextlib.contextmanager
    def scratch_copy(self, directory: Path, entry: ShardEntry) -> Iterator[Path]:
        """A verified plain copy for one use: the cache entry if present, else a temp file removed after.

        For whole-dataset scans (`verify --deep`) that must not fill the cache with every shard.
        """
        final = self.path_for(entry)
        if self._ready(final, entry.bin_bytes, directory, entry):
            yield final
            return
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".scratch-{entry.name}-", suffix=".tmp", dir=final.parent)
        except OSError as e:
            raise ConfigError(f"cannot write a scratch copy in {final.parent} ({e.strerror}); pass a writable "
                              "cache_dir (or set SHARDKIT_CACHE_DIR)") from None
        try:
            with os.fdopen(fd, "wb") as out:
                decompress_shard(directory, entry, out, threads=self.threads or 1)
            yield Path(tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
