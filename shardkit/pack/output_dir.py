"""The output directory: exclusive lock, refusal to clobber, and removal of what a crash left behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import PackError
from ..format.atomic import fsync_dir
from ..format.manifest import MANIFEST_NAME
from ..writer import JOURNAL_NAME, MERGE_MARKER_NAME

__all__ = ["LOCK_NAME", "locked_output", "is_shardkit_file", "remove_shardkit_files", "prepare_output"]

LOCK_NAME = ".shardkit-lock"
_SHARD_FILE = re.compile(r"\.?[A-Za-z0-9][A-Za-z0-9._-]*\.(bin|bin\.zst|idx|sum\.json|ids\.jsonl)(\.tmp)?")


def is_shardkit_file(name: str) -> bool:
    return (name in (MANIFEST_NAME, JOURNAL_NAME, MERGE_MARKER_NAME, LOCK_NAME) or name.endswith(".tmp")
            or bool(_SHARD_FILE.fullmatch(name)))


@contextlib.contextmanager
def locked_output(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on the output so two packs can never interleave their writes."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PackError(f"{directory}: another shardkit pack is writing here; wait for it or pick "
                            "another output directory") from None
        yield
    finally:
        os.close(fd)


def remove_shardkit_files(directory: Path, keep: set[str] = frozenset()) -> int:  # type: ignore[assignment]
    """Remove shardkit's files (the lock and `keep` excepted), the manifest first.

    Without its manifest the directory stops being a dataset at once, so no reader opens one whose
    shards are being deleted.
    """
    removed = 0
    manifest = directory / MANIFEST_NAME
    if MANIFEST_NAME not in keep and manifest.is_file():
        manifest.unlink()
        fsync_dir(directory)
        removed += 1
    for p in directory.iterdir():
        if p.name != LOCK_NAME and p.name not in keep and p.is_file() and is_shardkit_file(p.name):
            p.unlink()
            removed += 1
    return removed


def prepare_output(directory: Path, *, overwrite: bool) -> None:
    """Refuse a finished dataset (unless overwriting) or a directory holding anything else."""
    if (directory / MANIFEST_NAME).exists():
        if not overwrite:
            raise PackError(f"{directory} already holds a finished dataset; pass --overwrite to replace it "
                            "or choose another output directory")
        remove_shardkit_files(directory)
    foreign = sorted(p.name for p in directory.iterdir() if not is_shardkit_file(p.name))
    if foreign:
        raise PackError(f"{directory} is not empty and not a shardkit output (found {', '.join(foreign[:3])}"
                        f"{', …' if len(foreign) > 3 else ''}); choose an empty or new directory")
    if overwrite:
        remove_shardkit_files(directory)
