"""A directory of precomputed Megatron index arrays, keyed by exactly what each depends on.

Each entry is `<key>.json` (what it was built from, and each array's shape, dtype and sha256) plus one
`<key>-<name>.npy` per array, written with `allow_pickle=False`. Writers hold `<key>.lock` (flock), write
every file to a temporary name, fsync and rename, and write the JSON last, so a reader sees a whole entry
or none. Opening verifies the JSON against the arrays and rebuilds an entry that does not match (a torn
or edited file) instead of trusting it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from ..format.atomic import atomic_file, atomic_write_bytes, write_errors

__all__ = ["IndexCache", "cache_key"]

_FORMAT = "shardkit-megatron-index/1"
_VERIFIED: dict[str, tuple[int, int, int, str]] = {}  # .npy path → (inode, size, mtime, digest) checked here


def cache_key(depends_on: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of the inputs (sorted keys), so equal inputs share an entry."""
    text = json.dumps({"format": _FORMAT, **depends_on}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).data).hexdigest()


class IndexCache:
    """Get-or-build of named array sets under one directory (None: build in memory, keep nothing)."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = None if directory is None else Path(directory)

    def get(self, depends_on: Mapping[str, object], build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The arrays for `depends_on`: read and verified from the cache, or built, stored, and returned."""
        if self.directory is None:
            return build()
        key = cache_key(depends_on)
        found = self._open(key)
        if found is not None:
            return found
        with write_errors(self.directory, "create the Megatron index cache directory"):
            self.directory.mkdir(parents=True, exist_ok=True)
        with self._locked(key):
            found = self._open(key)  # another process may have built it while this one waited
            if found is not None:
                return found
            arrays = build()
            self._store(key, depends_on, arrays)
            return arrays

    def peek(self, depends_on: Mapping[str, object]) -> dict[str, np.ndarray] | None:
        """The arrays for `depends_on` if the cache holds a whole, verified entry (never builds)."""
        return None if self.directory is None else self._open(cache_key(depends_on))

    def put(self, depends_on: Mapping[str, object], arrays: dict[str, np.ndarray]) -> None:
        """Store an entry (under its lock; a no-op without a directory or when another process stored it)."""
        if self.directory is None:
            return
        key = cache_key(depends_on)
        with write_errors(self.directory, "create the Megatron index cache directory"):
            self.directory.mkdir(parents=True, exist_ok=True)
        with self._locked(key):
            if self._open(key) is None:
                self._store(key, depends_on, arrays)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        assert self.directory is not None
        path = self.directory / f"{key}.lock"
        with write_errors(path, "open the lock file"):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _open(self, key: str) -> dict[str, np.ndarray] | None:
        """The entry's arrays, mapped. Each array's digest is checked the first time this process opens
        the file as it is now (inode, size, mtime); a reopen of unchanged files (`OpenMaps` let them go)
        checks shapes and dtypes only."""
        assert self.directory is not None
        meta_path = self.directory / f"{key}.json"
        try:
            meta = json.loads(meta_path.read_text())
            out = {}
            for name, want in meta["arrays"].items():
                path = self.directory / f"{key}-{name}.npy"
                a = np.load(path, mmap_mode="r", allow_pickle=False)
                st = os.stat(path)
                ident = (st.st_ino, st.st_size, st.st_mtime_ns, want["sha256"])
                if list(a.shape) != want["shape"] or a.dtype.str != want["dtype"]:
                    return None
                if _VERIFIED.get(str(path)) != ident:
                    if _digest(a) != want["sha256"]:
                        return None
                    _VERIFIED[str(path)] = ident
                out[name] = a
            return out
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, torn or edited: rebuilt under the lock

    def _store(self, key: str, depends_on: Mapping[str, object], arrays: dict[str, np.ndarray]) -> None:
        assert self.directory is not None
        meta: dict[str, object] = {"format": _FORMAT, "depends_on": dict(depends_on), "arrays": {}}
        for name, a in arrays.items():
            final = self.directory / f"{key}-{name}.npy"
            with atomic_file(final, sync_dir=False) as f, write_errors(final):
                np.save(f, a, allow_pickle=False)
            meta["arrays"][name] = {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _digest(a)}  # type: ignore[index]
        atomic_write_bytes(self.directory / f"{key}.json", json.dumps(meta, indent=1, sort_keys=True).encode())
