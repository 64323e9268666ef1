"""The built-in tokenizer: UTF-8 bytes as ids 0–255 plus three specials. Needs no file; the default."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import TokenizerSpec, surrogate_error

__all__ = ["BytesTokenizer", "BYTES_EOS", "BYTES_BOS", "BYTES_PAD", "BYTES_VOCAB_SIZE"]

BYTES_EOS, BYTES_BOS, BYTES_PAD = 256, 257, 258
BYTES_VOCAB_SIZE = 259
_SPECIALS = {BYTES_EOS: "<|endoftext|>", BYTES_BOS: "<|bos|>", BYTES_PAD: "<|pad|>"}


class BytesTokenizer:
    """Every byte is its own id, so any text round-trips exactly and no vocabulary file is needed."""

    fastpath_note: str | None = None

    def __init__(self) -> None:
        self.spec = TokenizerSpec(kind="bytes", name="bytes", path=None, vocab_size=BYTES_VOCAB_SIZE,
                                  eos_id=BYTES_EOS, bos_id=BYTES_BOS, sha256=None, backend="bytes")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            encoded = [t.encode("utf-8") for t in texts]
        except (UnicodeEncodeError, AttributeError):
            raise surrogate_error(texts, "the bytes tokenizer") from None
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        return np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.uint32), lengths

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Bytes decode as UTF-8 (invalid sequences → U+FFFD); 256–258 decode to their special text."""
        arr = np.asarray(ids, dtype=np.int64).ravel()
        cuts = np.flatnonzero((arr < 0) | (arr > 255))
        if cuts.size == 0:
            return arr.astype(np.uint8).tobytes().decode("utf-8", "replace")
        out, start = [], 0
        for i in cuts.tolist():
            out.append(arr[start:i].astype(np.uint8).tobytes().decode("utf-8", "replace"))
            out.append(_SPECIALS.get(int(arr[i]), "\ufffd"))
            start = i + 1
        out.append(arr[start:].astype(np.uint8).tobytes().decode("utf-8", "replace"))
        return "".join(out)
