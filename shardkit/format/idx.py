"""Megatron-LM's MMIDIDX index format (version 1), read and written exactly as megatron-core does.

Layout, all little-endian:

    b"MMIDIDX\\x00\\x00"          9-byte magic
    u64  version = 1
    u8   dtype code              (see dtypes.DTYPE_CODES)
    u64  sequence count  S
    u64  document count  D        (= number of documents + 1; document_indices starts with 0)
    i32[S] sequence lengths (tokens)
    i64[S] sequence pointers (byte offsets into the .bin)
    i64[D] document indices (sequence index where each document starts, then S)

shardkit writes one sequence per document. Reading validates every count against the file size before
mapping anything, so a crafted header cannot make the reader allocate or touch bytes it should not.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ManifestError
from .dtypes import dtype_code, dtype_from_code

__all__ = ["INDEX_MAGIC", "IndexHeader", "IndexFile", "encode_index", "read_index_header", "read_index"]

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
_HEADER = struct.Struct("<9sQBQQ")
HEADER_SIZE = _HEADER.size  # 34
MAX_SEQUENCE_TOKENS = 2**31 - 1  # int32 lengths
_CHECK_PIECE = 1 << 16  # sequences checked at a time (bounded temporaries)


@dataclass(frozen=True, slots=True)
class IndexHeader:
    dtype: np.dtype
    num_sequences: int
    num_doc_indices: int

    @property
    def expected_size(self) -> int:
        return HEADER_SIZE + 12 * self.num_sequences + 8 * self.num_doc_indices


@dataclass(frozen=True)
class IndexFile:
    """Arrays of one `.idx` (memory-mapped, read-only)."""

    header: IndexHeader
    lengths: np.ndarray  # int32[S]
    pointers: np.ndarray  # int64[S]
    doc_indices: np.ndarray  # int64[D]


def encode_index(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """The bytes of an index for back-to-back sequences of `lengths` tokens, one sequence per document."""
    lengths = np.asarray(lengths)
    if lengths.size and (lengths.min() < 0 or lengths.max() > MAX_SEQUENCE_TOKENS):
        raise ValueError("sequence length outside the int32 range of the index format")
    n = int(lengths.size)
    itemsize = np.dtype(dtype).itemsize
    lengths32 = lengths.astype("<i4", copy=False)
    pointers = np.zeros(n, dtype="<i8")
    if n > 1:
        np.cumsum(lengths32[:-1], dtype="<i8", out=pointers[1:])
    pointers *= itemsize
    doc_indices = np.arange(n + 1, dtype="<i8")
    header = _HEADER.pack(INDEX_MAGIC, INDEX_VERSION, dtype_code(dtype), n, n + 1)
    return b"".join((header, lengths32.tobytes(), pointers.tobytes(), doc_indices.tobytes()))


def read_index_header(path: str | os.PathLike[str], file_size: int | None = None) -> IndexHeader:
    """Parse and bound-check the header; counts must agree with the file size exactly."""
    where = str(path)
    size = os.path.getsize(path) if file_size is None else file_size
    if size < HEADER_SIZE:
        raise ManifestError(where, f"index is {size} bytes, shorter than the {HEADER_SIZE}-byte header "
                                   "(truncated file? re-run pack or restore the shard)")
    with open(path, "rb") as f:
        raw = f.read(HEADER_SIZE)
    return parse_index_header(raw, size, where)


def parse_index_header(raw: bytes, size: int, where: str) -> IndexHeader:
    magic, version, code, n_seq, n_doc = _HEADER.unpack(raw[:HEADER_SIZE])
    if magic != INDEX_MAGIC:
        raise ManifestError(where, f"not a Megatron MMIDIDX index (magic {magic!r})")
    if version != INDEX_VERSION:
        raise ManifestError(where, f"index version {version} is not supported (expected {INDEX_VERSION})")
    dtype = dtype_from_code(code, where)
    # Bound counts by the file size before any arithmetic that could allocate.
    if n_seq > size // 12 or n_doc > size // 8:
        raise ManifestError(where, f"header claims {n_seq:,} sequences / {n_doc:,} document indices, "
                                   f"impossible in a {size:,}-byte file")
    header = IndexHeader(dtype=dtype, num_sequences=n_seq, num_doc_indices=n_doc)
    if header.expected_size != size:
        raise ManifestError(where, f"index is {size:,} bytes but its header implies {header.expected_size:,} "
                                   "(truncated or appended to)")
    if n_doc < 1:
        raise ManifestError(where, "index has no document indices (expected at least the leading 0)")
    return header


def read_index(path: str | os.PathLike[str], *, check: bool = True) -> IndexFile:
    """Map an index read-only; with `check`, validate lengths, pointers and document indices (O(S))."""
    path = Path(path)
    header = read_index_header(path)
    n, d = header.num_sequences, header.num_doc_indices
    mm = np.memmap(path, dtype=np.uint8, mode="r") if header.expected_size else np.zeros(0, np.uint8)
    off = HEADER_SIZE
    lengths = mm[off:off + 4 * n].view("<i4")
    off += 4 * n
    pointers = mm[off:off + 8 * n].view("<i8")
    off += 8 * n
    doc_indices = mm[off:off + 8 * d].view("<i8")
    idx = IndexFile(header=header, lengths=lengths, pointers=pointers, doc_indices=doc_indices)
    if check:
        check_index_arrays(idx, str(path))
    return idx


def check_index_arrays(idx: IndexFile, where: str, bin_size: int | None = None) -> None:
    """Lengths non-negative, pointers contiguous from 0, document indices monotonic from 0 to S."""
    h = idx.header
    itemsize = h.dtype.itemsize
    if h.num_sequences:
        if int(idx.lengths.min()) < 0:
            bad = int(np.argmax(idx.lengths < 0))
            raise ManifestError(where, f"sequence {bad} has negative length {int(idx.lengths[bad])}")
        at = 0  # bytes before the piece; pieces keep the temporaries small whatever the sequence count
        for lo in range(0, h.num_sequences, _CHECK_PIECE):
            lengths = idx.lengths[lo:lo + _CHECK_PIECE]
            expected = np.empty(lengths.size, dtype=np.int64)
            expected[0] = 0
            np.cumsum(lengths[:-1], dtype=np.int64, out=expected[1:])
            expected *= itemsize
            expected += at
            mismatch = np.flatnonzero(expected != idx.pointers[lo:lo + _CHECK_PIECE])
            if mismatch.size:
                i = lo + int(mismatch[0])
                raise ManifestError(where, f"sequence {i} pointer {int(idx.pointers[i])} is not where the "
                                           f"previous sequences end ({int(expected[i - lo])}): overlapping or "
                                           "gapped pointers")
            at = int(expected[-1]) + int(lengths[-1]) * itemsize
    di = idx.doc_indices
    if int(di[0]) != 0 or int(di[-1]) != h.num_sequences or (di.size > 1 and bool(np.any(np.diff(di) < 0))):
        raise ManifestError(where, "document indices must rise monotonically from 0 to the sequence count")
    if bin_size is not None:
        total = int(idx.lengths.sum(dtype=np.int64)) * itemsize
        if total != bin_size:
            raise ManifestError(where, f"sequence lengths sum to {total:,} bytes but the .bin has {bin_size:,}")
