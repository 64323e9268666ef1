"""The built-in tokenizer: UTF-8 bytes as ids 0–255 plus three specials. Needs no file; the default."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import TokenizerSpec

__all__ = ["BytesTokenizer", "BYTES_EOS", "BYTES_BOS", "BYTES_PAD"]

BYTES_EOS, BYTES_BOS, BYTES_PAD = 256, 257, 258
_SPECIALS = {BYTES_EOS: "<|endoftext|>", BYTES_BOS: "<|bos|>", BYTES_PAD: "<|pad|>"}


class BytesTokenizer:
    def __init__(self) -> None:
        self.spec = TokenizerSpec(kind="bytes", name="bytes", path=None, vocab_size=259, eos_id=BYTES_EOS,
                                  bos_id=BYTES_BOS, sha256=None, backend="bytes")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        flat = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.uint32)
        return flat, lengths

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        arr = np.asarray(ids, dtype=np.int64)
        out, start = [], 0
        for i in np.flatnonzero(arr > 255).tolist() + [arr.size]:
            out.append(arr[start:i].astype(np.uint8).tobytes().decode("utf-8", "replace"))
            if i < arr.size:
                out.append(_SPECIALS.get(int(arr[i]), "\ufffd"))
            start = i + 1
        return "".join(out)
