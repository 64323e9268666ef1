"""JSON Lines reader: one JSON object per line, plain or gzip/zstd-compressed.

Speed comes from working on ~1 MiB blocks of whole lines: one UTF-8 decode and one split per block, then the
C JSON scanner directly on each line (skipping `json.loads`' Python wrapper). Anything unusual on a line
(surrounding whitespace, a blank line, invalid JSON) falls back to `json.loads` for that line alone, so the
result and the error messages are exactly the standard library's.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Iterator
from typing import Any

from ..errors import ReaderError
from ..sources import InputFile, input_compression
from .compression import iter_blocks
from .fields import MISSING, FieldPath, stringify_id, type_name
from .records import ReaderConfig, Record, make_record

__all__ = ["MAX_LINE_BYTES", "read_jsonl"]

MAX_LINE_BYTES = 256 << 20  # a longer "line" is a corrupt file or a decompression bomb, not a document
_BOM = b"\xef\xbb\xbf"
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # (str, idx) -> (value, end)
_SURROGATE = re.compile("[\ud800-\udfff]")
_BLANK: Any = object()


def _line_blocks(blocks: Iterator[bytes], url: str) -> Iterator[tuple[bytes, bool]]:
    """(block, terminated) pairs where each block holds whole lines; only the very last may lack its b"\\n"."""
    pending: list[bytes] = []
    pending_len = 0
    for block in blocks:
        cut = block.rfind(b"\n")
        if cut < 0:
            pending.append(block)
            pending_len += len(block)
            if pending_len > MAX_LINE_BYTES:
                raise ReaderError(url, _too_long())
            continue
        if pending:
            if pending_len + block.find(b"\n") > MAX_LINE_BYTES:
                raise ReaderError(url, _too_long())
            pending.append(block[:cut + 1])
            yield b"".join(pending), True
            pending, pending_len = [], 0
        else:
            yield (block if cut == len(block) - 1 else block[:cut + 1]), True
        if cut + 1 < len(block):
            pending.append(block[cut + 1:])
            pending_len = len(block) - cut - 1
    if pending:
        yield b"".join(pending), False


def _too_long() -> str:
    return (f"a line is longer than {MAX_LINE_BYTES >> 20} MiB; this is not JSON lines (or is corrupt) - "
            "check the file, or split very large documents")


def _skip_lines(block: bytes, terminated: bool, skip: int) -> tuple[bytes, int]:
    """Drop up to `skip` leading lines of `block` by counting newlines only (no decoding, no parsing)."""
    lines = block.count(b"\n") + (0 if terminated else 1)
    if lines <= skip:
        return b"", lines
    pos = 0
    for _ in range(skip):
        pos = block.index(b"\n", pos) + 1
    return block[pos:], skip


def _decode_lines(block: bytes, terminated: bool, errors: str) -> tuple[list[str], dict[int, str] | None]:
    """The block's lines as str; lines that are not valid UTF-8 become "" with their message in `bad`."""
    try:
        s = block.decode("utf-8", errors)
        bad = None
        if "\r" in s:  # CRLF: a raw "\r" can only be JSON whitespace here, never inside a string
            s = s.replace("\r\n", "\n")
        lines = s.split("\n")
    except UnicodeDecodeError:
        lines, bad = [], {}
        pieces = block.split(b"\n")
        for k, raw in enumerate(pieces):
            if k < len(pieces) - 1 and raw.endswith(b"\r"):
                raw = raw[:-1]  # drop CRLF's "\r" as above: a line's error message must not depend on its block
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                lines.append("")
                bad[k] = f"invalid UTF-8 at byte {e.start} of the line (try --encoding-errors replace)"
    if terminated:
        lines.pop()
    return lines, bad


def _slow_parse(line: str) -> tuple[Any, str | None]:
    """Parse a line the fast path could not: (value, None), (_BLANK, None) or (None, error message)."""
    if not line.strip():
        return _BLANK, None
    try:
        return json.loads(line), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (col {e.colno})"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"
    except ValueError as e:  # e.g. an integer of more than 4,300 digits (sys.set_int_max_str_digits)
        return None, f"unreadable JSON value: {str(e)[:200]}"


def _array_hint(url: str, line: str) -> ReaderError | None:
    head = line.strip()
    if head.startswith("["):
        return ReaderError(url, "this looks like one JSON array, not JSON lines (one object per line); "
                           "convert it with: jq -c '.[]' FILE > FILE.jsonl", line=1)
    if head == "{":
        return ReaderError(url, "this looks like pretty-printed JSON, not JSON lines (one object per line); "
                           "convert it with: jq -c . FILE > FILE.jsonl", line=1)
    return None


