"""Per-row identity in batches (opt-in `fields.row_identity`): which source, document and token a row starts at.

A trainer that logs `source_id`, `doc_id` and `token_offset` next to each row's loss can attribute a loss
spike to documents without replaying anything: `doc_id` is the document (0-based over the source dataset,
as `shardkit show` numbers them) holding the row's first token, and `token_offset` is that token's offset in
the document. The rest of the row continues through the next documents (`shardkit explain` lists them all).
The lookup is one binary search of the shard's mapped `.idx` per row, vectorised per shard.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .mapper import Mapper

__all__ = ["row_identity"]


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
