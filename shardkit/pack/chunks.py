"""Cut the ordered record stream into chunks for the tokenizer workers, remembering where each came from.

A chunk carries, per document, its (file, record) position, so the writer can name the exact resume
point at any shard boundary, and the skip events in their order relative to the documents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ReaderError
from ..readers import ReaderConfig, Record, read_records
from ..sources import InputFile

__all__ = ["Skip", "Chunk", "iter_chunks", "skip_reason", "sample_texts", "first_samples", "CHUNK_CHARS", "CHUNK_DOCS",
           "MAX_DOC_CHARS"]

CHUNK_CHARS = 1 << 20  # ~1 MB of text per task: large enough to amortise IPC, small enough to stay flat
CHUNK_DOCS = 4096
# Tokenizing a document holds ~8-10x its size at once (text, its copy in the worker, ids, offsets); past
# this many characters a document is skipped with its reason, so one input cannot take gigabytes.
MAX_DOC_CHARS = 64 << 20
# the tokenizer self-check's sample: the first documents, each cut short (see sample_texts)
SAMPLE_DOCS = 128
SAMPLE_CHARS = 1 << 18
SAMPLE_DOC_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Skip:
    before_doc: int  # number of this chunk's documents that precede the skipped record
    file: int
    location: str
    reason: str


@dataclass
class Chunk:
    texts: list[str] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    doc_file: list[int] = field(default_factory=list)
    doc_record: list[int] = field(default_factory=list)
    doc_locations: list[str] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    chars: int = 0
    input_bytes_done: int = 0  # progress estimate at the end of this chunk
    # characters per document when the texts are not here (a worker read and tokenized them itself)
    char_counts: np.ndarray | None = None

    def doc_location(self, i: int) -> str:
        return self.doc_locations[i]

    def doc_chars(self) -> np.ndarray:
        if self.char_counts is not None:
            return self.char_counts
        return np.fromiter((len(t) for t in self.texts), dtype=np.int64, count=len(self.texts))


def skip_reason(rec: Record) -> str | None:
    """Why a record is not packed as a document (a bad record, an empty or oversized text), or None."""
    if rec.error is not None or rec.text is None:
        return rec.error or "no text"
    if not rec.text:
        return "empty document"
    if len(rec.text) > MAX_DOC_CHARS:
        return _too_long(len(rec.text))
    return None


def iter_chunks(
    files: Sequence[InputFile],
    reader: ReaderConfig,
    *,
    start_file: int = 0,
    start_record: int = 0,
    stop_file: int | None = None,
    on_file_error: Callable[[ReaderError], None] | None = None,
    read: Callable[[InputFile, ReaderConfig, int], Iterator[Record]] = read_records,
) -> Iterator[Chunk]:
    """Chunks from position (start_file, start_record) up to file `stop_file` (default: the end), in order.

    A file that fails part-way (corrupt or truncated) becomes one skip event at the failing location;
    `on_file_error` may raise instead (the `fail` policy). `read` reads one input (a task's slices of
    files are read by `slices.read_slice_records`).
    """
    done_bytes = sum(f.size for f in files[:start_file])
    chunk = Chunk()
    for fi in range(start_file, len(files) if stop_file is None else stop_file):
        f = files[fi]
        start = start_record if fi == start_file else 0
        file_chars = 0
        try:
            for rec in read(f, reader, start):
                if (reason := skip_reason(rec)) is not None:
                    chunk.skips.append(Skip(len(chunk.texts), fi, rec.location, reason))
                    continue
                chunk.texts.append(rec.text)
                chunk.ids.append(rec.doc_id)
                chunk.doc_file.append(fi)
                chunk.doc_record.append(rec.index)
                chunk.doc_locations.append(rec.location)
                chunk.chars += len(rec.text)
                file_chars += len(rec.text)
                if chunk.chars >= CHUNK_CHARS or len(chunk.texts) >= CHUNK_DOCS:
                    chunk.input_bytes_done = done_bytes + min(file_chars, f.size)
                    yield chunk
                    chunk = Chunk()
        except ReaderError as e:
            if on_file_error is not None:
                on_file_error(e)
            where = f"{e.path}:{e.line}" if e.line is not None else e.path
            chunk.skips.append(Skip(len(chunk.texts), fi, where, f"file error: {e.problem}"))
        done_bytes += f.size
    chunk.input_bytes_done = done_bytes
    if chunk.texts or chunk.skips:
        yield chunk


def _too_long(chars: int) -> str:
    return (f"document of {chars:,} characters exceeds the per-document limit of {MAX_DOC_CHARS:,} "
            "(tokenizing it would take gigabytes at once); split it into smaller documents")


def sample_texts(files: Sequence[InputFile], reader: ReaderConfig, *, max_docs: int = SAMPLE_DOCS,
                 max_chars: int = SAMPLE_CHARS, per_doc: int = SAMPLE_DOC_CHARS,
                 read: Callable[[InputFile, ReaderConfig, int], Iterator[Record]] = read_records) -> list[str]:
    """The first documents of the input (each cut to `per_doc` chars), for the tokenizer self-check.

    Small on purpose: the slow reference backend encodes it at every pack start-up. Unreadable files
    are passed over (the pack itself reports them).
    """
    def texts() -> Iterator[str]:
        for f in files:
            try:
                for rec in read(f, reader, 0):
                    if rec.text:
                        yield rec.text
            except ReaderError:
                continue

    return first_samples(texts(), max_docs=max_docs, max_chars=max_chars, per_doc=per_doc)


def first_samples(texts: Iterable[str], *, max_docs: int = SAMPLE_DOCS, max_chars: int = SAMPLE_CHARS,
                  per_doc: int = SAMPLE_DOC_CHARS) -> list[str]:
    """The leading texts, each cut to `per_doc` chars, up to `max_docs` texts or `max_chars` in all.

    A pack that starts at the first input reads its first chunk anyway: its texts give the same
    sample as `sample_texts` without reading the start of the input twice.
    """
    out: list[str] = []
    chars = 0
    for text in texts:
        if text:
            out.append(text[:per_doc])
            chars += len(out[-1])
            if len(out) >= max_docs or chars >= max_chars:
                break
    return out
