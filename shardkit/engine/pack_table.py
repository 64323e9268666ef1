"""Packing tables on disk: built once per node under a lock, verified when opened, rebuilt when damaged.

A table (`engine/packing.py`) is a function of the dataset's documents and a `PackSpec`; it is stored in
`CACHE/<strategy>-L<seq_len>-<key>/` where `key` hashes exactly that (the dataset fingerprint, the spec and
the table format version), as four `.npy` arrays (no pickle) and `meta.json` with their sizes and sha256.

Opening checks the meta against what is asked for and every array against its checksum; a table that was
built for something else (`ConfigError`: names the field) or is damaged (`IntegrityError`) is never used:
`cached_table` warns and builds it again. Concurrent loaders on one node take an exclusive `flock` on
`<dir>.lock`, so one process builds while the others wait and then open what it wrote (written to a
temporary directory and renamed into place: a reader never sees half a table); a cache that cannot be
written (prebuilt, mounted read-only) is used as it is (`engine/cache_dir.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..errors import ConfigError, IntegrityError
from ..format.atomic import building_dir, synced_file
from ..format.checksums import file_hexdigest
from ..format.dataset import Dataset
from ..format.fdless_map import map_npy
from .cache_dir import open_or_build
from .packing import PackSpec, PackTable, build_table

__all__ = ["TABLE_VERSION", "cached_table", "default_cache_dir", "document_spans", "load_table", "save_table",
           "table_dir"]

TABLE_VERSION = 1
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


def document_spans(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(first token in the flat stream, length) of every document of `dataset`, in order."""
    starts, lengths = [], []
    item = dataset.dtype.itemsize
    for s, shard in enumerate(dataset.shards):
        # a mapping of its own, dropped after the copy: a dataset of any number of shards holds one at a time
        index = shard.load_index()
        starts.append(np.asarray(index.pointers, dtype=np.int64) // item + int(dataset.token_offsets[s]))
        lengths.append(np.array(index.lengths, dtype=np.int64))
        del index
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(lengths)


def save_table(directory: Path, table: PackTable, fingerprint: str, spec: PackSpec) -> None:
    """Write `table` to `directory` (which must not exist) through a temporary sibling and one rename."""
    with building_dir(directory, SPACE_HINT) as tmp:
        sums = {}
        for name in _ARRAYS:
            path = tmp / f"{name}.npy"
            arr = np.ascontiguousarray(getattr(table, name), dtype=_DTYPES[name])
            with synced_file(path) as f:
                np.save(f, arr, allow_pickle=False)
            sums[name] = {"sha256": _sha256(path), "size": int(arr.size)}
        meta = {**_meta_key(fingerprint, spec), "rows": table.num_rows, "arrays": sums, "stats": table.stats()}
        with synced_file(tmp / "meta.json", "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)


def _sha256(path: Path) -> str:
    return file_hexdigest(path, hashlib.sha256)


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
        try:
            actual = _sha256(path)
        except OSError as e:
            raise IntegrityError(str(path), f"packing table array unreadable: {e}") from None
        if actual != rec.get("sha256"):
            raise IntegrityError(str(path), "packing table array does not match its checksum",
                                 expected=str(rec.get("sha256")), actual=actual)
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
    return PackTable(seq_len=spec.seq_len, row_ptr=ptr, start=arrays["start"], length=arrays["length"],
                     first=arrays["first"])


def cached_table(dataset: Dataset, spec: PackSpec, cache_dir: str | os.PathLike[str] | None = None) -> PackTable:
    """The table of `dataset` under `spec`: opened from the cache when it is there and intact, else built
    (once per node: other processes wait on the lock) and stored. A stale or damaged table is rebuilt with
    a warning, never used."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = table_dir(root, dataset.fingerprint, spec)

    def build() -> None:
        save_table(directory, build_table(*document_spans(dataset), spec), dataset.fingerprint, spec)
    return open_or_build(root, directory, "packing table", lambda: load_table(directory, dataset.fingerprint, spec),
                         build)
