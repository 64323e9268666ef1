"""Compare two tokenizers on real text: the start-up guard that keeps the fast backends exact.

The tiktoken fast path's static checks cover each pipeline stage; this check covers the rest (above all
the BPE merge loop) on the very texts about to be packed. `fastokens` has no static proof at all, so
the check (plus the built-in probe texts below, also run when it is loaded) is its whole guard.
`tokenizers` is the reference: any difference means the pack uses another backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import Tokenizer
from .fastpath import PROBE_TEXT, FastPathRefused, fast_hf_tokenizer
from .hf import HFTokenizer

__all__ = ["Difference", "PROBE_TEXTS", "SelfCheckResult", "compare", "compare_backends", "probe_check",
           "probe_texts"]

_LABELS = {"tiktoken": "tiktoken fast path", "fastokens": "fastokens backend"}

# Inputs where re-implementations of `tokenizers` are known to drift (special-token text, long runs
# without a split point, digit runs, joiner sequences, control characters), kept short: the reference
# encodes them at every start-up.
PROBE_TEXTS = (
    PROBE_TEXT, "", " ", "\r\n\r\n", "<|endoftext|>", "a<|endoftext|>b <|endoftext|><|endoftext|>",
    "x" * 3000, "7" * 3001, "1,000,000.00 3.14159e-10 0x7fff", "'tis 'TIS can't I'M we'll they'D",
    "👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👍🏽 🇫🇷", "日本語のテキスト、中文文本。한국어 텍스트",
    "\x00\x01\x08\x1b[0m\x7f\x85 \ufeffBOM \ufffd", "ab" * 1500 + " " + "\u0301" * 50,
)


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
    backend: str = "tiktoken"  # the backend under test

    @property
    def label(self) -> str:
        return _LABELS.get(self.backend, self.backend)

    @property
    def ok(self) -> bool:
        return self.refused is None and self.difference is None

    def describe(self) -> str:
        if self.refused is not None:
            return f"{self.label} refused: {self.refused}"
        if self.difference is not None:
            return f"{self.label} disagrees with tokenizers at {self.difference}"
        return f"{self.label} matches tokenizers on {self.texts} texts ({self.tokens:,} tokens)"


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


def probe_texts(reference: HFTokenizer) -> list[str]:
    """PROBE_TEXTS plus every added token of the file written inside text (alone and between letters)."""
    added = [t.content for t in reference.added_tokens() if t.content]
    return [*PROBE_TEXTS, *added, *(f"a{t}b {t}{t}" for t in added)]


def compare_backends(tokenizer_json_path: str, texts: Sequence[str], *, fast: Tokenizer | None = None,
                     reference: HFTokenizer | None = None) -> SelfCheckResult:
    """Encode `texts` (plus the built-in probe texts) with a fast backend and with `tokenizers`.

    `fast` (default: the tiktoken fast path) and `reference` reuse tokenizers the caller already loaded;
    both run single-threaded.
    """
    # the reference the load-time probe already built (spec.py keeps it on the fast tokenizer)
    reference = reference or getattr(fast, "reference", None) or HFTokenizer(tokenizer_json_path, threads=1)
    sample = [*texts, *probe_texts(reference)]
    ref = reference.encode_batch(sample)
    backend = fast.spec.backend if fast is not None else "tiktoken"
    if fast is None:
        try:
            fast = fast_hf_tokenizer(tokenizer_json_path)
        except FastPathRefused as why:
            return SelfCheckResult(len(sample), int(ref[0].size), refused=str(why))
    return SelfCheckResult(len(sample), int(ref[0].size), difference=_first_difference(fast.encode_batch(sample), ref),
                           backend=backend)


def probe_check(fast: Tokenizer, reference: HFTokenizer) -> SelfCheckResult:
    """The load-time guard of a backend without a static proof: the probe texts alone."""
    return compare_backends(reference.spec.path or "", [], fast=fast, reference=reference)
