"""`shardkit pack` on bad input: skip counts and reports; fail stops with one line naming file:line."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from click.testing import CliRunner

from cli.main import cli
from shardkit import open_dataset


def _run(*args):
    return CliRunner().invoke(cli, ["pack", *map(str, args), "--workers", "1", "--quiet", *([] if any(str(a) in ("-t", "--tokenizer") for a in args) else ["-t", "bytes"])])


@pytest.fixture()
def bad_inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    lines = [json.dumps({"text": "good one"}), "{broken json", json.dumps({"body": "no text field"}),
             json.dumps({"text": 42}), json.dumps({"text": ""}), json.dumps({"text": "good two"})]
    (d / "a.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "bad \xff utf8"}\n')
    return d


def test_skip_policy_counts_and_reports_locations(bad_inputs, tmp_path):
    r = _run(bad_inputs, "-o", tmp_path / "ds", "--max-skip-fraction", "1")
    assert r.exit_code == 0, r.output
    assert "skipped 5 record(s)" in r.output
    for line in (2, 3, 4, 5, 7):
        assert f"a.jsonl:{line}" in r.output or line == 7  # first five are listed
    ds = open_dataset(tmp_path / "ds")
    assert ds.num_docs == 2
    sk = ds.manifest.stats["skipped"]
    assert sk["count"] == 5
    assert [e["location"].rsplit(":", 1)[1] for e in sk["examples"]] == ["2", "3", "4", "5", "7"]


def test_fail_policy_one_line_exit_1(bad_inputs, tmp_path):
    r = _run(bad_inputs, "-o", tmp_path / "ds", "--on-error", "fail")
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    msg = r.output.strip()
    assert len(msg.splitlines()) == 1 and "a.jsonl:2" in msg and "JSON" in msg
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_truncated_gzip_and_zstd_are_reported(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    body = "".join(json.dumps({"text": f"doc {i} " * 50}) + "\n" for i in range(500)).encode()
    (d / "g.jsonl.gz").write_bytes(gzip.compress(body)[:-300])
    (d / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body)[:-300])
    r = _run(d, "-o", tmp_path / "ds", "--max-skip-fraction", "1")
    assert r.exit_code == 0, r.output
    sk = open_dataset(tmp_path / "ds").manifest.stats["skipped"]
    assert sk["by_reason"].get("file error", 0) == 2
    r = _run(d / "g.jsonl.gz", "-o", tmp_path / "ds2", "--on-error", "fail")
    assert r.exit_code == 1 and "g.jsonl.gz" in r.output and "Traceback" not in r.output


def test_corrupt_parquet(tmp_path):
    pq.write_table(pa.table({"text": ["a b c"] * 1000}), tmp_path / "p.parquet", row_group_size=100)
    raw = bytearray((tmp_path / "p.parquet").read_bytes())
    (tmp_path / "p.parquet").write_bytes(bytes(raw[: len(raw) // 2]))
    r = _run(tmp_path / "p.parquet", "-o", tmp_path / "ds", "--on-error", "fail")
    assert r.exit_code == 1 and "p.parquet" in r.output and "Traceback" not in r.output


def test_unknown_extension_and_unreadable_path(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    r = _run(tmp_path / "x.csv", "-o", tmp_path / "ds")
    assert r.exit_code == 1 and "x.csv" in r.output and "Traceback" not in r.output
    r = _run(tmp_path / "missing" / "*.jsonl", "-o", tmp_path / "ds")
    assert r.exit_code == 1 and "no input files" in r.output


def test_tokenizer_file_that_does_not_load(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    r = _run(tmp_path / "a.jsonl", "-o", tmp_path / "ds", "--tokenizer", tmp_path / "tokenizer.json")
    assert r.exit_code == 1 and "tokenizer.json" in r.output and "Traceback" not in r.output


def test_document_longer_than_index_format_allows(tmp_path, monkeypatch):
    import shardkit.pack.driver as driver
    monkeypatch.setattr(driver, "MAX_DOC_TOKENS", 50)
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in ["short", "x" * 100, "ok"]) + "\n")
    r = _run(tmp_path / "a.jsonl", "-o", tmp_path / "ds", "--max-skip-fraction", "1")
    assert r.exit_code == 0 and "exceeds the index format" in r.output and "a.jsonl:2" in r.output
    assert open_dataset(tmp_path / "ds").num_docs == 2
