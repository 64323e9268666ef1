"""Workers reading their own units of the input: the merged stream equals a single reader's, exactly.

The units are read in this process here (`read_unit` is what a worker runs); what is compared is every
document's file, record number, location, id and length, and every skip's place among the documents,
file, location and reason, and every file error handed to the policy: for any unit size, any resume
position, records and blank or bad lines crossing unit boundaries, and compressed inputs (never split).
"""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.pack import units
from shardkit.pack.chunks import iter_chunks
from shardkit.pack.slices import read_slice_records
from shardkit.pack.units import Unit, UnitMerger, read_unit, work_items
from shardkit.readers import ReaderConfig
from shardkit.sources import list_inputs

line_st = st.one_of(
    st.builds(lambda t: json.dumps({"text": t, "id": len(t)}), st.text(min_size=0, max_size=60)),
    st.sampled_from(["", "   ", "{broken", "[1, 2]", "{", '{"text": 5}', '{"other": "x"}', "\ufeff{}",
                     '{"text": "\\ud800"}', '{"text": "caf\xe9"}']),
)


def _events(stream, merger=None, reader=None):
    out = []
    for item in stream:
        if isinstance(item, Unit):
            texts, result = read_unit(item, reader)
            result.lengths = np.asarray([len(t) for t in texts], dtype=np.int64)
            chunk, _, lengths = merger.chunk(item, result)
            chars = list(chunk.doc_chars())
        else:
            chunk = item
            chars = [len(t) for t in chunk.texts]
        skips = iter(chunk.skips)
        pending = next(skips, None)
        for d in range(len(chunk.doc_file) + 1):
            while pending is not None and pending.before_doc <= d:
                out.append(("skip", pending.file, pending.location, pending.reason))
                pending = next(skips, None)
            if d < len(chunk.doc_file):
                out.append(("doc", chunk.doc_file[d], chunk.doc_record[d], chunk.doc_locations[d], chunk.ids[d],
                            int(chars[d])))
    return out


def _both(files, reader, start_file=0, start_record=0):
    errors_single, errors_split = [], []
    single = _events(iter_chunks(files, reader, start_file=start_file, start_record=start_record,
                                 on_file_error=lambda e: errors_single.append(str(e)), read=read_slice_records))

    def on_split(e):
        errors_split.append(str(e))

    split = _events(work_items(files, reader, start_file=start_file, start_record=start_record,
                               on_file_error=on_split, read=read_slice_records), UnitMerger(on_split), reader)
    return single, split, errors_single, errors_split


def _write_inputs(tmp_path, files_lines, eol, final_eol, bom):
    src = tmp_path / "in"
    src.mkdir()
    for k, lines in enumerate(files_lines):
        body = eol.join(lines) + (eol if final_eol and lines else "")
        data = (b"\xef\xbb\xbf" if bom else b"") + body.encode("utf-8", "surrogatepass")
        if k == 1:  # the second file is compressed: read whole by the parent, between split files
            (src / f"{k}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (src / f"{k}.jsonl").write_bytes(data)
    return src


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(line_st, max_size=25), min_size=1, max_size=3), st.sampled_from(["\n", "\r\n"]),
       st.booleans(), st.booleans(), st.integers(1, 300), st.integers(0, 3), st.integers(0, 30),
       st.booleans())
def test_unit_reading_equals_a_single_reader(tmp_path_factory, monkeypatch, files_lines, eol, final_eol, bom,
                                             unit_bytes, start_file, start_record, with_ids):
    tmp_path = tmp_path_factory.mktemp("u")
    monkeypatch.setattr(units, "UNIT_BYTES", unit_bytes)
    src = _write_inputs(tmp_path, files_lines, eol, final_eol, bom)
    files = list_inputs([str(src)])
    reader = ReaderConfig(id_field="id" if with_ids else None)
    start_file = min(start_file, len(files) - 1)
    single, split, e1, e2 = _both(files, reader, start_file, start_record if start_file < len(files) else 0)
    assert split == single
    assert e2 == e1


def test_records_crossing_unit_boundaries_keep_their_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(units, "UNIT_BYTES", 64)
    path = tmp_path / "a.jsonl"
    lines = [json.dumps({"text": "x" * (k * 37 % 150)}) for k in range(40)]
    lines[17] = "{not json"
    lines[30] = ""
    path.write_text("\n".join(lines) + "\n")
    files = list_inputs([str(path)])
    stream = list(work_items(files, ReaderConfig(), start_file=0, start_record=0, on_file_error=None,
                             read=read_slice_records))
    assert len(stream) > 20 and all(isinstance(u, Unit) for u in stream)  # really split, many times
    single, split, _, _ = _both(files, ReaderConfig())
    assert split == single
    bad = [e for e in split if e[0] == "skip" and "invalid JSON" in e[3]]
    assert bad and bad[0][2] == f"{path}:18"
    empty = [e for e in split if e[0] == "skip" and e[3] == "empty document"]
    assert empty[0][2] == f"{path}:1"  # {"text": ""}


