"""Arrow IPC reader: Hugging Face `datasets` directories (`save_to_disk`) and other `.arrow` files.

`datasets` writes Arrow IPC *stream* files (data-00000-of-00001.arrow, ...) beside state.json and
dataset_info.json; the listing reads such a directory as its Arrow files in order (sources/listing.py).
The IPC *file* format is read too. Rows are records exactly as in a Parquet file: the same column
resolution (dotted paths into structs), the same messages, `path:row N` locations; pyarrow reads them,
so `datasets` itself is not needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import ReaderError
from ..sources import InputFile
from .compression import open_binary
from .fields import FieldPath
from .parquet import _column, _ids, _is_binary, _is_text, _records, _resolve, _strings
from .records import ReaderConfig, Record

__all__ = ["read_arrow"]

_FIX = "re-create the file (e.g. Dataset.save_to_disk again), or remove it from the inputs"


def _open(url: str, stack: ExitStack) -> Any:
    """A batch reader over the file: IPC stream format first (what `datasets` writes), then file format."""
    try:
        source: Any = pa.memory_map(url) if "://" not in url else stack.enter_context(open_binary(url))
    except FileNotFoundError:
        raise ReaderError(url, "file not found (was it moved or deleted after listing?)") from None
    except (PermissionError, pa.ArrowException, OSError) as e:
        raise ReaderError(url, f"cannot open it ({e})") from None
    if "://" not in url:
        stack.callback(source.close)
    try:
        return ipc.open_stream(source)
    except (pa.ArrowException, OSError):
        pass
    try:
        source.seek(0)
        reader = ipc.open_file(source)
    except (pa.ArrowException, OSError) as e:
        raise ReaderError(url, f"not a readable Arrow IPC stream or file ({e}); {_FIX}") from None
    return (reader.get_batch(i) for i in range(reader.num_record_batches)), reader.schema


def _validate(batch: pa.RecordBatch) -> None:
    """Check every offset and length of a batch before reading it: the IPC reader trusts the file, and a
    damaged offset makes pyarrow build strings of negative size. Invalid UTF-8 is not damage here (the
    readers decide it per row), so string columns failing only that are checked again as bytes."""
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as e:
        if "utf" not in str(e).lower():
            raise
        for col in batch.columns:
            t = col.type
            as_bytes = (col.view(pa.binary()) if pa.types.is_string(t) else
                        col.view(pa.large_binary()) if pa.types.is_large_string(t) else col)
            as_bytes.validate(full=True)


def read_arrow(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """Records of an Arrow IPC file from row `start` on; null or non-text values become record errors."""
    url = file.url
    field = FieldPath(config.text_field)
    id_path = FieldPath(config.id_field) if config.id_field else None
    with ExitStack() as stack:
        opened = _open(url, stack)
        batches, schema = opened if isinstance(opened, tuple) else (opened, opened.schema)
        try:
            text_type = _resolve(url, schema, field, "text")
            if id_path is not None:
                _resolve(url, schema, id_path, "id")
        except UnicodeDecodeError as e:  # a damaged schema: pyarrow decodes column names lazily
            raise ReaderError(url, f"the file's schema is damaged (a column name is not UTF-8: {e.reason}); "
                                   "re-export the file") from None
        binary = _is_binary(text_type)
        if not (binary or _is_text(text_type)):
            raise ReaderError(url, f"text column {field.path!r} has type {text_type}, expected a string column; "
                              "choose another with --text-field")
        row = 0
        it = iter(batches)
        while True:
            try:
                batch = next(it, None)
                if batch is None:
                    return
                offset = max(0, start - row)
                if offset >= batch.num_rows:
                    row += batch.num_rows
                    continue
                _validate(batch)
                if offset:
                    batch = batch.slice(offset)
                    row += offset
                texts = _strings(_column(batch, field), binary, config.decode_errors)
                ids = _ids(_column(batch, id_path)) if id_path is not None else None
            except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
                raise ReaderError(url, f"corrupt Arrow data near row {row} ({e}); {_FIX}") from None
            yield from _records(url, field, texts, ids, row)
            row += len(texts)
