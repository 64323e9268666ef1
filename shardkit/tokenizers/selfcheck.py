"""Compare two tokenizers on real text: the guard that keeps the fast path exact."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Tokenizer

__all__ = ["compare"]


def compare(a: Tokenizer, b: Tokenizer, texts: Sequence[str]) -> str | None:
    """None when both give identical ids for every text, else where the first difference is."""
    ids_a, len_a = a.encode_batch(texts)
    ids_b, len_b = b.encode_batch(texts)
    if np.array_equal(len_a, len_b) and np.array_equal(ids_a, ids_b):
        return None
    off_a = np.concatenate([[0], np.cumsum(len_a)])
    off_b = np.concatenate([[0], np.cumsum(len_b)])
    for i in range(len(texts)):
        x, y = ids_a[off_a[i]:off_a[i + 1]], ids_b[off_b[i]:off_b[i + 1]]
        if not np.array_equal(x, y):
            n = min(x.size, y.size)
            pos = int(np.argmax(x[:n] != y[:n])) if n and np.any(x[:n] != y[:n]) else n
            return (f"text {i}, token {pos}: {x[pos:pos + 3].tolist()} vs {y[pos:pos + 3].tolist()}")
    return "lengths differ"
