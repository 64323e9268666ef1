"""Stream an input file's (decompressed) bytes in large blocks, detecting truncation and corruption.

Neither `gzip.GzipFile` nor zstandard's stream readers are used: the zstd ones end silently on a truncated
file, and both hide how much output one read may produce. Here every decompressor call gets a bounded slice
of input (so a highly compressed "bomb" cannot expand unboundedly in one step), multi-member gzip and
multi-frame zstd files are read to the end, and a stream that stops inside a member raises `ReaderError`.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import fsspec
import zstandard

from ..errors import ReaderError
from ..sources import Compression

__all__ = ["BLOCK_SIZE", "iter_blocks", "open_binary"]

BLOCK_SIZE = 1 << 20  # large enough that per-block Python work is negligible, small enough to stay in cache
_GZIP_FEED = 64 << 10  # deflate expands at most ~1032x: <= 66 MiB out per call
_ZSTD_FEED = 8 << 10  # zstd can expand ~32000x (RLE blocks): <= 256 MiB out per call
_FIX = "re-download or re-create the file, or remove it from the inputs"


def open_binary(url: str) -> BinaryIO:
    """Open `url` for binary reading through fsspec, turning OS errors into a ReaderError that names it.

    A local path must be a regular file when opened (a FIFO swapped in after listing would block the open).
    """
    try:
        if "://" not in url:
            return _open_local(url)
        return fsspec.open(url, "rb").open()  # type: ignore[no-any-return]
    except FileNotFoundError:
        raise ReaderError(url, "file not found (was it moved or deleted after listing?)") from None
    except PermissionError:
        raise ReaderError(url, "permission denied; check the file's permissions") from None
    except IsADirectoryError:
        raise ReaderError(url, "is a directory, not a file") from None
    except OSError as e:
        raise ReaderError(url, f"cannot open: {e}") from e


def _open_local(path: str) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ReaderError(path, "is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise ReaderError(path, "not a regular file (a FIFO, socket or device); inputs must be regular files")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _raw_blocks(f: BinaryIO, url: str, block_size: int) -> Iterator[bytes]:
    while True:
        try:
            block = f.read(block_size)
        except OSError as e:
            raise ReaderError(url, f"read failed: {e}") from e
        if not block:
            return
        yield block


def iter_blocks(url: str, compression: Compression, *, block_size: int | None = None) -> Iterator[bytes]:
    """The file's content (decompressed) as a sequence of non-empty blocks of about `block_size` bytes.

    Raises ReaderError (without a line) when the file cannot be read, is corrupt, or is truncated; blocks
    yielded before that are correct data. The default size is read at call time (tests shrink it).
    """
    block_size = block_size or BLOCK_SIZE
    with open_binary(url) as f:
        raw = _raw_blocks(f, url, block_size)
        if compression is Compression.NONE:
            yield from raw
        elif compression is Compression.GZIP:
            yield from _decompress(raw, url, "gzip", lambda: zlib.decompressobj(wbits=31), _GZIP_FEED,
                                   block_size, zero_padding=True)
        else:
            dctx = zstandard.ZstdDecompressor()
            yield from _decompress(raw, url, "zstd", dctx.decompressobj, _ZSTD_FEED, block_size,
                                   zero_padding=False)


def _decompress(raws: Iterator[bytes], url: str, kind: str, new: Callable[[], Any], feed: int,
                block_size: int, *, zero_padding: bool) -> Iterator[bytes]:
    """Run members/frames back to back until the input ends; the input must end on a member boundary."""
    d: Any = None
    out: list[bytes] = []
    out_len = 0
    empty = True
    for raw in raws:
        empty = False
        view = memoryview(raw)
        pos, n = 0, len(raw)
        while pos < n:
            if d is None:
                if zero_padding and raw[pos] == 0:  # gzip files may be padded with zeros after the last member
                    pos = n - len(raw[pos:].lstrip(b"\0"))
                    continue
                d = new()
            piece = view[pos:pos + feed]
            pos += len(piece)
            try:
                chunk = d.decompress(piece)
            except (zlib.error, zstandard.ZstdError) as e:
                raise ReaderError(url, f"corrupt {kind} data ({e}); {_FIX}") from None
            if chunk:
                out.append(chunk)
                out_len += len(chunk)
                if out_len >= block_size:
                    yield b"".join(out)
                    out, out_len = [], 0
            if d.eof:
                rest = d.unused_data
                d = None
                if rest:
                    raw = rest + raw[pos:]
                    view = memoryview(raw)
                    pos, n = 0, len(raw)
    if d is not None:
        try:
            tail = d.flush()
        except (zlib.error, zstandard.ZstdError) as e:
            raise ReaderError(url, f"corrupt {kind} data ({e}); {_FIX}") from None
        if tail:
            out.append(tail)
    if out:
        yield b"".join(out)
    if empty:
        raise ReaderError(url, f"empty file (0 bytes) is not valid {kind} data; {_FIX}")
    if d is not None and not d.eof:
        raise ReaderError(url, f"truncated {kind} stream: the file ends inside compressed data; {_FIX}")
