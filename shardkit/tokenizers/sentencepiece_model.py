"""A SentencePiece `.model` file (optional dependency: `pip install 'shardkit[sentencepiece]'`).

SentencePiece already treats control symbols (`<s>`, `</s>`) written in a text as text, the same rule
the other backends follow; ids come back as Python lists, one int object per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import MissingDependencyError, TokenizerError
from .base import TokenizerSpec, file_sha256, flatten_lists, surrogate_error

__all__ = ["SentencePieceTokenizer"]


class SentencePieceTokenizer:
    fastpath_note: str | None = None

    def __init__(self, path: str, *, threads: int = 1, eos: str | None = None, bos: str | None = None) -> None:
        try:
            import sentencepiece as spm
        except ImportError:
            raise MissingDependencyError("sentencepiece", extra="sentencepiece",
                                         purpose="SentencePiece .model tokenizers") from None
        if threads < 0:
            raise TokenizerError(f"threads must be ≥ 0 (0: one per core), got {threads}")
        if not Path(path).is_file():
            raise TokenizerError(f"{path}: SentencePiece model not found; give the path of a .model file")
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as e:
            raise TokenizerError(f"{path}: not a loadable SentencePiece model ({str(e)[:200]}); "
                                 "check it is a .model file written by SentencePieceTrainer") from None
        self._threads = threads if threads else -1  # sentencepiece: -1 = one thread per core
        self.spec = TokenizerSpec(kind="sentencepiece", name=Path(path).name, path=str(path),
                                  vocab_size=self._sp.get_piece_size(),
                                  eos_id=self._special(eos, self._sp.eos_id(), "eos", path),
                                  bos_id=self._special(bos, self._sp.bos_id(), "bos", path),
                                  sha256=file_sha256(str(path)), backend="sentencepiece")

    def _special(self, override: str | None, default: int, what: str, path: str) -> int | None:
        if override is None:
            return default if default >= 0 else None
        tid = self._sp.piece_to_id(override)
        if self._sp.id_to_piece(tid) != override:  # unknown pieces map to <unk>
            raise TokenizerError(f"{path}: {what} token {override!r} is not a piece of this model")
        return tid

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            ids = self._sp.encode(list(texts), out_type=int, num_threads=self._threads)
        except (UnicodeEncodeError, TypeError, RuntimeError):
            raise surrogate_error(texts, "sentencepiece") from None
        return flatten_lists(ids)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        try:
            return self._sp.decode(np.asarray(ids, dtype=np.int64).ravel().tolist())
        except (IndexError, RuntimeError) as e:
            raise TokenizerError(f"{self.spec.name}: cannot decode ({e})") from None
