"""The 1-worker pack runs reading, tokenizing and writing in threads (pack/pipeline.py): the same bytes as
the stages run in series, for any chunk size; a failure in the reading or the tokenizing thread is the
same clear error; Ctrl-C stops it and the same command resumes it to the same bytes."""

import gzip
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import shardkit_cmd
from support.dataset_bytes import assert_same_dataset
from support.paths import CORPUS, GPT2_JSON

from shardkit.errors import PackError, TokenizerError
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.pack import chunks as pack_chunks
from shardkit.pack import driver as pack_driver
from shardkit.pack.config import OnError
from shardkit.pack.worker import encode_chunk, init_worker
from shardkit.writer.journal import JOURNAL_NAME
from shardkit.writer.shard_writer import ShardLimits


def _real_corpus(d: Path) -> Path:
    """~4 MB of the real corpus in three formats: WikiText-2 paragraphs as JSON lines (thousands of short
    documents), whole books and Shakespeare as text files, HumanEval gzipped (no "text" field: every
    record is a counted skip, interleaved with the documents)."""
    d.mkdir()
    paragraphs = [p for p in (CORPUS / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
                  if p.strip()]
    with open(d / "a-wiki.jsonl", "w", encoding="utf-8") as f:
        for p in paragraphs:
            f.write(json.dumps({"text": p}) + "\n")
    shutil.copy(CORPUS / "humaneval" / "HumanEval.jsonl.gz", d / "b-humaneval.jsonl.gz")
    shutil.copy(CORPUS / "tinyshakespeare" / "input.txt", d / "c-shakespeare.txt")
    for book in sorted((CORPUS / "gutenberg").glob("*.txt"))[:2]:
        shutil.copy(book, d / f"d-{book.name}")
    return d


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> list[Path]:
    return [_real_corpus(tmp_path_factory.mktemp("real") / "in")]


def _config(inputs, out, workers=1, **kw):
    return PackConfig(inputs=tuple(str(p) for p in inputs), output=str(out),
                      tokenize=TokenizeOptions(tokenizer=str(GPT2_JSON)), workers=workers,
                      limits=ShardLimits(max_bytes=400_000, checksum_block_size=4096), max_skip_fraction=0.2, **kw)


def _in_series(chunks, setup, check, loaded):
    """The stages one after another in this thread: what the threads must reproduce byte for byte."""
    init_worker(setup, loaded)
    for i, chunk in enumerate(chunks):
        if i == 0 and check is not None:
            assert check(chunk) is None
        yield chunk, encode_chunk(chunk.texts)


@pytest.fixture(scope="module")
def serial_reference(tmp_path_factory, real):
    out = tmp_path_factory.mktemp("serial") / "ds"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pack_driver, "_in_threads", _in_series)
        result = pack(_config(real, out))
    assert len(result.manifest.shards) >= 5 and result.stats["skipped"]["count"] == 164
    return out, result


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk_chars=st.sampled_from([1, 512, 8192, 100_000, 1 << 20, 8 << 20]),
       chunk_docs=st.sampled_from([1, 7, 4096]))
def test_threads_write_the_serial_bytes_for_any_chunk_size(serial_reference, real, chunk_chars, chunk_docs):
    ref, ref_result = serial_reference
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(pack_chunks, "CHUNK_CHARS", chunk_chars)
        mp.setattr(pack_chunks, "CHUNK_DOCS", chunk_docs)
        result = pack(_config(real, Path(d) / "ds"))
        assert result.fingerprint == ref_result.fingerprint
        assert result.tokenizer_backend == ref_result.tokenizer_backend == "fastokens"
        assert_same_dataset(ref, Path(d) / "ds")


def test_stages_run_in_their_threads_and_progress_in_the_callers(tmp_path, real, monkeypatch):
    encoded_in = set()
    real_encode = pack_driver.encode_chunk

    def encode(texts):
        encoded_in.add(threading.current_thread().name)
        return real_encode(texts)

    monkeypatch.setattr(pack_driver, "encode_chunk", encode)
    seen = []
    pack(_config(real, tmp_path / "ds"), progress=lambda p: seen.append((threading.current_thread().name, p)))
    assert encoded_in == {"shardkit-pack-encode"}
    assert seen and {name for name, _ in seen} == {threading.main_thread().name}
    tokens = [p.tokens for _, p in seen]
    assert tokens == sorted(tokens) and seen[-1][1].input_bytes_done == seen[-1][1].input_bytes_total


