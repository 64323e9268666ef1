"""megatron-core's GPTDataset indices as pure functions (document, sample and shuffle index).

Each function reproduces, bit for bit, the array megatron-core 0.16.1 builds in
`gpt_dataset._build_document_sample_shuffle_indices` and `helpers.build_sample_idx` from the same
inputs, so a run can move between the two loaders without changing a sample. The document and shuffle
indices are numpy `RandomState` shuffles (Megatron's own, drawn in the same order from one state); the
sample index is computed without a per-token loop: sample `k` starts at flat position `k * seq_len` of
the document-index stream, and the document holding it follows from the cumulative document lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

__all__ = ["EpochPlan", "plan_epochs", "document_index", "sample_index", "shuffle_index", "SEPARATE_FINAL_EPOCH_THRESHOLD"]

SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80  # megatron-core's constant in _build_document_sample_shuffle_indices
_SAMPLE_CHUNK = 1 << 22  # samples of the sample index computed at a time


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """How many passes over the split's documents a request needs, and whether the last is shuffled apart."""

    num_epochs: int
    tokens_per_epoch: int
    separate_final_epoch: bool
    num_samples_sans_final_epoch: int  # only meaningful when separate_final_epoch


def plan_epochs(tokens_per_epoch: int, num_samples: int | None, seq_len: int, add_extra_token: bool) -> EpochPlan:
    """Megatron's `_get_num_epochs` and its separate-final-epoch decision (threshold 0.80)."""
    if tokens_per_epoch <= 1:
        raise ConfigError(f"the split holds {tokens_per_epoch} token(s): Megatron needs more than one; "
                          "check the split string and the data prefix")
    if seq_len <= 1:
        raise ConfigError(f"seq_len must be greater than 1 for Megatron's sample index, got {seq_len}")
    extra = int(add_extra_token)
    num_epochs = 1
    if num_samples is not None:
        requested = num_samples * seq_len + extra
        num_epochs = max(1, -(-(requested) // tokens_per_epoch))  # the smallest E with E * T >= requested
    if num_epochs == 1:
        return EpochPlan(1, tokens_per_epoch, False, 0)
    assert num_samples is not None
    sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_len
    from_final = num_samples - sans_final
    per_epoch = (tokens_per_epoch - extra) // seq_len
    separate = from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
    return EpochPlan(num_epochs, tokens_per_epoch, separate, sans_final)


def document_index(documents: np.ndarray, num_epochs: int, rng: np.random.RandomState,
                   separate_final_epoch: bool) -> np.ndarray:
    """Megatron's `_build_document_index`: the split's document ids repeated per epoch, shuffled (int32)."""
    if not separate_final_epoch or num_epochs == 1:
        out = np.tile(np.asarray(documents, dtype=np.int32), num_epochs)
        rng.shuffle(out)
        return out
    first = document_index(documents, num_epochs - 1, rng, False)
    last = document_index(documents, 1, rng, False)
    return np.concatenate((first, last))


def _num_samples(num_epochs: int, tokens_per_epoch: int, seq_len: int, drop_last_partial: bool, extra: int) -> int:
    total = num_epochs * tokens_per_epoch - extra
    if drop_last_partial:
        return total // seq_len
    # helpers.cpp computes ceil(float(total) / seq_length) in single precision: reproduced, rounding included
    return int(np.ceil(np.float32(total) / np.float32(seq_len)))


def sample_index(sizes: np.ndarray, doc_index: np.ndarray, seq_len: int, num_epochs: int, tokens_per_epoch: int,
                 drop_last_partial: bool = True, add_extra_token: bool = True) -> np.ndarray:
    """`helpers.build_sample_idx`: (position in doc_index, offset) where each sample starts, plus the end.

    Sample `k` covers flat positions `[k * seq_len, (k + 1) * seq_len + extra)` of the documents of
    `doc_index` laid back to back. Megatron's loop stops in the first document whose end reaches the
    sample's end, so entry `k` is that document for position `k * seq_len + extra`, with the offset
    taken from its start; past the last document the loop records the last one at `size - extra`.
    """
    extra = int(add_extra_token)
    n = _num_samples(num_epochs, tokens_per_epoch, seq_len, drop_last_partial, extra)
    lengths = np.asarray(sizes)[doc_index].astype(np.int64, copy=False)
    ends = np.cumsum(lengths, dtype=np.int64)  # end of each document of doc_index in the flat stream
    wide = max(doc_index.shape[0], int(np.max(sizes))) > np.iinfo(np.int32).max
    dtype = np.int64 if wide else np.int32
    out = np.empty((n + 1, 2), dtype=dtype)
    out[0] = 0
    if n == 0:
        return out
    # entry k is the first document whose end reaches k·seq_len + extra: document d is passed by every
    # k ≥ t_d = (ends[d] − extra) // seq_len + 1, and t is sorted, so the entries are runs — document j
    # for t_{j−1} ≤ k < t_j — written with one `repeat` (no binary search per sample)
    docs = doc_index.shape[0]
    t = (ends - extra) // seq_len + 1
    np.clip(t, 1, n + 1, out=t)
    runs = np.diff(t, prepend=1, append=n + 1)
    pos = np.repeat(np.arange(docs + 1, dtype=dtype), runs)  # docs: past the last document
    begin = ends - lengths  # each document's start in the flat stream
    last = docs - 1
    for a in range(0, n, _SAMPLE_CHUNK):  # offsets a chunk at a time: no n-sized int64 temporaries
        z = min(n, a + _SAMPLE_CHUNK)
        p = pos[a:z]
        past = p == docs
        off = np.arange(a + 1, z + 1, dtype=np.int64) * seq_len
        if past.any():
            if int(lengths[last]) - extra < 0:
                raise ConfigError("the last partial sample would start before its document (an empty final "
                                  "document with add_extra_token_to_sequence); megatron-core's build_sample_idx "
                                  "rejects this input too: drop empty documents or keep "
                                  "drop_last_partial_validation_sequence")
            p[past] = last
            off -= begin[p]
            off[past] = int(lengths[last]) - extra
        else:
            off -= begin[p]
        out[1 + a:1 + z, 0] = p
        out[1 + a:1 + z, 1] = off
    return out


def shuffle_index(num_samples: int, total_size: int, rng: np.random.RandomState) -> np.ndarray:
    """Megatron's `_build_shuffle_index`: [0, num_samples) shuffled, then [num_samples, total_size) apart."""
    dtype = np.int64 if total_size >= np.iinfo(np.uint32).max - 1 else np.uint32
    first = np.arange(0, num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))
