"""Parquet reader: one row is one record, streamed row group by row group, reading only the needed columns.

A dotted field ("meta.body") addresses a child of a struct column; only that leaf is read from storage.
Resuming at row N skips whole row groups using the footer's row counts, without reading their data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import ReaderError
from ..sources import InputFile
from .compression import open_binary
from .fields import FieldPath, did_you_mean, stringify_id
from .records import ReaderConfig, Record, make_record

__all__ = ["BATCH_BYTES", "read_parquet"]

BATCH_BYTES = 32 << 20  # target uncompressed size of one batch; bounds memory whatever the document size
_MAX_BATCH_ROWS = 65536
_FIX = "re-create or re-download the file, or remove it from the inputs"


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _resolve(url: str, schema: pa.Schema, path: FieldPath, what: str) -> pa.DataType:
    """The type of the column `path` names; a ReaderError that lists the columns when there is none."""
    fields: Any = schema
    t: Any = None
    for depth, part in enumerate(path.parts):
        if depth:
            parent = ".".join(path.parts[:depth])
            if not pa.types.is_struct(t):
                raise ReaderError(url, f"{what} field {path.path!r}: column {parent!r} is {t}, not a struct, "
                                  f"so it has no field {part!r}; choose another with --{what}-field")
            fields = t
        idx = fields.get_field_index(part)
        if idx < 0:
            names = [fields.field(i).name for i in range(len(fields))]
            where = "the file" if depth == 0 else f"struct {parent!r}"
            guess = did_you_mean(part, names) if what == "text" else None
            prefix = "" if depth == 0 else parent + "."
            raise ReaderError(url, f"no {what} column {path.path!r}: {where} has columns {', '.join(names)}; "
                              + (f"did you mean --text-field {prefix}{guess}?" if guess else
                                 f"choose one with --{what}-field"))
        t = fields.field(idx).type
    return t


def _column(batch: pa.RecordBatch, path: FieldPath) -> pa.Array:
    arr: Any = batch.column(path.parts[0])
    for part in path.parts[1:]:
        arr = pc.struct_field(arr, part)
    return arr


def _strings(arr: pa.Array, binary: bool, errors: str) -> list[Any]:
    """Python values of a text column; invalid UTF-8 becomes a per-row error under 'strict'."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not binary:
        try:
            return arr.to_pylist()  # type: ignore[no-any-return]
        except UnicodeDecodeError:  # parquet writers do not always validate UTF-8
            arr = arr.cast(pa.large_binary())
    out: list[Any] = []
    for raw in arr.to_pylist():
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(raw.decode("utf-8", errors))
        except UnicodeDecodeError as e:
            out.append(_BadUtf8(e.start))
    return out


def _ids(arr: pa.Array) -> list[Any]:
    """Python values of the id column; a string id in invalid UTF-8 is only a label, so it gets U+FFFD."""
    try:
        return arr.to_pylist()  # type: ignore[no-any-return]
    except UnicodeDecodeError:
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if not _is_text(arr.type):
            raise
        return [None if v is None else v.decode("utf-8", "replace") for v in arr.cast(pa.large_binary()).to_pylist()]


class _BadUtf8:
    __slots__ = ("start",)

    def __init__(self, start: int) -> None:
        self.start = start


def _batch_rows(meta: pq.FileMetaData, rg: int) -> int:
    info = meta.row_group(rg)
    per_row = max(1, info.total_byte_size // max(1, info.num_rows))
    return max(16, min(_MAX_BATCH_ROWS, BATCH_BYTES // per_row))


def _open(url: str, stack: ExitStack) -> pq.ParquetFile:
    source: Any = url if "://" not in url else stack.enter_context(open_binary(url))
    try:
        return stack.enter_context(pq.ParquetFile(source, page_checksum_verification=True))
    except FileNotFoundError:
        raise ReaderError(url, "file not found (was it moved or deleted after listing?)") from None
    except PermissionError:
        raise ReaderError(url, "permission denied; check the file's permissions") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # (column names in bad UTF-8)
        raise ReaderError(url, f"not a readable parquet file ({e}); {_FIX}") from None


def read_parquet(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """Records of a parquet file from row `start` on; null or non-text values become record errors."""
    url = file.url
    field = FieldPath(config.text_field)
    id_path = FieldPath(config.id_field) if config.id_field else None
    with ExitStack() as stack:
        pf = _open(url, stack)
        schema = pf.schema_arrow
        text_type = _resolve(url, schema, field, "text")
        binary = _is_binary(text_type)
        if not (binary or _is_text(text_type)):
            raise ReaderError(url, f"text column {field.path!r} has type {text_type}, expected a string column; "
                              "choose another with --text-field")
        columns = [field.path]
        if id_path is not None:
            _resolve(url, schema, id_path, "id")
            if id_path.path != field.path:
                columns.append(id_path.path)
        meta = pf.metadata
        row = 0
        for rg in range(meta.num_row_groups):
            n = meta.row_group(rg).num_rows
            if row + n <= start:
                row += n
                continue
            batches = pf.iter_batches(batch_size=_batch_rows(meta, rg), row_groups=[rg], columns=columns,
                                      use_threads=False)
            while True:
                try:
                    batch = next(batches, None)
                    if batch is None:
                        break
                    offset = max(0, start - row)
                    if offset >= batch.num_rows:
                        row += batch.num_rows
                        continue
                    if offset:
                        batch = batch.slice(offset)
                        row += offset
                    texts = _strings(_column(batch, field), binary, config.decode_errors)
                    ids = _ids(_column(batch, id_path)) if id_path is not None else None
                except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # (bad UTF-8 inside a struct id)
                    raise ReaderError(url, f"corrupt parquet data in row group {rg} near row {row} ({e}); "
                                      f"{_FIX}") from None
                yield from _records(url, field, texts, ids, row)
                row += len(texts)


def _records(url: str, field: FieldPath, texts: list[Any], ids: list[Any] | None, row: int) -> Iterator[Record]:
    new = make_record
    for k, text in enumerate(texts):
        i = row + k
        if type(text) is str:
            try:
                doc_id = stringify_id(ids[k]) if ids is not None else None
            except (ValueError, TypeError, RecursionError) as e:  # a row's value, never the whole file's problem
                yield new(i, None, None, f"id cannot be used ({type(e).__name__}: {str(e)[:200]})", f"{url}:row {i}")
                continue
            yield new(i, text, doc_id, None, f"{url}:row {i}")
        elif text is None:
            yield new(i, None, None, f"field {field.path!r} is null", f"{url}:row {i}")
        else:
            error = f"invalid UTF-8 at byte {text.start} of field {field.path!r} (try --encoding-errors replace)"
            yield new(i, None, None, error, f"{url}:row {i}")
