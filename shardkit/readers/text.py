"""Plain-text reader: one whole file is one document (plain, .gz or .zst)."""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import ReaderError
from ..sources import Compression, InputFile, input_compression
from .compression import iter_blocks, open_binary
from .records import ReaderConfig, Record, make_record

__all__ = ["MAX_TEXT_BYTES", "read_text"]

MAX_TEXT_BYTES = 64 << 20  # the document is held in memory whole (bytes and str): pack's per-document limit
_BOM = b"\xef\xbb\xbf"


def _too_big(url: str) -> ReaderError:
    return ReaderError(url, f"a .txt document larger than {MAX_TEXT_BYTES >> 20} MiB is refused (it is read "
                       "into memory whole); split it into smaller files or convert it to JSON lines")


def _read_all(file: InputFile) -> bytes | bytearray:
    compression = input_compression(file.url)
    if compression is Compression.NONE:
        if file.size > MAX_TEXT_BYTES:
            raise _too_big(file.url)
        with open_binary(file.url) as f:
            try:
                # one allocation, of the listed size (read(n) allocates n bytes up front, whatever the file)
                data = f.read(min(file.size, MAX_TEXT_BYTES) + 1)
                if len(data) > file.size:  # the file grew after it was listed: read the rest in bounded steps
                    parts, n = [data], len(data)
                    while n <= MAX_TEXT_BYTES and (more := f.read(8 << 20)):
                        parts.append(more)
                        n += len(more)
                    data = b"".join(parts)
            except OSError as e:
                raise ReaderError(file.url, f"read failed: {e}") from e
        if len(data) > MAX_TEXT_BYTES:
            raise _too_big(file.url)
        return data
    buf = bytearray()
    for block in iter_blocks(file.url, compression, block_size=8 << 20):
        buf += block
        if len(buf) > MAX_TEXT_BYTES:
            raise _too_big(file.url)
    return buf


def read_text(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """The file's text as record 0 (a leading UTF-8 BOM is dropped; line endings are kept as they are)."""
    if start > 0:
        return
    data = _read_all(file)
    skip = 3 if data[:3] == _BOM else 0
    try:
        text = str(memoryview(data)[skip:], "utf-8", config.decode_errors)
    except UnicodeDecodeError as e:
        error = f"invalid UTF-8 at byte {e.start + skip} (try --encoding-errors replace)"
        yield make_record(0, None, None, error, file.url)
        return
    yield make_record(0, text, None, None, file.url)
