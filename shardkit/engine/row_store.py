"""Packed rows stored materialised (`packing_store=True`): the rows of a packing table, in row-id order,
written once beside the table so a slab of rows is one row-gather instead of a gather of document pieces.

The store of a table lives in `CACHE/<table dir>.rows/` (the table's key: dataset fingerprint, `PackSpec`,
table format, plus the store format) and holds, for `R` rows of `seq_len + 1 = W` slots:

* `tokens.bin`  R × W tokens of the dataset's dtype, padding zero (exactly what the gathering reader copies);
* `pos.bin`     R × L position ids (uint16 when W ≤ 65,536, else int32), widened to int64 when read;
* `mask.bin`    R × L uint8: bit 0 the loss mask, bit 1 the loss mask with `mask_doc_boundary`;
* `seg.bin`     int32 length of every attention segment of every row (a row's sum to L; padding is one),
  `seg_ptr.bin` int64[R + 1] where each row's segments begin, and `seg_max.bin` int32[R] each row's
  longest segment: `cu_seqlens` of any rows is one running sum of their lengths, `max_seqlen` a max over
  rows, never over segments;
* `sums.bin`    xxh3-64 of every block (`block_rows` rows) of the three row files, and `meta.json`.

**Verification.** Building hashes each block as it is written (fsync, then one rename: a reader never sees
half a store). Opening checks the meta against the table it is asked for (stale → `ConfigError`), every
file's size (truncated → `IntegrityError`) and the small files' digests — milliseconds, never the GBs of
rows. A block of rows is hashed the first time a process reads it (`RowStore.check`), so a flipped bit is
found before its rows are handed out; `StoreReader` then warns, moves the store aside (the next open builds
it again) and reads the slab from the dataset instead. Nothing damaged is ever delivered.

**Cost.** 1× the tokens on disk, plus 3 bytes per input slot (positions, mask; 5 with int32 positions),
4 bytes per attention segment and 12 per row.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import xxhash

from ..errors import ConfigError, IntegrityError
from ..format.atomic import building_dir, remove_dir, synced_file
from ..format.checksums import file_hexdigest
from ..format.dataset import Dataset
from ..format.fdless_map import FileId, map_readonly
from .cache_dir import lock_of, open_or_build
from .fields import BatchFields
from .gather import CHECK_VALID_NS
from .pack_table import SPACE_HINT, TABLE_VERSION, default_cache_dir, table_dir
from .packed_fields import packed_fields
from .packing import PackSpec, PackTable, concat_ranges

__all__ = ["ALL_ROW_FILES", "ROW_FILES", "STORE_VERSION", "RowStore", "build_store", "cached_store", "open_store",
           "store_dir"]

STORE_VERSION = 2  # 2: segment lengths and each row's longest (1: segment starts)
# rows are written and verified this many bytes of tokens at a time: one block's xxh3 takes ~0.3 ms
BLOCK_BYTES = 4 << 20
_KEEP_MAPPED = 8  # shard mappings the build holds at once
ROW_FILES = ("tokens", "pos", "mask")  # the row files, numbered so by `RowStore.check`
ALL_ROW_FILES = tuple(range(len(ROW_FILES)))
_SEG_FILES = ("seg", "seg_ptr", "seg_max")
_SMALL_FILES = (*_SEG_FILES, "sums")


def store_dir(cache_dir: str | os.PathLike[str], fingerprint: str, spec: PackSpec) -> Path:
    """Where the row store of (dataset fingerprint, spec) lives: beside its table."""
    t = table_dir(cache_dir, fingerprint, spec)
    return t.with_name(f"{t.name}.rows")


def _meta_key(fingerprint: str, spec: PackSpec, dtype: np.dtype, rows: int) -> dict[str, object]:
    return {"format": "shardkit-row-store", "version": STORE_VERSION, "table_version": TABLE_VERSION,
            "dataset": fingerprint, **spec.to_json(), "dtype": np.dtype(dtype).str, "rows": rows}


def _pos_dtype(width: int) -> np.dtype:
    return np.dtype("<u2") if width <= 1 << 16 else np.dtype("<i4")


def _read_tokens(dataset: Dataset, starts: np.ndarray, lengths: np.ndarray, slot: np.ndarray,
                 flat: np.ndarray, maps: dict[int, np.ndarray]) -> None:
    """Pieces (flat-stream `starts`, `lengths`) copied into `flat` at `slot` (pieces never cross shards);
    `maps` keeps the last few shards' mappings for the next block (rows go through the shards in order)."""
    offsets = dataset.token_offsets
    shard = np.searchsorted(offsets, starts, side="right") - 1
    for s in np.unique(shard).tolist():
        k = shard == s
        tokens = maps.get(s)
        if tokens is None:
            sh = dataset.shards[s]
            tokens = maps[s] = sh.tokens_of(sh.map_bin())
            while len(maps) > _KEEP_MAPPED:  # a descriptor each: the oldest go, whatever the number of shards
                del maps[next(iter(maps))]
        flat[concat_ranges(slot[k], lengths[k])] = tokens[concat_ranges(starts[k] - int(offsets[s]), lengths[k])]


