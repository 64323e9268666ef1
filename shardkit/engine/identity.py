"""Per-row identity in batches (opt-in `fields.row_identity`): which source, document and token a row starts at.

A trainer that logs `source_id`, `doc_id` and `token_offset` next to each row's loss can attribute a loss
spike to documents without replaying anything: `doc_id` is the document (0-based over the source dataset,
as `shardkit show` numbers them) holding the row's first token, and `token_offset` is that token's offset in
the document. The rest of the row continues through the next documents (`shardkit explain` lists them all).
The lookup is one binary search of the shard's mapped `.idx` per row, vectorised per shard.

A packed row (`packing=`) holds several documents, so its identity is per **segment** (piece): flat arrays,
one entry per piece of the item in row order — `segment_row` (the row), `segment_slot` (where the piece
starts in the row), `segment_length`, and the piece's `source_id`, `doc_id` and `token_offset` (its first
token's offset in the document: > 0 for the continuation of a document split across rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .mapper import Mapper

__all__ = ["packed_identity", "row_identity"]


def row_identity(rows: Any, a: int, z: int, mapper: Mapper) -> dict[str, np.ndarray]:
    """`source_id` (index into the recipe's sources; 0 for a single dataset), `doc_id`, `token_offset` of rows
    [a, z) of a chunk (`plan.Rows`), int64 each."""
    gid, local = rows.gid[a:z], rows.local[a:z]
    doc = np.empty(z - a, np.int64)
    offset = np.empty(z - a, np.int64)
    for g in np.unique(gid).tolist():
        sel = gid == g
        ds = mapper.datasets[mapper.dataset_of(g)]
        shard = g - int(mapper.base[mapper.dataset_of(g)])
        starts = np.asarray(mapper.doc_starts(g)) // ds.dtype.itemsize
        j = np.searchsorted(starts, local[sel], side="right") - 1
        doc[sel] = int(ds.doc_offsets[shard]) + j
        offset[sel] = local[sel] - starts[j]
    return {"source_id": rows.src[a:z].astype(np.int64), "doc_id": doc, "token_offset": offset}


def _docs_of(mapper: Mapper, gid_base: int, offsets: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(document id, offset in it) of flat-stream tokens `starts` of one dataset."""
    shard = np.searchsorted(offsets, starts, side="right") - 1
    doc = np.empty(starts.size, np.int64)
    offset = np.empty(starts.size, np.int64)
    for s in np.unique(shard).tolist():
        sel = shard == s
        g = gid_base + s
        ds = mapper.datasets[mapper.dataset_of(g)]
        doc_starts = np.asarray(mapper.doc_starts(g)) // ds.dtype.itemsize
        local = starts[sel] - offsets[s]
        j = np.searchsorted(doc_starts, local, side="right") - 1
        doc[sel] = int(ds.doc_offsets[s]) + j
        offset[sel] = local - doc_starts[j]
    return doc, offset


def packed_identity(rows: Any, a: int, z: int, mapper: Mapper) -> dict[str, np.ndarray]:
    """Per piece of packed rows [a, z): segment_row, segment_slot, segment_length, source_id, doc_id,
    token_offset (int64 each, in row order)."""
    parts = []
    src = rows.src[a:z]
    for j, stream in rows.streams.items():
        sel = np.flatnonzero(src == j) if len(rows.streams) > 1 else np.arange(z - a)
        if not sel.size:
            continue
        w = stream.windows
        _, counts, starts, lengths = w.table.pieces(rows.ids[a:z][sel])
        row = np.repeat(sel, counts)
        slot = np.cumsum(lengths) - lengths
        slot -= np.repeat(slot[np.cumsum(counts) - counts], counts) if counts.size else 0
        doc, offset = _docs_of(mapper, w.gid_base, w.offsets, starts)
        parts.append((row, slot, lengths, np.full(row.size, j, np.int64), doc, offset))
    cols = [np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64) for k in range(6)]
    order = np.lexsort((cols[1], cols[0]))
    names = ("segment_row", "segment_slot", "segment_length", "source_id", "doc_id", "token_offset")
    return {n: np.asarray(c[order], dtype=np.int64) for n, c in zip(names, cols)}
