"""Workers that read their own input: the pack's stream of work items, and the merge of their results.

With several workers the parent would otherwise read, decompress and decode every byte alone and ship
the texts to the workers, one process doing half the pack's work. Here a large uncompressed JSON-lines
file is cut into units of `UNIT_BYTES` (byte ranges resolved at newlines exactly as a task's slices are,
see slices.py) and a Parquet file into runs of whole row groups; each worker reads, decodes and tokenizes
a unit and sends back tokens and per-document positions. Everything else — compressed streams, text
files, small files, remote inputs, the rest of the file a resumed run starts in the middle of — is read
by the parent in chunks as before.

The parent merges unit results in submission order and turns each unit's local line numbers into the
file's own (it adds up the lines of the file's earlier units), so record numbers, locations in
messages, skips, the journal's resume positions and the bytes written are those of a single reader.
A file error ends the file exactly where a single reader stops: later units of that file are dropped.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ReaderError
from ..readers import ReaderConfig, Record, read_records
from ..remote.fs import is_remote
from ..sources import Compression, InputFile, InputFormat, input_compression, input_format
from .chunks import Chunk, Skip, iter_chunks, skip_reason
from .slices import layout_files, line_start, slice_file
from .tasks import Slice, SplitKind

__all__ = ["UNIT_BYTES", "Unit", "UnitResult", "work_items", "read_unit", "UnitMerger"]

# ~4 MiB of input per unit: a few ×10 ms of work (IPC and start-up amortised), while a worker holds only
# one unit's texts and tokens at once, so memory stays flat however large the file
UNIT_BYTES = 4 << 20
MAX_GROUP_FACTOR = 4  # a Parquet file is split only if no row group exceeds this many units (compressed)
_SCAN = 1 << 20


@dataclass(frozen=True, slots=True)
class Unit:
    """A piece of one input file that one worker reads: bytes [start, stop) (records whose first byte lies
    there) of a JSON-lines file, or rows [start, stop) (whole row groups) of a Parquet file."""

    file: int  # index into the listing
    url: str
    size: int
    source: str
    kind: SplitKind  # BYTES or ROW_GROUPS
    start: int
    stop: int
    done_bytes: int  # input bytes of the whole listing up to the end of this unit (progress)


@dataclass(slots=True)
class UnitResult:
    """What a worker sends back for a unit: tokens and, per document, its record number in the unit."""

    tokens: np.ndarray
    lengths: np.ndarray
    records: np.ndarray  # per document: the record number (BYTES: line of the unit's view; ROWS: the file's)
    chars: np.ndarray  # per document: characters
    ids: list[str | None]
    skips: list[tuple[int, int, str, str]] = field(default_factory=list)  # (before_doc, record, location, reason)
    lines: int = 0  # BYTES: lines in the unit, for the numbering of the next unit of the file
    # a file error that ended the unit: (path, problem, line in the unit's numbering, errno, strerror)
    error: tuple[str, str, int | None, int | None, str | None] | None = None


def _splittable(f: InputFile) -> SplitKind | None:
    if f.size <= UNIT_BYTES or "://" in f.url or is_remote(f.url):  # local paths only (not slices, not fsspec)
        return None
    fmt = input_format(f.url)
    if fmt is InputFormat.JSONL and input_compression(f.url) is Compression.NONE:
        return SplitKind.BYTES
    if fmt is InputFormat.PARQUET:
        return SplitKind.ROW_GROUPS
    return None


def _units(fi: int, f: InputFile, kind: SplitKind, done_before: int) -> list[Unit]:
    if kind is SplitKind.BYTES:
        return [Unit(fi, f.url, f.size, f.source, kind, a, min(a + UNIT_BYTES, f.size),
                     done_before + min(a + UNIT_BYTES, f.size)) for a in range(0, f.size, UNIT_BYTES)]
    layout = layout_files([f], UNIT_BYTES)[0]  # (compressed bytes, rows) per row group; () if unreadable
    if len(layout.groups) < 2 or max(b for b, _ in layout.groups) > MAX_GROUP_FACTOR * UNIT_BYTES:
        return []  # a unit holds its texts at once: large row groups are streamed by the parent instead
    units, row, acc_rows, acc_bytes, seen = [], 0, 0, 0, 0
    for nbytes, nrows in layout.groups:
        acc_rows += nrows
        acc_bytes += nbytes
        if acc_bytes >= UNIT_BYTES:
            seen += acc_bytes
            units.append((row, row + acc_rows, seen))
            row, acc_rows, acc_bytes = row + acc_rows, 0, 0
    if acc_rows or not units:
        units.append((row, row + acc_rows, seen + acc_bytes))
    total = max(1, seen + acc_bytes)
    last = len(units) - 1
    return [Unit(fi, f.url, f.size, f.source, kind, a, b if k < last else 1 << 62,
                 done_before + f.size * c // total) for k, (a, b, c) in enumerate(units)]


def work_items(files: Sequence[InputFile], reader: ReaderConfig, *, start_file: int, start_record: int,
               on_file_error: Callable[[ReaderError], None] | None,
               read: Callable[[InputFile, ReaderConfig, int], Iterator[Record]]) -> Iterator[Chunk | Unit]:
    """The pack's input from (start_file, start_record) on, in order: parent-read chunks and units."""
    done = sum(f.size for f in files[:start_file])
    run_start = start_file
    fi = start_file
    while fi < len(files):
        f = files[fi]
        kind = None if (fi == start_file and start_record) else _splittable(f)
        units = _units(fi, f, kind, done) if kind is not None else []
        if units:
            if run_start < fi:  # the parent-read files before this one
                yield from iter_chunks(files, reader, start_file=run_start, stop_file=fi,
                                       start_record=start_record if run_start == start_file else 0,
                                       on_file_error=on_file_error, read=read)
            yield from units
            run_start = fi + 1
        done += f.size
        fi += 1
    if run_start < len(files):
        yield from iter_chunks(files, reader, start_file=run_start,
                               start_record=start_record if run_start == start_file else 0,
                               on_file_error=on_file_error, read=read)


