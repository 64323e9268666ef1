"""Compile a byte-level BPE `tokenizer.json` to an in-memory tiktoken `Encoding`, or say why not.

tiktoken's BPE core encodes the same vocabulary several times faster than `tokenizers`. The compiled
encoding is exactly equivalent only when every stage of the HF pipeline has a tiktoken counterpart:
no normalizer, a ByteLevel pre-tokenizer (GPT-2 regex) or Split(regex) + ByteLevel(use_regex=false),
no prefix space, a plain BPE model (no dropout, unk, byte fallback, subword prefixes/suffixes), added
tokens without strip/word options, and merge priorities that agree with token ranks. Anything else is
refused with a reason; the pack start-up self-check then compares both backends on real input.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TokenizerError
from .base import TokenizerSpec, concat_ids, file_sha256
from .specials import BOS_CANDIDATES, EOS_CANDIDATES, pick_special

__all__ = ["GPT2_PATTERN", "FastPathRefused", "compile_tiktoken", "TiktokenTokenizer"]

# The GPT-2 split regex (tiktoken's faster equivalent form of the HF ByteLevel regex).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


class FastPathRefused(Exception):
    """The tokenizer.json is not exactly representable as a tiktoken Encoding (message: why)."""


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map used by ByteLevel vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def _pattern(pre: Any) -> str:
    if pre is None:
        raise FastPathRefused("no pre-tokenizer (not a byte-level tokenizer)")
    kind = pre.get("type")
    if kind == "ByteLevel":
        if pre.get("add_prefix_space"):
            raise FastPathRefused("ByteLevel add_prefix_space=true has no tiktoken equivalent")
        if not pre.get("use_regex", True):
            raise FastPathRefused("ByteLevel without regex and without a Split has no tiktoken equivalent")
        return GPT2_PATTERN
    if kind == "Sequence":
        items = pre.get("pretokenizers") or []
        if (len(items) == 2 and items[0].get("type") == "Split" and items[1].get("type") == "ByteLevel"
                and not items[1].get("add_prefix_space") and not items[1].get("use_regex", True)):
            split = items[0]
            regex = (split.get("pattern") or {}).get("Regex")
            if regex is None:
                raise FastPathRefused("Split by a plain string, not a regex")
            if split.get("behavior") != "Isolated" or split.get("invert"):
                raise FastPathRefused(f"Split behavior {split.get('behavior')!r}/invert is not tiktoken's findall")
            return regex
    raise FastPathRefused(f"pre-tokenizer {kind!r} has no exact tiktoken equivalent")


def _check_model(model: dict[str, Any]) -> None:
    if model.get("type") != "BPE":
        raise FastPathRefused(f"model type {model.get('type')!r} is not BPE")
    for key, ok in (("dropout", None), ("unk_token", None), ("byte_fallback", False), ("fuse_unk", False)):
        if model.get(key, ok) not in (ok, 0.0 if key == "dropout" else ok):
            raise FastPathRefused(f"BPE {key}={model.get(key)!r} is not supported by tiktoken")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise FastPathRefused(f"BPE {key}={model.get(key)!r} is not supported by tiktoken")


def _to_bytes(token: str) -> bytes:
    try:
        return bytes(_UNICODE_TO_BYTE[c] for c in token)
    except KeyError:
        raise FastPathRefused(f"vocabulary entry {token!r} is not byte-level encoded") from None


def compile_tiktoken(path: str):
    """(tiktoken Encoding, vocab incl. added tokens) for a tokenizer.json, or raise FastPathRefused."""
    import tiktoken

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: cannot read tokenizer JSON ({e})") from None
    if doc.get("normalizer") not in (None, {}):
        raise FastPathRefused(f"normalizer {doc['normalizer'].get('type')!r} has no tiktoken equivalent")
    pattern = _pattern(doc.get("pre_tokenizer"))
    model = doc.get("model") or {}
    _check_model(model)
    added = doc.get("added_tokens") or []
    for t in added:
        if t.get("lstrip") or t.get("rstrip") or t.get("single_word"):
            raise FastPathRefused(f"added token {t.get('content')!r} uses lstrip/rstrip/single_word")
    added_ids = {t["content"]: int(t["id"]) for t in added}
    vocab: dict[str, int] = model.get("vocab") or {}
    ranks = {_to_bytes(tok): rank for tok, rank in vocab.items() if tok not in added_ids}
    if len(ranks) != len({v for k, v in vocab.items() if k not in added_ids}):
        raise FastPathRefused("two vocabulary entries decode to the same bytes")
    if any(bytes([b]) not in ranks for b in range(256)):
        raise FastPathRefused("the vocabulary lacks some of the 256 single-byte tokens")
    _check_merge_order(model.get("merges") or [], vocab)
    # every added token is matched in raw text by `tokenizers`; tiktoken does the same with its specials
    enc = tiktoken.Encoding(name=Path(path).name, pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens=dict(added_ids))
    return enc, {**vocab, **added_ids}


def _check_merge_order(merges: list[Any], vocab: dict[str, int]) -> None:
    """BPE by rank (tiktoken) equals BPE by merge priority (HF) when merge results' ids rise in merge order."""
    prev = -1
    for i, m in enumerate(merges):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        rank = vocab.get(a + b)
        if rank is None:
            raise FastPathRefused(f"merge {i} ({a!r} + {b!r}) produces a token missing from the vocabulary")
        if rank <= prev or rank <= max(vocab.get(a, -1), vocab.get(b, -1)):
            raise FastPathRefused(f"merge {i} ({a!r} + {b!r}): token ids do not follow merge priority")
        prev = rank


class TiktokenTokenizer:
    """Encodes with a tiktoken Encoding; special-token text maps to its id, as `tokenizers` does."""

    def __init__(self, encoding, spec: TokenizerSpec) -> None:
        self.encoding = encoding
        self.spec = spec
        self._allowed = encoding.special_tokens_set

    @classmethod
    def from_hf_json(cls, path: str, *, eos: str | None = None, bos: str | None = None) -> TiktokenTokenizer:
        enc, vocab = compile_tiktoken(path)
        spec = TokenizerSpec(kind="hf", name=Path(path).name, path=str(path), vocab_size=max(vocab.values()) + 1,
                             eos_id=pick_special(vocab, eos, EOS_CANDIDATES),
                             bos_id=pick_special(vocab, bos, BOS_CANDIDATES), sha256=file_sha256(path),
                             backend="tiktoken")
        return cls(enc, spec)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        enc, allowed = self.encoding, self._allowed
        return concat_ids([enc.encode_to_numpy(t, allowed_special=allowed) for t in texts])

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self.encoding.decode([int(i) for i in ids])
