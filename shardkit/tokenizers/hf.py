"""A Hugging Face `tokenizer.json` through the `tokenizers` library (the reference backend)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import TokenizerError
from .base import TokenizerSpec, concat_ids, file_sha256
from .specials import BOS_CANDIDATES, EOS_CANDIDATES, pick_special

__all__ = ["HFTokenizer", "load_hf_json"]


def set_single_threaded() -> None:
    """One encode thread in this process: pack parallelises across processes, not inside each."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"


def load_hf_json(path: str):
    import tokenizers

    p = Path(path)
    if not p.is_file():
        raise TokenizerError(f"{path}: tokenizer file not found")
    try:
        return tokenizers.Tokenizer.from_file(str(p))
    except Exception as e:  # the library raises a bare Exception on malformed files
        raise TokenizerError(f"{path}: not a loadable Hugging Face tokenizer.json ({str(e)[:200]})") from None


class HFTokenizer:
    def __init__(self, path: str, *, threads: int = 1,  # 0: the library's own thread pool
                 eos: str | None = None, bos: str | None = None) -> None:
        if threads == 1:
            set_single_threaded()
        self._tok = load_hf_json(path)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.spec = TokenizerSpec(
            kind="hf", name=Path(path).name, path=str(path), vocab_size=max(vocab.values()) + 1,
            eos_id=pick_special(vocab, eos, EOS_CANDIDATES), bos_id=pick_special(vocab, bos, BOS_CANDIDATES),
            sha256=file_sha256(path), backend="hf")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return concat_ids([np.asarray(e.ids, dtype=np.uint32) for e in encs])

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)
