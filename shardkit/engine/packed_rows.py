"""Packed rows in the read engine: where they live (`PackedWindows`) and how they are copied (`PackedReader`).

`PackedWindows` stands in for `Windows` in a plan's `Stream`: its samples are the rows of a packing table
(`engine/packing.py`), so the sample order, rank slices, micro-batches, resume and DataLoader workers work
on row ids exactly as they do on window ids — the rows of a step are a pure function of the table and the
seed, found in O(1). `PackedReader` copies a slab of rows piece by piece from the shard mappings (one
vectorised fancy-index per shard touched, the rest of each row zero padding) and builds their fields; or,
when the rows are stored materialised (`engine/row_store.py`), copies whole rows and their stored fields.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConfigError, IntegrityError
from ..format.dataset import Dataset
from .fields import BatchFields
from .mapper import Mapper
from .pack_table import cached_table
from .packed_fields import packed_fields, segment_starts
from .packing import PackingStrategy, PackSpec, PackTable, concat_ranges
from .plan import Rows
from .row_store import RowStore, cached_store
from .windows import Windows

__all__ = ["PackedReader", "PackedWindows", "is_packed", "windows_factory"]

SLAB_BYTES = 256 << 10  # as the engine's slabs of windows: two live slabs stay in L2
STORE_SLAB_BYTES = 2 << 20
_FEW_ITEMS = 8  # item_boundaries: up to this many bounds, a slice per item beats the vectorised pass


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
        self.fields: dict[tuple[int, bool], tuple[dict[str, Any], np.ndarray, np.ndarray]] = {}

    def item(self, a: int, z: int, seq_len: int, fields: BatchFields) -> dict[str, Any]:
        """The packed fields `fields` names (`BatchFields.for_packed_rows`) of rows [a, z): row slices of the
        slab's arrays, and the slab's segment boundaries between them shifted to start at 0."""
        key = (seq_len, fields.mask_doc_boundary, fields.position_ids)
        got = self.fields.get(key)
        if got is None:
            wanted = BatchFields(position_ids=fields.position_ids, cu_seqlens=True, loss_mask=True,
                                 mask_doc_boundary=fields.mask_doc_boundary)
            f = packed_fields(self.lengths, self.counts, self.first, seq_len, wanted)
            cu = f["cu_seqlens"]
            # every row begins a segment at its slot 0, so row r's boundaries start where cu == r·seq_len
            ptr = np.searchsorted(cu, np.arange(self.z - self.a + 1, dtype=np.int64) * seq_len)
            got = self.fields[key] = (f, ptr, np.diff(cu))
        f, ptr, seg = got
        i, j = a - self.a, z - self.a
        out: dict[str, Any] = {}
        if fields.loss_mask:
            out["loss_mask"] = f["loss_mask"][i:j]
        if fields.position_ids:
            out["position_ids"] = f["position_ids"][i:j]
        if fields.cu_seqlens:
            lo, hi = int(ptr[i]), int(ptr[j])
            out["cu_seqlens"] = f["cu_seqlens"][lo:hi + 1] - np.int32(i * seq_len)
            out["max_seqlen"] = int(seg[lo:hi].max()) if hi > lo else 0
        return out


class _StoreSlab:
    """A slab read from row stores: whole token rows, and the rows' segment starts as `cu_seqlens`; the
    stored positions and masks are gathered (and widened into the fields' dtypes) only when an item asks
    for them, once per slab, and handed out as row slices like `_Slab`'s."""

    def __init__(self, rows: Rows, a: int, z: int, parts: list[tuple[Any, PackedWindows, np.ndarray]],
                 cu: np.ndarray, ptr: np.ndarray) -> None:
        self.rows, self.a, self.z = rows, a, z
        self.parts = parts
        self.cu, self.ptr = cu, ptr
        self.pos: np.ndarray | None = None
        self.mask_stored: np.ndarray | None = None
        self.masks: dict[bool, np.ndarray] = {}
        # the items of one size from one row on, built together: first row → (end row, fields, item)
        self._items_at: dict[int, tuple[int, BatchFields, dict[str, Any]]] = {}

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

    def item(self, a: int, z: int, seq_len: int, fields: BatchFields) -> dict[str, Any]:
        """The packed fields of rows [a, z). The items of a slab are consecutive and of one size, so the first
        one asked for builds every item of its size to the slab's end in a few array operations; the others
        are looked up."""
        got = self._items_at.get(a)
        if got is not None and got[0] == z and got[1] is fields:
            return got[2]
        m = z - a
        items = self._items(a - self.a, m, seq_len, fields)
        self._items_at = {a + k * m: (min(a + (k + 1) * m, self.z), fields, item) for k, item in enumerate(items)}
        return items[0]

    def _items(self, i0: int, m: int, seq_len: int, fields: BatchFields) -> list[dict[str, Any]]:
        """Items of `m` rows from slab row `i0` to the slab's end (a last shorter one included)."""
        n_rows = self.z - self.a
        bounds = np.append(np.arange(i0, n_rows, m, dtype=np.int64), n_rows)
        b = bounds.tolist()
        items: list[dict[str, Any]] = [{} for _ in b[1:]]
        if fields.loss_mask:
            mask = self._mask(fields.mask_doc_boundary)
            for k, item in enumerate(items):
                item["loss_mask"] = mask[b[k]:b[k + 1]]
        if fields.position_ids:
            if self.pos is None:
                self.pos = self._gather("pos").astype(np.int64)
            for k, item in enumerate(items):
                item["position_ids"] = self.pos[b[k]:b[k + 1]]
        if fields.cu_seqlens:
            for item, cu, longest in zip(items, *item_boundaries(self.cu, self.ptr, bounds, seq_len)):
                item["cu_seqlens"], item["max_seqlen"] = cu, longest
        return items


def item_boundaries(cu: np.ndarray, ptr: np.ndarray, bounds: np.ndarray, seq_len: int
                    ) -> tuple[list[np.ndarray], list[int]]:
    """(cu_seqlens, max_seqlen) of each item of a slab: items are the slab rows between consecutive `bounds`,
    `cu` the slab's segment starts in slab coordinates (ending with rows·seq_len), `ptr[r]` the index in `cu`
    of row r's first segment (every row begins one at its slot 0). Few items: a slice each; many: one
    vectorised pass whose per-call cost is paid once, not per item."""
    lo = ptr[bounds]
    if bounds.size <= _FEW_ITEMS:
        seg = np.diff(cu[lo[0]:lo[-1] + 1])
        b, p = bounds.tolist(), (lo - lo[0]).tolist()
        return ([cu[lo_:hi_ + 1] - np.int32(r * seq_len) for lo_, hi_, r in zip(lo[:-1].tolist(), lo[1:].tolist(), b)],
                [int(seg[x:y].max()) for x, y in zip(p[:-1], p[1:])])
    nseg = np.diff(lo)
    ends = np.cumsum(nseg + 1)
    starts = ends - nseg - 1
    flat = np.empty(int(ends[-1]), dtype=np.int32)
    # each item's boundaries: the slab's, shifted to its first row, then its own end
    flat[concat_ranges(starts, nseg)] = cu[lo[0]:lo[-1]] - np.repeat((bounds[:-1] * seq_len).astype(np.int32), nseg)
    flat[ends - 1] = np.diff(bounds) * seq_len
    longest = np.maximum.reduceat(np.diff(cu[lo[0]:lo[-1] + 1]), lo[:-1] - lo[0]).tolist()
    return [flat[a:z] for a, z in zip(starts.tolist(), ends.tolist())], longest


class PackedReader:
    """Slabs of packed rows → token arrays and their fields, both computed once per slab."""

    def __init__(self, mapper: Mapper, dtype: np.dtype) -> None:
        self.mapper = mapper
        self.dtype = np.dtype(dtype)
        self._slab: _Slab | _StoreSlab | None = None

    @staticmethod
    def from_stores(rows: Rows) -> bool:
        """Whether every row of `rows` is read from a row store (none from the dataset's shards)."""
        return all(getattr(s.windows, "store", None) is not None for s in rows.streams.values())

    def slab_bytes(self, rows: Rows, fields: BatchFields) -> int:
        """How many bytes of rows one slab holds: more from row stores when the items carry no per-token
        field (only cu_seqlens), where a slab's cost is its fixed work (segments → cu_seqlens), not the copy."""
        f = fields.for_packed_rows
        light = not (f.loss_mask or f.position_ids)
        return STORE_SLAB_BYTES if light and self.from_stores(rows) else SLAB_BYTES

    def _parts(self, rows: Rows, a: int, z: int) -> list[tuple[Any, PackedWindows, np.ndarray]]:
        src = rows.src[a:z]
        if len(rows.streams) == 1:
            (stream,) = rows.streams.values()
            return [(slice(None), stream.windows, rows.ids[a:z])]
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
        if all(pw.store is not None for _, pw, _ in parts) and self._checked(parts):
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
        """Whether every part's store holds intact rows for the slab (blocks hashed on first read); a
        damaged store is moved aside to be rebuilt on the next open, and the slab read from the dataset."""
        for _, pw, ids in parts:
            store = pw.store
            assert store is not None
            try:
                store.check(ids)
            except IntegrityError as e:
                warnings.warn(f"row store {store.directory} is damaged, reading its rows from the dataset (it "
                              f"is rebuilt when next opened): {e}", RuntimeWarning, stacklevel=2)
                pw.store = None
                store.discard()
                return False
        return True

    def _from_stores(self, rows: Rows, a: int, z: int, width: int,
                     parts: list[tuple[Any, PackedWindows, np.ndarray]]) -> np.ndarray:
        """Rows [a, z) copied whole from the row stores (one row-gather per file and part), and `cu_seqlens`
        from the stored segment starts; positions and masks wait until an item asks for them."""
        n = z - a
        seq_len = width - 1
        if len(parts) == 1 and isinstance(parts[0][0], slice):
            (_, pw, ids), = parts
            st = pw.store
            assert st is not None
            # np.take along rows: twice as fast as fancy-indexing the rows (measured, NumPy 2.4)
            out = np.take(st.tokens, ids, axis=0)
            if out.dtype != self.dtype:
                out = out.astype(self.dtype)
            s0 = st.seg_ptr[ids]
            counts = st.seg_ptr[ids + 1] - s0
            seg = st.seg[concat_ranges(s0, counts)]
        else:
            out = np.empty((n, width), dtype=self.dtype)
            counts = np.zeros(n, dtype=np.int64)
            row, segs = [], []
            for sel, pw, ids in parts:
                st = pw.store
                assert st is not None
                out[sel] = st.tokens[ids]
                s0 = st.seg_ptr[ids]
                c = st.seg_ptr[ids + 1] - s0
                counts[sel] = c
                row.append(np.repeat(sel, c))
                segs.append(st.seg[concat_ranges(s0, c)])
            seg = np.concatenate(segs)[np.argsort(np.concatenate(row), kind="stable")]
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        cu = np.empty(seg.size + 1, dtype=np.int32)
        np.add(seg, np.repeat(np.arange(n, dtype=np.int32) * np.int32(seq_len), counts), out=cu[:-1])
        cu[-1] = n * seq_len
        self._slab = _StoreSlab(rows, a, z, parts, cu, ptr)
        return out

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

    def fields(self, rows: Rows, a: int, z: int, tokens: np.ndarray, seq_len: int, fields: BatchFields
               ) -> dict[str, Any]:
        """The item's arrays: tokens (or input_ids/labels views) and the packed fields
        (`BatchFields.for_packed_rows`: loss_mask, position_ids, cu_seqlens and max_seqlen unless a boundary
        field is named). Computed once for the slab holding the item, handed out as views."""
        out: dict[str, Any] = {"tokens": tokens} if fields.tokens_only else \
            {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}
        slab = self._slab
        if slab is None or not (rows is slab.rows and slab.a <= a and z <= slab.z):  # not in the current slab
            self.slab(rows, a, z, seq_len + 1)
            slab = self._slab
        out.update(slab.item(a, z, seq_len, fields.for_packed_rows))  # type: ignore[union-attr]
        return out
