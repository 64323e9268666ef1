"""Tokenizer spec strings → tokenizers, and the pack start-up decision between backends.

    bytes                      the built-in UTF-8 byte tokenizer
    PATH/tokenizer.json        a Hugging Face tokenizer file (also "hf:PATH")
    tiktoken:PATH[?...]        a tiktoken ranks file (see tiktoken_file.py)
    PATH.model                 a SentencePiece model (also "sentencepiece:PATH")
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError, TokenizerError
from .base import Tokenizer
from .bytes_tokenizer import BytesTokenizer
from .fastpath import FastPathRefused, TiktokenTokenizer
from .hf import HFTokenizer
from .selfcheck import compare
from .sentencepiece_model import SentencePieceTokenizer
from .tiktoken_file import load_tiktoken_file

__all__ = ["parse_spec", "load_tokenizer", "load_tokenizer_checked"]

BACKENDS = ("auto", "hf", "tiktoken")


def parse_spec(spec: str) -> tuple[str, str]:
    """(kind, argument) of a spec string."""
    s = spec.strip()
    if s == "bytes":
        return "bytes", ""
    for prefix, kind in (("hf:", "hf"), ("tiktoken:", "tiktoken"), ("sentencepiece:", "sentencepiece"),
                         ("spm:", "sentencepiece")):
        if s.startswith(prefix):
            return kind, s[len(prefix):]
    if s.endswith(".json"):
        return "hf", s
    if s.endswith(".model"):
        return "sentencepiece", s
    if s.endswith(".tiktoken"):
        return "tiktoken", s
    raise TokenizerError(f"unknown tokenizer spec {spec!r}: use 'bytes', a tokenizer.json path, "
                         "'tiktoken:FILE' or a SentencePiece .model path")


def load_tokenizer(spec: str, *, backend: str = "auto", threads: int = 1, eos: str | None = None,
                   bos: str | None = None) -> Tokenizer:
    """Load a tokenizer; for tokenizer.json, `auto` takes the tiktoken fast path when it is exact."""
    if backend not in BACKENDS:
        raise ConfigError(f"tokenizer backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    kind, arg = parse_spec(spec)
    if kind == "bytes":
        return BytesTokenizer()
    if kind == "tiktoken":
        return load_tiktoken_file(arg)
    if kind == "sentencepiece":
        return SentencePieceTokenizer(arg, threads=threads)
    if backend == "hf":
        return HFTokenizer(arg, threads=threads, eos=eos, bos=bos)
    try:
        return TiktokenTokenizer.from_hf_json(arg, eos=eos, bos=bos)
    except FastPathRefused as why:
        if backend == "tiktoken":
            raise TokenizerError(f"{arg}: the tiktoken fast path is not exact for this file: {why}") from None
        tok = HFTokenizer(arg, threads=threads, eos=eos, bos=bos)
        tok.fastpath_note = f"tiktoken fast path refused: {why}"  # type: ignore[attr-defined]
        return tok


def load_tokenizer_checked(spec: str, sample_texts: Sequence[str], *, backend: str = "auto"
                           ) -> tuple[Tokenizer, str | None]:
    """The tokenizer pack will use, and a note for the user when the fast path was not taken.

    With `auto` and a tokenizer.json on the fast path, both backends encode `sample_texts` (real input);
    any difference falls back to `tokenizers` and the note says where they differed.
    """
    tok = load_tokenizer(spec, backend=backend)
    note = getattr(tok, "fastpath_note", None)
    kind, arg = parse_spec(spec)
    if backend == "auto" and kind == "hf" and isinstance(tok, TiktokenTokenizer):
        ref = HFTokenizer(arg, threads=0)  # all cores here: this runs once, in the main process
        diff = compare(tok, ref, sample_texts)
        if diff is not None:
            return ref, f"fast path disagreed with tokenizers on the input sample ({diff}); using tokenizers"
    return tok, note
