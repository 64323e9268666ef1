"""Packed rows in the read engine: where they live (`PackedWindows`) and how they are copied (`PackedReader`).

`PackedWindows` stands in for `Windows` in a plan's `Stream`: its samples are the rows of a packing table
(`engine/packing.py`), so the sample order, rank slices, micro-batches, resume and DataLoader workers work
on row ids exactly as they do on window ids — the rows of a step are a pure function of the table and the
seed, found in O(1). `PackedReader` copies a slab of rows piece by piece from the shard mappings (one
vectorised fancy-index per shard touched, the rest of each row zero padding) and builds their fields.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset
from .fields import BatchFields
from .mapper import Mapper
from .pack_table import cached_table
from .packed_fields import packed_fields
from .packing import PackingStrategy, PackSpec, PackTable, concat_ranges
from .plan import Rows
from .windows import Windows

__all__ = ["PackedReader", "PackedWindows", "is_packed", "windows_factory"]


class PackedWindows(Windows):
    """The rows of a packing table, with `Windows`' interface (sample id = row id)."""

    def __init__(self, dataset: Dataset, table: PackTable, gid_base: int = 0) -> None:
        if hasattr(dataset, "read_gate"):
            raise ConfigError(f"{dataset.path}: packed rows read local datasets only; stream a remote dataset "
                              "with packing='window', or copy it locally")
        self.dataset = dataset
        self.table = table
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
        the page-cache hints): the data under rows [first // seq_len, ⌈(stop − 1) / seq_len⌉)."""
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


def windows_factory(packing: dict[int, PackingStrategy], cache_dir: str | os.PathLike[str] | None
                    ) -> Callable[[Dataset, int, int], Windows]:
    """`Plan`'s windows of (dataset, seq_len, gid_base): packed rows at the seq_lens `packing` names."""
    def make(dataset: Dataset, seq_len: int, gid_base: int) -> Windows:
        strategy = packing.get(seq_len, PackingStrategy.WINDOW)
        if strategy is PackingStrategy.WINDOW:
            return Windows(dataset, seq_len, gid_base)
        table = cached_table(dataset, PackSpec(strategy=strategy, seq_len=seq_len), cache_dir)
        return PackedWindows(dataset, table, gid_base)
    return make


class PackedReader:
    """Slabs of packed rows → token arrays and their fields."""

    def __init__(self, mapper: Mapper, dtype: np.dtype) -> None:
        self.mapper = mapper
        self.dtype = np.dtype(dtype)

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
        """Token rows [a, z) of `rows`: each row's pieces back to back, then zeros."""
        out = np.zeros((z - a, width), dtype=self.dtype)
        for sel, pw, ids in self._parts(rows, a, z):
            part = out if isinstance(sel, slice) else np.zeros((ids.size, width), dtype=self.dtype)
            self._fill(pw, ids, part)
            if not isinstance(sel, slice):
                out[sel] = part
        return out

    def _fill(self, pw: PackedWindows, ids: np.ndarray, out: np.ndarray) -> None:
        """Pieces back to back from slot 0 of each row: the destination is every slot before the row's
        padding (one boolean mask), the source one gather per shard touched."""
        _, counts, starts, lengths = pw.table.pieces(ids)
        width = out.shape[1]
        used = np.bincount(np.repeat(np.arange(ids.size), counts), weights=lengths, minlength=ids.size)
        dest = np.arange(width)[None, :] < used[:, None]
        shard = np.searchsorted(pw.offsets, starts, side="right") - 1
        shards = np.unique(shard).tolist()
        if len(shards) == 1:
            src = [(shards[0], starts - pw.offsets[shards[0]], lengths)]
        else:  # pieces in row order, read shard by shard
            src = [(s, starts[k] - pw.offsets[s], lengths[k]) for s in shards for k in [shard == s]]
        parts = []
        for s, local, n in src:
            g = pw.gid_base + s
            m = self.mapper.tokens(g)
            m.check_intact(self.mapper.shard(g))  # one fstat: a truncated file raises instead of SIGBUS
            parts.append(m.tokens[concat_ranges(local, n)])
        if len(parts) == 1:
            out[dest] = parts[0]
        else:
            flat = np.empty(int(lengths.sum()), dtype=out.dtype)
            at = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            for (s, _, n), part in zip(src, parts):
                flat[concat_ranges(at[shard == s], n)] = part
            out[dest] = flat

    def fields(self, rows: Rows, a: int, z: int, tokens: np.ndarray, seq_len: int, fields: BatchFields
               ) -> dict[str, Any]:
        """The item's arrays: tokens (or input_ids/labels views), and always loss_mask, position_ids,
        cu_seqlens, max_seqlen — a packed row without them would train across documents and on padding."""
        n = z - a
        counts = np.zeros(n, dtype=np.int64)
        pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (row of each piece, length, first)
        for sel, pw, ids in self._parts(rows, a, z):
            idx, c, _, lengths = pw.table.pieces(ids)
            counts[sel] = c
            where = np.arange(n)[sel]
            pieces.append((np.repeat(where, c), lengths, pw.table.first[idx]))
        if len(pieces) == 1:
            _, lengths, first = pieces[0]
        else:
            row = np.concatenate([p[0] for p in pieces])
            order = np.argsort(row, kind="stable")
            lengths = np.concatenate([p[1] for p in pieces])[order]
            first = np.concatenate([p[2] for p in pieces])[order]
        wanted = BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True,
                             mask_doc_boundary=fields.mask_doc_boundary)
        out: dict[str, Any] = {"tokens": tokens} if fields.tokens_only else \
            {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}
        out.update(packed_fields(lengths, counts, first, seq_len, wanted))
        return out
