"""Hostile or unlucky pack inputs and output paths: one clear line and exit 1 (or a counted skip), never a
traceback, a hang or gigabytes of memory. Each runs the real CLI in a subprocess with a timeout, so a hang
is a failure and a limit (memory, a read-only mount) applies to the process under test only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import zstandard
from faults_support import can_mount, tmpfs
from support.cli import shardkit_cmd
from support.paths import GPT2_JSON

from shardkit.remote.cache import CacheError, CacheRoot


def _defaults(args):
    """The bytes tokenizer unless one is named, and no skip budget: these cases skip records on purpose."""
    args = [str(a) for a in args]
    if "--tokenizer" not in args and "-t" not in args:
        args += ["--tokenizer", "bytes"]
    if "--max-skip-fraction" not in args:
        args += ["--max-skip-fraction", "1"]
    return args


def _pack(*args, timeout=120, env=None):
    return subprocess.run([*shardkit_cmd(), "pack", *_defaults(args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_line_error(r, match):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert match in r.stderr, r.stderr


def _jsonl(path: Path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


# -- item 5: any exception of a record is that record's error ------------------------------------------------


@pytest.mark.parametrize("where", ["other-field", "text-field", "id-field"])
def test_an_integer_of_5000_digits_is_one_skipped_record(tmp_path, where):
    src = tmp_path / "in"
    src.mkdir()
    huge = "9" * 5000
    bad = {"other-field": f'{{"text": "bad", "n": {huge}}}', "text-field": f'{{"text": {huge}}}',
           "id-field": f'{{"text": "bad", "id": {huge}}}'}[where]
    (src / "a.jsonl").write_text('{"text": "good one", "id": 1}\n' + bad + '\n{"text": "good two", "id": 2}\n')
    r = _pack(src, "-o", tmp_path / "out", "--id-field", "id", "--json", "--on-error", "skip", "-q")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    report = json.loads(r.stdout)
    assert report["docs"] == 2 and report["skipped"]["count"] == 1, report
    assert "a.jsonl:2" in json.dumps(report)


# -- item 7, 9: inputs must be regular files; links are named for what they are ------------------------------


def test_a_fifo_as_input_is_refused_never_opened(tmp_path):
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    r = _pack(fifo, "-o", tmp_path / "out", timeout=60)  # an open() of the FIFO would block: a timeout
    _one_line_error(r, "not a regular file (a FIFO, socket or device)")


def test_a_fifo_in_an_input_directory_is_refused(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "a.jsonl", ["x"])
    os.mkfifo(src / "b.jsonl")
    _one_line_error(_pack(src, "-o", tmp_path / "out", timeout=60), "not a regular file")


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_dangling_and_looping_links_are_named_as_such(tmp_path, kind):
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "a.jsonl", ["x"])
    link = src / "b.jsonl"
    link.symlink_to("missing.jsonl" if kind == "dangling" else "b.jsonl")
    for target in (src, link):
        r = _pack(target, "-o", tmp_path / "out", timeout=60)
        _one_line_error(r, "dangling symbolic link" if kind == "dangling" else "symbolic link loop")
        assert "permission denied" not in r.stderr


# -- item 8: output paths --------------------------------------------------------------------------------------


def test_output_dev_null_is_one_line(tmp_path):
    _jsonl(tmp_path / "a.jsonl", ["x"])
    _one_line_error(_pack(tmp_path / "a.jsonl", "-o", "/dev/null"), "is not a directory")


def test_output_under_a_regular_file_is_one_line(tmp_path):
    _jsonl(tmp_path / "a.jsonl", ["x"])
    (tmp_path / "file").write_text("x")
    _one_line_error(_pack(tmp_path / "a.jsonl", "-o", tmp_path / "file" / "out"), "is not a directory")


@pytest.fixture()
def read_only_dir(tmp_path):
    """A directory nobody may write in: a read-only tmpfs as root, a mode-555 directory otherwise."""
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)
        return
    why = can_mount()
    if why:
        pytest.skip(why)
    with tmpfs(where, "1m"):
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where


@pytest.mark.parametrize("sub", ["out", "deeper/out"])
def test_output_not_writable_is_one_line(tmp_path, read_only_dir, sub):
    _jsonl(tmp_path / "a.jsonl", ["x"])
    _one_line_error(_pack(tmp_path / "a.jsonl", "-o", read_only_dir / sub), "cannot create or write the output")


def test_a_refused_pack_leaves_nothing_in_a_non_empty_directory(tmp_path):
    _jsonl(tmp_path / "a.jsonl", ["x"])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _one_line_error(_pack(tmp_path / "a.jsonl", "-o", out), "is not empty and not a shardkit output")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_repacking_into_a_directory_inside_the_inputs_never_reads_the_old_output(tmp_path):
    src = tmp_path / "corpus"
    src.mkdir()
    _jsonl(src / "a.jsonl", [f"doc {i}" for i in range(50)])
    runs = []
    for _ in range(2):
        r = _pack(src, "-o", src / "out", "--overwrite", "--id-field", "text", "--json", "-q")
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    assert runs[1]["skipped"]["count"] == 0 and runs[1]["docs"] == 50, runs[1]
    assert runs[0]["fingerprint"] == runs[1]["fingerprint"]


def test_remote_cache_dir_under_a_regular_file_is_a_cache_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="cannot be used as the remote cache directory"):
        CacheRoot.get(tmp_path / "file" / "cache", 1 << 30)


def test_remote_cache_dir_on_a_read_only_file_system_is_a_cache_error(read_only_dir):
    with pytest.raises(CacheError, match="cannot be used as the remote cache directory"):
        CacheRoot.get(read_only_dir / "cache", 1 << 30)
    with pytest.raises(CacheError, match="cannot be used as the remote cache directory"):
        CacheRoot.get(read_only_dir, 1 << 30)


# -- item 9: a tokenizer.json with an id past the token format -------------------------------------------------


@pytest.mark.skipif(not GPT2_JSON.is_file(), reason="shared GPT-2 tokenizer.json not present")
@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_a_token_id_of_2_32_is_a_clear_tokenizer_error(tmp_path, backend):
    doc = json.loads(GPT2_JSON.read_text())
    doc["model"]["vocab"]["zzqq"] = 2**32
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(doc))
    _jsonl(tmp_path / "a.jsonl", ["hello"])
    r = _pack(tmp_path / "a.jsonl", "-o", tmp_path / "out", "--tokenizer", tok, "--tokenizer-backend", backend)
    _one_line_error(r, "4294967296")


# -- item 4: pack bounds its memory per document ---------------------------------------------------------------

# Runs `shardkit pack` as a child and prints the child's peak resident memory (KiB): the number is the pack's.
_PEAK = textwrap.dedent("""
    import json, resource, subprocess, sys
    r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr,
                      "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
