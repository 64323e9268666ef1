"""What a new user meets in the first hour: no quiet data loss, reasons shown, config files, dry runs."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from support.paths import CORPUS, GPT2_JSON

from cli.main import cli
from shardkit import open_dataset

GUTENBERG = CORPUS / "gutenberg"
CP1252 = ("141.txt", "471-0.txt", "6944-0.txt")  # not valid UTF-8 (see ../shared/data/README.md)

needs_data = pytest.mark.skipif(not GUTENBERG.exists(), reason="needs ../shared/data")


def run(*args):
    return CliRunner().invoke(cli, [*map(str, args)])


@pytest.fixture()
def books(tmp_path):
    """Three cp1252 books among five UTF-8 ones (a small Gutenberg)."""
    d = tmp_path / "books"
    d.mkdir()
    for name in (*CP1252, "105.txt", "1342-0.txt", "158-0.txt", "244-0.txt", "1424-0.txt"):
        shutil.copy(GUTENBERG / name, d / name)
    return d


@needs_data
def test_invalid_utf8_books_are_not_lost_quietly(books, tmp_path):
    r = run("pack", books, "-o", tmp_path / "ds", "-t", "bytes", "-q", "-w", "1")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert "skip budget --max-skip-fraction 0.005" in r.output
    assert all(name in r.output for name in CP1252)
    assert "--encoding-errors replace" in r.output and "--encoding-errors skip" in r.output
    assert not (tmp_path / "ds" / "manifest.json").exists()
    # the suggested budget admits exactly this loss; the pack resumes and finishes with what it wrote
    need = r.output.split("re-run the same command with --max-skip-fraction ")[1].split()[0]
    r2 = run("pack", books, "-o", tmp_path / "ds", "-t", "bytes", "-q", "-w", "1", "--max-skip-fraction", need)
    assert r2.exit_code == 0, r2.output
    assert "resumed" in r2.output and "skipped 3 record(s)" in r2.output
    assert "3 file(s) yielded no document" in r2.output
    assert open_dataset(tmp_path / "ds").num_docs == 5


@needs_data
def test_encoding_errors_replace_and_skip(books, tmp_path):
    r = run("pack", books, "-o", tmp_path / "rep", "-t", "bytes", "-q", "-w", "1", "--encoding-errors", "replace")
    assert r.exit_code == 0, r.output
    assert "skipped 0 records" in r.output
    assert open_dataset(tmp_path / "rep").num_docs == 8
    r = run("pack", books, "-o", tmp_path / "skip", "-t", "bytes", "-q", "-w", "1", "--encoding-errors", "skip")
    assert r.exit_code == 0, r.output  # chosen: reported, not counted against the budget
    assert "skipped 3 record(s)" in r.output and "invalid UTF-8" in r.output
    ds = open_dataset(tmp_path / "skip")
    assert ds.num_docs == 5 and ds.manifest.stats["skipped"]["count"] == 3
    # a chosen skip never stops --on-error fail either
    r = run("pack", books, "-o", tmp_path / "f", "-t", "bytes", "-q", "-w", "1", "--encoding-errors", "skip",
            "--on-error", "fail")
    assert r.exit_code == 0, r.output


def test_budget_counts_records_and_bytes(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    good = "".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(999))
    (d / "a.jsonl").write_text(good + "{broken\n")  # 1 bad record in 1000: 0.1 %
    r = run("pack", d, "-o", tmp_path / "ok", "-t", "bytes", "-q", "-w", "1")
    assert r.exit_code == 0, r.output
    assert "skipped 1 record(s) (invalid JSON: 1)" in r.output
    r = run("pack", d, "-o", tmp_path / "strict", "-t", "bytes", "-q", "-w", "1", "--max-skip-fraction", "0")
    assert r.exit_code == 1 and "invalid JSON: 1" in r.output and "a.jsonl:1000" in r.output
    # one large file that yields nothing among many good small records: few records, many bytes
    (d / "big.txt").write_bytes(b"\xff" + b"x" * 200_000)
    r = run("pack", d, "-o", tmp_path / "bytes", "-t", "bytes", "-q", "-w", "1", "--max-skip-fraction", "0.01")
    assert r.exit_code == 1, r.output
    assert "0.20%" in r.output  # 2 of 1001 records ...
    assert "of the input bytes" in r.output and "big.txt" in r.output  # ... but most of the bytes


def test_tokenizer_is_required(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    r = run("pack", tmp_path / "a.jsonl", "-o", tmp_path / "ds")
    assert r.exit_code == 2 and "--tokenizer is required" in r.output and "--tokenizer bytes" in r.output
    r = run("pack", tmp_path / "a.jsonl", "-o", tmp_path / "ds", "--tokenizer", "bytes", "-q")
    assert r.exit_code == 0 and "tokenizer backend bytes" in r.output


def test_a_file_that_yields_nothing_shows_its_first_error(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"doc_id": [1, 2], "content": ["a b", "c d"]}), d / "p.parquet")
    r = run("pack", d / "p.parquet", "-o", tmp_path / "ds", "-t", "bytes", "-q")
    assert r.exit_code == 1
    assert "no text column 'text': the file has columns doc_id, content" in r.output
    assert "did you mean --text-field content?" in r.output
    (d / "a.json").write_text('[\n  {"text": "one"},\n  {"text": "two"}\n]\n')
    r = run("pack", d / "a.json", "-o", tmp_path / "ds", "-t", "bytes", "-q")
    assert r.exit_code == 1 and "jq -c '.[]'" in r.output
    (d / "w.jsonl").write_text("".join(json.dumps({"id": i, "body": "x"}) + "\n" for i in range(64)))
    r = run("pack", d / "w.jsonl", "-o", tmp_path / "ds", "-t", "bytes", "-q")
    assert r.exit_code == 1
    assert "missing field 'text': 64" in r.output
    assert "the record has fields id, body; did you mean --text-field body?" in r.output
    # among good files (budget off), the summary still names the file and its first problem
    (d / "good.jsonl").write_text('{"text": "fine"}\n')
    r = run("pack", d / "good.jsonl", d / "p.parquet", "-o", tmp_path / "ds2", "-t", "bytes", "-q",
            "--max-skip-fraction", "1")
    assert r.exit_code == 0, r.output
    assert "1 file(s) yielded no document" in r.output and "did you mean --text-field content?" in r.output


def test_config_file_with_flags_overriding(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"body": f"doc {i}"}) + "\n" for i in range(50)))
    cfg = tmp_path / "pack.yaml"
    cfg.write_text(f"inputs: [{tmp_path / 'a.jsonl'}]\noutput: {tmp_path / 'from-config'}\ntokenizer: bytes\n"
                   "text-field: body\nshard_size: 200B\nworkers: 1\nquiet: true\n")
    r = run("pack", "--config", cfg)
    assert r.exit_code == 0, r.output
    ds = open_dataset(tmp_path / "from-config")
    assert ds.num_docs == 50 and ds.num_shards > 1
    r = run("pack", "--config", cfg, "-o", tmp_path / "flag-wins", "--shard-size", "1MiB")
    assert r.exit_code == 0, r.output
    assert open_dataset(tmp_path / "flag-wins").num_shards == 1
    assert not (tmp_path / "from-config" / "x").exists()
    cfg.write_text("tokeniser: bytes\n")
    r = run("pack", "--config", cfg, tmp_path / "a.jsonl", "-o", tmp_path / "o")
    assert r.exit_code == 2 and "unknown key 'tokeniser'" in r.output and "tokenizer" in r.output


@pytest.mark.skipif(not GPT2_JSON.exists(), reason="needs ../shared/data")
def test_dry_run_writes_nothing_and_estimates(tmp_path):
    text = (CORPUS / "tinyshakespeare" / "input.txt").read_text()
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": text[i:i + 5000]}) + "\n" for i in range(0, 400_000, 5000)))
    r = run("pack", src, "-o", tmp_path / "ds", "-t", GPT2_JSON, "--shard-size", "20KB", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert not (tmp_path / "ds").exists()
    assert plan["inputs"] == [{"url": str(src), "bytes": src.stat().st_size, "format": "jsonl"}]
    r = run("pack", src, "-o", tmp_path / "ds", "-t", GPT2_JSON, "--shard-size", "20KB", "-q", "--json")
    real = json.loads(r.output)
    assert abs(plan["estimated_tokens"] - real["tokens"]) / real["tokens"] < 0.05
    assert abs(plan["estimated_shards"] - real["shards"]) <= 1
    r = run("pack", src, "-o", tmp_path / "ds", "-t", GPT2_JSON, "--dry-run")
    assert r.exit_code == 0 and "holds a finished dataset: a pack needs --overwrite" in r.output
    assert "shard-00000.bin" in r.output and "estimate" in r.output
