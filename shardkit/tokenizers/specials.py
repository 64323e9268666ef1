"""Guessing EOS/BOS from a vocabulary's special tokens, the same way for every file format."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import TokenizerError

__all__ = ["EOS_CANDIDATES", "BOS_CANDIDATES", "pick_special"]

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "<|im_end|>")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")


def pick_special(vocab: Mapping[str, int], override: str | None, candidates: tuple[str, ...]) -> int | None:
    """The id of `override` if given (it must exist), else of the first candidate present."""
    if override is not None:
        if override not in vocab:
            raise TokenizerError(f"special token {override!r} is not in the tokenizer's vocabulary")
        return vocab[override]
    for c in candidates:
        if c in vocab:
            return vocab[c]
    return None
