"""`read_records`: choose the reader for a file by its extension."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import ConfigError
from ..sources import InputFile, InputFormat, input_format
from .arrow import read_arrow
from .jsonl import read_jsonl
from .parquet import read_parquet
from .records import ReaderConfig, Record
from .text import read_text

__all__ = ["read_records"]

_READERS: dict[InputFormat, Callable[[InputFile, ReaderConfig, int], Iterator[Record]]] = {
    InputFormat.JSONL: read_jsonl,
    InputFormat.PARQUET: read_parquet,
    InputFormat.TEXT: read_text,
    InputFormat.ARROW: read_arrow,
}


def read_records(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """The records of `file` in order from record number `start` (resuming skips without parsing).

    Per-record problems come back as records with `error` set; a file that cannot be read to the end raises
    ReaderError after the good records before the failure.
    """
    if start < 0:
        raise ConfigError(f"start must be a record number >= 0, got {start}")
    return _READERS[input_format(file.url)](file, config, start)
