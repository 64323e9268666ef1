"""Parquet reader: columns, nested struct fields, nulls, row-group streaming and corrupt files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reader_testutil import input_file, read_all, texts

from shardkit.errors import ReaderError
from shardkit.readers import parquet


def write(tmp_path: Path, table: pa.Table, name: str = "t.parquet", **kw) -> Path:
    path = tmp_path / name
    pq.write_table(table, path, **kw)
    return path


def test_rows_in_order_with_ids(tmp_path):
    path = write(tmp_path, pa.table({"text": ["a", "b", "c"], "id": [10, 11, 12]}))
    f = input_file(path)
    recs = read_all(f, id_field="id")
    assert [(r.index, r.text, r.doc_id, r.error) for r in recs] == [
        (0, "a", "10", None), (1, "b", "11", None), (2, "c", "12", None)]
    assert recs[2].location == f"{f.url}:row 2"


def test_nulls_are_record_errors(tmp_path):
    f = input_file(write(tmp_path, pa.table({"text": ["a", None, ""]})))
    recs = read_all(f)
    assert [(r.text, r.error) for r in recs] == [("a", None), (None, "field 'text' is null"), ("", None)]


def test_nested_struct_field(tmp_path):
    meta = pa.array([{"body": "x", "n": {"deep": "d1"}}, None, {"body": None, "n": {"deep": "d3"}}])
    f = input_file(write(tmp_path, pa.table({"meta": meta, "k": ["k1", "k2", "k3"]})))
    recs = read_all(f, text_field="meta.body", id_field="k")
    assert [(r.text, r.doc_id) for r in recs] == [("x", "k1"), (None, None), (None, None)]
    assert recs[1].error == "field 'meta.body' is null"
    assert texts(read_all(f, text_field="meta.n.deep")) == ["d1", None, "d3"]


def test_string_types(tmp_path):
    table = pa.table({
        "large": pa.array(["a", "b"], pa.large_string()),
        "dict": pa.array(["x", "y"]).dictionary_encode(),
        "bin": pa.array([b"caf\xc3\xa9", b"bad\xff"], pa.binary()),
    })
    f = input_file(write(tmp_path, table))
    assert texts(read_all(f, text_field="large")) == ["a", "b"]
    assert texts(read_all(f, text_field="dict")) == ["x", "y"]
    recs = read_all(f, text_field="bin")
    assert recs[0].text == "café" and recs[1].text is None and "invalid UTF-8 at byte 3" in recs[1].error
    assert texts(read_all(f, text_field="bin", encoding_errors="replace")) == ["café", "bad\ufffd"]


def test_invalid_utf8_in_a_string_column(tmp_path):
    arr = pa.array([b"ok", b"no\xfe"], pa.binary()).view(pa.string())  # a writer that did not validate
    f = input_file(write(tmp_path, pa.table({"text": arr})))
    recs = read_all(f)
    assert recs[0].text == "ok" and recs[1].error.startswith("invalid UTF-8 at byte 2")


@pytest.mark.parametrize("field,match", [
    ("body", "no text column 'body': the file has columns text, meta"),
    ("meta.nope", "no text column 'meta.nope': struct 'meta' has columns a"),
    ("text.x", "column 'text' is string, not a struct"),
    ("meta", "has type struct"),
])
def test_bad_text_field_is_a_file_error(tmp_path, field, match):
    f = input_file(write(tmp_path, pa.table({"text": ["a"], "meta": [{"a": 1}]})))
    with pytest.raises(ReaderError, match=match) as e:
        read_all(f, text_field=field)
    assert e.value.path == f.url


def test_missing_id_column_is_a_file_error(tmp_path):
    f = input_file(write(tmp_path, pa.table({"text": ["a"]})))
    with pytest.raises(ReaderError, match="no id column 'uid'"):
        read_all(f, id_field="uid")


def test_streams_by_row_group_and_skips_groups_on_start(tmp_path, monkeypatch):
    rows = [f"doc {i}" for i in range(100)]
    f = input_file(write(tmp_path, pa.table({"text": rows}), row_group_size=30))
    assert pq.ParquetFile(f.url).metadata.num_row_groups == 4
    requested: list[list[int]] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *a, **kw):
        requested.append(list(kw["row_groups"]))
        return real(self, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    recs = read_all(f, start=65)
    assert [r.index for r in recs] == list(range(65, 100)) and texts(recs) == rows[65:]
    assert requested == [[2], [3]]  # groups 0 and 1 (rows 0-59) were never read
    requested.clear()
    assert texts(read_all(f)) == rows and requested == [[0], [1], [2], [3]]


def test_batches_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet, "BATCH_BYTES", 1000)
    rows = ["x" * 100 + str(i) for i in range(500)]
    f = input_file(write(tmp_path, pa.table({"text": rows})))
    assert texts(read_all(f)) == rows
    assert [r.index for r in read_all(f, start=123)] == list(range(123, 500))


def test_empty_parquet(tmp_path):
    f = input_file(write(tmp_path, pa.table({"text": pa.array([], pa.string())})))
    assert read_all(f) == []


def _good_parquet(tmp_path: Path) -> bytes:
    path = write(tmp_path, pa.table({"text": [f"document number {i}" * 5 for i in range(2000)]}),
                 name="good.parquet", row_group_size=500, write_page_checksum=True, compression="none")
    return path.read_bytes()


@pytest.mark.parametrize("how", ["cut_footer", "cut_half", "flip_footer", "flip_data", "not_parquet"])
def test_corrupt_parquet_is_a_reader_error(tmp_path, how):
    blob = bytearray(_good_parquet(tmp_path))
    if how == "cut_footer":
        blob = blob[:-10]
    elif how == "cut_half":
        blob = blob[: len(blob) // 2]
    elif how == "flip_footer":
        footer_len = int.from_bytes(blob[-8:-4], "little")
        for k in range(len(blob) - 8 - footer_len, len(blob) - 8, 3):
            blob[k] ^= 0xFF
    elif how == "flip_data":
        for k in range(len(blob) // 2, len(blob) // 2 + 64):
            blob[k] ^= 0xFF
    else:
        blob = bytearray(b'{"text": "I am JSON"}\n' * 10)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(blob))
    with pytest.raises(ReaderError) as e:
        read_all(input_file(bad))
    assert e.value.path == str(bad) and str(bad) in str(e.value)
    assert "remove it from the inputs" in e.value.problem


def test_text_and_id_from_the_same_struct(tmp_path):
    meta = pa.array([{"body": "x", "id": 1}, {"body": "y", "id": 2}])
    f = input_file(write(tmp_path, pa.table({"meta": meta})))
    assert [(r.text, r.doc_id) for r in read_all(f, text_field="meta.body", id_field="meta.id")] == [
        ("x", "1"), ("y", "2")]
    assert read_all(f, text_field="meta.body", id_field="meta")[0].doc_id == '{"body":"x","id":1}'
