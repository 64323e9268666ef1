"""Random-access zstd container for one shard's token bytes: independent frames, an index, a footer.

Each frame holds exactly `block_size` uncompressed bytes (the last one fewer), so byte `o` of the
uncompressed stream lives in frame `o // block_size` and a read decompresses only the frames it
covers. The index and footer travel inside one zstd *skippable frame*, so the whole file is also an
ordinary zstd stream: `zstd -dc FILE` prints the uncompressed bytes.

Layout (all integers little-endian, `struct` formats in brackets)::

    [frame 0][frame 1]...[frame N-1]          zstd frames, back to back from offset 0
    [skippable header]  <II>  magic 0x184D2A5E, payload length = 32·N + 68
    [index]             N entries <QQ16s>: compressed offset, compressed length,
                        xxh3-128 digest (canonical 16 bytes) of the frame's UNCOMPRESSED bytes
    [footer]            68 bytes <QQQQ16sQI8s>:
        0   u64   block_size           uncompressed bytes per frame, 1 ≤ block_size ≤ 2**30
        8   u64   uncompressed_size    total uncompressed bytes
        16  u64   num_frames N         = ceil(uncompressed_size / block_size) (0 for empty data)
        24  u64   index_offset         offset of the first index entry
        32  16s   index_digest         xxh3-128 of the N·32 index bytes
        48  u64   footer_digest        xxh3-64 of footer bytes [0, 48)
        56  u32   version = 1
        60  8s    magic b"SKZFRM\\x00\\x01"

Invariants a reader checks before trusting anything: the file ends in the magic and a known version;
`footer_digest` and `index_digest` match; `index_offset + 32·N + 68` is the file size; the skippable
header sits at `index_offset - 8` with the right length; frames are contiguous from 0 to
`index_offset - 8`, none empty. Each frame must declare its content size in its zstd header, equal to
its expected length (never more than `block_size`) -- libzstd then stops with an error once output
passes the declared size, so a crafted frame cannot inflate memory -- must consume exactly its
compressed span, and must match its digest.

Errors: an unknown version is a `ManifestError` (written by a newer shardkit); everything else found
wrong with the bytes is an `IntegrityError` naming the file (and the frame, with its byte range).
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from struct import Struct
from typing import BinaryIO

import numpy as np
import xxhash
import zstandard

from ..errors import ConfigError, IntegrityError, ManifestError
from .atomic import atomic_file

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CACHE_FRAMES",
    "FOOTER_SIZE",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_BLOCK_SIZE",
    "FrameEntry",
    "FrameIndex",
    "FramedReader",
    "write_framed",
]

MAGIC = b"SKZFRM\x00\x01"
FORMAT_VERSION = 1
DEFAULT_BLOCK_SIZE = 1 << 20
MAX_BLOCK_SIZE = 1 << 30
DEFAULT_CACHE_FRAMES = 4

_SKIPPABLE = Struct("<II")
_SKIPPABLE_MAGIC = 0x184D2A5E
_ENTRY = Struct("<QQ16s")
_FOOTER_HEAD = Struct("<QQQQ16s")  # footer bytes [0, 48), covered by footer_digest
_FOOTER_TAIL = Struct("<QI8s")  # footer_digest, version, magic
FOOTER_SIZE = _FOOTER_HEAD.size + _FOOTER_TAIL.size  # 68
_TRAILING_SCAN = 1 << 16


def _digest(data: bytes | memoryview) -> bytes:
    return xxhash.xxh3_128_digest(data)


@dataclass(frozen=True, slots=True)
class FrameEntry:
    offset: int  # of the compressed frame in the file
    length: int  # compressed bytes
    digest: bytes  # xxh3-128 of the uncompressed bytes


@dataclass(frozen=True, slots=True)
class FrameIndex:
    """Where each frame is and what it must decompress to; `to_bytes` is the file's tail."""

    block_size: int
    uncompressed_size: int
    frames: tuple[FrameEntry, ...]

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    @property
    def index_offset(self) -> int:
        last = self.frames[-1] if self.frames else None
        return (last.offset + last.length if last else 0) + _SKIPPABLE.size

    @property
    def file_size(self) -> int:
        return self.index_offset + _ENTRY.size * len(self.frames) + FOOTER_SIZE

    def frame_range(self, i: int) -> tuple[int, int]:
        """Uncompressed byte range `[start, end)` of frame `i`."""
        start = i * self.block_size
        return start, min(start + self.block_size, self.uncompressed_size)

    def to_bytes(self) -> bytes:
        """Skippable header + index + footer, to be written right after the last frame."""
        index = b"".join(_ENTRY.pack(e.offset, e.length, e.digest) for e in self.frames)
        head = _FOOTER_HEAD.pack(self.block_size, self.uncompressed_size, len(self.frames), self.index_offset,
                                 _digest(index))
        footer = head + _FOOTER_TAIL.pack(xxhash.xxh3_64_intdigest(head), FORMAT_VERSION, MAGIC)
        return _SKIPPABLE.pack(_SKIPPABLE_MAGIC, len(index) + FOOTER_SIZE) + index + footer


