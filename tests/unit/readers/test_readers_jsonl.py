"""JSON-lines reader: records, line numbering, per-record errors, fields and ids."""

from __future__ import annotations

import json

import pytest
from reader_testutil import read_all, texts

from shardkit.errors import ReaderError
from shardkit.readers import ReaderConfig, Record, jsonl, read_records
from shardkit.sources import InputFile


def lines(*objs: object) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def test_reads_text_field_in_order(make_file):
    f = make_file(lines({"text": "a"}, {"text": "b"}, {"text": "c", "other": 1}))
    recs = read_all(f)
    assert texts(recs) == ["a", "b", "c"]
    assert [r.index for r in recs] == [0, 1, 2]
    assert [r.location for r in recs] == [f"{f.url}:1", f"{f.url}:2", f"{f.url}:3"]
    assert all(r.error is None and r.doc_id is None for r in recs)
    assert recs[0] == Record(index=0, text="a", doc_id=None, error=None, location=f"{f.url}:1")


@pytest.mark.parametrize("ext", [".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".jsonl.zst",
                                 ".json.zst", ".jsonl.zstd", ".ndjson.gz"])
def test_every_jsonl_extension(make_file, ext):
    f = make_file(lines({"text": "x"}, {"text": "y"}), name="in" + ext)
    assert texts(read_all(f)) == ["x", "y"]


def test_blank_lines_are_counted_not_yielded(make_file):
    f = make_file(b'\n{"text": "a"}\n   \n\t\r\n{"text": "b"}\n\n')
    recs = read_all(f)
    assert [(r.index, r.text) for r in recs] == [(1, "a"), (4, "b")]
    assert recs[1].location.endswith(":5")


def test_crlf_and_final_line_without_newline(make_file):
    f = make_file(b'{"text": "a\\r\\nb"}\r\n{"text": "c"}\r\n{"text": "d"}')
    assert texts(read_all(f)) == ["a\r\nb", "c", "d"]
    f = make_file(b'{"text": "a"}\n{"text": "d"}\r')
    assert texts(read_all(f)) == ["a", "d"]


def test_surrounding_whitespace_is_allowed(make_file):
    f = make_file(b'  {"text": "a"}  \n\t{"text": "b"}\n')
    assert texts(read_all(f)) == ["a", "b"]


def test_leading_bom_is_dropped(make_file, monkeypatch):
    f = make_file(b'\xef\xbb\xbf{"text": "a"}\n{"text": "b"}\n')
    assert texts(read_all(f)) == ["a", "b"]
    monkeypatch.setattr("shardkit.readers.compression.BLOCK_SIZE", 1)
    assert texts(read_all(f)) == ["a", "b"]
    assert texts(read_all(f, start=1)) == ["b"]


def test_empty_text_is_a_normal_record(make_file):
    [rec] = read_all(make_file(lines({"text": ""})))
    assert rec.text == "" and rec.error is None


def test_empty_file_has_no_records(make_file):
    assert read_all(make_file(b"")) == []
    assert read_all(make_file(b"", name="e.jsonl.gz")) == []


def test_unicode_text(make_file):
    objs = [{"text": "héllo wörld ✓"}, {"text": "日本語"}, {"text": "emoji 😀"}]
    data = b"".join(json.dumps(o, ensure_ascii=False).encode() + b"\n" for o in objs)
    assert texts(read_all(make_file(data))) == [o["text"] for o in objs]
    assert texts(read_all(make_file(lines(*objs)))) == [o["text"] for o in objs]  # \u escapes, surrogate pair


def test_per_record_errors_keep_going_with_right_lines(make_file):
    data = (b'{"text": "ok1"}\n'
            b'{"text": "x" "y"}\n'  # 2: bad JSON
            b'[1, 2]\n'  # 3: not an object
            b'{"body": "x"}\n'  # 4: missing field
            b'{"text": 5}\n'  # 5: not a string
            b'{"text": null}\n'  # 6: null
            b'{"text": "bad \xff byte"}\n'  # 7: invalid UTF-8
            b'{"text": "ok2"}\n'
            b'"just a string"\n'  # 9
            b'{"text": "a"} {"text": "b"}\n'  # 10: extra data
            b'{"text": "ok3"}')
    recs = read_all(make_file(data))
    got = {int(r.location.rsplit(":", 1)[1]): (r.text, r.error) for r in recs}
    assert [r.index + 1 for r in recs] == list(range(1, 12))
    assert got[1] == ("ok1", None) and got[8] == ("ok2", None) and got[11] == ("ok3", None)
    assert got[2] == (None, "invalid JSON: Expecting ',' delimiter (col 14)")
    assert got[3][0] is None and got[3][1].startswith("top-level value is not an object (got array); a file that is "
                                                      "one JSON array converts to JSON lines with: jq -c")
    assert got[4] == (None, "missing field 'text' (the record has fields body; did you mean --text-field body?)")
    assert got[5] == (None, "field 'text' is not a string (got int)")
    assert got[6] == (None, "field 'text' is null")
    assert got[7][0] is None and got[7][1].startswith("invalid UTF-8 at byte 14 ")
    assert "--encoding-errors replace" in got[7][1]
    assert got[9] == (None, "top-level value is not an object (got string)")
    assert got[10][1].startswith("invalid JSON: Extra data")


