"""Token-level checks (`--deep`): ids inside the vocabulary, EOS at document ends, BOS at starts.

Checksums prove the bytes are the ones written; these prove they are what the manifest says they
are (a pack bug or a foreign adopted dataset passes the first and fails the second). Runs only on
shards whose index and `.bin` size passed the structural checks, vectorised over mapped chunks.
"""

from __future__ import annotations

import contextlib
import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format.idx import read_index
from ..format.manifest import Manifest, ShardEntry
from .report import Check, Problem

__all__ = ["TokenRules", "check_tokens", "token_rules"]

CHUNK_TOKENS = 8 << 20


@dataclass(frozen=True, slots=True)
class TokenRules:
    """What to check; None turns a check off (the notes say why)."""

    vocab_size: int | None
    eos_id: int | None
    bos_id: int | None

    @property
    def any(self) -> bool:
        return self.vocab_size is not None or self.eos_id is not None or self.bos_id is not None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def token_rules(manifest: Manifest) -> tuple[TokenRules, list[str]]:
    tok = manifest.tokenizer
    if tok is None:
        return TokenRules(None, None, None), ["no tokenizer recorded in the manifest (adopted data?): token ids, "
                                              "EOS and BOS not checked (adopt with --tokenizer to enable)"]
    notes = []
    vocab = _int(tok.get("vocab_size"))
    if not vocab:
        notes.append("the manifest's tokenizer has no valid vocab_size: token ids not checked against it")
        vocab = None
    ids = {}
    for flag, key, what in (("eos_appended", "eos_id", "EOS"), ("bos_prepended", "bos_id", "BOS")):
        ids[key] = None
        if getattr(manifest, flag) is True:
            ids[key] = _int(tok.get(key))
            if ids[key] is None:
                notes.append(f"{flag} is true but the tokenizer records no {key}: {what} not checked")
    return TokenRules(vocab, ids["eos_id"], ids["bos_id"]), notes


def check_tokens(directory: Path, entry: ShardEntry, dtype: np.dtype, rules: TokenRules, *,
                 bin_path: Path | None = None) -> tuple[list[Problem], int]:
    """Problems of one shard (at most one per kind, with counts) and the bytes read.

    `bin_path` is where the tokens are when not at `directory / NAME.bin` (a decompressed copy).
    """
    if entry.bin_bytes == 0 or not rules.any:
        return [], 0
    with open(bin_path or directory / entry.bin_name, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        tokens = np.frombuffer(mm, dtype=dtype, count=entry.num_tokens)
        problems = []
        if rules.vocab_size is not None:
            problems += _vocab(entry, tokens, rules.vocab_size)
        if rules.eos_id is not None or rules.bos_id is not None:
            idx = read_index(directory / entry.idx_name, check=False)
            starts = idx.pointers // dtype.itemsize
            lengths = np.asarray(idx.lengths, dtype=np.int64)
            del idx
            if rules.eos_id is not None:
                problems += _marker(entry, tokens, starts, lengths, rules.eos_id, Check.EOS, at_end=True)
            if rules.bos_id is not None:
                problems += _marker(entry, tokens, starts, lengths, rules.bos_id, Check.BOS, at_end=False)
        del tokens
    finally:
        with contextlib.suppress(BufferError):  # a view escaped; the map closes when it is collected
            mm.close()
    return problems, entry.bin_bytes


def _vocab(entry: ShardEntry, tokens: np.ndarray, vocab: int) -> list[Problem]:
    if tokens.dtype.kind == "u" and vocab > np.iinfo(tokens.dtype).max:
        return []  # every value of the dtype is a valid id
    count, first, last, first_id = 0, -1, -1, 0
    for lo in range(0, tokens.size, CHUNK_TOKENS):
        chunk = tokens[lo:lo + CHUNK_TOKENS]
        if int(chunk.max()) < vocab and int(chunk.min()) >= 0:
            continue
        bad = np.flatnonzero((chunk >= vocab) | (chunk < 0))
        if first < 0:
            first, first_id = lo + int(bad[0]), int(chunk[bad[0]])
        last = lo + int(bad[-1])
        count += int(bad.size)
    if not count:
        return []
    isz = tokens.dtype.itemsize
    return [Problem(Check.TOKENS, f"{count:,} token id(s) outside [0, {vocab:,}) (vocab size); first: id "
                                  f"{first_id:,} at token {first:,}", shard=entry.name, file=entry.bin_name,
                    byte_range=(first * isz, (last + 1) * isz))]


def _marker(entry: ShardEntry, tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray, want: int,
            check: Check, *, at_end: bool) -> list[Problem]:
    name = "EOS" if at_end else "BOS"
    empty = lengths == 0
    pos = starts + lengths - 1 if at_end else starts
    found = np.full(lengths.size, -1, dtype=np.int64)
    found[~empty] = tokens[pos[~empty]]
    bad = np.flatnonzero(found != want)
    if not bad.size:
        return []
    d = int(bad[0])
    isz = tokens.dtype.itemsize
    what = "is empty" if empty[d] else f"{'ends' if at_end else 'starts'} with id {int(found[d]):,}"
    rng = None if empty[d] else (int(pos[d]) * isz, (int(pos[d]) + 1) * isz)
    return [Problem(check, f"{bad.size:,} of {lengths.size:,} document(s) do not {'end' if at_end else 'start'} "
                           f"with {name} id {want:,} (the manifest says it was "
                           f"{'appended' if at_end else 'prepended'}); first: document {d:,} {what}",
                    shard=entry.name, file=entry.bin_name, byte_range=rng)]