def _as_bytes_view(data: bytes | memoryview | np.ndarray) -> memoryview:
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    return memoryview(data).cast("B")


def write_framed(
    path: Path,
    data: bytes | memoryview | np.ndarray,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    level: int = 3,
) -> FrameIndex:
    """Compress `data` into a framed zstd file at `path`, atomically; arrays are stored as their raw bytes."""
    if not isinstance(block_size, int) or not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise ConfigError(f"block_size must be an integer in [1, {MAX_BLOCK_SIZE}], got {block_size!r}")
    if not isinstance(level, int) or not -(1 << 17) <= level <= zstandard.MAX_COMPRESSION_LEVEL:
        raise ConfigError(f"zstd level must be an integer ≤ {zstandard.MAX_COMPRESSION_LEVEL}, got {level!r}")
    view = _as_bytes_view(data)
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
    entries: list[FrameEntry] = []
    offset = 0
    with atomic_file(Path(path)) as f:
        for start in range(0, view.nbytes, block_size):
            block = view[start:start + block_size]
            frame = cctx.compress(block)
            f.write(frame)
            entries.append(FrameEntry(offset, len(frame), _digest(block)))
            offset += len(frame)
        index = FrameIndex(block_size=block_size, uncompressed_size=view.nbytes, frames=tuple(entries))
        f.write(index.to_bytes())
    return index


