"""Read side of the format: `open_dataset(path)` → zero-copy views of documents and the flat token stream.

Opening is cheap and strict: the manifest is validated, and every shard file must exist inside the
dataset directory with exactly the size the manifest records, before anything is mapped. Each shard's
index is parsed and checked on first use (O(documents in that shard)), then mapped read-only once.
A compressed shard (`NAME.bin.zst`) is decompressed on first use into a verified plain copy in a local
cache (`format.compressed.DecompressCache`) and that copy is mapped: readers see the same arrays.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import ConfigError, IntegrityError, ManifestError
from .compressed import DecompressCache
from .idx import IndexFile, check_index_arrays, read_index
from .listing import scan_directory
from .manifest import Manifest, ShardEntry
from .shard_files import check_index_header, open_shard_file

__all__ = ["Dataset", "Shard", "open_dataset"]


class Shard:
    """One `.bin`/`.idx` pair (or `.bin.zst`/`.idx`); arrays are mapped on first use."""

    def __init__(self, directory: Path, entry: ShardEntry, dtype: np.dtype,
                 cache: DecompressCache | None = None) -> None:
        self.directory = directory
        self.entry = entry
        self.dtype = dtype
        self.cache = cache

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def num_docs(self) -> int:
        return self.entry.num_docs

    @property
    def num_tokens(self) -> int:
        return self.entry.num_tokens

    @property
    def compressed(self) -> bool:
        return self.entry.compression is not None

    @property
    def bin_path(self) -> Path:
        """The plain token file; for a compressed shard, its decompressed copy (made on first use)."""
        if self.entry.compression is None:
            return self.directory / self.entry.bin_name
        return self._decompressed

    @property
    def data_path(self) -> Path:
        """The file in the dataset holding the tokens: NAME.bin or NAME.bin.zst."""
        return self.directory / self.entry.data_name

    @cached_property
    def _decompressed(self) -> Path:
        return (self.cache or DecompressCache()).materialize(self.directory, self.entry)

    @property
    def idx_path(self) -> Path:
        return self.directory / self.entry.idx_name

    @property
    def sum_path(self) -> Path:
        return self.directory / self.entry.sum_name

    @cached_property
    def index(self) -> IndexFile:
        return self.load_index()

    def load_index(self, *, check: bool = True) -> IndexFile:
        """Map the `.idx` (not cached: see `map_bin`); with `check`, validate it against the manifest (O(docs))."""
        where = str(self.idx_path)
        open_shard_file(self.idx_path, self.name).close()  # a regular file inside the dataset, never a FIFO
        try:
            idx = read_index(self.idx_path, check=False)
        except OSError as e:
            raise ManifestError(where, _unreadable(self.name, e)) from e
        if not check:
            return idx
        if idx.header.dtype != self.dtype:
            raise ManifestError(where, f"index dtype {idx.header.dtype.name} differs from the manifest's "
                                       f"{self.dtype.name}")
        if idx.header.num_sequences != self.entry.num_docs:
            raise ManifestError(where, f"index has {idx.header.num_sequences:,} sequences, manifest says "
                                       f"{self.entry.num_docs:,}")
        check_index_arrays(idx, where, bin_size=self.entry.bin_bytes)
        return idx

    @cached_property
    def mmap(self) -> mmap.mmap | None:
        """The shard's `.bin` mapped read-only once (None for an empty shard); used for madvise hints."""
        return self.map_bin()

    def map_bin(self) -> mmap.mmap | None:
        """A new read-only mapping of the `.bin` (None for an empty shard), its size checked first.

        Not cached: the read engine keeps its own bounded set of mappings (`engine.mapper`); each mapping
        holds one file descriptor until the last array made from it is gone.
        """
        if self.entry.bin_bytes == 0:
            return None
        self.check_header()
        with open_shard_file(self.bin_path, self.name) as f:
            size = os.fstat(f.fileno()).st_size
            if size != self.entry.bin_bytes and self.__dict__.get("_size_seen"):
                # it had the right size when this process mapped it before: modified under a running reader
                raise IntegrityError(self.name, f"{self.bin_path.name} is {size:,} bytes, the manifest records "
                                                f"{self.entry.bin_bytes:,}: the dataset was modified after it "
                                                "was opened; restore it or re-pack",
                                     expected=str(self.entry.bin_bytes), actual=str(size))
            if size != self.entry.bin_bytes:  # the first look at this file (readers that skip the listing)
                raise ManifestError(str(self.bin_path), f"size {size:,} bytes, the manifest records "
                                                        f"{self.entry.bin_bytes:,} (truncated, appended to, or "
                                                        "replaced); restore it or re-pack")
            self._size_seen = True
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def tokens_of(self, mapping: mmap.mmap | None) -> np.ndarray:
        """The shard's tokens as a read-only array over `mapping` (a `map_bin()` result)."""
        if mapping is None:
            return np.zeros(0, dtype=self.dtype)
        return np.frombuffer(mapping, dtype=self.dtype, count=self.entry.num_tokens)

    def check_header(self) -> None:
        """The `.idx` header agrees with the manifest (dtype, documents, size): one small read, at the first
        mapping of this shard (a release and remap does not read it again)."""
        if not self.__dict__.get("_header_ok"):
            check_index_header(self.entry, self.idx_path, self.dtype)
            self._header_ok = True

    def check_intact(self, mapping: mmap.mmap | None = None) -> None:
        """Raise IntegrityError if the mapped `.bin` shrank since it was mapped.

        Touching a mapped page past the end of a truncated file kills the process with SIGBUS, which no
        Python code can catch; readers call this (one fstat) before copying from the mapping. `mapping`:
        a `map_bin()` result (the read engine's); default this shard's own cached mapping.
        """
        mm = self.__dict__.get("mmap") if mapping is None else mapping  # not mapped yet: checked when mapped
        if mm is not None and (size := mm.size()) < self.entry.bin_bytes:
            raise IntegrityError(self.name, f"{self.bin_path.name} shrank to {size:,} bytes while it was being "
                                            f"read (the manifest records {self.entry.bin_bytes:,}): the dataset "
                                            "was modified under a running reader; restore it or re-pack",
                                 byte_range=(size, self.entry.bin_bytes),
                                 expected=str(self.entry.bin_bytes), actual=str(size))

    @cached_property
    def tokens(self) -> np.ndarray:
        """The whole shard as one read-only token array over the mapping (a plain ndarray: slicing is cheap)."""
        return self.tokens_of(self.mmap)

    def release(self) -> None:
        """Forget this shard's mappings and index arrays; the next use maps the files again.

        A reader that walks many shards keeps only a bounded set mapped (`WindowSource`): each mapping
        holds a file descriptor and a `vm.max_map_count` slot, and `doc_offsets` 8 bytes per document. The
        mapping itself goes away once no array made from it is left.
        """
        for name in ("tokens", "mmap", "index", "doc_offsets"):
            self.__dict__.pop(name, None)

    @cached_property
    def doc_offsets(self) -> np.ndarray:
        """Token offset of each document start within the shard, plus the end (int64[num_docs + 1])."""
        lengths = self.index.lengths  # first: the checked index bounds the count, the manifest's could be 10**12
        out = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, dtype=np.int64, out=out[1:])
        return out

    def doc(self, i: int) -> np.ndarray:
        if not 0 <= i < self.entry.num_docs:
            raise IndexError(f"document {i} out of range for shard {self.name} ({self.entry.num_docs} docs)")
        start = int(self.index.pointers[i]) // self.dtype.itemsize
        return self.tokens[start:start + int(self.index.lengths[i])]


