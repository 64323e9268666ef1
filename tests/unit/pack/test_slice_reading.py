"""Reading a task's slices: each JSON-lines record (good or bad) and each Parquet row in exactly one task."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import ReaderError
from shardkit.pack.slices import layout_files, read_slice_records, slice_file
from shardkit.pack.tasks import Slice, SplitKind, TaskSpec, plan_tasks
from shardkit.readers import ReaderConfig, read_records
from shardkit.sources import InputFile, list_inputs

CFG = ReaderConfig()

line_st = st.one_of(
    st.builds(lambda t: json.dumps({"text": t}), st.text(min_size=0, max_size=40)),
    st.sampled_from(["", "   ", "{broken", "[1, 2]", "{", '{"text": 5}', '{"other": "x"}', "\ufeff{}"]),
)


def _records(recs):
    return [(r.text, r.error) for r in recs]


def _cuts(size, raw_cuts):
    return sorted({0, size, *(c % (size + 1) for c in raw_cuts)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(line_st, max_size=30), st.sampled_from(["\n", "\r\n"]), st.booleans(), st.booleans(),
       st.lists(st.integers(0, 10_000), max_size=6))
def test_byte_ranges_read_every_record_once(tmp_path, lines, eol, final_eol, bom, raw_cuts):
    body = eol.join(lines) + (eol if final_eol and lines else "")
    path = tmp_path / "f.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body.encode())
    f = InputFile(url=str(path), size=path.stat().st_size, source="src")
    try:
        whole = _records(read_records(f, CFG))
    except ReaderError:
        whole = None  # the whole file is refused (a JSON array at line 1): only the first range says so
    cuts = _cuts(f.size, raw_cuts)
    got, refused = [], False
    for a, b in zip(cuts, cuts[1:]):
        try:
            got += _records(read_slice_records(slice_file(Slice(0, SplitKind.BYTES, a, b, weight=b - a), f), CFG))
        except ReaderError as e:
            assert a == 0 and whole is None, e
            refused = True
    if whole is not None:
        assert got == whole
    else:
        assert refused


def test_locations_name_the_range_and_line(tmp_path):
    path = tmp_path / "f.jsonl"
    lines = [json.dumps({"text": "a" * 20}) for _ in range(10)]
    lines[7] = "{broken"
    path.write_text("\n".join(lines) + "\n")
    f = InputFile(url=str(path), size=path.stat().st_size, source="src")
    first = list(read_slice_records(slice_file(Slice(0, SplitKind.BYTES, 0, 50, weight=50), f), CFG))
    assert [r.location for r in first] == [f"{path}:1", f"{path}:2"]  # the start of the file keeps file:LINE
    rest = list(read_slice_records(slice_file(Slice(0, SplitKind.BYTES, 50, f.size, weight=f.size - 50), f), CFG))
    bad = [r for r in rest if r.error]
    assert [r.location for r in bad] == [f"{path}@50:6"]  # the 6th line starting at or after byte 50 is line 8
    assert len(first) + len(rest) == 10


def test_resume_inside_a_byte_range(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(100)))
    f = InputFile(url=str(path), size=path.stat().st_size, source="src")
    view = slice_file(Slice(0, SplitKind.BYTES, 300, 1200, weight=900), f)
    recs = list(read_slice_records(view, CFG))
    k = 7
    assert [r.text for r in read_slice_records(view, CFG, recs[k].index)] == [r.text for r in recs[k:]]


def test_parquet_row_groups_split_and_resume(tmp_path):
    path = tmp_path / "b.parquet"
    texts = [f"row {i} " + "z" * (i % 13) for i in range(250)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=30)
    files = list_inputs([str(path)])
    layouts = layout_files(files, granularity=100)
    assert layouts[0].kind is SplitKind.ROW_GROUPS and len(layouts[0].groups) == 9
    got = []
    for plan in plan_tasks(layouts, 4, granularity=100):
        for s in plan.slices:
            recs = list(read_slice_records(slice_file(s, files[0]), CFG))
            assert all(r.location == f"{path}:row {r.index}" for r in recs)
            if recs:  # resuming at a row inside the slice gives the rest of the slice
                mid = recs[len(recs) // 2].index
                assert [r.text for r in read_slice_records(slice_file(s, files[0]), CFG, mid)] == \
                    [r.text for r in recs if r.index >= mid]
            got += [r.text for r in recs]
    assert got == texts


def test_small_and_compressed_files_are_never_cut(tmp_path):
    import gzip
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' * 1000))
    (tmp_path / "b.txt").write_text("y" * 5000)
    (tmp_path / "c.jsonl").write_text('{"text": "x"}\n')
    kinds = [lay.kind for lay in layout_files(list_inputs([str(tmp_path)]), granularity=10)]
    assert kinds == [SplitKind.WHOLE, SplitKind.WHOLE, SplitKind.BYTES]


def test_unreadable_parquet_footer_is_left_whole(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all" * 100)
    lay = layout_files(list_inputs([str(tmp_path)]), granularity=10)[0]
    assert lay.kind is SplitKind.WHOLE


@pytest.mark.parametrize("n", [1, 2, 5, 13])
def test_task_spec_plans_agree_across_tasks(tmp_path, n):
    """Every task computes the same split from the same listing (no coordinator)."""
    from shardkit.pack.slices import plan_task
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps({"text": "w" * (i % 50)}) + "\n" for i in range(300)))
    files = list_inputs([str(tmp_path)])
    metas = [plan_task(TaskSpec(num_tasks=n, task_id=i, granularity=256), files)[1] for i in range(n)]
    assert len({m["plan"] for m in metas}) == 1
    assert [m["range"] for m in metas] == sorted(m["range"] for m in metas)
    texts = [r.text for i in range(n)
             for f in plan_task(TaskSpec(num_tasks=n, task_id=i, granularity=256), files)[0]
             for r in read_slice_records(f, CFG)]
    assert texts == [r.text for r in read_records(files[0], CFG)]
