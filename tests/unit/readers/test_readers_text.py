"""Plain-text reader: the whole file is one document."""

from __future__ import annotations

import gzip

import pytest
from reader_testutil import read_all

from shardkit.errors import ReaderError
from shardkit.readers import text as text_reader


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz", "a.txt.zst", "a.txt.zstd"])
def test_whole_file_is_one_record(make_file, name):
    body = "line one\r\nline two\n\n  indented — ünïcode\n"
    f = make_file(body.encode(), name=name)
    [rec] = read_all(f)
    assert (rec.index, rec.text, rec.doc_id, rec.error, rec.location) == (0, body, None, None, f.url)


def test_bom_is_stripped_and_nothing_else(make_file):
    [rec] = read_all(make_file(b"\xef\xbb\xbf\xef\xbb\xbfhi\r\n", name="bom.txt"))
    assert rec.text == "\ufeffhi\r\n"  # only the leading BOM goes


def test_empty_file_is_an_empty_document(make_file):
    [rec] = read_all(make_file(b"", name="e.txt"))
    assert rec.text == "" and rec.error is None


def test_invalid_utf8(make_file):
    f = make_file(b"\xef\xbb\xbfabc\xffdef", name="b.txt")
    [rec] = read_all(f)
    assert rec.text is None
    assert rec.error == "invalid UTF-8 at byte 6 (try --encoding-errors replace)"
    [rec] = read_all(f, encoding_errors="replace")
    assert rec.text == "abc\ufffddef"


def test_start_past_the_document(make_file):
    assert read_all(make_file(b"x", name="s.txt"), start=1) == []


def test_too_large_is_refused(make_file, monkeypatch):
    monkeypatch.setattr(text_reader, "MAX_TEXT_BYTES", 10)
    for name in ("big.txt", "big.txt.gz"):
        with pytest.raises(ReaderError, match="larger than"):
            read_all(make_file(b"x" * 11, name=name))
    assert read_all(make_file(b"x" * 10, name="ok.txt"))[0].text == "x" * 10


def test_truncated_gz_text(make_file):
    blob = gzip.compress(b"some text " * 1000)
    f = make_file(blob[: len(blob) - 5], name="t.txt.gz", raw=True)
    with pytest.raises(ReaderError, match="truncated gzip") as e:
        read_all(f)
    assert e.value.path == f.url