""")


def _pack_peak(args, timeout=300):
    r = subprocess.run([sys.executable, "-c", _PEAK, *shardkit_cmd(), "pack", *_defaults(args)],
                       capture_output=True, text=True, timeout=timeout)
    return json.loads(r.stdout)


def _bomb(path: Path, raw_line: bytes, size: int) -> Path:
    """A zstd file of `size` bytes of `raw_line` repeated (a few KB on disk)."""
    cctx = zstandard.ZstdCompressor(level=19)
    with open(path, "wb") as f, cctx.stream_writer(f) as w:
        chunk = raw_line * ((8 << 20) // len(raw_line))
        left = size
        while left > 0:
            w.write(chunk[:left])
            left -= len(chunk)
    return path


def test_a_txt_zst_expanding_to_640_mb_is_skipped_in_bounded_memory(tmp_path):
    bomb = _bomb(tmp_path / "bomb.txt.zst", b"the quick brown fox jumps over the lazy dog. ", 640 << 20)
    assert bomb.stat().st_size < 200_000
    _jsonl(tmp_path / "ok.jsonl", ["a normal document"])
    got = _pack_peak([tmp_path / "ok.jsonl", bomb, "-o", tmp_path / "out", "--json", "-q", "-w", "1"])
    assert got["rc"] == 0 and "Traceback" not in got["stderr"], got["stderr"]
    report = json.loads(got["stdout"])
    assert report["docs"] == 1 and report["skipped"]["count"] == 1, report
    print(f"\n640 MB .txt.zst bomb: pack peaked at {got['peak_kib'] >> 10} MiB resident")
    assert got["peak_kib"] < 600 << 10, f"pack peaked at {got['peak_kib'] >> 10} MiB"


def test_a_200_mb_jsonl_line_is_skipped_in_bounded_memory(tmp_path):
    line = b'{"text": "' + b"lorem ipsum dolor sit amet " * ((200 << 20) // 27) + b'"}\n'
    path = tmp_path / "big.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(b'{"text": "before"}\n' + line +
                                                                 b'{"text": "after"}\n'))
    del line
    got = _pack_peak([path, "-o", tmp_path / "out", "--json", "-q", "-w", "1"])
    assert got["rc"] == 0 and "Traceback" not in got["stderr"], got["stderr"]
    report = json.loads(got["stdout"])
    assert report["docs"] == 2 and report["skipped"]["count"] == 1, report
    assert "per-document limit" in json.dumps(report)
    print(f"\n200 MB JSONL line: pack peaked at {got['peak_kib'] >> 10} MiB resident")
    assert got["peak_kib"] < 1600 << 10, f"pack peaked at {got['peak_kib'] >> 10} MiB"
