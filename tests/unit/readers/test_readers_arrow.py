"""Hugging Face `save_to_disk` directories (Arrow IPC streams) as pack input, read with pyarrow only."""

import json

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner
from support.hf_layout import dataset_dict_dir, save_to_disk_dir

from cli.main import cli
from shardkit import open_dataset
from shardkit.errors import InputError, ReaderError
from shardkit.readers import ReaderConfig, read_records
from shardkit.sources import list_inputs

TEXTS = [f"row {i} " + "text " * (i % 7) for i in range(40)]


@pytest.fixture()
def hf_dir(tmp_path):
    table = pa.table({"id": list(range(40)), "text": TEXTS, "meta": [{"lang": "en"}] * 40})
    return save_to_disk_dir(tmp_path / "ds", table, shards=2, batch_rows=7)


def test_listing_takes_the_arrow_files_in_order_and_not_the_metadata(hf_dir):
    files = list_inputs([str(hf_dir)])
    assert [f.url.rsplit("/", 1)[1] for f in files] == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]


def test_records_rows_ids_and_resume(hf_dir):
    files = list_inputs([str(hf_dir)])
    cfg = ReaderConfig(id_field="id")
    recs = [r for f in files for r in read_records(f, cfg)]
    assert [r.text for r in recs] == TEXTS and [r.doc_id for r in recs][:3] == ["0", "1", "2"]
    assert recs[0].location.endswith("data-00000-of-00002.arrow:row 0")
    tail = list(read_records(files[0], cfg, start=9))  # inside the second batch of 7
    assert [r.text for r in tail] == TEXTS[9:20] and tail[0].index == 9


def test_missing_column_and_ipc_file_format(hf_dir, tmp_path):
    f = list_inputs([str(hf_dir)])[0]
    with pytest.raises(ReaderError, match="did you mean --text-field text"):
        list(read_records(f, ReaderConfig(text_field="txt")))
    path = tmp_path / "file-format.arrow"
    with ipc.new_file(str(path), pa.schema([("content", pa.string())])) as w:
        w.write_batch(pa.record_batch([pa.array(["a", None, "c"])], names=["content"]))
    recs = list(read_records(list_inputs([str(path)])[0], ReaderConfig(text_field="content")))
    assert [r.text for r in recs] == ["a", None, "c"] and recs[1].error == "field 'content' is null"
    (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(ReaderError, match="not a readable Arrow IPC"):
        list(read_records(list_inputs([str(tmp_path / "junk.arrow")])[0], ReaderConfig()))


def test_dataset_dict_asks_for_a_split(tmp_path):
    d = dataset_dict_dir(tmp_path / "dd", {"train": pa.table({"text": ["a"]}), "test": pa.table({"text": ["b"]})})
    with pytest.raises(InputError, match="name one split's directory"):
        list_inputs([str(d)])
    assert len(list_inputs([str(d / "train")])) == 1


def test_pack_cli_packs_a_saved_dataset(hf_dir, tmp_path):
    r = CliRunner().invoke(cli, ["pack", str(hf_dir), "-o", str(tmp_path / "out"), "-t", "bytes", "-q", "-w", "1",
                                 "--id-field", "id"])
    assert r.exit_code == 0, r.output
    ds = open_dataset(tmp_path / "out")
    assert ds.num_docs == 40
    assert bytes(ds.doc(5)[:-1].astype("uint8")).decode() == TEXTS[5]
    ids = (tmp_path / "out" / "shard-00000.ids.jsonl").read_text().splitlines()
    assert json.loads(ids[5]) == "5"


def test_truncated_or_damaged_arrow_is_a_reader_error_never_a_crash(hf_dir, tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    good = (hf_dir / "data-00000-of-00002.arrow").read_bytes()
    path = tmp_path / "x.arrow"

    @settings(max_examples=150, deadline=None)
    @given(st.integers(0, len(good)), st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)),
                                               max_size=3))
    def check(cut, flips):
        raw = bytearray(good[:cut])
        for at, value in flips:
            if at < len(raw):
                raw[at] = value
        path.write_bytes(bytes(raw))
        try:
            recs = list(read_records(list_inputs([str(path)])[0], ReaderConfig()))
        except ReaderError:
            return
        assert all(r.text is None or isinstance(r.text, str) for r in recs)

    check()


def test_invalid_utf8_in_a_string_column_is_per_row(tmp_path):
    col = pa.array([b"good", b"bad \xff byte", b"fine"], type=pa.binary()).view(pa.string())  # not validated
    path = tmp_path / "u.arrow"
    with ipc.new_stream(str(path), pa.schema([("text", pa.string())])) as w:
        w.write_batch(pa.record_batch([col], names=["text"]))
    f = list_inputs([str(path)])[0]
    strict = list(read_records(f, ReaderConfig()))
    assert [r.text for r in strict] == ["good", None, "fine"]
    assert strict[1].error.startswith("invalid UTF-8 at byte 4 of field 'text'")
    assert [r.text for r in read_records(f, ReaderConfig(encoding_errors="replace"))][1] == "bad \ufffd byte"


def test_a_damaged_column_name_is_a_reader_error(tmp_path):
    """Found by the property test above (a byte of the schema flipped into invalid UTF-8)."""
    import pyarrow as pa

    path = tmp_path / "t.arrow"
    table = pa.table({"text": ["a", "b"]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"text")
    raw[at] = 0x80  # the column name is no longer UTF-8
    path.write_bytes(bytes(raw))
    from shardkit.errors import ReaderError
    from shardkit.readers import ReaderConfig
    from shardkit.readers.arrow import read_arrow
    from shardkit.sources import InputFile

    with pytest.raises(ReaderError, match="not UTF-8"):
        list(read_arrow(InputFile(url=str(path), size=len(raw), source=str(path)), ReaderConfig()))