def test_compressed_and_small_inputs_are_read_by_the_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(units, "UNIT_BYTES", 100)
    body = "".join(json.dumps({"text": f"doc {k} " * 20}) + "\n" for k in range(50)).encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "b.jsonl.zst").write_bytes(__import__("zstandard").ZstdCompressor().compress(body))
    (tmp_path / "c.jsonl").write_bytes(body[:90])  # under one unit
    (tmp_path / "d.txt").write_text("plain text " * 100)
    files = list_inputs([str(tmp_path)])
    stream = list(work_items(files, ReaderConfig(), start_file=0, start_record=0, on_file_error=None,
                             read=read_slice_records))
    assert not any(isinstance(u, Unit) for u in stream)


def _parquet(path, texts, row_group_size, compression="snappy"):
    pq.write_table(pa.table({"text": texts}), path, row_group_size=row_group_size, compression=compression,
                   use_dictionary=False)


@pytest.mark.parametrize("unit_bytes", [1, 200, 500, 3000, 1 << 20])
def test_parquet_row_group_units_equal_a_single_reader(tmp_path, monkeypatch, unit_bytes):
    monkeypatch.setattr(units, "UNIT_BYTES", unit_bytes)
    texts = [None if k % 13 == 5 else ("" if k % 17 == 3 else f"row {k} " * (k % 9 + 1)) for k in range(300)]
    _parquet(tmp_path / "p.parquet", texts, 23)
    files = list_inputs([str(tmp_path / "p.parquet")])
    single, split, e1, e2 = _both(files, ReaderConfig())
    assert split == single and e2 == e1
    assert sum(e[0] == "doc" for e in split) == sum(1 for t in texts if t)
    meta = pq.read_metadata(tmp_path / "p.parquet")
    biggest = max(meta.row_group(g).column(0).total_compressed_size for g in range(meta.num_row_groups))
    if unit_bytes < files[0].size and biggest <= units.MAX_GROUP_FACTOR * unit_bytes:
        stream = list(work_items(files, ReaderConfig(), start_file=0, start_record=0, on_file_error=None,
                                 read=read_slice_records))
        assert len(stream) > 1 and all(isinstance(u, Unit) for u in stream)


def test_a_file_error_mid_file_ends_the_file_where_a_single_reader_stops(tmp_path, monkeypatch):
    """A corrupt row group in the middle: its unit reports the error, the file's later units are dropped."""
    path = tmp_path / "p.parquet"
    texts = [f"row {k} " * 40 for k in range(200)]
    _parquet(path, texts, 20, compression="zstd")
    meta = pq.read_metadata(path)
    biggest = max(meta.row_group(g).column(0).total_compressed_size for g in range(meta.num_row_groups))
    monkeypatch.setattr(units, "UNIT_BYTES", biggest)  # one row group per unit
    col = meta.row_group(5).column(0)
    data = bytearray(path.read_bytes())
    a, b = col.data_page_offset + 40, col.data_page_offset + col.total_compressed_size
    data[a:b] = b"\xff" * (b - a)  # the compressed page body: zstd cannot decode it
    path.write_bytes(bytes(data))
    (tmp_path / "q.jsonl").write_text(json.dumps({"text": "after"}) + "\n")
    files = list_inputs([str(tmp_path)])
    assert sum(isinstance(u, Unit) for u in work_items(files, ReaderConfig(), start_file=0, start_record=0,
                                                       on_file_error=None, read=read_slice_records)) >= 5
    single, split, e1, e2 = _both(files, ReaderConfig())
    assert e1, "the corruption must be a file error for this test to mean anything"
    assert split == single and e2 == e1
    assert split[-1][0] == "doc" and split[-1][3].endswith("q.jsonl:1")


def test_parquet_with_row_groups_too_large_for_a_unit_is_streamed_by_the_parent(tmp_path, monkeypatch):
    """A worker holds a unit's texts at once, so memory stays flat only if no row group is huge."""
    texts = [f"row {k} " * 50 for k in range(400)]
    _parquet(tmp_path / "p.parquet", texts, 100, compression="none")
    files = list_inputs([str(tmp_path / "p.parquet")])
    meta = pq.read_metadata(tmp_path / "p.parquet")
    group = max(meta.row_group(g).column(0).total_compressed_size for g in range(meta.num_row_groups))
    monkeypatch.setattr(units, "UNIT_BYTES", group // units.MAX_GROUP_FACTOR - 1)
    stream = list(work_items(files, ReaderConfig(), start_file=0, start_record=0, on_file_error=None,
                             read=read_slice_records))
    assert stream and not any(isinstance(u, Unit) for u in stream)
    monkeypatch.setattr(units, "UNIT_BYTES", group // units.MAX_GROUP_FACTOR + 1)
    stream = list(work_items(files, ReaderConfig(), start_file=0, start_record=0, on_file_error=None,
                             read=read_slice_records))
    assert len(stream) > 1 and all(isinstance(u, Unit) for u in stream)
