"""Checks made where a shard is first mapped: the file is the dataset's own, and its `.idx` agrees with the manifest.

The manifest's fingerprint is a plain hash anyone can recompute, so what the loader takes from the manifest
(the token dtype, the document count, the byte size) is cross-checked against what the shard files say of
themselves: one 34-byte read of the `.idx` header at a shard's first mapping, never a scan of every shard
at open. A shard file is opened with `O_NOFOLLOW`; a symlink is followed only when it resolves inside the
dataset (the policy `open_dataset` applies when it lists the directory), and the file must be regular, so
a file swapped for a link out of the dataset or for a FIFO after the listing is refused, not read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import IntegrityError, ManifestError
from .idx import HEADER_SIZE, IndexHeader, parse_index_header
from .manifest import ShardEntry

__all__ = ["check_header_agrees", "check_index_header", "open_shard_file"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_shard_file(path: Path, shard: str, root: Path | None = None) -> BinaryIO:
    """`path` opened for reading: a regular file, or a symlink resolving inside `root` (default: its directory).

    A link out of the dataset (made after `open_dataset` listed it) is refused, as is a FIFO or device;
    the open never blocks.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as e:
        if not os.path.islink(path):
            raise ManifestError(str(path), f"shard {shard} cannot be read ({e.strerror or e}); was it deleted or "
                                           "moved after the dataset was opened? restore it or re-pack") from None
        fd = _open_link(path, shard, root if root is not None else path.parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestError(str(path), f"shard {shard}: not a regular file (a FIFO, device or directory "
                                           "replaced it after the dataset was opened); restore it or re-pack")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_link(path: Path, shard: str, root: Path) -> int:
    real_root, target = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, target]) != real_root:
        raise ManifestError(str(path), f"shard {shard}: a symlink pointing outside the dataset (made after the "
                                       "dataset was opened?); shardkit reads only files inside the dataset: "
                                       "restore the file or re-pack")
    try:
        return os.open(target, _FLAGS)
    except OSError as e:
        raise ManifestError(str(path), f"shard {shard}: a dangling or looping symlink, not a regular file "
                                       f"({e.strerror or e}); restore it or re-pack") from None


def check_header_agrees(header: IndexHeader, entry: ShardEntry, dtype: np.dtype, where: str) -> None:
    """The `.idx` header must name the manifest's dtype and document count, and the `.bin` size follow."""
    if header.dtype != dtype:
        raise ManifestError(where, f"shard {entry.name}: the index records token dtype {header.dtype.name}, the "
                                   f"manifest says {np.dtype(dtype).name}; the manifest was edited (its "
                                   "fingerprint recomputed): restore the original manifest or re-pack")
    if header.num_sequences != entry.num_docs:
        raise ManifestError(where, f"shard {entry.name}: the index holds {header.num_sequences:,} documents, the "
                                   f"manifest says {entry.num_docs:,}; restore the original manifest or re-pack")
    if entry.bin_bytes != entry.num_tokens * header.dtype.itemsize:
        raise ManifestError(where, f"shard {entry.name}: {entry.bin_bytes:,} bytes of tokens cannot hold "
                                   f"{entry.num_tokens:,} {header.dtype.name} tokens")


def check_index_header(entry: ShardEntry, idx_path: Path, dtype: np.dtype) -> IndexHeader:
    """Read the shard's `.idx` header (one small read) and check it against the manifest's entry."""
    where = str(idx_path)
    with open_shard_file(idx_path, entry.name) as f:
        size = os.fstat(f.fileno()).st_size
        if size != entry.idx_bytes:
            raise IntegrityError(entry.name, f"{idx_path.name} is {size:,} bytes, the manifest records "
                                             f"{entry.idx_bytes:,}: the dataset was modified after it was opened; "
                                             "restore it or re-pack", expected=str(entry.idx_bytes), actual=str(size))
        raw = f.read(HEADER_SIZE)
    if len(raw) < HEADER_SIZE:
        raise ManifestError(where, f"index is {len(raw)} bytes, shorter than the {HEADER_SIZE}-byte header")
    header = parse_index_header(raw, size, where)
    check_header_agrees(header, entry, dtype, where)
    return header
