"""Block checksums: xxh3-128 over fixed-size blocks of each shard file, kept in a JSON sidecar.

Per-block digests make verification parallel (any block can be checked alone) and locate a corrupt
region instead of only detecting it. The manifest records the sidecar's own digest, so the chain
manifest → sidecar → blocks covers every byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from ..errors import ManifestError

__all__ = [
    "CHECKSUM_ALGORITHM",
    "DEFAULT_BLOCK_SIZE",
    "BlockHasher",
    "FileChecksums",
    "ShardChecksums",
    "digest_bytes",
    "file_block_digests",
    "file_hexdigest",
]

CHECKSUM_ALGORITHM = "xxh3_128"
DEFAULT_BLOCK_SIZE = 16 * 1024 * 1024
SIDECAR_FORMAT = "shardkit-checksums"
SIDECAR_VERSION = 1
_READ_CHUNK = 4 * 1024 * 1024


def digest_bytes(data: bytes | memoryview) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def file_hexdigest(path: str | os.PathLike[str], new_hash: Callable[[], Any] = xxhash.xxh3_128) -> str:
    """Hex digest of a whole file (xxh3-128 unless `new_hash` makes another hash object), read a
    `_READ_CHUNK` at a time: memory stays flat whatever the file's size."""
    h = new_hash()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class BlockHasher:
    """Streams bytes in and yields one digest per `block_size` bytes (the last block may be short)."""

    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.size = 0
        self.digests: list[str] = []
        self._h = xxhash.xxh3_128()
        self._in_block = 0

    def update(self, data: bytes | memoryview) -> None:
        mv = memoryview(data).cast("B")
        while mv.nbytes:
            take = min(self.block_size - self._in_block, mv.nbytes)
            self._h.update(mv[:take])
            self._in_block += take
            self.size += take
            mv = mv[take:]
            if self._in_block == self.block_size:
                self.digests.append(self._h.hexdigest())
                self._h.reset()
                self._in_block = 0

    def finish(self) -> FileChecksums:
        if self._in_block or not self.digests:
            self.digests.append(self._h.hexdigest())
            self._h.reset()
            self._in_block = 0
        return FileChecksums(size=self.size, blocks=tuple(self.digests))


@dataclass(frozen=True, slots=True)
class FileChecksums:
    size: int
    blocks: tuple[str, ...]  # an empty file has one block: the digest of no bytes

    def block_range(self, i: int, block_size: int) -> tuple[int, int]:
        start = i * block_size
        return start, min(start + block_size, self.size)


def file_block_digests(path: str | os.PathLike[str], block_size: int) -> FileChecksums:
    hasher = BlockHasher(block_size)
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_READ_CHUNK):
            hasher.update(chunk)
    return hasher.finish()


@dataclass(frozen=True)
class ShardChecksums:
    """The sidecar `NAME.sum.json`: block digests of a shard's `.bin` and `.idx`."""

    block_size: int
    files: dict[str, FileChecksums]

    def to_bytes(self) -> bytes:
        doc = {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "algorithm": CHECKSUM_ALGORITHM,
            "block_size": self.block_size,
            "files": {
                name: {"size": fc.size, "blocks": list(fc.blocks)} for name, fc in sorted(self.files.items())
            },
        }
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> ShardChecksums:
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:  # (RecursionError: nested too deeply)
            raise ManifestError(where, f"checksum sidecar is not valid JSON ({str(e)[:200]})") from None
        if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
            raise ManifestError(where, "not a shardkit checksum sidecar")
        if doc.get("version") != SIDECAR_VERSION or doc.get("algorithm") != CHECKSUM_ALGORITHM:
            raise ManifestError(where, f"unsupported checksum sidecar version/algorithm "
                                       f"({doc.get('version')!r}, {doc.get('algorithm')!r})")
        block_size = doc.get("block_size")
        files = doc.get("files")
        if not isinstance(block_size, int) or block_size <= 0 or not isinstance(files, dict):
            raise ManifestError(where, "checksum sidecar lacks a positive block_size or a files table")
        out: dict[str, FileChecksums] = {}
        for name, entry in files.items():
            size = entry.get("size") if isinstance(entry, dict) else None
            blocks = entry.get("blocks") if isinstance(entry, dict) else None
            if not isinstance(size, int) or size < 0 or not isinstance(blocks, list):
                raise ManifestError(where, f"checksum entry for {name!r} is malformed")
            expected_blocks = max(1, -(-size // block_size))
            if len(blocks) != expected_blocks or not all(isinstance(b, str) and len(b) == 32 for b in blocks):
                raise ManifestError(where, f"checksum entry for {name!r} has {len(blocks)} digests, "
                                           f"expected {expected_blocks} for {size:,} bytes")
            out[name] = FileChecksums(size=size, blocks=tuple(blocks))
        return cls(block_size=block_size, files=out)

    @classmethod
    def read(cls, path: Path) -> ShardChecksums:
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise ManifestError(str(path), f"cannot read checksum sidecar ({e.strerror})") from None
        return cls.from_bytes(raw, str(path))
