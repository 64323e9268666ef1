"""The tokenizer contract every backend meets, and the JSON-able spec the manifest records."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["TokenizerSpec", "Tokenizer", "file_sha256", "concat_ids"]


@dataclass(frozen=True, kw_only=True)
class TokenizerSpec:
    kind: str  # "bytes" | "hf" | "tiktoken" | "sentencepiece"
    name: str
    path: str | None
    vocab_size: int  # max id + 1, including special tokens
    eos_id: int | None
    bos_id: int | None
    sha256: str | None
    backend: str  # what actually encodes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenizerSpec:
        return cls(**{k: d.get(k) for k in ("kind", "name", "path", "vocab_size", "eos_id", "bos_id", "sha256",
                                            "backend")})


class Tokenizer(Protocol):
    spec: TokenizerSpec

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids as uint32, lengths as int64): all texts back to back, no EOS/BOS added."""
        ...

    def decode(self, ids: Sequence[int] | np.ndarray) -> str: ...


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def concat_ids(parts: Sequence[np.ndarray | list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    if not parts:
        return np.zeros(0, np.uint32), lengths
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts).astype(np.uint32, copy=False), lengths
    flat = np.fromiter((i for p in parts for i in p), dtype=np.uint32, count=int(lengths.sum()))
    return flat, lengths
