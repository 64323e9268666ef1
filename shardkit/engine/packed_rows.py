"""Packed rows in the read engine: where they live (`PackedWindows`) and how they are copied (`PackedReader`).

`PackedWindows` stands in for `Windows` in a plan's `Stream`: its samples are the rows of a packing table
(`engine/packing.py`), so the sample order, rank slices, micro-batches, resume and DataLoader workers work
on row ids exactly as they do on window ids — the rows of a step are a pure function of the table and the
seed, found in O(1). `PackedReader` copies a slab of rows piece by piece from the shard mappings (one
vectorised fancy-index per shard touched, the rest of each row zero padding) and builds their fields; or,
when the rows are stored materialised (`engine/row_store.py`), copies whole rows and their stored fields.
"""

from __future__ import annotations

import bisect
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConfigError, IntegrityError
from ..format.dataset import Dataset
from .fields import BatchFields
from .kernels import row_boundaries
from .mapper import Mapper
from .pack_table import cached_table
from .packed_fields import packed_fields, segment_starts
from .packing import PackingStrategy, PackSpec, PackTable, concat_ranges
from .plan import Rows
from .row_store import ALL_ROW_FILES, RowStore, cached_store
from .windows import Windows

__all__ = ["PackedReader", "PackedWindows", "is_packed", "store_files_read", "windows_factory"]

SLAB_BYTES = 256 << 10  # as the engine's slabs of windows: two live slabs stay in L2
STORE_SLAB_BYTES = 1 << 20  # whole stored rows with no per-token field (`PackedReader.slab_bytes`)
# stored rows' cu_seqlens are built for rows of about this many tokens at once, and at most this many
# attention segments (unless one slab holds more): about 12 bytes of scratch per segment
BOUNDARY_TOKENS = 16 << 20
BOUNDARY_SEGMENTS = 1 << 20
# the run's tokens when the compiled loop (`kernels.row_boundaries`) builds them: its fixed cost is a few µs,
# so a shorter run costs nothing measurable (1–16 Mi tokens measured alike) and holds less (about 200 KB of
# boundaries for paragraph-sized documents, until the run's last batch is released)
KERNEL_BOUNDARY_TOKENS = 4 << 20


