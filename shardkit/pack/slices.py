"""A task's inputs: the listing's files laid out for the planner, and the records of one slice of a file.

A slice that is not a whole file becomes an `InputFile` whose URL names it
(`shardkit-slice://bytes/START-STOP/<quoted url>` or `shardkit-slice://rows/START-STOP/<quoted url>`),
so the journal, progress and resume see a slice exactly like a file. Reading one:

* **byte range** of an uncompressed JSON-lines file: the records whose first byte lies in
  [START, STOP). The range is widened to line boundaries by scanning to the next newline at both ends,
  so neighbouring tasks agree on every boundary without talking to each other. The bytes reach the
  ordinary JSON-lines reader through a registered fsspec protocol (a read-only view of the range,
  preceded by one blank line when it starts mid-file, so the reader's start-of-file rules — BOM, the
  "this is a JSON array" hint — apply only at the real start of the file). Record locations read
  `FILE@START:N`: the N-th line that starts at or after byte START.
* **rows** of a Parquet file (whole row groups): the ordinary Parquet reader from the first row, stopped
  after the last; locations are the file's own `FILE:row N`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote, unquote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.spec import AbstractFileSystem

from ..errors import ReaderError
from ..readers import ReaderConfig, Record, read_records
from ..readers.compression import open_binary
from ..readers.records import make_record
from ..sources import Compression, InputFile, InputFormat, input_compression, input_format
from .tasks import FileLayout, Slice, SplitKind, TaskPlan, TaskSpec, plan_digest, plan_tasks

__all__ = ["SLICE_PROTOCOL", "layout_files", "plan_task", "read_slice_records", "slice_file", "task_files"]

SLICE_PROTOCOL = "shardkit-slice"
_PREFIX = SLICE_PROTOCOL + "://"
_SCAN = 1 << 16


def layout_files(files: Sequence[InputFile], granularity: int) -> list[FileLayout]:
    """Where each file may be cut; reads the footer of each Parquet file larger than `granularity`."""
    out = []
    for f in files:
        fmt = input_format(f.url)
        if f.size <= granularity:
            out.append(FileLayout(f.size))
        elif fmt is InputFormat.JSONL and input_compression(f.url) is Compression.NONE:
            out.append(FileLayout(f.size, SplitKind.BYTES))
        elif fmt is InputFormat.PARQUET:
            groups = _row_groups(f.url)
            out.append(FileLayout(f.size, SplitKind.ROW_GROUPS, groups) if len(groups) > 1
                       else FileLayout(f.size))
        else:
            out.append(FileLayout(f.size))
    return out


def _row_groups(url: str) -> tuple[tuple[int, int], ...]:
    """(compressed bytes, rows) per row group; an unreadable footer makes the file uncuttable (its
    task then reports the error exactly as a single pack would)."""
    try:
        with open_binary(url) as fh:
            meta = pq.read_metadata(fh)
    except (ReaderError, OSError, pa.ArrowException):
        return ()
    groups = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        nbytes = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        groups.append((int(nbytes), int(rg.num_rows)))
    return tuple(groups)


def slice_file(s: Slice, file: InputFile) -> InputFile:
    """The InputFile a task reads for slice `s` of `file` (the file itself when the slice is whole)."""
    if s.kind is SplitKind.WHOLE:
        return file
    kind, (a, b) = ("bytes", (s.start, s.stop)) if s.kind is SplitKind.BYTES else ("rows", (s.row_start, s.row_stop))
    return InputFile(url=f"{_PREFIX}{kind}/{a}-{b}/{quote(file.url, safe='')}", size=s.weight, source=file.source)


def task_files(plan: TaskPlan, files: Sequence[InputFile]) -> list[InputFile]:
    return [slice_file(s, files[s.file]) for s in plan.slices]


def plan_task(spec: TaskSpec, listing: Sequence[InputFile]) -> tuple[list[InputFile], dict[str, Any]]:
    """The inputs of task `spec.task_id` and its part metadata (recorded in the part's manifest)."""
    layouts = layout_files(listing, spec.granularity)
    plan = plan_tasks(layouts, spec.num_tasks, granularity=spec.granularity)[spec.task_id]
    meta = {
        "task_id": spec.task_id,
        "num_tasks": spec.num_tasks,
        "granularity": spec.granularity,
        "plan": plan_digest([f.url for f in listing], layouts, spec.num_tasks, spec.granularity),
        "listing": {"files": len(listing), "bytes": sum(f.size for f in listing)},
        "range": [plan.start, plan.stop],
        "slices": [{"url": listing[s.file].url, **s.to_json()} for s in plan.slices],
    }
    return task_files(plan, listing), meta


def _parse(url: str) -> tuple[str, int, int, str]:
    try:
        kind, span, inner = url[len(_PREFIX):].split("/", 2)
        a, b = (int(x) for x in span.split("-"))
    except ValueError:
        raise ValueError(f"not a shardkit slice URL: {url!r}") from None
    return kind, a, b, unquote(inner)


def read_slice_records(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """`read_records` for a task's input: a whole file, a JSON-lines byte range or Parquet rows."""
    if not file.url.startswith(_PREFIX):
        return read_records(file, config, start)
    kind, a, b, inner = _parse(file.url)
    if kind == "rows":
        return _rows(InputFile(url=inner, size=file.size, source=file.source), config, start, a, b)
    if a == 0:  # the range starts the file: locations are the file's own FILE:LINE
        return _byte_range(file, config, start, label=inner, first_line=1)
    return _byte_range(file, config, start, label=f"{inner}@{a}", first_line=0)


def _rows(file: InputFile, config: ReaderConfig, start: int, row_start: int, row_stop: int) -> Iterator[Record]:
    for rec in read_records(file, config, max(start, row_start)):
        if rec.index >= row_stop:
            return
        yield rec


def _byte_range(file: InputFile, config: ReaderConfig, start: int, *, label: str, first_line: int
                ) -> Iterator[Record]:
    """Records of the view with their locations renamed from the view's URL to `label:N`."""
    try:
        for r in read_records(file, config, start):
            yield make_record(r.index, r.text, r.doc_id, r.error, f"{label}:{r.index + first_line}")
    except ReaderError as e:
        line = None if e.line is None else e.line - 1 + first_line
        raise ReaderError(label, e.problem, line=line) from e


def line_start(f: Any, pos: int, size: int) -> int:
    """The first position ≥ `pos` at which a line starts (0, or just after a newline), or `size`."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    f.seek(pos - 1)
    at = pos - 1
    while True:
        block = f.read(_SCAN)
        if not block:
            return size
        k = block.find(b"\n")
        if k >= 0:
            return at + k + 1
        at += len(block)


class _LineRange(io.RawIOBase):
    """Read-only view of the whole lines starting in [start, stop) of a file, after one b"\\n" if mid-file."""

    def __init__(self, url: str, start: int, stop: int) -> None:
        super().__init__()
        self._f = fsspec.open(url, "rb").open()
        try:
            size = self._f.seek(0, io.SEEK_END)
            begin = line_start(self._f, start, size)
            end = line_start(self._f, stop, size)
            self._f.seek(begin)
        except BaseException:
            self._f.close()
            raise
        self._prefix = b"\n" if begin > 0 else b""
        self._left = max(0, end - begin)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        mv = memoryview(buf).cast("B")
        if self._prefix:
            n = len(self._prefix)
            mv[:n] = self._prefix
            self._prefix = b""
            return n
        want = min(len(mv), self._left)
        if want <= 0:
            return 0
        data = self._f.read(want)
        mv[:len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


class _SliceFileSystem(AbstractFileSystem):
    """fsspec protocol `shardkit-slice`: opens a byte-range slice URL as the view above (read-only)."""

    protocol = SLICE_PROTOCOL

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        return path  # the whole URL is the name: _open parses it

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" not in mode:
            raise PermissionError(f"{path}: slice URLs are read-only")
        kind, a, b, inner = _parse(path if path.startswith(_PREFIX) else _PREFIX + path)
        if kind == "rows":  # the row range is applied by the reader (read_slice_records), not by the bytes
            return fsspec.open(inner, "rb").open()
        return io.BufferedReader(_LineRange(inner, a, b), buffer_size=1 << 20)


fsspec.register_implementation(SLICE_PROTOCOL, _SliceFileSystem, clobber=True)
