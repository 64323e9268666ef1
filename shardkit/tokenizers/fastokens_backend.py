"""A Hugging Face `tokenizer.json` encoded by `fastokens`: the fastest exact backend where it agrees.

`fastokens` (Apache-2.0, Rust, abi3 wheels) re-implements the `tokenizers` pipeline. Its flat batch
call returns every text's ids as one little-endian uint32 buffer plus uint64 offsets, so a batch costs
two `np.frombuffer` views and no per-token Python object. The settings mirror `HFTokenizer`:
`split_special_tokens=True` encodes special-token text in a document as text (as
`encode_special_tokens = True` does in `tokenizers`), `add_special_tokens=False` leaves EOS/BOS to the
pack, truncation and padding stored in the file are switched off.

Nothing proves statically that `fastokens` equals `tokenizers` on a file, so `auto` takes this backend
only after `probe_check` (built-in adversarial texts, at load) and the pack's self-check on real input
(selfcheck.py) found no difference; anything else falls back (spec.py).

Threads: fastokens splits a batch over its own worker pool (threads named `fastokens-N`, one fewer than
the cores), sized by the `FASTOKENS_BPE_THREADS` environment variable when the pool first starts (the
variable is read by the library's native code; it is not in its Python docs). `threads=1` (each pack
worker) sets it to 1, and no pool is ever started: a test counts the process's threads. `threads=N`
sets N, effective only if no pool exists yet in the process; `threads=0` leaves the library default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TokenizerError
from .base import surrogate_error
from .specials import json_spec

try:
    import fastokens
except ImportError:  # not every platform has a wheel (pyproject: installed only where one exists)
    fastokens = None

__all__ = ["FASTOKENS_VERSION", "FastokensTokenizer", "FastokensUnavailable", "available"]

FASTOKENS_VERSION = "0.3.5"  # the version the exactness tests ran on (pyproject pins it)


class FastokensUnavailable(Exception):
    """`fastokens` is not installed or cannot load this file (the message says which)."""


def available() -> bool:
    return fastokens is not None


def _load(path: str) -> Any:
    if fastokens is None:
        raise FastokensUnavailable(f"fastokens is not installed (pip install fastokens=={FASTOKENS_VERSION}; "
                                   f"wheels exist for Linux x86_64, macOS arm64 and Windows x86_64)")
    try:
        tok = fastokens.Tokenizer.from_file(str(path))
    except BaseException as e:  # a ValueError or a pyo3 PanicException for a construct it does not support
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise FastokensUnavailable(f"fastokens cannot load {Path(path).name} ({str(e)[:160]})") from None
    tok.no_truncation()
    tok.no_padding()
    return tok


class FastokensTokenizer:
    """`fastokens` as the encoder of a tokenizer.json (spec kind "hf", backend "fastokens")."""

    fastpath_note: str | None = None
    reference: Any = None  # the `tokenizers` reference `auto` checked it against (reused by the self-check)

    def __init__(self, path: str, *, threads: int = 1, eos: str | None = None, bos: str | None = None) -> None:
        if threads < 0:
            raise TokenizerError(f"threads must be ≥ 0 (0: one per core), got {threads}")
        if threads:
            os.environ["FASTOKENS_BPE_THREADS"] = str(threads)  # before the first batch starts the pool
        if not Path(path).is_file():
            raise TokenizerError(f"{path}: tokenizer file not found; give the path of a Hugging Face "
                                 "tokenizer.json (or a model directory that contains one)")
        self._tok = _load(path)
        vocab = _vocab(self._tok)
        self.spec = json_spec(str(path), vocab, eos, bos, backend="fastokens")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            ids, offsets = self._tok.encode_batch_flat(texts if isinstance(texts, list) else list(texts),
                                                       add_special_tokens=False, split_special_tokens=True)
        except (TypeError, UnicodeEncodeError):
            raise surrogate_error(texts, "fastokens") from None
        flat = np.frombuffer(ids, dtype="<u4")
        ends = np.frombuffer(offsets, dtype="<u8")
        if sys.byteorder != "little":
            flat = flat.astype(np.uint32)
        return flat, np.diff(ends).astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        try:
            return self._tok.decode(np.asarray(ids, dtype=np.int64).ravel().tolist(), skip_special_tokens=False)
        except (OverflowError, ValueError, TypeError) as e:
            raise TokenizerError(f"{self.spec.name}: cannot decode ({e})") from None


def _vocab(tok: Any) -> dict[str, int]:
    """Model vocabulary and added tokens (fastokens has no get_vocab: ids are walked up to vocab_size)."""
    vocab: dict[str, int] = {}
    for i in range(int(tok.vocab_size)):
        piece = tok.id_to_token(i)
        if piece is not None:
            vocab.setdefault(piece, i)
    for t in tok.added_tokens():
        vocab[t["content"]] = int(t["id"])
    return vocab
