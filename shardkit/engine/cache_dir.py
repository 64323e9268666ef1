"""Open-or-build for the packing cache's directories (tables and row stores), once per node.

A directory is opened (and verified) when it is there, else built, under an exclusive `flock` on
`<dir>.lock`: concurrent loaders on a node wait while one builds, then open what it wrote. A stale or damaged
directory is removed with a warning and built again, never used.

A cache that cannot be written — prebuilt on a shared file system mounted read-only, or a read-only home —
is used as it is: nothing can build or change it there, so no lock is needed, and whatever is intact is
opened (verified as always). Only a missing or damaged directory is then an error, saying what to do.
"""

from __future__ import annotations

import fcntl
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import ConfigError, IntegrityError
from ..format.atomic import remove_dir

__all__ = ["lock_of", "open_or_build"]

T = TypeVar("T")
_WRITABLE = "pass a writable cache directory (packing_cache_dir=, --packing-cache-dir, $SHARDKIT_PACK_CACHE_DIR)"


def lock_of(directory: Path) -> int:
    """A descriptor holding the exclusive lock that guards `directory` (closing it releases the lock)."""
    fd = os.open(directory.with_name(f"{directory.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def open_or_build(root: Path, directory: Path, what: str, open_: Callable[[], T], build: Callable[[], None]) -> T:
    """`open_()` of `directory` (under `root`) when it is there and intact, else `build()` it and open it;
    `what` names it in warnings and errors ("packing table", "row store")."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = lock_of(directory)
    except OSError as e:
        return _open_read_only(root, directory, what, open_, e)
    try:
        if directory.exists():
            try:
                return open_()
            except (ConfigError, IntegrityError) as e:
                warnings.warn(f"{what} {directory} not used, building it again: {e}", RuntimeWarning, stacklevel=3)
                remove_dir(directory)
        build()
        return open_()
    finally:
        os.close(lock)  # releases the flock


def _open_read_only(root: Path, directory: Path, what: str, open_: Callable[[], T], why: OSError) -> T:
    if not directory.exists():
        raise ConfigError(f"{what} cache {root} is not writable ({why}) and holds no {what} for this loader; "
                          f"{_WRITABLE}, or build it there where the cache is writable")
    try:
        return open_()
    except (ConfigError, IntegrityError) as e:
        raise ConfigError(f"{what} {directory} cannot be used ({e}) and its cache {root} is not writable "
                          f"({why}) to build it again; {_WRITABLE}") from None
