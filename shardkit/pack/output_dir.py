"""The output directory: exclusive lock, refusal to clobber, and removal of what a crash left behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError, PackError
from ..format.atomic import fsync_dir
from ..format.manifest import MANIFEST_NAME
from ..sources import InputFile
from ..writer import JOURNAL_NAME, MERGE_MARKER_NAME

__all__ = ["LOCK_NAME", "locked_output", "is_shardkit_file", "outside_output", "remove_shardkit_files",
           "prepare_output"]

LOCK_NAME = ".shardkit-lock"
_SHARD_FILE = re.compile(r"\.?[A-Za-z0-9][A-Za-z0-9._-]*\.(bin|bin\.zst|idx|sum\.json|ids\.jsonl)(\.tmp)?")


def is_shardkit_file(name: str) -> bool:
    return (name in (MANIFEST_NAME, JOURNAL_NAME, MERGE_MARKER_NAME, LOCK_NAME) or name.endswith(".tmp")
            or bool(_SHARD_FILE.fullmatch(name)))


@contextlib.contextmanager
def locked_output(directory: Path, *, own_layout: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the output so two packs can never interleave their writes.

    A directory holding anything but shardkit's files is refused before the lock file is made in it, so a
    refused pack leaves the user's directory as it was (`own_layout`: a directory whose layout the caller
    checks itself, such as a remote pack's staging directory).
    """
    if not own_layout:
        _refuse_foreign(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileExistsError, NotADirectoryError):
        raise PackError(f"{directory}: the output path (or a parent) exists and is not a directory; the output "
                        "of a pack is a directory: choose a new or empty directory") from None
    except OSError as e:
        raise PackError(f"{directory}: cannot create or write the output directory ({e.strerror or e}); choose "
                        "a directory you can write to, or fix its permissions") from None
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


def _refuse_foreign(directory: Path) -> None:
    """PackError when `directory` exists and holds a file that is not shardkit's."""
    try:
        names = [p.name for p in directory.iterdir()] if directory.is_dir() else []
    except OSError:
        return  # unreadable: the lock's own open reports it
    foreign = sorted(n for n in names if not is_shardkit_file(n))
    if foreign:
        raise PackError(f"{directory} is not empty and not a shardkit output (found {', '.join(foreign[:3])}"
                        f"{', …' if len(foreign) > 3 else ''}); choose an empty or new directory")


def prepare_output(directory: Path, *, overwrite: bool) -> None:
    """Refuse a finished dataset (unless overwriting) or a directory holding anything else."""
    if (directory / MANIFEST_NAME).exists():
        if not overwrite:
            raise PackError(f"{directory} already holds a finished dataset; pass --overwrite to replace it "
                            "or choose another output directory")
        remove_shardkit_files(directory)
    _refuse_foreign(directory)
    if overwrite:
        remove_shardkit_files(directory)


def outside_output(files: list[InputFile], directory: Path) -> list[InputFile]:
    """The inputs minus any file inside the output directory: a pack never reads its own (previous) output.

    `pack corpus/ -o corpus/out --overwrite` would otherwise list the last run's shards and sidecars
    (`.ids.jsonl`, `manifest.json`) as inputs.
    """
    root = os.path.realpath(directory)
    kept = [f for f in files if "://" in f.url or os.path.commonpath([root, os.path.realpath(f.url)]) != root]
    if files and not kept:
        raise InputError(str(directory), "every input file is inside the output directory; name inputs outside it")
    return kept
