"""Packing tables on disk: built once per node under a lock, verified when opened, rebuilt when damaged.

A table (`engine/packing.py`) is a function of the dataset's documents and a `PackSpec`; it is stored in
`CACHE/<strategy>-L<seq_len>-<key>/` where `key` hashes exactly that (the dataset fingerprint, the spec and
the table format version), as four `.npy` arrays (no pickle) and `meta.json` with their sizes and digests.

Opening checks the meta against what is asked for and every array against its checksum; a table that was
built for something else (`ConfigError`: names the field) or is damaged (`IntegrityError`) is never used:
`cached_table` warns and builds it again. Concurrent loaders on one node take an exclusive `flock` on
`<dir>.lock`, so one process builds while the others wait and then open what it wrote (written to a
temporary directory and renamed into place: a reader never sees half a table); a cache that cannot be
written (prebuilt, mounted read-only) is used as it is (`engine/cache_dir.py`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import xxhash

from ..errors import ConfigError, IntegrityError
from ..format.atomic import building_dir, synced_file
from ..format.checksums import file_hexdigest
from ..format.dataset import Dataset
from ..format.fdless_map import map_npy
from .cache_dir import open_or_build
from .packing import PackSpec, PackTable, table_parts

__all__ = ["TABLE_VERSION", "cached_table", "default_cache_dir", "document_spans", "load_table", "save_table",
           "shard_spans", "table_dir", "write_table"]

TABLE_VERSION = 1
# each array's digest in meta.json: xxh3-128, 15× sha256's speed (27 against 1.8 GB/s here), since every
# process opening a table hashes it whole (sha256 is still read from tables written before)
_DIGEST = "xxh3_128"
# what to do when a table or store cannot be written (`WriteError` puts "free space on that file system, then"
# before it on a full disk)
SPACE_HINT = "run again, or pass a packing_cache_dir with room for it (--packing-cache-dir, $SHARDKIT_PACK_CACHE_DIR)"
_ARRAYS = ("row_ptr", "start", "length", "first")
_DTYPES = {"row_ptr": "<i8", "start": "<i8", "length": "<i8", "first": "|b1"}


def default_cache_dir() -> Path:
    """$SHARDKIT_PACK_CACHE_DIR, else $XDG_CACHE_HOME/shardkit/packing (~/.cache/shardkit/packing)."""
    env = os.environ.get("SHARDKIT_PACK_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardkit" / "packing"


def _meta_key(fingerprint: str, spec: PackSpec) -> dict[str, object]:
    return {"format": "shardkit-pack-table", "version": TABLE_VERSION, "dataset": fingerprint, **spec.to_json()}


def table_dir(cache_dir: str | os.PathLike[str], fingerprint: str, spec: PackSpec) -> Path:
    """Where the table of (dataset fingerprint, spec) lives under `cache_dir`."""
    key = hashlib.sha256(json.dumps(_meta_key(fingerprint, spec), sort_keys=True).encode()).hexdigest()[:24]
    return Path(cache_dir) / f"{spec.strategy.value}-L{spec.seq_len}-{key}"


def shard_spans(dataset: Dataset) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(first token in the flat stream, length) of the documents of each shard of `dataset`, in order."""
    item = dataset.dtype.itemsize
    for s, shard in enumerate(dataset.shards):
        # a mapping of its own, dropped after the copy: a dataset of any number of shards holds one at a time
        index = shard.load_index()
        starts = np.asarray(index.pointers, dtype=np.int64) // item + int(dataset.token_offsets[s])
        lengths = np.array(index.lengths, dtype=np.int64)
        del index
        yield starts, lengths


