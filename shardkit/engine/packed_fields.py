"""Batch fields of packed rows: what a trainer needs to keep the documents of a row apart.

A packed row is `seq_len + 1` slots holding pieces of documents back to back, then padding (see
`engine/packing.py`). Each piece is its own attention segment (a continuation piece of a split document
too: it cannot see the piece before it, which is in another row), and so is the padding:

* `position_ids` restart at 0 at every piece (and at the padding);
* `cu_seqlens` (int32, over the flattened inputs of the batch) has a boundary at every piece and at the
  padding, `max_seqlen` the longest segment;
* `loss_mask` (float32; padding must not be trained on, so it is there unless `fields` names boundary
  fields without it, `BatchFields.for_packed_rows`) is 1 where input t and label t + 1 are consecutive
  tokens of one piece, and 0 on padding and where the label begins a continuation piece (that pair is
  trained in the piece before it). Where the label is the first token of another
  document (the "what follows the end of a document" pair) it is 1, or 0 with `mask_doc_boundary`.

`block_mask` turns `cu_seqlens` into the boolean attention mask `scaled_dot_product_attention` takes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fields import BatchFields
from .packing import concat_ranges

__all__ = ["block_mask", "packed_fields", "segment_starts"]


def segment_starts(lengths: np.ndarray, counts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat slot index of every piece's first slot in an (rows, width) array, tokens used per row)."""
    n = counts.size
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    first_piece = np.cumsum(counts) - counts
    row_base = np.zeros(n, dtype=np.int64)
    nonempty = counts > 0
    row_base[nonempty] = starts[first_piece[nonempty]]
    offset = starts - row_base[row]
    used = np.bincount(row, weights=lengths, minlength=n).astype(np.int64) if lengths.size else \
        np.zeros(n, dtype=np.int64)
    return row * width + offset, used


def packed_fields(lengths: np.ndarray, counts: np.ndarray, first: np.ndarray, seq_len: int,
                  fields: BatchFields) -> dict[str, Any]:
    """position_ids / cu_seqlens / max_seqlen / loss_mask of rows whose pieces have `lengths` (concatenated
    in row order, `counts` per row); `first` marks pieces that begin a document.

    Everything is computed from the segment starts (a few per row), never by a scan over every slot: the
    per-slot work is one fill and one running sum for the positions and one fill for the mask."""
    width, n = seq_len + 1, counts.size
    lengths = np.asarray(lengths, dtype=np.int64)
    slot, used = segment_starts(lengths, counts, width)
    padded = np.flatnonzero(used < width)
    starts = np.sort(np.concatenate([slot, padded * width + used[padded]]))  # every segment, padding too
    r, t = np.divmod(starts, width)
    # loss where label slot t + 1 holds a token of the same segment as input slot t: all of a row's inputs
    # before its last used slot, less the slots before a segment start
    mask = np.ones((n, seq_len), dtype=np.float32)
    tail = np.minimum(np.maximum(used - 1, 0), seq_len)
    cut = np.flatnonzero(tail < seq_len)
    mask.reshape(-1)[concat_ranges(cut * seq_len + tail[cut], seq_len - tail[cut])] = 0
    inner = t > 0
    mask[r[inner], t[inner] - 1] = 0  # the label starts another segment
    if not fields.mask_doc_boundary:  # keep "end of a document → first token of the next one"
        doc_start = slot[np.asarray(first, dtype=bool) & (slot % width > 0)]
        dr, dt = np.divmod(doc_start, width)
        mask[dr, dt - 1] = 1
    out: dict[str, Any] = {"loss_mask": mask}
    if fields.position_ids:
        # a running count of ones, set back to 0 at every segment start
        seg_len = np.diff(np.append(starts, n * width))
        pos = np.ones(n * width, dtype=np.int64)
        pos[starts[1:]] = 1 - seg_len[:-1]
        pos[0] = 0
        out["position_ids"] = np.cumsum(pos, out=pos).reshape(n, width)[:, :seq_len]
    if fields.cu_seqlens:
        keep = t < seq_len  # a segment starting at the last slot holds no input
        cu = np.append(r[keep] * seq_len + t[keep], n * seq_len).astype(np.int32)
        out["cu_seqlens"] = cu
        out["max_seqlen"] = int(np.diff(cu).max()) if cu.size > 1 else 0
    return out


def block_mask(cu_seqlens: np.ndarray, seq_len: int, *, causal: bool = True) -> np.ndarray:
    """Boolean attention mask (rows, 1, seq_len, seq_len) from a batch's `cu_seqlens`: True where query t
    may attend to key s (same segment, and s ≤ t when causal) — the `attn_mask` of
    `torch.nn.functional.scaled_dot_product_attention` (`torch.from_numpy(mask)`)."""
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    total = int(cu[-1])
    if total % seq_len:
        raise ValueError(f"cu_seqlens ends at {total}, not a multiple of seq_len {seq_len}")
    seg = (np.searchsorted(cu, np.arange(total, dtype=np.int64), side="right") - 1).reshape(-1, seq_len)
    mask = seg[:, :, None] == seg[:, None, :]
    if causal:
        mask &= np.tri(seq_len, dtype=bool)[None]
    return mask[:, None]
