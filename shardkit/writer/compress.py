"""Compress a finished raw shard into a framed zstd file (`NAME.bin.zst`), frames in parallel threads.

The container is `format.zstd_frames`' (independent frames of `frame_size` uncompressed bytes, an index
and a footer in a skippable frame). Frames are compressed independently by threads, each with its own
single-threaded compressor, and written in order, so the bytes equal `zstd_frames.write_framed`'s for
any thread count (zstd's own multi-threaded mode is never used: its output depends on the thread count).
The transport checksums (block digests of the compressed file) are computed as the bytes are written.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO

import xxhash
import zstandard

from ..errors import ConfigError
from ..format.checksums import BlockHasher, FileChecksums
from ..format.manifest import MAX_FRAME_SIZE, ShardCompression
from ..format.zstd_frames import DEFAULT_BLOCK_SIZE, FrameEntry, FrameIndex

__all__ = ["Codec", "CompressedFile", "CompressionConfig", "compress_file"]

MAX_LEVEL = 22


class Codec(Enum):
    """How shard tokens are stored: `none` writes NAME.bin; `zstd` writes framed NAME.bin.zst."""

    NONE = "none"
    ZSTD = "zstd"


@dataclass(frozen=True, kw_only=True)
class CompressionConfig:
    """Shard compression; part of the pack options (and so of the fingerprint) only when enabled."""

    codec: Codec = Codec.NONE
    level: int = 3
    frame_size: int = DEFAULT_BLOCK_SIZE  # uncompressed bytes per independent frame (1 MiB)

    def __post_init__(self) -> None:
        if not isinstance(self.codec, Codec):
            raise ConfigError(f"compression codec must be a Codec ({', '.join(c.value for c in Codec)}), "
                              f"got {self.codec!r}")
        if isinstance(self.level, bool) or not isinstance(self.level, int) or not 1 <= self.level <= MAX_LEVEL:
            raise ConfigError(f"zstd compression level must be an integer in [1, {MAX_LEVEL}], got {self.level!r}")
        if (isinstance(self.frame_size, bool) or not isinstance(self.frame_size, int)
                or not 1 <= self.frame_size <= MAX_FRAME_SIZE):
            raise ConfigError(f"frame size must be an integer number of bytes in [1, {MAX_FRAME_SIZE}] "
                              f"(e.g. 1MiB), got {self.frame_size!r}")

    @property
    def enabled(self) -> bool:
        return self.codec is not Codec.NONE

    def to_json(self) -> dict[str, Any]:
        return {"codec": self.codec.value, "level": self.level, "frame_size": self.frame_size}


@dataclass(frozen=True)
class CompressedFile:
    """What `compress_file` wrote: the frame index and the compressed file's block checksums."""

    index: FrameIndex
    transport: FileChecksums  # block digests of the compressed file itself
    level: int

    def entry(self) -> ShardCompression:
        return ShardCompression(codec=Codec.ZSTD.value, level=self.level, frame_size=self.index.block_size,
                                file_bytes=self.transport.size)


_local = threading.local()


def _compress_frame(level: int, block: memoryview) -> tuple[bytes, bytes]:
    """(zstd frame, xxh3-128 of the uncompressed block); one compressor per thread and level."""
    cctx = getattr(_local, "cctx", None)
    if cctx is None or _local.level != level:
        cctx = _local.cctx = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
        _local.level = level
    return cctx.compress(block), xxhash.xxh3_128_digest(block)


def _frames(view: memoryview, config: CompressionConfig, threads: int) -> Iterator[tuple[bytes, bytes]]:
    """Compressed frames in order; at most 2 × threads in flight, so memory stays flat."""
    starts = range(0, view.nbytes, config.frame_size)
    if threads <= 1:
        for s in starts:
            yield _compress_frame(config.level, view[s:s + config.frame_size])
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="zstd") as pool:
        pending: deque[Future[tuple[bytes, bytes]]] = deque()
        for s in starts:
            pending.append(pool.submit(_compress_frame, config.level, view[s:s + config.frame_size]))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _write_all(f: BinaryIO, view: memoryview, config: CompressionConfig, threads: int,
               checksum_block_size: int) -> CompressedFile:
    hasher = BlockHasher(checksum_block_size)
    entries: list[FrameEntry] = []
    offset = 0
    for frame, digest in _frames(view, config, threads):
        f.write(frame)
        hasher.update(frame)
        entries.append(FrameEntry(offset, len(frame), digest))
        offset += len(frame)
    index = FrameIndex(block_size=config.frame_size, uncompressed_size=view.nbytes, frames=tuple(entries))
    tail = index.to_bytes()
    f.write(tail)
    hasher.update(tail)
    return CompressedFile(index=index, transport=hasher.finish(), level=config.level)


def compress_file(raw: Path, out: Path, config: CompressionConfig, *, checksum_block_size: int,
                  threads: int = 1) -> CompressedFile:
    """Compress the file `raw` into `out` (written and fsynced, not renamed: the caller commits it)."""
    if not config.enabled:
        raise ConfigError("compress_file needs an enabled compression config")
    with open(raw, "rb") as src, open(out, "wb") as f:
        size = os.fstat(src.fileno()).st_size
        if size == 0:
            result = _write_all(f, memoryview(b""), config, threads, checksum_block_size)
        else:
            mm = mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                with memoryview(mm) as view:
                    result = _write_all(f, view, config, threads, checksum_block_size)
            finally:
                mm.close()
        f.flush()
        os.fsync(f.fileno())
    return result
