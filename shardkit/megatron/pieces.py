"""Megatron samples as document pieces, many at once: what a reader copies for each sample id.

`GPTOrder.spans(i)` is the readable per-sample form; `order_pieces` is the same, vectorised over sample ids
(one pass over the shuffle and sample indices per prefix), giving each piece as a start in the prefix's
dataset's flat token stream — the shape the engine's packed-row reader copies. Pieces of no tokens (a sample
starting exactly where a document ends) are left out.
"""

from __future__ import annotations

import numpy as np

from .order import BlendOrder, GPTOrder

__all__ = ["gpt_pieces", "order_pieces"]


def gpt_pieces(order: GPTOrder, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pieces per sample, flat token start, length, starts its document) of samples `ids` of one prefix."""
    a = order.arrays
    extra = int(order.config.add_extra_token_to_sequence)
    ids = np.asarray(ids, dtype=np.int64)
    j = np.asarray(a["shuffle_index"][ids], dtype=np.int64)
    smp = a["sample_index"]
    b, b_off = smp[j, 0].astype(np.int64), smp[j, 1].astype(np.int64)
    e, e_off = smp[j + 1, 0].astype(np.int64), smp[j + 1, 1].astype(np.int64)
    counts = e - b + 1
    row = np.repeat(np.arange(ids.size, dtype=np.int64), counts)
    first_of_row = np.cumsum(counts) - counts
    k = b[row] + (np.arange(row.size, dtype=np.int64) - first_of_row[row])  # position in the document index
    doc = np.asarray(a["document_index"][k], dtype=np.int64)
    lengths, pointers = order.prefix.index_arrays()
    sizes = np.asarray(lengths[doc], dtype=np.int64)
    is_first = k == b[row]
    is_last = k == e[row]
    lo = np.where(is_first, b_off[row], 0)
    hi = np.minimum(np.where(is_last, e_off[row] + extra, sizes), sizes)
    length = hi - lo
    itemsize = order.prefix.dataset.dtype.itemsize
    base = int(order.prefix.dataset.token_offsets[order.prefix.position])
    start = base + np.asarray(pointers[doc], dtype=np.int64) // itemsize + lo
    keep = length > 0
    if not keep.all():
        counts = np.bincount(row[keep], minlength=ids.size).astype(np.int64)
        start, length, lo = start[keep], length[keep], lo[keep]
    return counts, start, length, lo == 0


def order_pieces(order: GPTOrder | BlendOrder, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`gpt_pieces` of a blend or a single prefix, pieces in the order of `ids` (all prefixes one dataset)."""
    ids = np.asarray(ids, dtype=np.int64)
    if isinstance(order, GPTOrder):
        return gpt_pieces(order, ids)
    d, j = order.locate_many(ids)
    present = np.unique(d).tolist()
    if len(present) == 1:
        return gpt_pieces(order.datasets[present[0]], j)
    counts = np.empty(ids.size, dtype=np.int64)
    parts = []
    for p in present:
        sel = np.flatnonzero(d == p)
        c, s, n, f = gpt_pieces(order.datasets[p], j[sel])
        counts[sel] = c
        parts.append((np.repeat(sel, c), s, n, f))
    row = np.concatenate([q[0] for q in parts])
    at = np.argsort(row, kind="stable")
    return (counts, np.concatenate([q[1] for q in parts])[at], np.concatenate([q[2] for q in parts])[at],
            np.concatenate([q[3] for q in parts])[at])
