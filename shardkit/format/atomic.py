"""Crash-safe file replacement: write to a temp name, fsync, rename, fsync the directory.

A reader never sees a half-written file under its final name; after a crash only `.tmp` leftovers
remain, and those are never taken for data.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["TMP_SUFFIX", "atomic_write_bytes", "atomic_file", "fsync_dir", "temp_path"]

TMP_SUFFIX = ".tmp"


def temp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(final: Path, *, sync_dir: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file that appears at `final` only if the block finishes without error."""
    tmp = temp_path(final)
    f = open(tmp, "wb")  # noqa: SIM115 - closed on both paths below
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, final)
        if sync_dir:
            fsync_dir(final.parent)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(final: Path, data: bytes, *, sync_dir: bool = True) -> None:
    with atomic_file(final, sync_dir=sync_dir) as f:
        f.write(data)
