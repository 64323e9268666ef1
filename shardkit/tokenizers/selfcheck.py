"""Compare two tokenizers on real text: the start-up guard that keeps the fast path exact.

The fast path's static checks cover each pipeline stage; this check covers the rest (above all the BPE
merge loop) on the very texts about to be packed. `tokenizers` is the reference: any difference means
the pack uses it instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import Tokenizer
from .fastpath import PROBE_TEXT, FastPathRefused, fast_hf_tokenizer
from .hf import HFTokenizer

__all__ = ["Difference", "SelfCheckResult", "compare", "compare_backends"]


@dataclass(frozen=True)
class Difference:
    """Where two tokenizers first disagree: text `text_index`, token `position` (ids from there on)."""

    text_index: int
    position: int
    ids: tuple[int, ...]  # of the tokenizer under test, a few from `position`
    reference_ids: tuple[int, ...]

    def __str__(self) -> str:
        return (f"text {self.text_index}, token {self.position}: {list(self.ids)} "
                f"instead of {list(self.reference_ids)}")


@dataclass(frozen=True)
class SelfCheckResult:
    texts: int
    tokens: int  # of the reference, over all texts
    refused: str | None = None  # the fast path could not be built at all
    difference: Difference | None = None

    @property
    def ok(self) -> bool:
        return self.refused is None and self.difference is None

    def describe(self) -> str:
        if self.refused is not None:
            return f"tiktoken fast path refused: {self.refused}"
        if self.difference is not None:
            return f"tiktoken fast path disagrees with tokenizers at {self.difference}"
        return f"tiktoken fast path matches tokenizers on {self.texts} texts ({self.tokens:,} tokens)"


def _first_difference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> Difference | None:
    (ids_a, len_a), (ids_b, len_b) = a, b
    if np.array_equal(len_a, len_b) and np.array_equal(ids_a, ids_b):
        return None
    off_a = np.concatenate([[0], np.cumsum(len_a)])
    off_b = np.concatenate([[0], np.cumsum(len_b)])
    for i in range(len(len_a)):
        x, y = ids_a[off_a[i]:off_a[i + 1]], ids_b[off_b[i]:off_b[i + 1]]
        if np.array_equal(x, y):
            continue
        n = min(x.size, y.size)
        neq = np.flatnonzero(x[:n] != y[:n])
        pos = int(neq[0]) if neq.size else n
        return Difference(i, pos, tuple(x[pos:pos + 4].tolist()), tuple(y[pos:pos + 4].tolist()))
    return None


def compare(tok: Tokenizer, reference: Tokenizer, texts: Sequence[str]) -> Difference | None:
    """None when both give identical ids for every text, else the first difference."""
    return _first_difference(tok.encode_batch(texts), reference.encode_batch(texts))


def compare_backends(tokenizer_json_path: str, texts: Sequence[str], *, fast: Tokenizer | None = None,
                     reference: Tokenizer | None = None) -> SelfCheckResult:
    """Encode `texts` (plus a built-in probe text) with the fast path and with `tokenizers`.

    `fast`/`reference` reuse tokenizers the caller already loaded; both run single-threaded.
    """
    sample = [*texts, PROBE_TEXT]
    reference = reference or HFTokenizer(tokenizer_json_path, threads=1)
    ref = reference.encode_batch(sample)
    if fast is None:
        try:
            fast = fast_hf_tokenizer(tokenizer_json_path)
        except FastPathRefused as why:
            return SelfCheckResult(len(sample), int(ref[0].size), refused=str(why))
    return SelfCheckResult(len(sample), int(ref[0].size), difference=_first_difference(fast.encode_batch(sample), ref))