class Dataset:
    """A packed dataset: documents back to back in shards, addressable by document or by token offset."""

    def __init__(self, path: Path, manifest: Manifest, *, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.dtype = manifest.token_dtype
        cache = DecompressCache(cache_dir, fingerprint=manifest.fingerprint) if manifest.compressed else None
        self.shards = [Shard(path, e, self.dtype, cache) for e in manifest.shards]
        self.token_offsets = _cumulative([e.num_tokens for e in manifest.shards])
        self.doc_offsets = _cumulative([e.num_docs for e in manifest.shards])

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def num_docs(self) -> int:
        return int(self.doc_offsets[-1])

    @property
    def num_tokens(self) -> int:
        return int(self.token_offsets[-1])

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def tokenizer(self) -> dict | None:
        return self.manifest.tokenizer

    @property
    def checksum_block_size(self) -> int:
        return self.manifest.checksum_block_size

    def part_of(self, position: int) -> tuple[Dataset, int]:
        """(the dataset that owns shard `position`, its position there): itself, here; a union's part."""
        return self, position

    def shard_position(self, name: str) -> int:
        """A shard's position by name, by `DATASET_DIR/NAME` (how Megatron names a data prefix), or by the
        dataset's own directory when it has one shard."""
        names = [s.name for s in self.shards]
        if name not in names and Path(name).resolve() == Path(self.path).resolve():
            if len(names) != 1:
                raise ConfigError(f"prefix {name!r}: the dataset has {len(names)} shards; name one as "
                                  f"{name.rstrip('/')}/SHARD (shards: {', '.join(names[:5])}"
                                  f"{', ...' if len(names) > 5 else ''})")
            return 0
        directory, sep, short = name.rstrip("/").rpartition("/")
        if sep and Path(directory).resolve() != Path(self.path).resolve():
            raise ConfigError(f"prefix {name!r}: {directory!r} is not this dataset ({self.path})")
        if short not in names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise ConfigError(f"{self.path}: no shard named {short!r}; shards: {shown}")
        return names.index(short)

    def __len__(self) -> int:
        return self.num_docs

    def __iter__(self) -> Iterator[Shard]:
        return iter(self.shards)

    def __repr__(self) -> str:
        return (f"Dataset({str(self.path)!r}, shards={self.num_shards}, docs={self.num_docs:,}, "
                f"tokens={self.num_tokens:,}, dtype={self.dtype.name})")

    def locate_doc(self, i: int) -> tuple[Shard, int]:
        if not 0 <= i < self.num_docs:
            raise IndexError(f"document {i} out of range ({self.num_docs} documents)")
        s = int(np.searchsorted(self.doc_offsets, i, side="right")) - 1
        return self.shards[s], i - int(self.doc_offsets[s])

    def doc(self, i: int) -> np.ndarray:
        """Document `i` as a zero-copy read-only view into its shard."""
        shard, j = self.locate_doc(i)
        return shard.doc(j)

    def read_tokens(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Tokens [start, stop) of the flat stream (all shards back to back), copied into `out`."""
        if not 0 <= start <= stop <= self.num_tokens:
            raise IndexError(f"token range [{start}, {stop}) outside [0, {self.num_tokens})")
        n = stop - start
        if out is None:
            out = np.empty(n, dtype=self.dtype)
        elif out.shape[0] < n:
            raise ValueError("output buffer too small")
        s = int(np.searchsorted(self.token_offsets, start, side="right")) - 1
        pos = 0
        while pos < n:
            shard_start = int(self.token_offsets[s])
            lo = start + pos - shard_start
            take = min(self.shards[s].num_tokens - lo, n - pos)
            if take > 0:
                tokens = self.shards[s].tokens
                self.shards[s].check_intact()
                out[pos:pos + take] = tokens[lo:lo + take]
                pos += take
            s += 1
        return out


def _unreadable(shard: str, e: OSError) -> str:
    return (f"shard {shard} cannot be read ({e.strerror or e}); was it deleted or moved after the dataset "
            "was opened? restore it or re-pack")


def _cumulative(counts: list[int]) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    if counts:
        np.cumsum(np.asarray(counts, dtype=np.int64), out=out[1:])
    return out


def _check_files(path: Path, manifest: Manifest) -> None:
    """Every shard file present, a regular file inside the dataset, with the size the manifest records."""
    listing = scan_directory(path)
    for e in manifest.shards:
        for fname, expected in ((e.data_name, e.data_bytes), (e.idx_name, e.idx_bytes), (e.sum_name, None)):
            size = listing.files.get(fname)
            if size is None:
                raise ManifestError(str(path / fname), f"shard file {listing.absent_reason(fname)} (shard "
                                                       f"{e.name}); restore it or re-pack the dataset")
            if expected is not None and size != expected:
                raise ManifestError(str(path / fname), f"size {size:,} bytes, manifest records {expected:,} "
                                                       "(truncated, appended to, or replaced)")


def open_dataset(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                 check_files: bool = True) -> Dataset:
    """Open a packed dataset directory; raises ManifestError naming the problem if it is not complete.

    `cache_dir` holds decompressed copies of compressed shards (default: the per-user cache).
    `check_files=False` skips the listing of every shard file (134k entries at 44,704 shards, on every rank):
    the loader checks each shard's files when it first maps them instead.
    """
    p = Path(path)
    if not p.is_dir():
        raise ManifestError(str(p), "not a directory (expected a dataset directory with manifest.json)")
    manifest = Manifest.load(p)
    if check_files:
        _check_files(p, manifest)
    return Dataset(p, manifest, cache_dir=cache_dir)
