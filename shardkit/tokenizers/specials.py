"""Finding EOS/BOS among a vocabulary's special tokens, the same way for every file format."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import TokenizerError
from .base import TokenizerSpec, file_sha256

__all__ = ["EOS_CANDIDATES", "BOS_CANDIDATES", "json_spec", "pick_special"]

# Document boundaries, not chat-turn ends: <|eot_id|> / <|im_end|> are deliberately absent.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")


def pick_special(vocab: Mapping[str, int], override: str | None, candidates: tuple[str, ...],
                 *, what: str, where: str) -> int | None:
    """The id of `override` if given (it must exist), else of the first candidate the vocabulary has."""
    if override is not None:
        if override not in vocab:
            raise TokenizerError(f"{where}: {what} token {override!r} is not in the tokenizer's vocabulary; "
                                 f"give a token the file defines")
        return vocab[override]
    for c in candidates:
        if c in vocab:
            return vocab[c]
    return None


def json_spec(path: str, vocab: Mapping[str, int], eos: str | None, bos: str | None, backend: str) -> TokenizerSpec:
    """The spec of a Hugging Face tokenizer.json, whichever backend encodes it (the data never says which)."""
    where = str(path)
    return TokenizerSpec(
        kind="hf", name=Path(path).name, path=str(path), vocab_size=max(vocab.values()) + 1,
        eos_id=pick_special(vocab, eos, EOS_CANDIDATES, what="eos", where=where),
        bos_id=pick_special(vocab, bos, BOS_CANDIDATES, what="bos", where=where),
        sha256=file_sha256(path), backend=backend)
