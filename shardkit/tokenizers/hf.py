"""A Hugging Face `tokenizer.json` through the `tokenizers` library: the reference backend.

Two settings make it agree with tiktoken's `encode_ordinary` and with the fast path:
- `encode_special_tokens = True`: special added tokens written in a document (`"<|endoftext|>"`) are
  encoded as ordinary text, never mapped to their id — a document cannot forge a document boundary.
  Non-special added tokens keep their usual meaning (they are matched in the text).
- no truncation, no padding (a file may carry either), no post-processor specials
  (`add_special_tokens=False`): EOS/BOS are the pack's business.

Threads: `tokenizers` reads `TOKENIZERS_PARALLELISM` at every batch call, so setting it to "false" around
our calls makes `threads=1` truly single-threaded (no rayon pool is ever started in that process).
`threads=N>1` sets `RAYON_NUM_THREADS`, which only counts before the process's pool first starts;
`threads=0` leaves the library default (one thread per core).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

from ..errors import TokenizerError
from .base import flatten_lists, surrogate_error
from .specials import json_spec

__all__ = ["HFTokenizer", "load_hf_json", "set_parallelism"]


def set_parallelism(threads: int) -> None:
    """Make the next `tokenizers` batch call use `threads` threads (1: the calling thread only)."""
    if threads == 1:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    else:
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        if threads > 1:
            os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


def load_hf_json(path: str) -> Any:
    """A `tokenizers.Tokenizer` set up for document encoding (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise TokenizerError(f"{path}: tokenizer file not found; give the path of a Hugging Face "
                             "tokenizer.json (or a model directory that contains one)")
    try:
        tok = tokenizers.Tokenizer.from_file(str(p))
    except BaseException as e:  # a bare Exception for malformed JSON, a pyo3 PanicException for bad contents
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise TokenizerError(f"{path}: not a loadable Hugging Face tokenizer.json ({str(e)[:200]}); "
                             "check the file is complete and was saved by `tokenizers`") from None
    tok.encode_special_tokens = True
    tok.no_truncation()
    tok.no_padding()
    return tok


class HFTokenizer:
    """`tokenizers` as the encoder; `fastpath_note` says why the tiktoken fast path is not used, if so."""

    def __init__(self, path: str, *, threads: int = 1, eos: str | None = None, bos: str | None = None,
                 fastpath_note: str | None = None) -> None:
        if threads < 0:
            raise TokenizerError(f"threads must be ≥ 0 (0: one per core), got {threads}")
        self._threads = threads
        self._tok = load_hf_json(path)
        self.fastpath_note = fastpath_note
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.spec = json_spec(str(path), vocab, eos, bos, backend="hf")

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-token Python ints are unavoidable here: `tokenizers` only returns ids as lists."""
        set_parallelism(self._threads)
        try:
            encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        except (TypeError, UnicodeEncodeError):
            raise surrogate_error(texts, "tokenizers") from None
        return flatten_lists([e.ids for e in encodings])

    def added_tokens(self) -> list[Any]:
        """The file's added tokens (`tokenizers.AddedToken`), special or not, in id order."""
        return [t for _, t in sorted(self._tok.get_added_tokens_decoder().items())]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode(np.asarray(ids, dtype=np.int64).ravel().tolist(), skip_special_tokens=False)
