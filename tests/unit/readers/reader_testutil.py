"""Helpers shared by the reader tests (imported by name: the test directories have no __init__.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import zstandard

from shardkit.readers import ReaderConfig, Record, read_records
from shardkit.sources import InputFile


def compress(data: bytes, name: str) -> bytes:
    """`data` compressed as the file name's extension says (unchanged for plain names)."""
    if name.endswith(".gz"):
        return gzip.compress(data)
    if name.endswith((".zst", ".zstd")):
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)  # as the zstd CLI does
    return data


def input_file(path: Path | str) -> InputFile:
    path = str(path)
    return InputFile(url=path, size=Path(path).stat().st_size, source=path)


def read_all(file: InputFile, start: int = 0, **config: object) -> list[Record]:
    return list(read_records(file, ReaderConfig(**config), start=start))  # type: ignore[arg-type]


def texts(records: list[Record]) -> list[str | None]:
    return [r.text for r in records]
