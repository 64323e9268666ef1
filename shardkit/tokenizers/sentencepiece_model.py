"""A SentencePiece `.model` file (optional dependency)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import MissingDependencyError, TokenizerError
from .base import TokenizerSpec, concat_ids, file_sha256

__all__ = ["SentencePieceTokenizer"]


class SentencePieceTokenizer:
    def __init__(self, path: str, *, threads: int = 1) -> None:
        try:
            import sentencepiece as spm
        except ImportError:
            raise MissingDependencyError("sentencepiece", extra="sentencepiece", purpose="SentencePiece models") from None
        if not Path(path).is_file():
            raise TokenizerError(f"{path}: SentencePiece model not found")
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as e:
            raise TokenizerError(f"{path}: not a loadable SentencePiece model ({str(e)[:200]})") from None
        self._threads = max(1, threads)
        eos, bos = self._sp.eos_id(), self._sp.bos_id()
        self.spec = TokenizerSpec(kind="sentencepiece", name=Path(path).name, path=str(path),
                                  vocab_size=self._sp.get_piece_size(), eos_id=eos if eos >= 0 else None,
                                  bos_id=bos if bos >= 0 else None, sha256=file_sha256(str(path)),
                                  backend="sentencepiece")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = self._sp.encode(list(texts), out_type=int, num_threads=self._threads)
        return concat_ids(ids)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._sp.decode([int(i) for i in ids])
