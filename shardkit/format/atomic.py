"""Crash-safe file replacement: write to a temp name, fsync, rename, fsync the directory.

A reader never sees a half-written file under its final name; after a crash only `.tmp` leftovers
remain, and those are never taken for data. A failed write (disk full, I/O error, read-only file system)
raises `WriteError` naming the file and the cause, and leaves no temp file behind.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO

from ..errors import ShardkitError

__all__ = ["TMP_SUFFIX", "WriteError", "atomic_write_bytes", "atomic_file", "building_dir", "fsync_dir",
           "publish_dir", "remove_dir", "remove_leftovers", "synced_file", "temp_path", "write_errors"]

TMP_SUFFIX = ".tmp"
_SPACE = (_errno.ENOSPC, _errno.EDQUOT)


class WriteError(ShardkitError, OSError):
    """Writing, syncing or renaming a file failed; names the file, the operation and the OS's reason.

    Also an OSError (same errno), so code that handles OSError keeps working, and a ShardkitError, so
    the CLI prints one line ("…: No space left on device (ENOSPC); free space …") instead of a traceback.
    """

    def __init__(self, path: str | os.PathLike[str], op: str, cause: OSError, hint: str = "") -> None:
        OSError.__init__(self, cause.errno, cause.strerror or str(cause))
        self.path = str(path)
        self.op = op
        if cause.errno in _SPACE:
            hint = f"free space on that file system, then {hint or 'retry'}"
        self.hint = hint

    def __str__(self) -> str:
        code = _errno.errorcode.get(self.errno or 0)
        return (f"{self.path}: cannot {self.op}: {self.strerror}{f' ({code})' if code else ''}"
                f"{f'; {self.hint}' if self.hint else ''}")


@contextlib.contextmanager
def write_errors(path: str | os.PathLike[str], op: str = "write", hint: str = "") -> Iterator[None]:
    """Turn an OSError raised inside the block into a `WriteError` naming `path` (WriteErrors pass through)."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(e.filename or path, op, e, hint) from e


def temp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}{TMP_SUFFIX}")


def fsync_dir(directory: Path) -> None:
    with write_errors(directory, "fsync the directory"):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_file(final: Path, *, sync_dir: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file that appears at `final` only if the block finishes without error."""
    tmp = temp_path(final)
    with write_errors(tmp, "create"):
        f = open(tmp, "wb")  # noqa: SIM115 - closed on both paths below
    try:
        yield f
        with write_errors(tmp):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        with write_errors(tmp, f"rename to {final.name}"):
            os.replace(tmp, final)
        if sync_dir:
            fsync_dir(final.parent)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk fails the final flush again: the error is raised below
            f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(final: Path, data: bytes, *, sync_dir: bool = True) -> None:
    with atomic_file(final, sync_dir=sync_dir) as f, write_errors(temp_path(final)):
        f.write(data)


@contextlib.contextmanager
def synced_file(path: Path, mode: str = "wb") -> Iterator[IO]:
    """A new file inside a directory not published yet, flushed and fsynced when the block ends: the
    directory's one rename (`publish_dir`) makes every file of it visible at once."""
    with open(path, mode) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def publish_dir(tmp: Path, final: Path) -> None:
    """Rename a directory whose files are all synced (`synced_file`) to `final`, and sync its parent."""
    os.rename(tmp, final)
    fsync_dir(final.parent)


# siblings of a directory `final` that only a builder or a discard of it makes: `<final>.tmp-<pid>` while it
# is built, `<final>.damaged-<pid>` while a damaged one is removed
_LEFTOVERS = (".tmp-", ".damaged-")


def remove_leftovers(final: Path) -> list[Path]:
    """Remove the temporary and set-aside siblings of `final` that a killed builder (or a killed discard) left:
    call it only under the lock that guards `final`, where no live process is writing one. Returns them."""
    found = [p for marker in _LEFTOVERS for p in final.parent.glob(f"{final.name}{marker}*")]
    for p in found:
        shutil.rmtree(p, ignore_errors=True)
    return found


def remove_dir(final: Path) -> None:
    """Remove a published directory at once: renamed aside (`<final>.damaged-<pid>`), then deleted, so a
    process killed meanwhile leaves a leftover `remove_leftovers` finds, never a half-deleted `final`."""
    aside = final.with_name(f"{final.name}.damaged-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(final, aside)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def building_dir(final: Path, hint: str = "") -> Iterator[Path]:
    """A temporary sibling of `final` to build a directory in (files written with `synced_file`), renamed to
    `final` when the block ends; removed when it raises, an OSError then raised as a `WriteError` naming the
    file (with `hint`: what to do). Call it under the lock that guards `final`: a dead builder's leftovers are
    removed first, so a crash loop cannot fill the disk with half-built copies."""
    remove_leftovers(final)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    try:
        try:
            tmp.mkdir(parents=True)
            yield tmp
            publish_dir(tmp, final)
        except OSError as e:  # a write into `tmp` (a file object's write names no file); not a read elsewhere
            if isinstance(e, WriteError) or (e.filename and not str(e.filename).startswith(str(tmp))):
                raise
            raise WriteError(e.filename or tmp, "write", e, hint) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
