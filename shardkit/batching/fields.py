"""What a batch contains beyond the tokens: labels, position ids, varlen boundaries, loss mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from .windows import WindowSource

__all__ = ["BatchFields", "assemble"]


@dataclass(frozen=True, kw_only=True)
class BatchFields:
    """`tokens_only`: one `tokens` array of seq_len + 1 per row instead of input_ids/labels views."""

    tokens_only: bool = False
    position_ids: bool = False
    cu_seqlens: bool = False
    loss_mask: bool = False
    mask_doc_boundary: bool = False  # zero the loss where the label is the first token of another document

    def __post_init__(self) -> None:
        if self.mask_doc_boundary and not self.loss_mask:
            raise ConfigError("mask_doc_boundary needs loss_mask=True")

    @property
    def needs_docs(self) -> bool:
        return self.position_ids or self.cu_seqlens or self.mask_doc_boundary

    def to_json(self) -> dict[str, bool]:
        return {"tokens_only": self.tokens_only, "position_ids": self.position_ids,
                "cu_seqlens": self.cu_seqlens, "loss_mask": self.loss_mask,
                "mask_doc_boundary": self.mask_doc_boundary}


def assemble(tokens: np.ndarray, sample_ids: np.ndarray, source: WindowSource,
             fields: BatchFields) -> dict[str, Any]:
    """A batch dict from filled token rows; input_ids/labels are views (no copy)."""
    batch: dict[str, Any] = {}
    if fields.tokens_only:
        batch["tokens"] = tokens
    else:
        batch["input_ids"] = tokens[:, :-1]
        batch["labels"] = tokens[:, 1:]
    if fields.loss_mask:
        batch["loss_mask"] = np.ones((tokens.shape[0], source.seq_len), dtype=np.float32)
    if not fields.needs_docs:
        return batch
    n, L = tokens.shape[0], source.seq_len
    positions = np.empty((n, L), dtype=np.int64) if fields.position_ids else None
    seqlens: list[np.ndarray] = []
    ar = np.arange(L, dtype=np.int64)
    for j, sid in enumerate(sample_ids.tolist()):
        starts = source.doc_starts(sid)
        inner = starts[starts < L]  # starts among input positions 1..L-1
        if positions is not None:
            seg_start = np.zeros(L, dtype=np.int64)
            if inner.size:
                seg_start[inner] = inner
                np.maximum.accumulate(seg_start, out=seg_start)
            positions[j] = ar - seg_start
        if fields.cu_seqlens:
            bounds = np.concatenate([[0], inner, [L]])
            seqlens.append(np.diff(bounds))
        if fields.mask_doc_boundary and starts.size:
            batch["loss_mask"][j, starts - 1] = 0.0  # label at t is token t+1: a new document's first token
    if positions is not None:
        batch["position_ids"] = positions
    if fields.cu_seqlens:
        lens = np.concatenate(seqlens)
        cu = np.zeros(lens.size + 1, dtype=np.int32)
        np.cumsum(lens, out=cu[1:])
        batch["cu_seqlens"] = cu
        batch["max_seqlen"] = int(lens.max())
    return batch