def _corrupt_gzip(d: Path) -> Path:
    """A corpus whose second file is a gzip cut short: a file-level read error in the reading thread."""
    d.mkdir()
    shutil.copy(CORPUS / "tinyshakespeare" / "input.txt", d / "a.txt")
    raw = gzip.compress("".join(json.dumps({"text": f"line {i} " * 40}) + "\n" for i in range(4000)).encode())
    (d / "b.jsonl.gz").write_bytes(raw[: len(raw) // 2])
    return d


def test_a_read_error_in_the_reading_thread_is_the_documented_error(tmp_path):
    src = _corrupt_gzip(tmp_path / "in")
    with pytest.raises(PackError) as raised:
        pack(_config([src], tmp_path / "out", on_error=OnError.FAIL))
    message = str(raised.value)
    assert "b.jsonl.gz:" in message and message.endswith("(stopped by --on-error fail)")
    # the same message as the stages in series
    with pytest.MonkeyPatch.context() as mp, pytest.raises(PackError) as serial:
        mp.setattr(pack_driver, "_in_threads", _in_series)
        pack(_config([src], tmp_path / "out2", on_error=OnError.FAIL))
    assert str(serial.value) == message
    # and on the command line: one line, exit 1, no traceback
    done = subprocess.run(shardkit_cmd() + ["pack", str(src), "-o", str(tmp_path / "cli"), "--workers", "1",
                                            "--tokenizer", str(GPT2_JSON), "--on-error", "fail", "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and message in done.stderr


def test_a_tokenizer_error_in_the_tokenizing_thread_stops_the_pack_and_it_resumes(tmp_path, serial_reference, real,
                                                                                 monkeypatch):
    ref, _ = serial_reference
    calls = []
    real_encode = pack_driver.encode_chunk

    def failing(texts):
        calls.append(len(texts))
        if len(calls) == 20:
            raise TokenizerError("tokenizer.json: cannot encode this chunk (injected)")
        return real_encode(texts)

    monkeypatch.setattr(pack_chunks, "CHUNK_CHARS", 50_000)
    monkeypatch.setattr(pack_driver, "encode_chunk", failing)
    out = tmp_path / "out"
    t0 = time.monotonic()
    with pytest.raises(TokenizerError, match=r"cannot encode this chunk \(injected\)"):
        pack(_config(real, out))
    assert time.monotonic() - t0 < 60
    assert len(calls) == 20  # stopped at the failing chunk: the encoder took nothing after it
    journaled = (out / JOURNAL_NAME).read_text().count("\n") - 1
    assert journaled >= 1  # the shards finished before the failure are kept
    monkeypatch.setattr(pack_driver, "encode_chunk", real_encode)
    result = pack(_config(real, out))
    assert result.resumed_shards == journaled
    assert_same_dataset(ref, out)


def _big_corpus(d: Path) -> Path:
    d.mkdir()
    for k in range(6):
        shutil.copy(CORPUS / "wikitext-2-raw" / "wiki.test.raw", d / f"w{k}.txt")
    return d


def _cli(src: Path, out: Path) -> list[str]:
    return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--workers", "1", "--tokenizer", str(GPT2_JSON),
                             "--shard-size", "200KB", "--quiet"]


def test_ctrl_c_stops_a_one_worker_pack_and_the_same_command_resumes_it(tmp_path):
    src = _big_corpus(tmp_path / "in")
    ref = tmp_path / "ref"
    assert subprocess.run(_cli(src, ref), capture_output=True, timeout=300).returncode == 0
    out = tmp_path / "out"
    proc = subprocess.Popen(_cli(src, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    journal = out / JOURNAL_NAME
    while proc.poll() is None and time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count("\n") >= 3:
            break
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.skip("the pack finished before it could be interrupted")
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130, stderr
    assert "interrupted; an unfinished pack resumes" in stderr and "Traceback" not in stderr
    done = subprocess.run(_cli(src, out), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_same_dataset(ref, out)
