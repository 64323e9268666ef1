"""The tokenizer contract every backend meets, and the JSON-able spec the manifest records."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import TokenizerError
from ..format.checksums import file_hexdigest

__all__ = [
    "Backend",
    "BACKENDS",
    "KINDS",
    "TokenizerSpec",
    "Tokenizer",
    "file_sha256",
    "flatten_lists",
    "flatten_arrays",
    "surrogate_error",
]

KINDS = ("bytes", "hf", "tiktoken", "sentencepiece")
BACKENDS = (*KINDS, "fastokens")  # what encodes: a kind's own library, or fastokens for a tokenizer.json


class Backend(str, Enum):
    """Which library encodes a `tokenizer.json`: `auto` takes the fastest one found exact (spec.py)."""

    AUTO = "auto"
    HF = "hf"
    TIKTOKEN = "tiktoken"
    FASTOKENS = "fastokens"

    @classmethod
    def parse(cls, value: str | Backend) -> Backend:
        try:
            return cls(value)
        except ValueError:
            raise TokenizerError(f"tokenizer backend must be one of {', '.join(b.value for b in cls)}, "
                                 f"got {value!r}") from None


@dataclass(frozen=True, kw_only=True)
class TokenizerSpec:
    """What the manifest records about a tokenizer; enough to reload it and to check a dataset fits it."""

    kind: str  # "bytes" | "hf" | "tiktoken" | "sentencepiece"
    name: str  # file name (basename) or "bytes"
    path: str | None  # the path as given (None for bytes)
    vocab_size: int  # number of ids: max id + 1, including added/special tokens
    eos_id: int | None
    bos_id: int | None
    sha256: str | None  # of the tokenizer file (None for bytes)
    backend: str  # what actually encodes: "bytes" | "hf" | "tiktoken" | "sentencepiece" | "fastokens"

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.backend not in BACKENDS:
            raise TokenizerError(f"tokenizer spec kind must be one of {', '.join(KINDS)} and backend one of "
                                 f"{', '.join(BACKENDS)}, got {self.kind!r}/{self.backend!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size <= 0:
            raise TokenizerError(f"tokenizer vocab_size must be a positive integer, got {self.vocab_size!r}")
        for name in ("eos_id", "bos_id"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 <= value < self.vocab_size):
                raise TokenizerError(f"tokenizer {name} must be an id below vocab_size {self.vocab_size}, "
                                     f"got {value!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenizerSpec:
        """Rebuild a spec; `backend` may be absent (manifests leave it out: it is not part of the data)."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d and n != "backend"]
        if missing:
            raise TokenizerError(f"tokenizer spec lacks {', '.join(missing)} (found keys: {', '.join(sorted(d))})")
        return cls(kind=d["kind"], name=d["name"], path=d["path"], vocab_size=d["vocab_size"], eos_id=d["eos_id"],
                   bos_id=d["bos_id"], sha256=d["sha256"], backend=d.get("backend", d["kind"]))


@runtime_checkable
class Tokenizer(Protocol):
    """A loaded tokenizer; one per worker process, so nothing here needs to be thread-safe."""

    spec: TokenizerSpec

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids as uint32, lengths as int64): ids of all texts back to back, no EOS/BOS added."""
        ...

    def decode(self, ids: Sequence[int] | np.ndarray) -> str: ...


def file_sha256(path: str) -> str:
    return file_hexdigest(path, hashlib.sha256)


def flatten_lists(parts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Flat uint32 ids and int64 lengths from per-text id lists (for backends that only return lists)."""
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    flat = np.fromiter(itertools.chain.from_iterable(parts), dtype=np.uint32, count=int(lengths.sum()))
    return flat, lengths


def flatten_arrays(parts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    if not parts:
        return np.zeros(0, np.uint32), lengths
    return np.concatenate(parts).astype(np.uint32, copy=False), lengths


def surrogate_error(texts: Sequence[str], backend: str) -> TokenizerError:
    """The error to raise when a backend rejected a batch: names the first text that is not valid Unicode."""
    for i, t in enumerate(texts):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            return TokenizerError(f"text {i} of the batch has an unpaired surrogate at character {e.start}; "
                                  f"{backend} can only encode valid Unicode (fix or drop the record)")
        except AttributeError:
            return TokenizerError(f"text {i} of the batch is a {type(t).__name__}, not a str")
    return TokenizerError(f"{backend} rejected a batch of {len(texts)} texts that are all valid Unicode")
