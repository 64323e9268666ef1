"""Token-level checks (`--deep`): ids inside the vocabulary, EOS at document ends, BOS at starts.

Checksums prove the bytes are the ones written; these prove they are what the manifest says they
are (a pack bug or a foreign adopted dataset passes the first and fails the second). Runs only on
shards whose index and `.bin` size passed the structural checks, vectorised over chunks read with
`preadv` (never mapped: a shard truncated during the scan is reported, not a SIGBUS).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format.idx import read_index
from ..format.manifest import Manifest, ShardEntry
from .report import Check, Problem

__all__ = ["TokenRules", "check_tokens", "token_rules"]

READ_BYTES = 1 << 20  # cache-sized: each chunk is scanned while it is still in L2 (measured ~2x faster than 32 MiB)


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
    The `.bin` is read with `preadv` in chunks, never mapped: a file truncated while it is scanned is
    a short read (reported), where a mapping would kill the process with SIGBUS.
    """
    if entry.bin_bytes == 0 or not rules.any:
        return [], 0
    markers = []  # (check, want, document positions to look at, which documents are non-empty, at_end)
    if rules.eos_id is not None or rules.bos_id is not None:
        idx = read_index(directory / entry.idx_name, check=False)
        starts = np.asarray(idx.pointers, dtype=np.int64) // dtype.itemsize
        lengths = np.array(idx.lengths, dtype=np.int64)
        del idx
        for want, check, at_end in ((rules.eos_id, Check.EOS, True), (rules.bos_id, Check.BOS, False)):
            if want is not None:
                markers.append((check, want, starts + lengths - 1 if at_end else starts, lengths, at_end))
    vocab = rules.vocab_size
    if vocab is not None and dtype.kind == "u" and vocab > np.iinfo(dtype).max:
        vocab = None  # every value of the dtype is a valid id
    tally = _VocabTally()
    found = [np.full(m[3].size, -1, dtype=np.int64) for m in markers]
    nonempty = [np.flatnonzero(m[3] > 0) for m in markers]
    targets = [m[2][docs] for m, docs in zip(markers, nonempty)]  # ascending: documents are back to back
    path = bin_path or directory / entry.bin_name
    got = 0
    for lo, chunk in _chunks(path, dtype, entry.num_tokens):
        got = lo + chunk.size
        if vocab is not None:
            tally.add(lo, chunk, vocab)
        for f, docs, at in zip(found, nonempty, targets):
            a, b = np.searchsorted(at, [lo, got])
            f[docs[a:b]] = chunk[at[a:b] - lo]
    if got < entry.num_tokens:
        size = got * dtype.itemsize
        return [Problem(Check.SIZE, f"shrank to {size:,} bytes while it was being read (the manifest records "
                                    f"{entry.bin_bytes:,}): modified during verify? run verify again",
                        shard=entry.name, file=entry.bin_name, byte_range=(size, entry.bin_bytes),
                        expected=str(entry.bin_bytes), actual=str(size))], size
    problems = tally.problems(entry, dtype, vocab) if vocab is not None else []
    for (check, want, pos, lengths, at_end), f in zip(markers, found):
        problems += _marker(entry, dtype, pos, lengths, f, want, check, at_end=at_end)
    return problems, entry.bin_bytes


_local = threading.local()


def _chunks(path: Path, dtype: np.dtype, num_tokens: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first token, tokens) of consecutive chunks, read into one reused per-thread buffer; stops short
    if the file ends before `num_tokens`."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = np.empty(READ_BYTES, dtype=np.uint8)
    step = buf.size // dtype.itemsize
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in fails instead of hanging
    try:
        for lo in range(0, num_tokens, step):
            want = min(step, num_tokens - lo) * dtype.itemsize
            n = 0
            while n < want:
                r = os.preadv(fd, [memoryview(buf[n:want])], lo * dtype.itemsize + n)
                if r == 0:
                    break
                n += r
            n -= n % dtype.itemsize
            if n:
                yield lo, buf[:n].view(dtype)
            if n < want:
                return
    finally:
        os.close(fd)


class _VocabTally:
    """Token ids outside [0, vocab), accumulated chunk by chunk: count, first (position, id), last position."""

    def __init__(self) -> None:
        self.count, self.first, self.last, self.first_id = 0, -1, -1, 0

    def add(self, lo: int, chunk: np.ndarray, vocab: int) -> None:
        if int(chunk.max()) < vocab and int(chunk.min()) >= 0:
            return
        bad = np.flatnonzero((chunk >= vocab) | (chunk < 0))
        if self.first < 0:
            self.first, self.first_id = lo + int(bad[0]), int(chunk[bad[0]])
        self.last = lo + int(bad[-1])
        self.count += int(bad.size)

    def problems(self, entry: ShardEntry, dtype: np.dtype, vocab: int) -> list[Problem]:
        if not self.count:
            return []
        isz = dtype.itemsize
        return [Problem(Check.TOKENS, f"{self.count:,} token id(s) outside [0, {vocab:,}) (vocab size); first: id "
                                      f"{self.first_id:,} at token {self.first:,}", shard=entry.name,
                        file=entry.bin_name, byte_range=(self.first * isz, (self.last + 1) * isz))]


def _marker(entry: ShardEntry, dtype: np.dtype, pos: np.ndarray, lengths: np.ndarray, found: np.ndarray,
            want: int, check: Check, *, at_end: bool) -> list[Problem]:
    """`found[d]`: the token at document d's end (start), -1 for an empty document."""
    name = "EOS" if at_end else "BOS"
    empty = lengths == 0
    bad = np.flatnonzero(found != want)
    if not bad.size:
        return []
    d = int(bad[0])
    isz = dtype.itemsize
    what = "is empty" if empty[d] else f"{'ends' if at_end else 'starts'} with id {int(found[d]):,}"
    rng = None if empty[d] else (int(pos[d]) * isz, (int(pos[d]) + 1) * isz)
    return [Problem(check, f"{bad.size:,} of {lengths.size:,} document(s) do not {'end' if at_end else 'start'} "
                           f"with {name} id {want:,} (the manifest says it was "
                           f"{'appended' if at_end else 'prepended'}); first: document {d:,} {what}",
                    shard=entry.name, file=entry.bin_name, byte_range=rng)]
