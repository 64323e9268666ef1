"""Resuming with `start` gives exactly the tail of a full read, whatever the file, block size and format."""

from __future__ import annotations

import io
import itertools
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reader_testutil import compress

from shardkit.readers import ReaderConfig, read_records
from shardkit.sources import InputFile

_names = itertools.count()
_mem = fsspec.filesystem("memory")


def _memory_file(data: bytes, ext: str) -> InputFile:
    path = f"/shardkit-tests/start/{next(_names)}{ext}"
    with _mem.open(path, "wb") as f:
        f.write(data)
    url = "memory://" + path
    return InputFile(url=url, size=len(data), source=url)


def _read(f: InputFile, start: int = 0) -> list:
    return list(read_records(f, ReaderConfig(id_field="id"), start=start))


_line = st.one_of(
    st.builds(lambda t, i: json.dumps({"text": t, "id": i}, ensure_ascii=bool(i % 2)), st.text(max_size=30),
              st.integers(0, 99)),
    st.sampled_from(["", "  ", "\t", '{"text": 1}', '{"nope": "x"}', "[1]", '{"text"', '{"text": "a"} x', "null"]),
)


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(_line, max_size=40), crlf=st.booleans(), final_newline=st.booleans(),
       ext=st.sampled_from([".jsonl", ".jsonl.gz", ".jsonl.zst"]), block=st.sampled_from([1, 5, 64, 1 << 20]),
       data=st.data())
def test_jsonl_start_equals_tail_of_full_read(lines, crlf, final_newline, ext, block, data):
    nl = "\r\n" if crlf else "\n"
    text = nl.join(lines) + (nl if final_newline and lines else "")
    f = _memory_file(compress(text.encode(), ext), ext)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("shardkit.readers.compression.BLOCK_SIZE", block)
        full = _read(f)
        start = data.draw(st.integers(0, len(lines) + 2), label="start")
        assert _read(f, start) == [r for r in full if r.index >= start]
    # every non-blank line is one record at its own line number; blank ones are counted only
    assert [r.index for r in full] == [i for i, s in enumerate(lines) if s.strip()]
    for r in full:
        if r.error is None:
            obj = json.loads(lines[r.index])
            assert (r.text, r.doc_id) == (obj["text"], str(obj["id"]))
        else:
            assert r.text is None


def _parquet_file(rows: list[str | None], group: int) -> InputFile:
    table = pa.table({"text": pa.array(rows, pa.string()), "id": list(range(len(rows)))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, group))
    return _memory_file(buf.getvalue(), ".parquet")


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), st.text(max_size=10)), max_size=60), group=st.integers(1, 25),
       data=st.data())
def test_parquet_start_equals_tail_of_full_read(rows, group, data):
    f = _parquet_file(rows, group)
    full = _read(f)
    assert [r.text for r in full] == rows
    start = data.draw(st.integers(0, len(rows) + 2), label="start")
    assert _read(f, start) == full[start:]


def test_start_past_the_end_is_empty(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"text": "b"}\n')
    f = InputFile(url=str(p), size=p.stat().st_size, source=str(p))
    assert [r.text for r in _read(f, 1)] == ["b"]
    assert _read(f, 2) == [] and _read(f, 100) == []