# ---- in the worker ------------------------------------------------------------------------------------

def _line_span(url: str, start: int, stop: int, size: int) -> tuple[int, int, int]:
    """(first line start ≥ start, first line start ≥ stop, lines in between) of an uncompressed file."""
    with open(url, "rb", buffering=0) as f:
        begin = line_start(f, start, size)
        end = line_start(f, stop, size)
        f.seek(begin)
        left, lines, last = end - begin, 0, b"\n"
        while left > 0:
            block = f.read(min(_SCAN, left))
            if not block:
                break
            lines += block.count(b"\n")
            left -= len(block)
            last = block[-1:]
    if end == size and begin < end and last != b"\n":
        lines += 1  # the file's last line, without its newline
    return begin, end, lines


def read_unit(unit: Unit, reader: ReaderConfig) -> tuple[list[str], UnitResult]:
    """Read one unit in a worker: its documents' texts, and everything else the parent needs about them."""
    texts: list[str] = []
    records: list[int] = []
    ids: list[str | None] = []
    skips: list[tuple[int, int, str, str]] = []
    lines = 0
    error = None
    try:
        if unit.kind is SplitKind.BYTES:
            file = slice_file(Slice(unit.file, SplitKind.BYTES, unit.start, unit.stop, weight=unit.stop - unit.start),
                              InputFile(url=unit.url, size=unit.size, source=unit.source))
            recs: Iterator[Record] = read_records(file, reader, 0)
        else:
            recs = _rows(InputFile(url=unit.url, size=unit.size, source=unit.source), reader, unit.start, unit.stop)
        for rec in recs:
            if (reason := skip_reason(rec)) is not None:
                skips.append((len(texts), rec.index, rec.location, reason))
                continue
            texts.append(rec.text)  # type: ignore[arg-type]  # skip_reason: a str
            records.append(rec.index)
            ids.append(rec.doc_id)
        if unit.kind is SplitKind.BYTES:  # (the file opened and read: counting its lines again cannot fail
            try:                          # but for a device fault)
                lines = _line_span(unit.url, unit.start, unit.stop, unit.size)[2]
            except OSError as e:
                raise ReaderError(unit.url, f"cannot read: {e.strerror or e}") from e
    except ReaderError as e:
        dev = e.device_error
        error = (e.path, e.problem, e.line, None if dev is None else dev.errno,
                 None if dev is None else (dev.strerror or str(dev)))
    chars = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    empty = np.zeros(0, dtype=np.int64)
    return texts, UnitResult(empty, empty, np.asarray(records, dtype=np.int64), chars, ids, skips, lines, error)


def _rows(file: InputFile, reader: ReaderConfig, start: int, stop: int) -> Iterator[Record]:
    for rec in read_records(file, reader, start):
        if rec.index >= stop:
            return
        yield rec


# ---- in the parent ------------------------------------------------------------------------------------

class UnitMerger:
    """Turns unit results, taken in order, into chunks with the file's own record numbers and locations."""

    def __init__(self, on_file_error: Callable[[ReaderError], None] | None) -> None:
        self.on_file_error = on_file_error
        self._file = -1
        self._lines_before = 0  # lines of the current file in its earlier units
        self._ended = False  # the current file had a file error: its later units are dropped

    def chunk(self, unit: Unit, result: UnitResult) -> tuple[Chunk, np.ndarray, np.ndarray]:
        if unit.file != self._file:
            self._file, self._lines_before, self._ended = unit.file, 0, False
        if self._ended:
            empty = np.zeros(0, dtype=result.tokens.dtype)
            return Chunk(input_bytes_done=unit.done_bytes, char_counts=np.zeros(0, np.int64)), empty, \
                np.zeros(0, np.int64)
        by_lines = unit.kind is SplitKind.BYTES
        # a unit's view starts with one blank line when it starts mid-file (see slices.py): local line i
        # is the file's line before + i - 1; the first unit's numbering is the file's own
        shift = (self._lines_before - (1 if unit.start > 0 else 0)) if by_lines else 0
        url = unit.url
        records = result.records + shift
        chunk = Chunk(ids=result.ids, doc_file=[unit.file] * len(records), doc_record=records.tolist(),
                      input_bytes_done=unit.done_bytes, char_counts=result.chars)
        chunk.doc_locations = [f"{url}:{r + 1}" for r in chunk.doc_record] if by_lines else \
            [f"{url}:row {r}" for r in chunk.doc_record]
        for before, rec, location, reason in result.skips:
            chunk.skips.append(Skip(before, unit.file, f"{url}:{rec + shift + 1}" if by_lines else location, reason))
        if result.error is not None:
            path, problem, line, code, strerror = result.error
            if by_lines:
                path = url
                line = None if line is None else line + shift
            err = ReaderError(path, problem, line=line)
            if code is not None:
                err.__cause__ = OSError(code, strerror or _errno.errorcode.get(code, ""))
            self._ended = True
            if self.on_file_error is not None:
                self.on_file_error(err)
            where = f"{err.path}:{err.line}" if err.line is not None else err.path
            chunk.skips.append(Skip(len(records), unit.file, where, f"file error: {err.problem}"))
        self._lines_before += result.lines
        return chunk, result.tokens, result.lengths
