"""One listing of a dataset directory, shared by `open_dataset` and `verify`.

Nothing is opened by name before it is known to be a regular file inside the dataset, so a FIFO or a
symlink out of the directory can neither hang a reader nor make it touch bytes outside the dataset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DirListing", "scan_directory"]


@dataclass(frozen=True)
class DirListing:
    """Entries of the dataset directory by kind; sizes only for regular files that stay inside it."""

    files: dict[str, int]
    outside: frozenset[str]  # symlinks resolving outside the dataset (treated as absent)
    others: frozenset[str]  # directories, FIFOs, sockets, broken links

    def absent_reason(self, name: str) -> str:
        if name in self.outside:
            return "a symlink pointing outside the dataset (treated as missing)"
        if name in self.others:
            return "not a regular file (treated as missing)"
        return "missing"


def scan_directory(path: Path) -> DirListing:
    files: dict[str, int] = {}
    outside: set[str] = set()
    others: set[str] = set()
    real_root = os.path.realpath(path)
    with os.scandir(path) as it:
        for de in it:
            if de.is_symlink():
                target = os.path.realpath(de.path)
                if os.path.commonpath([real_root, target]) != real_root:
                    outside.add(de.name)
                    continue
            try:
                if de.is_file():
                    files[de.name] = de.stat().st_size
                    continue
            except OSError:
                pass
            others.add(de.name)
    return DirListing(files=files, outside=frozenset(outside), others=frozenset(others))
