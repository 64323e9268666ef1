"""`tokenizers`' added-token matching and normalization, replicated exactly for the fast path.

`tokenizers` (with special tokens encoded as text) first cuts non-normalized added tokens out of the raw
text, then normalizes each remaining piece, then cuts normalized added tokens out of the normalized
pieces; both matchers are leftmost-longest. Special added tokens take no part: documents treat them as
text. tiktoken has no such step, so the fast path does it here in Python — only for files that have
non-special added tokens or a normalizer, and only on texts where it can change anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["AddedTokenPlan", "overlap"]


def _matcher(tokens: Mapping[str, int]) -> re.Pattern[str] | None:
    if not tokens:
        return None
    # longest first: Python's alternation takes the first alternative that matches at the leftmost
    # position, which is then the longest — aho-corasick's LeftmostLongest, as in `tokenizers`
    alts = sorted(tokens, key=lambda t: (-len(t), t))
    return re.compile("(" + "|".join(map(re.escape, alts)) + ")")


def overlap(a: str, b: str) -> bool:
    """True if some text could contain `a` and `b` with shared characters (or one inside the other)."""
    if a in b or b in a:
        return True
    return any(a.endswith(b[:k]) or b.endswith(a[:k]) for k in range(1, min(len(a), len(b))))


class AddedTokenPlan:
    """Which non-special added tokens `tokenizers` cuts out before and after normalization."""

    def __init__(self, *, raw: Mapping[str, int], normalized: Mapping[str, int],
                 normalize: Callable[[str], str] | None) -> None:
        self.raw = dict(raw)  # matched in the raw text
        self.normalized = dict(normalized)  # matched in normalized pieces (keys already normalized)
        self.normalize = normalize  # the file's own normalizer (`tokenizers`' code); must keep ASCII as is
        self._raw_re = _matcher(self.raw)
        self._norm_re = _matcher(self.normalized)

    def encode(self, text: str, ordinary: Callable[[str], np.ndarray]) -> np.ndarray:
        """Ids of `text`: added tokens by table, everything between them by `ordinary` (tiktoken)."""
        raw_re, norm_re = self._raw_re, self._norm_re
        quick = raw_re is None or raw_re.search(text) is None
        if quick and (self.normalize is None or text.isascii()) and (norm_re is None or norm_re.search(text) is None):
            return ordinary(text)  # nothing to cut, nothing to normalize (ASCII is invariant under NFC)
        parts: list[np.ndarray] = []
        pieces = [text] if quick else raw_re.split(text)  # type: ignore[union-attr]
        for i, piece in enumerate(pieces):
            if i % 2:  # a matched raw added token
                parts.append(np.array([self.raw[piece]], dtype=np.uint32))
                continue
            if self.normalize is not None and not piece.isascii():
                piece = self.normalize(piece)
            sub = [piece] if norm_re is None else norm_re.split(piece)
            for j, s in enumerate(sub):
                if j % 2:
                    parts.append(np.array([self.normalized[s]], dtype=np.uint32))
                elif s:
                    parts.append(ordinary(s))
        return np.concatenate(parts) if parts else np.zeros(0, np.uint32)