def document_spans(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(first token in the flat stream, length) of every document of `dataset`, in order (in memory: 16
    bytes per document)."""
    parts = list(shard_spans(dataset))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class _NpyWriter:
    """A 1-D `.npy` file written in appended parts: a header of fixed size is written first and rewritten
    with the final length at the end (the format pads its header with spaces), so nothing of the array is
    held in memory."""

    HEADER = 128  # bytes: magic, version, header length, the dict padded to a multiple of 64

    def __init__(self, f: BinaryIO, dtype: str) -> None:
        self.f, self.dtype, self.count = f, np.dtype(dtype), 0
        f.write(b"\0" * self.HEADER)

    def append(self, arr: np.ndarray) -> None:
        a = np.ascontiguousarray(arr, dtype=self.dtype)
        self.f.write(memoryview(a).cast("B"))
        self.count += a.size

    def finish(self) -> None:
        """Write the header for the `count` items appended (the caller flushes and syncs the file)."""
        text = f"{{'descr': {np.lib.format.dtype_to_descr(self.dtype)!r}, 'fortran_order': False, " \
               f"'shape': ({self.count},), }}"
        room = self.HEADER - 10
        header = b"\x93NUMPY\x01\x00" + room.to_bytes(2, "little") + text.ljust(room - 1).encode("latin1") + b"\n"
        assert len(header) == self.HEADER
        self.f.seek(0)
        self.f.write(header)
        self.f.seek(0, os.SEEK_END)


def write_table(directory: Path, dataset: Dataset, spec: PackSpec) -> None:
    """Build the table of `dataset` under `spec` straight into `directory` (which must not exist), a shard's
    documents at a time (`packing.table_parts`): memory is bounded by a shard's documents and one pack group,
    whatever the dataset's size. The arrays are those of `build_table` on all its documents."""
    with building_dir(directory, SPACE_HINT) as tmp, contextlib.ExitStack() as stack:
        files = {name: stack.enter_context(synced_file(tmp / f"{name}.npy")) for name in _ARRAYS}
        out = {name: _NpyWriter(files[name], _DTYPES[name]) for name in _ARRAYS}
        out["row_ptr"].append(np.zeros(1, np.int64))
        pieces = documents = split = used = 0
        for part in table_parts(shard_spans(dataset), spec):
            out["row_ptr"].append(pieces + np.cumsum(part.sizes))
            for name in ("start", "length", "first"):
                out[name].append(getattr(part, name))
            pieces += part.start.size
            documents += int(np.count_nonzero(part.first))
            split += part.split
            used += int(part.length.sum())
        for w in out.values():
            w.finish()
        stack.close()  # flushed and synced before they are hashed
        rows = out["row_ptr"].count - 1
        slots = rows * spec.width
        stats = {"rows": rows, "pieces": pieces, "documents": documents, "documents_split": split, "tokens": used,
                 "padding_fraction": (slots - used) / slots if slots else 0.0}
        sums = {name: {_DIGEST: file_hexdigest(tmp / f"{name}.npy"), "size": out[name].count} for name in _ARRAYS}
        meta = {**_meta_key(dataset.fingerprint, spec), "rows": rows, "arrays": sums, "stats": stats}
        with synced_file(tmp / "meta.json", "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)


def save_table(directory: Path, table: PackTable, fingerprint: str, spec: PackSpec) -> None:
    """Write `table` to `directory` (which must not exist) through a temporary sibling and one rename."""
    with building_dir(directory, SPACE_HINT) as tmp:
        sums = {}
        for name in _ARRAYS:
            path = tmp / f"{name}.npy"
            arr = np.ascontiguousarray(getattr(table, name), dtype=_DTYPES[name])
            with synced_file(path) as f:
                np.save(f, arr, allow_pickle=False)
            sums[name] = {_DIGEST: file_hexdigest(path), "size": int(arr.size)}
        meta = {**_meta_key(fingerprint, spec), "rows": table.num_rows, "arrays": sums, "stats": table.stats()}
        with synced_file(tmp / "meta.json", "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)


def _checked_digest(path: Path, rec: dict) -> None:
    """The file's digest against the one `meta.json` records: xxh3-128, or sha256 for a table written before
    (`IntegrityError` on a mismatch or an unreadable file)."""
    kind = _DIGEST if _DIGEST in rec else "sha256"
    try:
        actual = file_hexdigest(path, xxhash.xxh3_128 if kind == _DIGEST else hashlib.sha256)
    except OSError as e:
        raise IntegrityError(str(path), f"packing table array unreadable: {e}") from None
    if actual != rec.get(kind):
        raise IntegrityError(str(path), "packing table array does not match its checksum",
                             expected=str(rec.get(kind)), actual=actual)


def load_table(directory: str | os.PathLike[str], fingerprint: str, spec: PackSpec) -> PackTable:
    """The table in `directory`, checked: `ConfigError` if it was built for another dataset or spec (stale),
    `IntegrityError` if a file is missing, unreadable or does not match its checksum (damaged)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise IntegrityError(str(directory), f"packing table has no readable meta.json ({e}); delete the "
                             "directory to build it again") from None
    want = _meta_key(fingerprint, spec)
    for field, value in want.items():
        if not isinstance(meta, dict) or meta.get(field) != value:
            got = meta.get(field) if isinstance(meta, dict) else None
            raise ConfigError(f"{directory}: packing table was built for {field} {got!r}, not {value!r}; it "
                              f"cannot be used for this loader")
    arrays = {}
    for name in _ARRAYS:
        path = directory / f"{name}.npy"
        rec = meta.get("arrays", {}).get(name) if isinstance(meta.get("arrays"), dict) else None
        if not isinstance(rec, dict):
            raise IntegrityError(str(directory), f"meta.json lists no checksum for {name}.npy")
        _checked_digest(path, rec)
        try:  # mapped without holding a descriptor: a loader keeps a table per source and seq_len
            arr = map_npy(path)
        except (OSError, ValueError) as e:
            raise IntegrityError(str(path), f"packing table array unreadable: {e}") from None
        if arr.dtype.str != _DTYPES[name] or arr.ndim != 1 or arr.size != rec.get("size"):
            raise IntegrityError(str(path), f"packing table array has dtype {arr.dtype.str} shape {arr.shape}, "
                                 f"expected {_DTYPES[name]} of {rec.get('size')}")
        arrays[name] = arr
    ptr = arrays["row_ptr"]
    if ptr.size < 1 or int(ptr[0]) != 0 or int(ptr[-1]) != arrays["start"].size or \
            not all(arrays[n].size == arrays["start"].size for n in ("length", "first")):
        raise IntegrityError(str(directory), "packing table arrays do not fit together")
    stats = meta.get("stats")
    if not (isinstance(stats, dict) and stats.get("rows") == ptr.size - 1 and stats.get("pieces") == int(ptr[-1])):
        stats = None  # not what the arrays hold: computed from them when asked
    return PackTable(seq_len=spec.seq_len, row_ptr=ptr, start=arrays["start"], length=arrays["length"],
                     first=arrays["first"], recorded=stats)


def cached_table(dataset: Dataset, spec: PackSpec, cache_dir: str | os.PathLike[str] | None = None) -> PackTable:
    """The table of `dataset` under `spec`: opened from the cache when it is there and intact, else built
    (once per node: other processes wait on the lock) and stored. A stale or damaged table is rebuilt with
    a warning, never used."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = table_dir(root, dataset.fingerprint, spec)

    return open_or_build(root, directory, "packing table", lambda: load_table(directory, dataset.fingerprint, spec),
                         lambda: write_table(directory, dataset, spec))
