"""Rolling shard writer: documents go into `NAME.bin` as they arrive; a shard becomes visible only whole.

Each shard is written under temp names, its block checksums computed while the bytes stream through
(no second read), then `.bin`, `.idx` and the checksum sidecar are fsynced and renamed into place.
With compression, the finished temp `.bin` is compressed into `NAME.bin.zst` (fsynced) and the raw
temp file removed; the sidecar then holds the uncompressed `.bin` digests *and* the `.bin.zst`'s.
A shard rolls over before a document that would take it past the size limit, so documents never
straddle shards and a shard exceeds the limit only when one document alone is larger.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format.atomic import fsync_dir, temp_path, write_errors
from ..format.checksums import BlockHasher, ShardChecksums, digest_bytes
from ..format.idx import MAX_SEQUENCE_TOKENS, encode_index
from ..format.manifest import ShardEntry, check_shard_name
from .compress import CompressionConfig, compress_file

__all__ = ["RESUME_HINT", "ShardLimits", "ShardWriter", "shard_name"]

# what a pack that failed to write should do next (the journal still names every finished shard)
RESUME_HINT = "re-run the same `shardkit pack` command: it resumes after the last finished shard"


def shard_name(prefix: str, index: int) -> str:
    return check_shard_name(f"{prefix}-{index:05d}", "shard name")


@dataclass(frozen=True, kw_only=True)
class ShardLimits:
    """When to roll over: by bytes of tokens, by token count, or both (whichever comes first)."""

    max_bytes: int | None = 1 << 30
    max_tokens: int | None = None
    checksum_block_size: int = 16 << 20

    def capacity_tokens(self, itemsize: int) -> int:
        caps = [c for c in (self.max_tokens, (self.max_bytes // itemsize) if self.max_bytes else None) if c]
        return min(caps) if caps else 1 << 62


class ShardWriter:
    """Writes shards `PREFIX-00000`, `PREFIX-00001`, … into `directory`."""

    def __init__(
        self,
        directory: Path,
        *,
        dtype: np.dtype,
        limits: ShardLimits,
        prefix: str = "shard",
        next_index: int = 0,
        with_ids: bool = False,
        compression: CompressionConfig | None = None,
        compress_threads: int = 1,
    ) -> None:
        self.directory = directory
        self.dtype = np.dtype(dtype)
        self.limits = limits
        self.prefix = prefix
        self.next_index = next_index
        self.with_ids = with_ids
        self.compression = compression if compression is not None and compression.enabled else None
        self.compress_threads = max(1, compress_threads)
        self.capacity = limits.capacity_tokens(self.dtype.itemsize)
        self._bin = None
        self._hasher: BlockHasher | None = None
        self._lengths: list[np.ndarray] = []
        self._ids: list[str] = []
        self._tokens = 0
        self._docs = 0

    @property
    def open_tokens(self) -> int:
        return self._tokens

    @property
    def has_open_shard(self) -> bool:
        return self._bin is not None and self._docs > 0

    def fitting_docs(self, lengths: np.ndarray) -> int:
        """How many of the next documents (by length) fit the open shard; at least 1 into an empty shard."""
        room = self.capacity - self._tokens
        cum = np.cumsum(lengths, dtype=np.int64)
        k = int(np.searchsorted(cum, room, side="right"))
        if k == 0 and self._docs == 0 and lengths.size:
            return 1
        return k

    def write_docs(self, tokens: np.ndarray, lengths: np.ndarray, ids: list[str | None] | None = None) -> None:
        """Append documents (flat tokens, their lengths) to the open shard, opening one if needed."""
        if lengths.size == 0:
            return
        if int(lengths.max()) > MAX_SEQUENCE_TOKENS:
            raise ValueError(f"a document of {int(lengths.max()):,} tokens exceeds the index format's "
                             f"{MAX_SEQUENCE_TOKENS:,}-token limit")
        if self._bin is None:
            self._open()
        data = np.ascontiguousarray(tokens, dtype=self.dtype.newbyteorder("<"))
        mv = memoryview(data).cast("B")
        with write_errors(self._bin.name, hint=RESUME_HINT):  # type: ignore[union-attr]
            self._bin.write(mv)  # type: ignore[union-attr]
        self._hasher.update(mv)  # type: ignore[union-attr]
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        if self.with_ids:
            self._ids.extend(json.dumps(i) for i in (ids or [None] * int(lengths.size)))
        self._tokens += int(data.size)
        self._docs += int(lengths.size)

    def close_shard(self) -> ShardEntry | None:
        """Finish the open shard (fsync + rename of every file); None if nothing was written to it.

        An OSError (disk full, I/O error) becomes a WriteError naming the file; the shard stays unfinished.
        """
        if self._bin is None:
            return None
        with write_errors(self._bin.name, hint=RESUME_HINT):
            return self._close_shard()

    def _close_shard(self) -> ShardEntry:
        name = shard_name(self.prefix, self.next_index)
        bin_final = self.directory / f"{name}.bin"
        self._bin.flush()
        if self.compression is None:  # a raw temp that is compressed next is deleted, never kept
            os.fsync(self._bin.fileno())
        self._bin.close()
        self._bin = None
        bin_sums = self._hasher.finish()  # type: ignore[union-attr]
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        idx_bytes = encode_index(lengths, self.dtype)
        block = self.limits.checksum_block_size
        files = {bin_final.name: bin_sums, f"{name}.idx": _sums_of(idx_bytes, block)}
        data_final, compressed = bin_final, None
        if self.compression is not None:
            data_final = self.directory / f"{name}.bin.zst"
            compressed = compress_file(temp_path(bin_final), temp_path(data_final), self.compression,
                                       checksum_block_size=block, threads=self.compress_threads)
            files[data_final.name] = compressed.transport
        outputs: list[tuple[Path, bytes]] = [(self.directory / f"{name}.idx", idx_bytes)]
        if self.with_ids:
            ids_bytes = ("\n".join(self._ids) + "\n").encode() if self._ids else b""
            files[f"{name}.ids.jsonl"] = _sums_of(ids_bytes, block)
            outputs.append((self.directory / f"{name}.ids.jsonl", ids_bytes))
        sidecar = ShardChecksums(block_size=block, files=files).to_bytes()
        outputs.append((self.directory / f"{name}.sum.json", sidecar))
        for final, data in outputs:
            _write_synced(temp_path(final), data)
        # The sidecar is renamed last: a shard whose sidecar is present has all its files.
        os.replace(temp_path(data_final), data_final)
        for final, _ in outputs:
            os.replace(temp_path(final), final)
        if compressed is not None:
            temp_path(bin_final).unlink()
        fsync_dir(self.directory)
        entry = ShardEntry(
            name=name,
            num_docs=self._docs,
            num_tokens=self._tokens,
            bin_bytes=bin_sums.size,
            idx_bytes=len(idx_bytes),
            sum_digest=digest_bytes(sidecar),
            compression=compressed.entry() if compressed is not None else None,
        )
        self.next_index += 1
        self._lengths, self._ids, self._tokens, self._docs = [], [], 0, 0
        return entry

    def abort(self) -> None:
        """Drop the open shard's temp file (used on errors; a crash leaves it for the next run to remove)."""
        if self._bin is not None:
            with contextlib.suppress(OSError):  # a full disk fails the final flush again; the error is known
                self._bin.close()
            self._bin = None
            for suffix in (".bin", ".bin.zst"):
                with contextlib.suppress(FileNotFoundError):
                    temp_path(self.directory / f"{shard_name(self.prefix, self.next_index)}{suffix}").unlink()

    def _open(self) -> None:
        name = shard_name(self.prefix, self.next_index)
        self._bin = open(temp_path(self.directory / f"{name}.bin"), "wb")  # noqa: SIM115 - closed in close_shard
        self._hasher = BlockHasher(self.limits.checksum_block_size)


def _sums_of(data: bytes, block_size: int):
    h = BlockHasher(block_size)
    h.update(data)
    return h.finish()


def _write_synced(path: Path, data: bytes) -> None:
    with write_errors(path, hint=RESUME_HINT), open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
