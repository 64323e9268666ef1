"""Tokenizer spec strings → tokenizers, and the pack's start-up choice between backends.

    bytes                         the built-in UTF-8 byte tokenizer (no file)
    PATH.json | DIR | hf:PATH     a Hugging Face tokenizer.json (DIR: a directory holding tokenizer.json)
    NAME | ORG/NAME[@REV]         a Hugging Face hub name, from the local HF cache only (hub_cache.py)
    tiktoken:PATH[?options]       a tiktoken ranks file (options: see tiktoken_file.py); also PATH.tiktoken
    PATH.model | sentencepiece:PATH   a SentencePiece model (also spm:PATH)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import TokenizerError
from .base import Backend, Tokenizer
from .bytes_tokenizer import BytesTokenizer
from .fastokens_backend import FastokensTokenizer, FastokensUnavailable, available
from .fastpath import FastPathRefused, fast_hf_tokenizer
from .hf import HFTokenizer
from .hub_cache import looks_like_hub_name, resolve_hub_tokenizer
from .selfcheck import compare_backends, probe_check
from .sentencepiece_model import SentencePieceTokenizer
from .tiktoken_file import load_tiktoken_file

__all__ = ["FAST_BACKENDS", "parse_spec", "load_tokenizer", "load_tokenizer_checked", "needs_self_check", "self_check"]

_PREFIXES = {"hf:": "hf", "tiktoken:": "tiktoken", "sentencepiece:": "sentencepiece", "spm:": "sentencepiece"}
_SUFFIXES = {".json": "hf", ".tiktoken": "tiktoken", ".model": "sentencepiece"}
_NATIVE = {"bytes": "bytes", "tiktoken": "tiktoken", "sentencepiece": "sentencepiece"}


def parse_spec(spec: str) -> tuple[str, str]:
    """(kind, argument) of a spec string: kind is bytes, hf, tiktoken or sentencepiece."""
    s = spec.strip()
    if s == "bytes":
        return "bytes", ""
    for prefix, kind in _PREFIXES.items():
        if s.startswith(prefix):
            arg = s[len(prefix):]
            if kind == "hf" and Path(arg).is_dir():
                arg = str(Path(arg) / "tokenizer.json")
            return kind, arg
    if Path(s).is_dir() and (Path(s) / "tokenizer.json").is_file():
        return "hf", str(Path(s) / "tokenizer.json")
    by_suffix = _SUFFIXES.get(Path(s.partition("?")[0]).suffix.lower())
    if by_suffix is None and not Path(s).exists() and looks_like_hub_name(s):
        return "hf", resolve_hub_tokenizer(s)  # a Hugging Face name, from the local cache only
    if by_suffix is None:
        raise TokenizerError(f"unknown tokenizer spec {spec!r}: use 'bytes', a tokenizer.json path (or hf:PATH), "
                             "tiktoken:PATH for a tiktoken ranks file, or a SentencePiece .model path "
                             "(hub names are not downloaded: give a local file)")
    return by_suffix, s


def load_tokenizer(spec: str, *, backend: str | Backend = "auto", threads: int = 1, eos: str | None = None,
                   bos: str | None = None) -> Tokenizer:
    """Load a tokenizer; for a tokenizer.json, `auto` takes the fastest backend found exact.

    `auto` tries, in order: `fastokens` (if installed, it loads the file and matches `tokenizers` on
    the built-in probe texts), the tiktoken fast path (if every stage is provably exact), `tokenizers`.
    `backend` only concerns tokenizer.json files ("hf" forces `tokenizers`; "fastokens"/"tiktoken"
    force that backend or fail); other kinds accept "auto" or their own backend. `threads=1` (what each
    pack worker uses) encodes on the calling thread only; 0 means one thread per core. `eos`/`bos` name
    the special tokens to use instead of the detected ones.
    """
    chosen = Backend.parse(backend)
    kind, arg = parse_spec(spec)
    if kind != "hf" and chosen is not Backend.AUTO and chosen.value != _NATIVE[kind]:
        raise TokenizerError(f"{spec!r} is a {kind} tokenizer; backend {chosen.value!r} only applies to "
                             "tokenizer.json files (use backend 'auto')")
    if kind == "bytes":
        return BytesTokenizer()
    if kind == "tiktoken":
        return load_tiktoken_file(arg, threads=threads, eos=eos, bos=bos)
    if kind == "sentencepiece":
        return SentencePieceTokenizer(arg, threads=threads, eos=eos, bos=bos)
    if chosen is Backend.HF:
        return HFTokenizer(arg, threads=threads, eos=eos, bos=bos)
    skipped: list[str] = []  # why faster backends were passed over, for the pack summary
    if chosen in (Backend.AUTO, Backend.FASTOKENS):
        fast, why = _fastokens(arg, threads=threads, eos=eos, bos=bos, probe=chosen is Backend.AUTO)
        if fast is not None:
            return fast
        if chosen is Backend.FASTOKENS:
            raise TokenizerError(f"{arg}: the fastokens backend cannot be used: {why}; "
                                 "use backend 'auto' or 'hf'")
        if available():  # absent (no wheel for this platform) is a configuration, not news for each pack
            skipped.append(why or "")
    try:
        tok = fast_hf_tokenizer(arg, threads=threads, eos=eos, bos=bos)
    except FastPathRefused as why:
        if chosen is Backend.TIKTOKEN:
            raise TokenizerError(f"{arg}: the tiktoken fast path is not exact for this file: {why}; "
                                 "use backend 'auto' or 'hf'") from None
        return HFTokenizer(arg, threads=threads, eos=eos, bos=bos,
                           fastpath_note="; ".join([*skipped, f"tiktoken fast path refused: {why}"]))
    tok.fastpath_note = "; ".join(skipped) or None
    return tok


def _fastokens(path: str, *, threads: int, eos: str | None, bos: str | None, probe: bool
               ) -> tuple[FastokensTokenizer | None, str | None]:
    """The fastokens backend, or None and why not (not installed, cannot load the file, probe differs)."""
    try:
        tok = FastokensTokenizer(path, threads=threads, eos=eos, bos=bos)
    except FastokensUnavailable as why:
        return None, str(why)
    if probe:
        reference = HFTokenizer(path, threads=1, eos=eos, bos=bos)
        result = probe_check(tok, reference)
        if not result.ok:
            return None, result.describe()
        tok.reference = reference  # the pack's self-check compares against it too: loaded once
    return tok, None


def load_tokenizer_checked(spec: str, sample_texts: Sequence[str], *, backend: str | Backend = "auto",
                           threads: int = 1, eos: str | None = None, bos: str | None = None
                           ) -> tuple[Tokenizer, str | None]:
    """The tokenizer a pack uses, and a note for the user when a faster backend was passed over.

    On a fast backend, it and `tokenizers` encode `sample_texts` (real input) at start-up; any
    difference falls back (see `self_check`; an explicitly chosen backend fails) and the note says where
    they differ.
    """
    tok = load_tokenizer(spec, backend=backend, threads=threads, eos=eos, bos=bos)
    return self_check(tok, sample_texts, backend=backend, threads=threads, eos=eos, bos=bos)


def needs_self_check(tok: Tokenizer) -> bool:
    """A tokenizer.json encoded by anything but `tokenizers` is checked against it on real input."""
    return tok.spec.kind == "hf" and tok.spec.backend in FAST_BACKENDS


FAST_BACKENDS = ("fastokens", "tiktoken")  # the order `auto` tries them in


def self_check(tok: Tokenizer, sample_texts: Sequence[str], *, backend: str | Backend = "auto", threads: int = 1,
               eos: str | None = None, bos: str | None = None) -> tuple[Tokenizer, str | None]:
    """`tok` if it needs no check or passes it; else the next backend that passes, down to `tokenizers`.

    With `auto`, fastokens failing the check falls back to the tiktoken fast path (if exact and it
    passes the same check), then to `tokenizers`; the note says why. An explicitly chosen fast backend
    that fails is an error.
    """
    if not needs_self_check(tok):
        return tok, getattr(tok, "fastpath_note", None)
    path = tok.spec.path or ""
    result = compare_backends(path, sample_texts, fast=tok)
    if isinstance(tok, FastokensTokenizer):
        tok.reference = None  # not needed again: free it for the rest of the pack
    if result.ok:
        return tok, getattr(tok, "fastpath_note", None)
    if Backend.parse(backend) is not Backend.AUTO:
        raise TokenizerError(f"{path}: {result.describe()}; use backend 'auto' or 'hf'")
    notes = [result.describe()]
    if tok.spec.backend == "fastokens":
        try:
            fast = fast_hf_tokenizer(path, threads=threads, eos=eos, bos=bos)
        except FastPathRefused as why:
            notes.append(f"tiktoken fast path refused: {why}")
        else:
            second = compare_backends(path, sample_texts, fast=fast)
            if second.ok:
                note = "; ".join([*notes, "using the tiktoken fast path"])
                fast.fastpath_note = note
                return fast, note
            notes.append(second.describe())
    note = "; ".join([*notes, "using tokenizers"])
    return HFTokenizer(path, threads=threads, eos=eos, bos=bos, fastpath_note=note), note