def test_invalid_utf8_replace(make_file):
    f = make_file(b'{"text": "bad \xff byte"}\n{"text": "ok"}\n')
    recs = read_all(f, encoding_errors="replace")
    assert texts(recs) == ["bad \ufffd byte", "ok"]


def test_unpaired_surrogate_escape(make_file):
    f = make_file(b'{"text": "lone \\ud800 x"}\n{"text": "pair \\ud83d\\ude00"}\n')
    strict = read_all(f)
    assert strict[0].text is None and "surrogate" in strict[0].error
    assert strict[1].text == "pair 😀"
    assert texts(read_all(f, encoding_errors="replace")) == ["lone \ufffd x", "pair 😀"]


def test_nested_dotted_field_and_id(make_file):
    f = make_file(lines(
        {"meta": {"body": "a", "id": 7}, "uid": "u1"},
        {"meta": {"body": "b"}, "uid": 3},
        {"meta": "flat", "uid": None},
        {"meta": {"body": 1.5}},
        {"other": 1},
    ))
    recs = read_all(f, text_field="meta.body", id_field="uid")
    assert [(r.text, r.doc_id) for r in recs[:2]] == [("a", "u1"), ("b", "3")]
    assert recs[2].error == "missing field 'meta.body' ('meta' is not an object, got string)"
    assert recs[3].error == "field 'meta.body' is not a string (got float)"
    assert recs[4].error == "missing field 'meta.body' (the record has fields other)"
    assert [r.doc_id for r in read_all(f, text_field="meta.body", id_field="meta.id")[:2]] == ["7", None]


def test_id_values_are_stringified(make_file):
    f = make_file(lines({"text": "a", "id": "s"}, {"text": "b", "id": 12}, {"text": "c", "id": True},
                        {"text": "d", "id": [1, "x"]}, {"text": "e"}, {"text": "f", "id": None},
                        {"text": "g", "id": 2.5}))
    assert [r.doc_id for r in read_all(f, id_field="id")] == ["s", "12", "true", '[1,"x"]', None, None, "2.5"]


def test_json_array_file_gets_a_hint(make_file):
    f = make_file(b'[\n  {"text": "a"},\n  {"text": "b"}\n]\n', name="arr.json")
    with pytest.raises(ReaderError, match="JSON array") as e:
        read_all(f)
    assert e.value.path == f.url and e.value.line == 1


def test_line_too_long_is_a_file_error(make_file, monkeypatch):
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr("shardkit.readers.compression.BLOCK_SIZE", 16)
    f = make_file(lines({"text": "a"}, {"text": "b" * 200}, {"text": "c"}))
    got: list[Record] = []
    with pytest.raises(ReaderError, match="longer than") as e:
        got.extend(read_records(f, ReaderConfig()))
    assert e.value.line == 2
    assert texts(got) == ["a"]


def test_small_blocks_give_the_same_records(make_file, monkeypatch):
    data = lines(*({"text": f"doc {i} " + "x" * (i % 37)} for i in range(300))) + b"\n\n" + b'{"text": "end"}'
    f = make_file(data)
    expected = read_all(f)
    for size in (1, 7, 64, 1000):
        monkeypatch.setattr("shardkit.readers.compression.BLOCK_SIZE", size)
        assert read_all(f) == expected


def test_missing_file_is_a_reader_error(tmp_path):
    f = InputFile(url=str(tmp_path / "gone.jsonl"), size=0, source="x")
    with pytest.raises(ReaderError, match="not found") as e:
        read_all(f)
    assert e.value.path == f.url
