"""What a batch contains beyond the tokens: labels, position ids, varlen boundaries, loss mask.

Document boundaries come from each shard's mapped `.idx` (`Mapper.doc_starts`): a binary search of the
file-backed pointer array per window, never a private per-document copy, so memory does not grow with the
number of documents read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import ConfigError
from .mapper import Mapper
from .plan import Stream

__all__ = ["BatchFields", "DocStarts", "assemble"]


@dataclass(frozen=True, kw_only=True)
class BatchFields:
    """`tokens_only`: one `tokens` array of seq_len + 1 per row instead of input_ids/labels views."""

    tokens_only: bool = False
    position_ids: bool = False
    cu_seqlens: bool = False
    loss_mask: bool = False
    mask_doc_boundary: bool = False  # zero the loss where the label is the first token of another document
    row_identity: bool = False  # per row: source_id, doc_id, token_offset of its first token (engine/identity.py)

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), bool):
                raise ConfigError(f"fields.{f.name} must be True or False, got {getattr(self, f.name)!r}")
        if self.mask_doc_boundary and not self.loss_mask:
            raise ConfigError("fields.mask_doc_boundary needs loss_mask=True")

    @classmethod
    def parse(cls, value: Any) -> BatchFields:
        """A BatchFields, a mapping of flags, or an iterable of field names (`["position_ids", "cu_seqlens"]`)."""
        names = [f.name for f in fields(cls)]
        if isinstance(value, BatchFields):
            return value
        if value is None:
            return cls()
        if isinstance(value, Mapping):
            unknown = [k for k in value if k not in names]
            if unknown:
                raise ConfigError(f"fields: unknown field {unknown[0]!r}; the fields are {', '.join(names)}")
            return cls(**value)
        if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
            items = list(value)
            unknown = [k for k in items if k not in names]
            if unknown:
                raise ConfigError(f"fields: unknown field {unknown[0]!r}; the fields are {', '.join(names)}")
            return cls(**dict.fromkeys(items, True))
        raise ConfigError(f"fields must be a BatchFields, a dict of flags or a list of field names "
                          f"({', '.join(names)}), got {value!r}")

    @cached_property
    def for_packed_rows(self) -> BatchFields:
        """The fields packed rows carry: all of position_ids, cu_seqlens and loss_mask, unless a boundary field
        (position_ids or cu_seqlens) is named, then the named ones (loss_mask only if named). A packed row
        needs its boundaries, or attention crosses its documents; a varlen trainer that masks padding itself
        (`fields=["cu_seqlens"]`) pays for no per-token field."""
        if self.position_ids or self.cu_seqlens:
            return self
        return replace(self, position_ids=True, cu_seqlens=True, loss_mask=True)

    @property
    def packed_boundaries_only(self) -> bool:
        """Whether packed rows carry no per-token field, only their boundaries (cu_seqlens, max_seqlen): the
        items a row store hands out without gathering or widening anything but the tokens."""
        f = self.for_packed_rows
        return not (f.loss_mask or f.position_ids)  # then cu_seqlens is named (for_packed_rows)

    @property
    def needs_docs(self) -> bool:
        return self.position_ids or self.cu_seqlens or self.mask_doc_boundary

    def to_json(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class DocStarts:
    """Document starts inside windows, from the mapped indices of a `Mapper`."""

    def __init__(self, mapper: Mapper) -> None:
        self.mapper = mapper

    def __call__(self, stream: Stream, sample_id: int) -> np.ndarray:
        """Positions 1..seq_len inside the window where a new document begins (sorted, int64)."""
        w = stream.windows
        item = w.dataset.dtype.itemsize
        g0 = int(sample_id) * w.seq_len
        g1 = g0 + w.seq_len  # a start at the window's last token still splits the last label
        s = int(np.searchsorted(w.offsets, g0, side="right")) - 1
        found = []
        n = w.dataset.num_shards
        while s < n and int(w.offsets[s]) <= g1:
            base = int(w.offsets[s])
            pointers = self.mapper.doc_starts(w.gid_base + s)
            lo, hi = np.searchsorted(pointers, [(g0 + 1 - base) * item, (g1 + 1 - base) * item])
            found.append(pointers[lo:hi] // item + (base - g0))
            s += 1
        return np.concatenate(found) if found else np.zeros(0, np.int64)


def assemble(tokens: np.ndarray, starts_of: Callable[[int], np.ndarray], seq_len: int,
             fields: BatchFields) -> dict[str, Any]:
    """A batch dict from filled token rows; input_ids/labels are views (no copy). `starts_of(r)` gives row
    r's document starts (only called when a field needs them)."""
    batch: dict[str, Any] = {}
    if fields.tokens_only:
        batch["tokens"] = tokens
    else:
        batch["input_ids"] = tokens[:, :-1]
        batch["labels"] = tokens[:, 1:]
    if fields.loss_mask:
        batch["loss_mask"] = np.ones((tokens.shape[0], seq_len), dtype=np.float32)
    if not fields.needs_docs:
        return batch
    n, L = tokens.shape[0], seq_len
    positions = np.empty((n, L), dtype=np.int64) if fields.position_ids else None
    seqlens: list[np.ndarray] = []
    ar = np.arange(L, dtype=np.int64)
    for j in range(n):
        starts = starts_of(j)
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