class FramedReader:
    """Reads byte ranges of a framed zstd file, decompressing (and verifying) only the frames they cover.

    Opened on a path (the reader owns and closes the file) or on a seekable binary file object such as
    an fsspec file (left open). The footer and index are validated on open. Thread-safe; reads of
    the same reader serialize, so give each worker its own reader for parallel decompression.
    """

    def __init__(self, source: str | os.PathLike[str] | BinaryIO, *, cache_frames: int = DEFAULT_CACHE_FRAMES,
                 name: str | None = None) -> None:
        if not isinstance(cache_frames, int) or cache_frames < 0:
            raise ConfigError(f"cache_frames must be a non-negative integer, got {cache_frames!r}")
        if isinstance(source, (str, os.PathLike)):
            self.name = name or os.fspath(source)
            try:
                self._f: BinaryIO = open(source, "rb")  # noqa: SIM115 - closed by close()
            except OSError as e:
                raise ManifestError(self.name, f"cannot open framed zstd file ({e.strerror})") from None
            self._owns = True
        else:
            self.name = name or str(getattr(source, "path", None) or getattr(source, "name", None) or "<stream>")
            self._f = source
            self._owns = False
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_frames = cache_frames
        try:
            self.index = self._load_index()
        except BaseException:
            self.close()
            raise

    # -- properties -------------------------------------------------------------------------------
    @property
    def uncompressed_size(self) -> int:
        return self.index.uncompressed_size

    @property
    def num_frames(self) -> int:
        return self.index.num_frames

    @property
    def block_size(self) -> int:
        return self.index.block_size

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        if self._owns:
            self._f.close()

    def __enter__(self) -> FramedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- validation on open -----------------------------------------------------------------------
    def _bad(self, problem: str, *, byte_range: tuple[int, int] | None = None, expected: str | None = None,
             actual: str | None = None) -> IntegrityError:
        return IntegrityError(self.name, problem, byte_range=byte_range, expected=expected, actual=actual)

    def _pread(self, offset: int, n: int) -> bytes:
        self._f.seek(offset)
        got = self._f.read(n)
        while len(got) < n:  # file objects (fsspec, sockets) may return short reads before EOF
            more = self._f.read(n - len(got))
            if not more:
                break
            got += more
        if len(got) != n:
            raise self._bad(f"truncated: wanted {n} bytes at offset {offset}, file gave {len(got)}")
        return got

    def _load_index(self) -> FrameIndex:
        size = self._f.seek(0, io.SEEK_END)
        if size < _SKIPPABLE.size + FOOTER_SIZE:
            raise self._bad(f"truncated: {size} bytes is smaller than an empty framed file "
                            f"({_SKIPPABLE.size + FOOTER_SIZE} bytes)")
        footer = self._pread(size - FOOTER_SIZE, FOOTER_SIZE)
        head = footer[:_FOOTER_HEAD.size]
        block_size, total, n, index_offset, index_digest = _FOOTER_HEAD.unpack(head)
        footer_digest, version, magic = _FOOTER_TAIL.unpack(footer[_FOOTER_HEAD.size:])
        if magic != MAGIC:
            tail = self._pread(max(0, size - _TRAILING_SCAN), min(size, _TRAILING_SCAN))
            at = tail.rfind(MAGIC)
            if at >= 0:
                extra = len(tail) - at - len(MAGIC)
                raise self._bad(f"{extra} unexpected byte(s) after the footer (appended garbage?)")
            raise self._bad(f"bad magic {magic!r} at the end, expected {MAGIC!r}: not a shardkit framed "
                            f"zstd file, or truncated")
        if version != FORMAT_VERSION:
            raise ManifestError(self.name, f"framed zstd version {version} is unknown (this shardkit reads "
                                           f"version {FORMAT_VERSION}); upgrade shardkit or rewrite the file")
        actual = xxhash.xxh3_64_intdigest(head)
        if actual != footer_digest:
            raise self._bad("footer checksum mismatch (footer corrupted)",
                            expected=f"{footer_digest:016x}", actual=f"{actual:016x}")
        if not 1 <= block_size <= MAX_BLOCK_SIZE:
            raise self._bad(f"block_size {block_size} is outside [1, {MAX_BLOCK_SIZE}]")
        if n != -(-total // block_size):
            raise self._bad(f"sizes inconsistent: {n} frames for {total} bytes in blocks of {block_size}")
        index_len = _ENTRY.size * n
        if index_offset < _SKIPPABLE.size or index_offset + index_len + FOOTER_SIZE != size:
            raise self._bad(f"sizes inconsistent: index of {n} entries at offset {index_offset} plus footer "
                            f"does not end at the file size {size} (truncated or extended?)")
        raw_index = self._pread(index_offset, index_len)
        actual_index = _digest(raw_index)
        if actual_index != index_digest:
            raise self._bad("index checksum mismatch (index corrupted)",
                            expected=index_digest.hex(), actual=actual_index.hex())
        magic_skip, skip_len = _SKIPPABLE.unpack(self._pread(index_offset - _SKIPPABLE.size, _SKIPPABLE.size))
        if magic_skip != _SKIPPABLE_MAGIC or skip_len != index_len + FOOTER_SIZE:
            raise self._bad(f"skippable frame header before the index is wrong "
                            f"(magic {magic_skip:#x}, length {skip_len}; expected {_SKIPPABLE_MAGIC:#x}, "
                            f"{index_len + FOOTER_SIZE})")
        frames: list[FrameEntry] = []
        expected_offset = 0
        for i in range(n):
            off, length, digest = _ENTRY.unpack_from(raw_index, i * _ENTRY.size)
            if off != expected_offset or length == 0:
                raise self._bad(f"sizes inconsistent: frame {i} at offset {off} length {length}, expected "
                                f"a non-empty frame at offset {expected_offset}")
            frames.append(FrameEntry(off, length, digest))
            expected_offset = off + length
        if expected_offset != index_offset - _SKIPPABLE.size:
            raise self._bad(f"sizes inconsistent: frames end at {expected_offset}, index header starts at "
                            f"{index_offset - _SKIPPABLE.size}")
        return FrameIndex(block_size=block_size, uncompressed_size=total, frames=tuple(frames))

    # -- frames -----------------------------------------------------------------------------------
    def _decode(self, i: int, compressed: bytes) -> bytes:
        entry = self.index.frames[i]
        start, end = self.index.frame_range(i)
        expected_len = end - start
        where = f"frame {i} (file bytes [{entry.offset}, {entry.offset + entry.length}))"

        def bad(problem: str, expected: str | None = None, actual: str | None = None) -> IntegrityError:
            return self._bad(f"{where}: {problem}", byte_range=(start, end), expected=expected, actual=actual)

        try:
            declared = zstandard.get_frame_parameters(compressed).content_size
        except zstandard.ZstdError as e:
            raise bad(f"not a zstd frame ({e})") from None
        if declared == zstandard.CONTENTSIZE_UNKNOWN:
            raise bad("zstd frame header declares no content size; refusing to decompress it unbounded")
        if declared > self.index.block_size:
            raise bad(f"zstd frame declares {declared} bytes, more than block_size {self.index.block_size}; "
                      f"refusing to decompress it")
        if declared != expected_len:
            raise bad(f"zstd frame declares {declared} bytes, expected {expected_len}")
        # decompressobj stops at the frame's end (libzstd errors once output passes the declared size),
        # and reports anything after it, which `decompress()` would silently ignore.
        dobj = zstandard.ZstdDecompressor().decompressobj()
        try:
            out = dobj.decompress(compressed)
        except zstandard.ZstdError as e:
            raise bad(f"zstd cannot decompress it ({e})") from None
        if not dobj.eof or dobj.unused_data or len(out) != expected_len:
            raise bad(f"zstd frame is incomplete, overlong or followed by extra bytes "
                      f"(decoded {len(out)} of {expected_len} bytes, {len(dobj.unused_data)} bytes left over)")
        actual = _digest(out)
        if actual != entry.digest:
            raise bad("digest mismatch of the decompressed bytes", expected=entry.digest.hex(),
                      actual=actual.hex())
        return out

    def _frame(self, i: int) -> bytes:
        cached = self._cache.get(i)
        if cached is not None:
            self._cache.move_to_end(i)
            return cached
        entry = self.index.frames[i]
        out = self._decode(i, self._pread(entry.offset, entry.length))
        if self._cache_frames:
            self._cache[i] = out
            while len(self._cache) > self._cache_frames:
                self._cache.popitem(last=False)
        return out

    def read(self, offset: int, length: int) -> bytes:
        """Uncompressed bytes `[offset, offset + length)`; raises `IntegrityError` naming a bad frame."""
        if offset < 0 or length < 0 or offset + length > self.uncompressed_size:
            raise ConfigError(f"{self.name}: read of {length} bytes at offset {offset} is outside "
                              f"[0, {self.uncompressed_size})")
        if length == 0:
            return b""
        bs = self.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        with self._lock:
            parts = [self._frame(i) for i in range(first, last + 1)]
        lo = offset - first * bs
        if len(parts) == 1:
            return parts[0][lo:lo + length]
        return b"".join(parts)[lo:lo + length]

    def iter_frames(self) -> Iterator[tuple[int, bytes]]:
        """Yield `(i, uncompressed bytes)` for every frame in order, verified, bypassing the cache."""
        for i, entry in enumerate(self.index.frames):
            with self._lock:
                compressed = self._pread(entry.offset, entry.length)
            yield i, self._decode(i, compressed)

    def verify_all(self) -> None:
        """Decompress and check every frame; raises `IntegrityError` at the first bad one."""
        for _ in self.iter_frames():
            pass