class PackedWindows(Windows):
    """The rows of a packing table, with `Windows`' interface (sample id = row id)."""

    store: RowStore | None = None  # the rows materialised (packing_store=True), None once found damaged

    def __init__(self, dataset: Dataset, table: PackTable, gid_base: int = 0, store: RowStore | None = None
                 ) -> None:
        if hasattr(dataset, "read_gate"):
            raise ConfigError(f"{dataset.path}: packed rows read local datasets only; stream a remote dataset "
                              "with packing='window', or copy it locally")
        self.dataset = dataset
        self.table = table
        self.store = store
        self.seq_len = table.seq_len
        self.width = table.width
        self.gid_base = gid_base
        self.num_samples = table.num_rows
        if self.num_samples == 0:
            raise ConfigError(f"{dataset.path}: no document to pack (the dataset has no tokens)")
        self.offsets = dataset.token_offsets
        self.sizes = np.diff(self.offsets)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, start within it) of each row's first piece: where its reads begin (hints, metrics)."""
        starts = self.table.start[self.table.row_ptr[np.asarray(sample_ids, dtype=np.int64)]]
        shard = np.searchsorted(self.offsets, starts, side="right") - 1
        return shard, starts - self.offsets[shard]

    def inside(self, shard: np.ndarray, local: np.ndarray) -> np.ndarray:
        return np.ones(np.shape(shard), dtype=bool)  # pieces never cross shards (documents do not)

    def token_ranges(self, first: np.ndarray, stop: np.ndarray) -> list[tuple[int, int, int]]:
        """Like `Windows.token_ranges`, for callers that address sample ids × seq_len (the shuffle blocks of
        the page-cache hints): the data under rows [first // seq_len, ⌈(stop − 1) / seq_len⌉). None while the
        rows are read from a row store: hinting (reading ahead, evicting) the dataset's pages would read data
        no row needs."""
        if self.store is not None:
            return []
        lo_rows = np.asarray(first, dtype=np.int64) // self.seq_len
        hi_rows = np.minimum(-(-(np.asarray(stop, dtype=np.int64) - 1) // self.seq_len), self.num_samples)
        lo, hi = [], []
        t = self.table
        for a, z in zip(lo_rows.tolist(), hi_rows.tolist()):
            if z <= a:
                continue
            pa, pz = int(t.row_ptr[a]), int(t.row_ptr[z])
            lo.append(int(t.start[pa:pz].min()))
            hi.append(int((t.start[pa:pz] + t.length[pa:pz]).max()))
        return super().token_ranges(np.array(lo, np.int64), np.array(hi, np.int64))


def store_files_read(fields: BatchFields) -> tuple[int, ...]:
    """The row store files that items with `fields` read (indexes into `row_store.ROW_FILES`): the tokens,
    and the stored positions and masks when packed rows carry position_ids and loss_mask. Only these are
    hashed and hinted: a varlen trainer (`fields=["cu_seqlens"]`) reads 2 bytes a token, not 5."""
    f = fields.for_packed_rows
    return (0, *((1,) if f.position_ids else ()), *((2,) if f.loss_mask else ()))


def is_packed(rows: Rows) -> bool:
    """Whether a chunk's rows are packed (a phase packs all of its sources or none)."""
    return any(isinstance(s.windows, PackedWindows) for s in rows.streams.values())


def windows_factory(packing: dict[int, PackingStrategy], cache_dir: str | os.PathLike[str] | None,
                    store: bool = False) -> Callable[[Dataset, int, int], Windows]:
    """`Plan`'s windows of (dataset, seq_len, gid_base): packed rows at the seq_lens `packing` names (read
    from their row stores with `store`)."""
    def make(dataset: Dataset, seq_len: int, gid_base: int) -> Windows:
        strategy = packing.get(seq_len, PackingStrategy.WINDOW)
        if strategy is PackingStrategy.WINDOW:
            return Windows(dataset, seq_len, gid_base)
        spec = PackSpec(strategy=strategy, seq_len=seq_len)
        table = cached_table(dataset, spec, cache_dir)
        return packed_windows(dataset, table, spec, gid_base, cache_dir, store)
    return make


def packed_windows(dataset: Dataset, table: PackTable, spec: PackSpec, gid_base: int,
                   cache_dir: str | os.PathLike[str] | None, store: bool) -> PackedWindows:
    """`PackedWindows` of `table`, with its row store opened (or built) when `store`."""
    pw = PackedWindows(dataset, table, gid_base)  # checks the dataset first: no store of a remote dataset
    if store:
        pw.store = cached_store(dataset, table, spec, cache_dir)
    return pw


class _Slab:
    """The pieces of one slab of rows (row order) and, once asked for, its fields: every item of the
    slab takes views of them instead of computing its own."""

    def __init__(self, rows: Rows, a: int, z: int, lengths: np.ndarray, counts: np.ndarray, first: np.ndarray
                 ) -> None:
        self.rows, self.a, self.z = rows, a, z
        self.lengths, self.counts, self.first = lengths, counts, first

    def items(self, out: list[dict[str, Any]], bounds: list[int], seq_len: int, fields: BatchFields,
              cus: list[np.ndarray], longest: list[int]) -> None:
        """Add the packed fields `fields` names (`BatchFields.for_packed_rows`) to the items `out` (the rows
        between consecutive `bounds`, rows of the chunk inside this slab): row slices of the slab's arrays,
        and the slab's segment boundaries between them shifted to start at 0 (`cus`, `longest` are for
        stored rows)."""
        wanted = BatchFields(position_ids=fields.position_ids, cu_seqlens=True, loss_mask=True,
                             mask_doc_boundary=fields.mask_doc_boundary)
        f = packed_fields(self.lengths, self.counts, self.first, seq_len, wanted)
        cu = f["cu_seqlens"]
        # every row begins a segment at its slot 0, so row r's boundaries start where cu == r·seq_len
        ptr = np.searchsorted(cu, np.arange(self.z - self.a + 1, dtype=np.int64) * seq_len)
        seg = np.diff(cu)
        for item, a, z in zip(out, bounds[:-1], bounds[1:]):
            i, j = a - self.a, z - self.a
            if fields.loss_mask:
                item["loss_mask"] = f["loss_mask"][i:j]
            if fields.position_ids:
                item["position_ids"] = f["position_ids"][i:j]
            if fields.cu_seqlens:
                lo, hi = int(ptr[i]), int(ptr[j])
                item["cu_seqlens"] = cu[lo:hi + 1] - np.int32(i * seq_len)
                item["max_seqlen"] = int(seg[lo:hi].max()) if hi > lo else 0


class _StoreSlab:
    """A slab read from row stores: whole token rows. The stored positions and masks are gathered (and
    widened into the fields' dtypes) only when an item asks for them, once per slab, and handed out as row
    slices like `_Slab`'s; `cu_seqlens` come from the reader's `_Boundaries`, built for many slabs at once."""

    def __init__(self, rows: Rows, a: int, z: int, parts: list[tuple[Any, PackedWindows, np.ndarray]]) -> None:
        self.rows, self.a, self.z = rows, a, z
        self.parts = parts
        self.pos: np.ndarray | None = None
        self.mask_stored: np.ndarray | None = None
        self.masks: dict[bool, np.ndarray] = {}

    def _gather(self, name: str) -> np.ndarray:
        """The slab's rows of the stores' `name` file (`pos`, `mask`), in slab row order."""
        parts = self.parts
        if len(parts) == 1 and isinstance(parts[0][0], slice):
            (_, pw, ids), = parts
            return np.take(getattr(pw.store, name), ids, axis=0)
        first = getattr(parts[0][1].store, name)
        out = np.empty((self.z - self.a, first.shape[1]), dtype=first.dtype)
        for sel, pw, ids in parts:
            out[sel] = getattr(pw.store, name)[ids]
        return out

    def _mask(self, mask_doc_boundary: bool) -> np.ndarray:
        mask = self.masks.get(mask_doc_boundary)
        if mask is None:  # bit 1: the mask with mask_doc_boundary, bit 0: without
            if self.mask_stored is None:
                self.mask_stored = self._gather("mask")
            bits = np.right_shift(self.mask_stored, 1) if mask_doc_boundary else np.bitwise_and(self.mask_stored, 1)
            mask = self.masks[mask_doc_boundary] = bits.astype(np.float32)
        return mask

    def items(self, out: list[dict[str, Any]], bounds: list[int], seq_len: int, fields: BatchFields,
              cus: list[np.ndarray], longest: list[int]) -> None:
        """Add the packed fields to the items `out` (rows between consecutive `bounds`, inside this slab);
        `cus`, `longest`: their cu_seqlens and max_seqlen, from the reader's `_Boundaries`."""
        if fields.loss_mask:
            mask = self._mask(fields.mask_doc_boundary)
            for item, a, z in zip(out, bounds[:-1], bounds[1:]):
                item["loss_mask"] = mask[a - self.a:z - self.a]
        if fields.position_ids:
            if self.pos is None:
                self.pos = self._gather("pos").astype(np.int64)
            for item, a, z in zip(out, bounds[:-1], bounds[1:]):
                item["position_ids"] = self.pos[a - self.a:z - self.a]
        if fields.cu_seqlens:
            for item, cu, m in zip(out, cus, longest):
                item["cu_seqlens"], item["max_seqlen"] = cu, m


class _Boundaries:
    """cu_seqlens and max_seqlen of a chunk's items read from row stores, built for a run of items at a time
    (rows of about `KERNEL_BOUNDARY_TOKENS` tokens by the compiled loop, `BOUNDARY_TOKENS` by NumPy; at least
    the slab asking): the fixed cost of a build (a kernel call; a few dozen NumPy calls) is paid per run,
    not per slab."""

    def __init__(self, rows: Rows, bounds: list[int], seq_len: int) -> None:
        self.rows, self.bounds, self.seq_len = rows, bounds, seq_len
        self.first = 0  # the chunk's item number of the run's first item
        self.x = np.zeros(0, dtype=np.int32)
        self.cut: list[int] = [0]
        self.longest: list[int] = []

    def of(self, reader: PackedReader, k0: int, k1: int) -> tuple[np.ndarray, list[int], list[int]]:
        """(x, cut, max_seqlen) of the chunk's items k0..k1 (their rows all in row stores): item k0 + k's
        cu_seqlens is x[cut[k]:cut[k + 1]]."""
        if not (self.first <= k0 and k1 <= self.first + len(self.longest)):
            self._build(reader, k0, k1)
        i, j = k0 - self.first, k1 - self.first
        return self.x, self.cut[i:j + 1], self.longest[i:j]

    def _build(self, reader: PackedReader, k0: int, k1: int) -> None:
        b = self.bounds
        kernel = row_boundaries()  # numba imported at the first run that needs it (None: without numba)
        run = BOUNDARY_TOKENS if kernel is None else KERNEL_BOUNDARY_TOKENS
        k = bisect.bisect_left(b, b[k0] + max(1, run // self.seq_len), k1, len(b) - 1)
        parts = reader._parts(self.rows, b[k0], b[k])
        if any(pw.store is None for _, pw, _ in parts):  # a store found damaged: only the rows asked for
            k = k1
            parts = reader._parts(self.rows, b[k0], b[k])
        if k > k1 and (b[k] - b[k0]) * self.seq_len > BOUNDARY_SEGMENTS:  # (a segment holds ≥ 1 token)
            # many short documents: fewer items, so the run's arrays stay bounded
            counts = _segment_counts(parts, b[k] - b[k0])
            if int(counts.sum()) > BOUNDARY_SEGMENTS:
                rows = int(np.searchsorted(np.cumsum(counts), BOUNDARY_SEGMENTS, side="right"))
                k = max(k1, bisect.bisect_right(b, b[k0] + rows, k0, k) - 1)
                parts = reader._parts(self.rows, b[k0], b[k])
        rel = np.asarray(b[k0:k + 1], dtype=np.int64)
        rel -= b[k0]
        seg, s0, counts, seg_max = _row_segments(parts, b[k] - b[k0])
        self.first = k0
        if kernel is None:
            self.x, self.cut, self.longest = item_boundaries(seg, s0, counts, seg_max, rel, self.seq_len)
        else:
            x, ptr, longest = kernel(seg, s0, counts, seg_max, rel)
            self.x, self.cut, self.longest = x, ptr.tolist(), longest.tolist()


def _segment_counts(parts: list[tuple[Any, PackedWindows, np.ndarray]], n: int) -> np.ndarray:
    """How many attention segments each of `n` rows read from row stores holds, in row order."""
    counts = np.zeros(n, dtype=np.int64)
    for sel, pw, ids in parts:
        st = pw.store
        assert st is not None
        counts[sel] = st.seg_ptr[ids + 1] - st.seg_ptr[ids]
    return counts


def _row_segments(parts: list[tuple[Any, PackedWindows, np.ndarray]], n: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(seg, s0, counts, seg_max) of `n` rows read from row stores: row r's segment lengths are
    seg[s0[r]:s0[r] + counts[r]], its longest seg_max[r] (several parts: gathered into row order)."""
    if len(parts) == 1 and isinstance(parts[0][0], slice):
        (_, pw, ids), = parts
        st = pw.store
        assert st is not None
        s0 = st.seg_ptr[ids]
        return st.seg, s0, st.seg_ptr[ids + 1] - s0, st.seg_max[ids]
    counts = _segment_counts(parts, n)
    seg_max = np.zeros(n, dtype=np.int32)
    for sel, pw, ids in parts:
        seg_max[sel] = pw.store.seg_max[ids]  # type: ignore[union-attr]
    s0 = np.cumsum(counts) - counts
    seg = np.empty(int(counts.sum()), dtype=np.int32)
    for sel, pw, ids in parts:
        st = pw.store
        assert st is not None
        seg[concat_ranges(s0[sel], counts[sel])] = st.seg[concat_ranges(st.seg_ptr[ids], counts[sel])]
    return seg, s0, counts, seg_max


def item_boundaries(seg: np.ndarray, s0: np.ndarray, counts: np.ndarray, seg_max: np.ndarray, bounds: np.ndarray,
                    seq_len: int) -> tuple[np.ndarray, list[int], list[int]]:
    """(x, cut, max_seqlen) of the items of a run of rows: item k's cu_seqlens is x[cut[k]:cut[k + 1]]. The
    items are the rows between consecutive `bounds` (0 to every row); row r's segment lengths are
    `seg[s0[r]:s0[r] + counts[r]]` (at least one, summing to seq_len) and its longest is `seg_max[r]`.

    An item's cu_seqlens is 0 and then the running sum of its rows' segment lengths, so the slab is laid out
    as, per item, one reset slot (minus the previous item's total) and its rows' lengths, and one running
    sum builds every item: about four passes over the slab's segments, one NumPy call per pass, whatever the
    number of items. max_seqlen is a max over rows, never over segments."""
    b = np.asarray(bounds, dtype=np.int64)
    first = b[:-1]
    counts = np.asarray(counts, dtype=np.int64)
    room = counts.copy()
    room[first] += 1
    ends = np.cumsum(room)
    at = ends - counts  # where each row's first segment goes
    lead = at[first] - 1  # each item's reset slot
    # which segment each slot reads: one past the slot before inside a row, a jump at a row's first segment
    # (a reset slot reads the one before it; its value is replaced)
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    jump = np.asarray(s0, dtype=np.int64).copy()
    jump[1:] -= jump[:-1] + counts[:-1] - 1
    steps[at] = jump
    steps[lead] = 0
    x = np.take(seg, np.cumsum(steps, out=steps))
    x[lead[0]] = 0
    x[lead[1:]] = -(np.diff(b)[:-1] * seq_len)
    np.cumsum(x, out=x)
    longest = np.maximum.reduceat(seg_max, first).tolist()
    return x, np.append(lead, x.size).tolist(), longest


def _boundary_items(tokens: np.ndarray, b: list[int], x: np.ndarray, cut: list[int], longest: list[int],
                    tokens_only: bool) -> list[dict[str, Any]]:
    """The items of rows between consecutive `b` (the slab `tokens` begins at row b[0]) with their
    boundaries (item k's cu_seqlens x[cut[k]:cut[k + 1]], max_seqlen longest[k]) and no other packed field:
    views made in one comprehension, none of the rows' own views first."""
    a0 = b[0]
    if tokens_only:
        return [{"tokens": tokens[a - a0:z - a0], "cu_seqlens": x[c:d], "max_seqlen": m}
                for a, z, c, d, m in zip(b, b[1:], cut, cut[1:], longest)]
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    return [{"input_ids": inputs[a - a0:z - a0], "labels": labels[a - a0:z - a0], "cu_seqlens": x[c:d],
             "max_seqlen": m} for a, z, c, d, m in zip(b, b[1:], cut, cut[1:], longest)]


class PackedReader:
    """Slabs of packed rows → token arrays and their fields, both computed once per slab."""

    def __init__(self, mapper: Mapper, dtype: np.dtype) -> None:
        self.mapper = mapper
        self.dtype = np.dtype(dtype)
        self._slab: _Slab | _StoreSlab | None = None
        self._bounds: _Boundaries | None = None  # the current chunk's stored rows' cu_seqlens
        self.store_files = ALL_ROW_FILES  # the row store files the current chunk's items read (`store_files_read`)

    @staticmethod
    def from_stores(rows: Rows) -> bool:
        """Whether every row of `rows` is read from a row store (none from the dataset's shards)."""
        return all(getattr(s.windows, "store", None) is not None for s in rows.streams.values())

    def stored_fast(self, rows: Rows, fields: BatchFields) -> bool:
        """Whether a chunk's slabs can be read by `stored_items`: one source, read from its row store, and
        items whose only packed fields are the boundaries (`fields=["cu_seqlens"]`, what varlen attention
        takes)."""
        return len(rows.streams) == 1 and fields.packed_boundaries_only and self.from_stores(rows)

    def stored_items(self, rows: Rows, bounds: list[int], k0: int, k1: int, seq_len: int, fields: BatchFields
                     ) -> tuple[np.ndarray, list[dict[str, Any]]] | None:
        """(the slab, its items) of the chunk's items k0..k1 when `stored_fast`: one row-gather from the store
        and the items' views, with none of `slab`'s and `items`' general bookkeeping (2–3 % of a batch of 8,
        measured alternated). None once the store is found damaged: the caller reads the slab as any other
        (from the dataset)."""
        (stream,) = rows.streams.values()
        pw = stream.windows
        store = pw.store
        if store is None:
            return None
        a0, z0 = bounds[k0], bounds[k1]
        ids = rows.ids[a0:z0]
        if not self._checked([(slice(None), pw, ids)]):
            return None
        tokens = self._store_rows(store, ids)
        self._slab = None
        x, cut, longest = self._stored_boundaries(rows, bounds, k0, k1, seq_len)
        return tokens, _boundary_items(tokens, bounds[k0:k1 + 1], x, cut, longest, fields.tokens_only)

    def slab_bytes(self, rows: Rows, fields: BatchFields) -> int:
        """How many bytes of rows one slab holds: more from row stores when the items carry no per-token
        field (only cu_seqlens), where a slab's cost is its fixed work (the slab's items), not the copy;
        1 MiB measured fastest (bench_packing), larger slabs stop fitting the caches the copy writes to."""
        return STORE_SLAB_BYTES if fields.packed_boundaries_only and self.from_stores(rows) else SLAB_BYTES

    def _parts(self, rows: Rows, a: int, z: int) -> list[tuple[Any, PackedWindows, np.ndarray]]:
        if len(rows.streams) == 1:
            (stream,) = rows.streams.values()
            return [(slice(None), stream.windows, rows.ids[a:z])]
        src = rows.src[a:z]
        out = []
        for j, stream in rows.streams.items():
            sel = np.flatnonzero(src == j)
            if sel.size:
                out.append((sel, stream.windows, rows.ids[a:z][sel]))
        return out

    def slab(self, rows: Rows, a: int, z: int, width: int) -> np.ndarray:
        """Token rows [a, z) of `rows`: each row's pieces back to back, then zeros. The slab's pieces are
        kept for `fields` of the items inside it."""
        parts = self._parts(rows, a, z)
        if self._checked(parts):
            return self._from_stores(rows, a, z, width, parts)
        n = z - a
        out = np.empty((n, width), dtype=self.dtype)
        pieces = []
        for sel, pw, ids in parts:
            idx, counts, starts, lengths = pw.table.pieces(ids)
            part = out if isinstance(sel, slice) else np.empty((ids.size, width), dtype=self.dtype)
            self._fill(pw, counts, starts, lengths, part)
            if not isinstance(sel, slice):
                out[sel] = part
            pieces.append((sel, counts, lengths, pw.table.first[idx]))
        if len(pieces) == 1:
            _, counts, lengths, first = pieces[0]
        else:  # the parts' pieces in row order
            counts = np.zeros(n, dtype=np.int64)
            row = []
            for sel, c, _, _ in pieces:
                counts[sel] = c
                row.append(np.repeat(np.arange(n)[sel], c))
            order = np.argsort(np.concatenate(row), kind="stable")
            lengths = np.concatenate([p[2] for p in pieces])[order]
            first = np.concatenate([p[3] for p in pieces])[order]
        self._slab = _Slab(rows, a, z, lengths, counts, first)
        return out

    def _checked(self, parts: list[tuple[Any, PackedWindows, np.ndarray]]) -> bool:
        """Whether every part is read from a store that holds intact rows for the slab in the files its items
        read (`store_files`; blocks hashed on first read); a damaged store is moved aside to be rebuilt on the
        next open, and the slab read from the dataset."""
        for _, pw, ids in parts:
            store = pw.store
            if store is None:
                return False
            try:
                store.check(ids, self.store_files)
            except IntegrityError as e:
                warnings.warn(f"row store {store.directory} is damaged, reading its rows from the dataset (it "
                              f"is rebuilt when next opened): {e}", RuntimeWarning, stacklevel=2)
                pw.store = None
                store.discard()
                return False
        return True

    def _from_stores(self, rows: Rows, a: int, z: int, width: int,
                     parts: list[tuple[Any, PackedWindows, np.ndarray]]) -> np.ndarray:
        """Rows [a, z) copied whole from the row stores (one row-gather per part); their fields wait until an
        item asks for them."""
        self._slab = _StoreSlab(rows, a, z, parts)
        if len(parts) == 1 and isinstance(parts[0][0], slice):
            (_, pw, ids), = parts
            assert pw.store is not None
            return self._store_rows(pw.store, ids)
        out = np.empty((z - a, width), dtype=self.dtype)
        for sel, pw, ids in parts:
            assert pw.store is not None
            out[sel] = pw.store.tokens[ids]
        return out

    def _store_rows(self, store: RowStore, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a store, copied into a new slab of the reader's dtype."""
        # take along rows: twice as fast as fancy-indexing the rows (measured, NumPy 2.4); the method, not
        # np.take, whose Python wrapper costs a third as much as a slab's copy of 256 KiB
        out = store.tokens.take(ids, axis=0)
        return out if out.dtype == self.dtype else out.astype(self.dtype)

    def _fill(self, pw: PackedWindows, counts: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
              out: np.ndarray) -> None:
        """Pieces back to back from slot 0 of each row, zeros after: one `take` per shard touched, whose
        index runs over every slot of the rows (a row's padding slots repeat its last piece's last token,
        already read, and are zeroed after)."""
        n, width = out.shape
        slot, used = segment_starts(lengths, counts, width)
        pad = np.flatnonzero(used < width)
        pad_slot = concat_ranges(pad * width + used[pad], width - used[pad])
        shard = np.searchsorted(pw.offsets, starts, side="right") - 1
        s0 = int(shard[0]) if shard.size else 0
        flat = out.reshape(-1)
        if shard.size and bool((shard == s0).all()):
            local = starts - pw.offsets[s0]
            # slot → token index: a step of 1 inside a piece, 0 on padding, a jump where a piece begins
            steps = np.ones(flat.size, dtype=np.int64)
            steps[pad_slot] = 0
            # the slot before a piece holds the previous piece's last token (padding repeats it)
            steps[slot[1:]] = local[1:] - (local[:-1] + lengths[:-1] - 1)
            steps[0] = local[0]
            np.take(self._tokens(pw, s0), np.cumsum(steps, out=steps), out=flat)
        else:  # pieces of several shards: each shard's pieces gathered into their own slots
            for s in np.unique(shard).tolist():
                k = shard == s
                flat[concat_ranges(slot[k], lengths[k])] = \
                    self._tokens(pw, s)[concat_ranges(starts[k] - pw.offsets[s], lengths[k])]
        flat[pad_slot] = 0

    def _tokens(self, pw: PackedWindows, shard: int) -> np.ndarray:
        g = pw.gid_base + shard
        m = self.mapper.tokens(g)
        m.check_intact(self.mapper.shard(g))  # one fstat: a truncated file raises instead of SIGBUS
        return m.tokens

    def items(self, rows: Rows, bounds: list[int], k0: int, k1: int, tokens: np.ndarray, seq_len: int,
              fields: BatchFields) -> list[dict[str, Any]]:
        """The chunk's items k0..k1 (rows between consecutive `bounds`, the items of the slab `tokens` just
        read): tokens (or input_ids/labels) as row slices of `tokens`, and the packed fields
        (`BatchFields.for_packed_rows`: loss_mask, position_ids, cu_seqlens and max_seqlen unless a boundary
        field is named), all computed at once and handed out as views."""
        b = bounds[k0:k1 + 1]
        a0 = b[0]
        slab = self._slab
        if slab is None or not (rows is slab.rows and slab.a <= a0 and b[-1] <= slab.z):  # not the slab just read
            self.slab(rows, a0, b[-1], seq_len + 1)
            slab = self._slab
        packed = fields.for_packed_rows
        if fields.packed_boundaries_only and isinstance(slab, _StoreSlab):
            # varlen attention alone, from row stores: the common fast case, every item made in one pass
            x, cut, longest = self._stored_boundaries(rows, bounds, k0, k1, seq_len)
            return _boundary_items(tokens, b, x, cut, longest, fields.tokens_only)
        spans = [(a - a0, z - a0) for a, z in zip(b[:-1], b[1:])]
        cus: list[np.ndarray] = []
        longest: list[int] = []
        if packed.cu_seqlens and isinstance(slab, _StoreSlab):
            x, cut, longest = self._stored_boundaries(rows, bounds, k0, k1, seq_len)
            cus = [x[c:d] for c, d in zip(cut[:-1], cut[1:])]
        if fields.tokens_only:
            out = [{"tokens": tokens[i:j]} for i, j in spans]
        else:
            inputs, labels = tokens[:, :-1], tokens[:, 1:]
            out = [{"input_ids": inputs[i:j], "labels": labels[i:j]} for i, j in spans]
        slab.items(out, b, seq_len, packed, cus, longest)  # type: ignore[union-attr]
        return out

    def _stored_boundaries(self, rows: Rows, bounds: list[int], k0: int, k1: int, seq_len: int
                           ) -> tuple[np.ndarray, list[int], list[int]]:
        """(x, cut, max_seqlen) of the chunk's items k0..k1 (their rows all in row stores): item k0 + k's
        cu_seqlens is x[cut[k]:cut[k + 1]], from the current run of boundaries (`_Boundaries`)."""
        bd = self._bounds
        if bd is None or bd.rows is not rows or bd.bounds is not bounds or bd.seq_len != seq_len:
            bd = self._bounds = _Boundaries(rows, bounds, seq_len)
        return bd.of(self, k0, k1)
