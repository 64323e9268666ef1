"""Read-only file mappings that hold no file descriptor.

CPython's `mmap.mmap` keeps a duplicate of the descriptor it maps for as long as the mapping lives (before
Python 3.13's `trackfd=False`), and `np.load(mmap_mode="r")` maps through it. A packed loader keeps its
packing tables (four arrays) and row stores (seven files) mapped for its whole life, one set per source and
seq_len: a mixture of 40 packed sources over two phases' seq_lens held 880 descriptors, past a normal
`ulimit -n` of 1,024 with the shards' own, and failed with EMFILE under 256. The kernel needs no descriptor
once a file is mapped, so these mappings are made with libc's `mmap` and the descriptor closed at once; the
mapping is unmapped when the last array over it is garbage collected (as an `mmap.mmap`'s would be).

What such a mapping cannot do is `fstat` its own file: a reader that must notice the file being truncated
under it (the row store, before each slab) stats the path and compares the inode it mapped (`FileId`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from dataclasses import dataclass

import numpy as np

__all__ = ["FileId", "map_npy", "map_readonly"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class FileId:
    """The file a mapping was made from: (device, inode) and its size then."""

    dev: int
    ino: int
    size: int

    def changed_size(self, path: str | os.PathLike[str]) -> int | None:
        """The size `path` has now if it is still this file and its size differs (truncated or appended to
        under the mapping), else None — also when the path now names another file: the mapped one is then
        unreachable by name, so it can no longer be truncated under the reader."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if (st.st_dev, st.st_ino) != (self.dev, self.ino) or st.st_size == self.size:
            return None
        return st.st_size


def map_readonly(path: str | os.PathLike[str]) -> tuple[np.ndarray, FileId]:
    """The whole file as a read-only uint8 array over a shared mapping, and the file it maps; no descriptor
    stays open. An empty file gives an empty array (nothing is mapped)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        size = st.st_size
        ident = FileId(st.st_dev, st.st_ino, size)
        if size == 0:
            return np.zeros(0, dtype=np.uint8), ident
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)
    buf = (ctypes.c_ubyte * size).from_address(addr)
    unmap = weakref.finalize(buf, _libc.munmap, addr, size)  # every array made below keeps `buf` alive
    unmap.atexit = False  # never at interpreter exit, where a daemon thread may still read the pages
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr.flags.writeable = False  # the pages are PROT_READ: a write would be a segfault, not an error
    return arr, ident


def map_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """A `.npy` file's array, read-only over a mapping that holds no descriptor (what
    `np.load(path, mmap_mode="r")` gives, without the descriptor). Object arrays are refused (no pickle)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        offset = f.tell()
    if dtype.hasobject:
        raise ValueError(f"{path}: an object array needs pickle, which shardkit never loads")
    count = int(np.prod(shape, dtype=np.int64))
    raw, _ = map_readonly(path)
    need = offset + count * dtype.itemsize
    if raw.size < need:
        raise ValueError(f"{path}: {raw.size:,} bytes, its header describes {need:,}")
    arr = raw[offset:need].view(dtype)
    return arr.reshape(shape, order="F" if fortran else "C")