class _LineParser:
    """The careful path for any line the fast loop does not take: blank, odd, invalid or bad records."""

    def __init__(self, url: str, config: ReaderConfig) -> None:
        self.url = url
        self.field = FieldPath(config.text_field)
        self.id_path = FieldPath(config.id_field) if config.id_field else None
        self.replace = config.encoding_errors == "replace"

    def record(self, i: int, line: str, bad_utf8: str | None) -> Record | None:
        """The record for line index `i`, or None for a blank line."""
        where = f"{self.url}:{i + 1}"
        if bad_utf8 is not None:
            return make_record(i, None, None, bad_utf8, where)
        obj, error = _slow_parse(line)
        if error is not None:
            if i == 0 and (hint := _array_hint(self.url, line)) is not None:
                raise hint
            return make_record(i, None, None, error, where)
        if obj is _BLANK:
            return None
        if type(obj) is not dict:
            hint = ("; a file that is one JSON array converts to JSON lines with: jq -c '.[]' FILE > FILE.jsonl"
                    if type(obj) is list else "")
            return make_record(i, None, None, f"top-level value is not an object (got {type_name(obj)}){hint}", where)
        text = self.field.get(obj)
        if type(text) is not str:
            return make_record(i, None, None, self.field.text_error(obj, text), where)
        if _SURROGATE.search(text) is not None:
            if not self.replace:
                return make_record(i, None, None, f"field {self.field.path!r} contains an unpaired surrogate "
                                   "escape, not valid Unicode (try --encoding-errors replace)", where)
            text = _SURROGATE.sub("\ufffd", text)
        try:
            doc_id = stringify_id(self.id_path.get(obj)) if self.id_path is not None else None
        except (ValueError, TypeError, RecursionError) as e:  # a record's value, never the whole file's problem
            return make_record(i, None, None, f"field {self.id_path.path!r} cannot be used as an id "  # type: ignore[union-attr]
                               f"({type(e).__name__}: {str(e)[:200]})", where)
        return make_record(i, text, doc_id, None, where)


def read_jsonl(file: InputFile, config: ReaderConfig, start: int = 0) -> Iterator[Record]:
    """Records of a JSON-lines file from record `start` on; blank lines are counted but not yielded."""
    url = file.url
    parser = _LineParser(url, config)
    field, id_path = parser.field, parser.id_path
    key = field.parts[0] if len(field.parts) == 1 else None
    id_key = id_path.parts[0] if id_path is not None and len(id_path.parts) == 1 else None
    scan, new, get_field, prefix = _scan, make_record, field.get, url + ":"
    index = 0  # number of the next line
    skip = start
    blocks = _line_blocks(iter_blocks(url, input_compression(url)), url)
    while True:
        try:
            block, terminated = next(blocks)
        except StopIteration:
            return
        except ReaderError as e:
            raise ReaderError(e.path, e.problem, line=index + 1) from e
        if index == 0 and block.startswith(_BOM):  # the first block always starts at the file's first byte
            block = block[3:]
        if skip:
            block, skipped = _skip_lines(block, terminated, skip)
            skip -= skipped
            index += skipped
            if not block:
                continue
        lines, bad = _decode_lines(block, terminated, config.decode_errors)
        base = index
        index += len(lines)
        surrogates = b"\\ud" in block or b"\\uD" in block  # escapes are ASCII: search the bytes
        for i, line in enumerate(lines, base):
            try:
                obj, end = scan(line, 0)
            except (StopIteration, ValueError, RecursionError):
                end = -1
            if end == len(line) and type(obj) is dict:
                text = obj.get(key, MISSING) if key is not None else get_field(obj)
                if type(text) is str and not (surrogates and _SURROGATE.search(text) is not None):
                    if id_path is None:
                        doc_id = None
                    else:
                        doc_id = obj.get(id_key) if id_key is not None else id_path.get(obj)
                        if type(doc_id) is not str:
                            try:
                                doc_id = stringify_id(MISSING if doc_id is None else doc_id)
                            except (ValueError, TypeError, RecursionError):
                                doc_id = _BLANK  # the careful path below makes it this record's error
                    if doc_id is not _BLANK:
                        yield new(i, text, doc_id, None, f"{prefix}{i + 1}")
                        continue
            rec = parser.record(i, line, bad.get(i - base) if bad else None)
            if rec is not None:
                yield rec