def build_store(directory: Path, dataset: Dataset, table: PackTable, spec: PackSpec) -> None:
    """Write the rows of `table` to `directory` (which must not exist) through a temporary sibling and one
    rename, a block of rows at a time (memory: one block, whatever the dataset's size). A failed write
    (`WriteError`, e.g. a full disk: it says how much room the store needs) leaves nothing behind."""
    n, width = table.num_rows, table.width
    need = n * width * np.dtype(dataset.dtype).itemsize + n * table.seq_len * (_pos_dtype(width).itemsize + 1) \
        + 4 * int(table.length.size) + 12 * n
    with building_dir(directory, f"{SPACE_HINT}; the store needs about {need / 2**20:,.1f} MiB") as tmp:
        _write_store(tmp, dataset, table, spec)


def _write_store(tmp: Path, dataset: Dataset, table: PackTable, spec: PackSpec) -> None:
    width, seq_len, n = table.width, table.seq_len, table.num_rows
    dtype = np.dtype(dataset.dtype)
    pos_dtype = _pos_dtype(width)
    block_rows = max(1, BLOCK_BYTES // (width * dtype.itemsize))
    sums = np.zeros((-(-n // block_rows), len(ROW_FILES)), dtype="<u8")
    fields = BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True)
    doc_mask = BatchFields(position_ids=False, cu_seqlens=False, loss_mask=True, mask_doc_boundary=True)
    seg_total = 0
    maps: dict[int, np.ndarray] = {}
    with contextlib.ExitStack() as stack:
        files = {name: stack.enter_context(synced_file(tmp / f"{name}.bin")) for name in (*ROW_FILES, *_SEG_FILES)}
        files["seg_ptr"].write(np.zeros(1, "<i8").tobytes())
        for b, a in enumerate(range(0, n, block_rows)):
            z = min(n, a + block_rows)
            idx, counts, starts, lengths = table.pieces(np.arange(a, z, dtype=np.int64))
            ends = np.cumsum(lengths)
            row_of = np.repeat(np.arange(z - a, dtype=np.int64), counts)
            first_end = np.cumsum(counts) - counts
            base = np.zeros(z - a, dtype=np.int64)
            base[counts > 0] = (ends - lengths)[first_end[counts > 0]]
            slot = row_of * width + (ends - lengths) - base[row_of]
            tokens = np.zeros((z - a, width), dtype=dtype)
            _read_tokens(dataset, starts, lengths, slot, tokens.reshape(-1), maps)
            first = table.first[idx]
            f = packed_fields(lengths, counts, first, seq_len, fields)
            m = f["loss_mask"].astype(np.uint8)
            m |= packed_fields(lengths, counts, first, seq_len, doc_mask)["loss_mask"].astype(np.uint8) << 1
            cu = f["cu_seqlens"].astype(np.int64)
            seg_row = cu[:-1] // seq_len  # every row begins a segment at its slot 0, so none is empty
            lens = np.diff(cu)
            rows_parts = {"tokens": tokens, "pos": f["position_ids"].astype(pos_dtype), "mask": m}
            for k, name in enumerate(ROW_FILES):
                data = np.ascontiguousarray(rows_parts[name]).tobytes()
                files[name].write(data)
                sums[b, k] = xxhash.xxh3_64_intdigest(data)
            files["seg"].write(lens.astype("<i4").tobytes())
            counts_seg = np.bincount(seg_row, minlength=z - a)
            files["seg_max"].write(np.maximum.reduceat(lens, np.cumsum(counts_seg) - counts_seg).astype("<i4").tobytes())
            seg_ptr = seg_total + np.cumsum(counts_seg)
            files["seg_ptr"].write(seg_ptr.astype("<i8").tobytes())
            seg_total = int(seg_ptr[-1]) if seg_ptr.size else seg_total
    with synced_file(tmp / "sums.bin") as f_:
        f_.write(sums.tobytes())
    digests = {name: file_hexdigest(tmp / f"{name}.bin") for name in _SMALL_FILES}
    meta = {**_meta_key(dataset.fingerprint, spec, dtype, n), "block_rows": block_rows, "pos_dtype": pos_dtype.str,
            "segments": seg_total, "digests": digests}
    with synced_file(tmp / "meta.json", "w") as f_:
        json.dump(meta, f_, indent=1, sort_keys=True)


class RowStore:
    """An opened store: its files mapped read-only (holding no descriptor: a loader keeps a store per source
    and seq_len), each block of rows hashed on its first read here."""

    def __init__(self, directory: Path, meta: dict, seq_len: int, dtype: np.dtype) -> None:
        self.directory = directory
        self.ino = os.stat(directory).st_ino
        self.seq_len, self.width = seq_len, seq_len + 1
        self.rows = int(meta["rows"])
        self.block_rows = int(meta["block_rows"])
        self._files: dict[str, FileId] = {}
        self.tokens = self._map("tokens", np.dtype(dtype)).reshape(self.rows, self.width)
        self.pos = self._map("pos", np.dtype(meta["pos_dtype"])).reshape(self.rows, seq_len)
        self.mask = self._map("mask", np.dtype(np.uint8)).reshape(self.rows, seq_len)
        self.seg = self._map("seg", np.dtype("<i4"))
        self.seg_ptr = self._map("seg_ptr", np.dtype("<i8"))
        self.seg_max = self._map("seg_max", np.dtype("<i4"))
        self.sums = self._map("sums", np.dtype("<u8")).reshape(-1, len(ROW_FILES))
        self.verified = np.zeros(self.sums.shape, dtype=bool)  # (block, row file) hashed in this process
        self._sized_at = -CHECK_VALID_NS - 1  # monotonic ns of the last size check of the row files
        self.all_verified = [self.sums.shape[0] == 0] * len(ROW_FILES)  # per row file

    def _map(self, name: str, dtype: np.dtype) -> np.ndarray:
        raw, self._files[name] = map_readonly(self.directory / f"{name}.bin")
        return raw.view(dtype)  # sizes were checked by open_store

    def check(self, ids: np.ndarray, files: tuple[int, ...] = ALL_ROW_FILES) -> None:
        """Hash the blocks under rows `ids` of the row files `files` (indexes into `ROW_FILES`: what the read
        takes; a reader of boundaries only never hashes positions and masks) not hashed yet in this process
        (`IntegrityError` on a mismatch), after one stat per row file (a store truncated under the mapping
        raises here instead of SIGBUS; as the dataset's shards, at most once per `CHECK_VALID_NS`)."""
        t = time.monotonic_ns()
        if t - self._sized_at > CHECK_VALID_NS:
            for name in ROW_FILES:
                path = self.directory / f"{name}.bin"
                now = self._files[name].changed_size(path)
                if now is not None:
                    raise IntegrityError(str(path), f"row store file changed size under the reader (now "
                                         f"{now:,} bytes, was {self._files[name].size:,})")
            self._sized_at = t
        files = tuple(k for k in files if not self.all_verified[k])
        if not files:
            return
        blocks = np.unique(np.asarray(ids, dtype=np.int64) // self.block_rows)
        arrays = (self.tokens, self.pos, self.mask)
        for k in files:
            todo = blocks[~self.verified[blocks, k]].tolist()
            for b in todo:
                a, z = b * self.block_rows, min(self.rows, (b + 1) * self.block_rows)
                actual = xxhash.xxh3_64_intdigest(memoryview(arrays[k][a:z]).cast("B"))
                if actual != int(self.sums[b, k]):
                    raise IntegrityError(str(self.directory / f"{ROW_FILES[k]}.bin"),
                                         f"row store block {b} (rows {a:,}–{z - 1:,}) does not match its checksum",
                                         expected=f"{int(self.sums[b, k]):016x}", actual=f"{actual:016x}")
                self.verified[b, k] = True
            if todo and self.verified[:, k].all():
                self.all_verified[k] = True

    def discard(self) -> None:
        """Move this (damaged) store aside so the next open builds it again; another process that got there
        first (the directory is no longer the one opened) is left alone."""
        try:
            lock = lock_of(self.directory)
        except OSError as e:  # a read-only cache: the store stays, each process finds the damage again
            warnings.warn(f"row store {self.directory} could not be moved aside ({e}): delete it, or the next "
                          "loader reads its damaged blocks from the dataset again", RuntimeWarning, stacklevel=3)
            return
        try:
            if os.path.exists(self.directory) and os.stat(self.directory).st_ino == self.ino:
                remove_dir(self.directory)
        finally:
            os.close(lock)

    def __getstate__(self) -> dict:
        raise TypeError("a row store holds live mappings; pickle the loader instead, which reopens it")


def open_store(directory: str | os.PathLike[str], fingerprint: str, spec: PackSpec, dtype: np.dtype,
               rows: int) -> RowStore:
    """The store in `directory`, checked: `ConfigError` if it was built for another dataset, spec or table
    (stale), `IntegrityError` if a file is missing, has the wrong size, or a small file its digest."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise IntegrityError(str(directory), f"row store has no readable meta.json ({e}); delete the directory "
                             "to build it again") from None
    if not isinstance(meta, dict):
        raise IntegrityError(str(directory), "row store meta.json is not an object")
    for field, value in _meta_key(fingerprint, spec, dtype, rows).items():
        if meta.get(field) != value:
            raise ConfigError(f"{directory}: row store was built for {field} {meta.get(field)!r}, not {value!r}")
    try:
        block_rows, segments = int(meta["block_rows"]), int(meta["segments"])
        pos_dtype = np.dtype(meta["pos_dtype"])
        digests = dict(meta["digests"])
    except (KeyError, TypeError, ValueError) as e:
        raise IntegrityError(str(directory), f"row store meta.json is incomplete ({e})") from None
    width, seq_len = spec.width, spec.seq_len
    blocks = -(-rows // max(1, block_rows))
    sizes = {"tokens": rows * width * np.dtype(dtype).itemsize, "pos": rows * seq_len * pos_dtype.itemsize,
             "mask": rows * seq_len, "seg": 4 * segments, "seg_ptr": 8 * (rows + 1), "seg_max": 4 * rows,
             "sums": 8 * 3 * blocks}
    for name, size in sizes.items():
        path = directory / f"{name}.bin"
        try:
            actual = path.stat().st_size
        except OSError as e:
            raise IntegrityError(str(path), f"row store file unreadable: {e}") from None
        if actual != size:
            raise IntegrityError(str(path), f"row store file has {actual:,} bytes, expected {size:,} (truncated "
                                 "or from another build)")
    for name in _SMALL_FILES:
        actual_digest = file_hexdigest(directory / f"{name}.bin")
        if actual_digest != digests.get(name):
            raise IntegrityError(str(directory / f"{name}.bin"), "row store file does not match its checksum",
                                 expected=str(digests.get(name)), actual=actual_digest)
    return RowStore(directory, meta, seq_len, dtype)


def cached_store(dataset: Dataset, table: PackTable, spec: PackSpec,
                 cache_dir: str | os.PathLike[str] | None = None) -> RowStore:
    """The row store of `table`: opened when it is there and intact, else built (once per node: other
    processes wait on the lock, then open it). A stale or damaged store is rebuilt with a warning."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = store_dir(root, dataset.fingerprint, spec)
    return open_or_build(root, directory, "row store",
                         lambda: open_store(directory, dataset.fingerprint, spec, dataset.dtype, table.num_rows),
                         lambda: build_store(directory, dataset, table, spec))
