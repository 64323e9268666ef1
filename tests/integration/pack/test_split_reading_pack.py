"""Packs whose workers read their own units of the input write a single reader's bytes, skips and messages.

With one worker the parent reads everything (no units); with two, large uncompressed JSON-lines and
Parquet files are cut into units that the workers read. The datasets must be identical, and so must the
skip statistics, the skip examples' locations (file and line) and the `--on-error fail` message.
"""

import gzip
import json
import random
import signal
import subprocess
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import shardkit_cmd
from support.dataset_bytes import assert_same_dataset

from shardkit.errors import PackError
from shardkit.pack import PackConfig, pack, units
from shardkit.pack.config import OnError
from shardkit.writer import ShardLimits
from shardkit.writer.journal import JOURNAL_NAME


def _corpus(d, seed=11):
    rng = random.Random(seed)
    words = ["alpha", "beta", "δέλτα", "эпсилон", "\n", "  ", "🙂", "<|endoftext|>"]
    d.mkdir()
    for f in range(3):
        lines = []
        for _ in range(300):
            r = rng.random()
            if r < 0.03:
                lines.append("{not json")
            elif r < 0.05:
                lines.append("")
            elif r < 0.06:
                lines.append(json.dumps({"text": ""}))
            else:
                lines.append(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(1, 300)))}))
        body = ("\n".join(lines) + "\n").encode()
        if f == 1:
            (d / f"part-{f}.jsonl.gz").write_bytes(gzip.compress(body))  # never split
        else:
            (d / f"part-{f}.jsonl").write_bytes(body)
    texts = [None if k % 31 == 7 else " ".join(rng.choice(words) for _ in range(rng.randint(1, 80)))
             for k in range(400)]
    pq.write_table(pa.table({"text": texts}), d / "part-3.parquet", row_group_size=37)
    return d


def _pack(src, out, workers, **kw):
    return pack(PackConfig(inputs=(str(src),), output=str(out), workers=workers, max_skip_fraction=1.0,
                           limits=ShardLimits(max_bytes=20_000, checksum_block_size=4096), **kw))


@pytest.mark.parametrize("unit_bytes", [97, 5000, 1 << 16])
def test_split_reading_pack_writes_the_single_reader_bytes(tmp_path, monkeypatch, unit_bytes):
    src = _corpus(tmp_path / "in")
    ref = _pack(src, tmp_path / "ref", workers=1)
    monkeypatch.setattr(units, "UNIT_BYTES", unit_bytes)
    seen = []
    real = units._units
    monkeypatch.setattr(units, "_units", lambda *a: seen.append(len(out := real(*a))) or out)
    got = _pack(src, tmp_path / "split", workers=2)
    assert seen and max(seen) > 1  # files were really cut into units
    assert_same_dataset(tmp_path / "ref", tmp_path / "split")
    assert got.stats == ref.stats
    assert got.skip_examples == ref.skip_examples
    assert any(":" in e["location"] and e["location"].split(":")[-1].isdigit() for e in got.skip_examples)
    assert len(ref.manifest.shards) > 5


def test_on_error_fail_names_the_files_own_line(tmp_path, monkeypatch):
    src = tmp_path / "in"
    src.mkdir()
    lines = [json.dumps({"text": f"document {k} " * 30}) for k in range(2000)]
    lines[1733] = "{broken"
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(units, "UNIT_BYTES", 10_000)  # line 1734 is deep in a later unit
    messages = []
    for workers in (1, 2):
        with pytest.raises(PackError) as err:
            _pack(src, tmp_path / f"o{workers}", workers, on_error=OnError.FAIL)
        messages.append(str(err.value).replace(f"o{workers}", "o"))
    assert f"{src / 'a.jsonl'}:1734: invalid JSON" in messages[1]
    assert messages[0] == messages[1]


def _big_corpus(d):
    rng = random.Random(5)
    d.mkdir()
    for f in range(2):  # ~9 MB each: three units of 4 MiB
        with open(d / f"p{f}.jsonl", "w") as fh:
            for k in range(6000):
                fh.write("{oops\n" if k % 997 == 5 else json.dumps({"text": "y" * rng.randint(100, 3000)}) + "\n")
    return d


def _cmd(src, out, workers):
    return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--shard-size", "512KB", "--max-skip-fraction", "1",
                             "--workers", str(workers), "--quiet", "-t", "bytes"]


@pytest.mark.parametrize("kill_after_shards", [3, 20])
def test_killed_split_pack_resumes_to_the_single_reader_bytes(tmp_path, kill_after_shards):
    src = _big_corpus(tmp_path / "in")
    assert (src / "p0.jsonl").stat().st_size > 2 * units.UNIT_BYTES
    ref = tmp_path / "ref"
    subprocess.run(_cmd(src, ref, 1), check=True, capture_output=True)
    out = tmp_path / "out"
    proc = subprocess.Popen(_cmd(src, out, 2), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if (out / JOURNAL_NAME).read_bytes().count(b"\n") - 1 >= kill_after_shards:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("pack finished before the kill point")
    done = subprocess.run(_cmd(src, out, 2), capture_output=True, text=True)  # resumes mid-file, split again
    assert done.returncode == 0, done.stderr
    assert "resumed" in done.stdout
    assert_same_dataset(ref, out)
