"""`shardkit verify`, `inspect` and `show`: output, JSON, exit codes 0 / 1 / 2, no tracebacks."""

import builtins
import json
import os

import pytest
from click.testing import CliRunner
from unit.verify.verify_testutil import build_dataset, flip_bit, texts

from cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture()
def ds(tmp_path):
    build_dataset(tmp_path / "ds", n_docs=40, shard_tokens=300, block_size=128)
    return tmp_path / "ds"


@pytest.mark.parametrize("flags", [[], ["--quick"], ["--deep", "--decode-sample", "2"], ["-j", "1"]])
def test_clean_verify_exits_0(ds, flags):
    r = run("verify", ds, "-q", *flags)
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("verdict: OK")
    assert "shard(s) OK" in r.output


def test_corruption_is_a_table_row_and_exit_1(ds):
    flip_bit(ds / "shard-00001.bin", 200, 3)
    (ds / "shard-00002.idx").unlink()
    r = run("verify", ds)
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    lines = r.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SHARD"))
    rows = lines[header + 1:header + 3]
    assert rows[0].split()[:2] == ["shard-00001", "checksum"] and "bytes [128, 256)" in rows[0]
    assert rows[1].split()[:2] == ["shard-00002", "missing"]
    assert "shard(s) OK, 2 with problems" in r.output
    assert lines[-1].startswith("verdict: CORRUPT — 2 problem(s) in 2 of")


def test_json_report(ds):
    flip_bit(ds / "shard-00000.bin", 0, 0)
    r = run("verify", ds, "--json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["verdict"] == "corrupt" and doc["bad_shards"] == ["shard-00000"]
    [p] = doc["problems"]
    assert p["byte_range"] == [0, 128] and p["file"] == "shard-00000.bin" and p["check"] == "checksum"


def test_unfinished_pack_is_incomplete_exit_1(tmp_path):
    (tmp_path / ".shardkit-journal.jsonl").write_text("")
    r = run("verify", tmp_path)
    assert r.exit_code == 1
    assert "INCOMPLETE" in r.output and "CORRUPT" not in r.output
    assert json.loads(run("verify", tmp_path, "--json").output)["verdict"] == "incomplete"


def test_bad_manifest_is_reported_not_raised(ds):
    (ds / "manifest.json").write_bytes(b"{not json")
    r = run("verify", ds)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "(dataset)" in r.output and "manifest" in r.output and "not valid JSON" in r.output


@pytest.mark.parametrize("args", [["--quick", "--deep"], ["--jobs", "0"], ["--decode-sample", "-1"]])
def test_usage_errors_exit_2(ds, args):
    assert run("verify", ds, *args).exit_code == 2


def test_missing_path_is_a_usage_error(tmp_path):
    assert run("verify", tmp_path / "nope").exit_code == 2
    assert run("inspect", tmp_path / "nope").exit_code == 2


def test_inspect_text_and_json(ds):
    r = run("inspect", ds)
    assert r.exit_code == 0, r.output
    for word in ("tokenizer  bytes", "dtype      uint16", "docs       40", "p50", "p99", "histogram", "█",
                 "corpus/*.txt"):
        assert word in r.output
    doc = json.loads(run("inspect", ds, "--json").output)
    assert doc["docs"] == 40 and doc["sources"][0]["share"] == 1.0
    assert sum(doc["histogram"]) == 40 and doc["lengths"]["max"] >= doc["lengths"]["p99"]


def test_inspect_plot_writes_a_png(ds, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "summary.png"
    r = run("inspect", ds, "--plot", out)
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inspect_plot_without_matplotlib_names_the_extra(ds, tmp_path, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    r = run("inspect", ds, "--plot", tmp_path / "x.png")
    assert r.exit_code == 1
    assert "pip install 'shardkit[plot]'" in r.output and len(r.output.strip().splitlines()) == 1


def test_inspect_of_a_damaged_dataset_is_one_line_exit_1(ds):
    os.truncate(ds / "shard-00000.bin", 3)
    r = run("inspect", ds)
    assert r.exit_code == 1 and r.output.startswith("Error: ") and "Traceback" not in r.output


def test_show_prints_ids_and_text(ds):
    r = run("show", ds, 7)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("document 7: shard-") and 'id "doc-7"' in lines[0]
    assert lines[1].startswith("ids: ") and lines[1].endswith(" 256")
    assert texts(40)[7] + "<|endoftext|>" in r.output
    doc = json.loads(run("show", ds, 7, "--json").output)
    assert doc["tokens"][-1] == 256 and doc["id"] == "doc-7"
    r = run("show", ds, 7, "--max-tokens", "3", "--no-text")
    assert "first 3 shown" in r.output and "text:" not in r.output


def test_show_out_of_range_is_exit_1(ds):
    r = run("show", ds, 40)
    assert r.exit_code == 1 and "out of range" in r.output
    assert run("show", ds, -1).exit_code == 2


def test_verify_and_inspect_never_import_click():
    import subprocess
    import sys
    code = "import sys, shardkit.verify, shardkit.inspect; sys.exit(1 if 'click' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
