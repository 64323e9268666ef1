"""Split packs: N task parts merged in task order give the single pack's documents, tokens and statistics."""

import json
import random
import signal
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import shardkit_cmd
from support.dataset_bytes import assert_same_dataset

from shardkit import open_dataset, verify_dataset
from shardkit.pack import PackConfig, pack
from shardkit.pack.executors import pack_job
from shardkit.pack.merge import merge_parts
from shardkit.pack.tasks import TaskSpec
from shardkit.writer import ShardLimits
from shardkit.writer.journal import JOURNAL_NAME

LIMITS = ShardLimits(max_bytes=6000, checksum_block_size=4096)


def _corpus(d, seed=5):
    rng = random.Random(seed)
    d.mkdir()
    for k in range(3):
        with open(d / f"a{k}.jsonl", "w", encoding="utf-8") as f:
            for i in range(rng.randint(80, 160)):
                f.write(json.dumps({"text": f"{k}/{i} " + "é" * rng.randint(0, 200)}) + "\n")
            if k == 1:
                f.write("{not json\n" + json.dumps({"text": ""}) + "\n" + json.dumps({"text": "after the bad ones"}))
    pq.write_table(pa.table({"text": [f"pq{i} " + "q" * rng.randint(1, 90) for i in range(220)]}),
                   d / "b.parquet", row_group_size=25)
    (d / "c.txt").write_text("a whole text file\nwith two lines\n")
    return d


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("tasks")
    src = _corpus(base / "in")
    single = base / "single"
    pack(PackConfig(inputs=(str(src),), output=str(single), limits=LIMITS, max_skip_fraction=1.0, workers=1))
    return src, single


def _stream(path):
    ds = open_dataset(path)
    return np.concatenate([s.tokens for s in ds]) if ds.num_shards else np.zeros(0, np.uint16), ds


def _pack_parts(src, base, n, granularity):
    parts = []
    for i in range(n):
        out = base / f"part-{i}"
        pack(PackConfig(inputs=(str(src),), output=str(out), limits=LIMITS, max_skip_fraction=1.0, workers=1,
                        task=TaskSpec(num_tasks=n, task_id=i, granularity=granularity)))
        parts.append(out)
    return parts


@pytest.mark.parametrize("n, granularity", [(1, 1 << 30), (3, 1 << 30), (4, 1 << 30), (9, 1 << 30),
                                            (2, 512), (5, 700), (11, 256)])
def test_merged_token_stream_equals_single_pack(corpus, tmp_path, n, granularity):
    src, single = corpus
    parts = _pack_parts(src, tmp_path, n, granularity)
    merge_parts(parts, tmp_path / "merged")
    ref_tokens, ref = _stream(single)
    tokens, merged = _stream(tmp_path / "merged")
    assert np.array_equal(tokens, ref_tokens)
    assert merged.num_docs == ref.num_docs
    got, want = merged.manifest.stats, ref.manifest.stats
    if granularity >= 1 << 30:  # split by whole files: the statistics are the single pack's, skips included
        assert got == want
    else:  # by byte range: the same counts; a skipped record's location may name its range (FILE@START:N)
        assert {k: v for k, v in got.items() if k != "skipped"} == {k: v for k, v in want.items() if k != "skipped"}
        assert got["skipped"]["count"] == want["skipped"]["count"]
        assert got["skipped"]["by_reason"] == want["skipped"]["by_reason"]
    assert verify_dataset(tmp_path / "merged", mode="full").ok


def test_part_is_an_ordinary_dataset_with_part_metadata(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "p"
    pack(PackConfig(inputs=(str(src),), output=str(out), limits=LIMITS, max_skip_fraction=1.0, workers=1,
                    task=TaskSpec(num_tasks=3, task_id=1, granularity=512)))
    ds = open_dataset(out)
    task = ds.manifest.pack["task"]
    assert task["task_id"] == 1 and task["num_tasks"] == 3 and task["granularity"] == 512
    assert len(task["plan"]) == 64 and task["listing"]["files"] == 5
    assert task["slices"] and all(s["url"].startswith(str(src)) for s in task["slices"])
    assert all(s.name.startswith("task-00001-shard-") for s in ds)
    assert ds.manifest.tokenizer["kind"] == "bytes" and ds.manifest.pack["options"]["shard_max_bytes"] == 6000
    assert verify_dataset(out, mode="full").ok


def test_more_tasks_than_inputs_packs_empty_parts(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("one")
    (src / "b.txt").write_text("two")
    r = pack_job(PackConfig(inputs=(str(src),), output=str(tmp_path / "out"), limits=LIMITS, max_skip_fraction=1.0, workers=1),
                 num_tasks=5, keep_parts=True)
    assert sorted(t.docs for t in r.tasks) == [0, 0, 0, 1, 1]
    empty = open_dataset(tmp_path / "out.parts" / "task-00000")
    assert empty.num_shards == 0 and empty.manifest.pack["task"]["slices"] == []
    assert open_dataset(tmp_path / "out").num_docs == 2


def test_job_result_does_not_depend_on_workers_or_reruns(corpus, tmp_path):
    src, _ = corpus
    cfg = PackConfig(inputs=(str(src),), output=str(tmp_path / "a"), limits=LIMITS, max_skip_fraction=1.0, workers=1)
    pack_job(cfg, num_tasks=4, granularity=600)
    pack_job(PackConfig(inputs=(str(src),), output=str(tmp_path / "b"), limits=LIMITS, max_skip_fraction=1.0, workers=2),
             num_tasks=4, granularity=600, keep_parts=True)
    assert_same_dataset(tmp_path / "a", tmp_path / "b")
    assert not (tmp_path / "a.parts").exists() and (tmp_path / "b.parts").is_dir()
    # the same job again over kept parts: every part is kept, the merge is the same
    r = pack_job(PackConfig(inputs=(str(src),), output=str(tmp_path / "c"), limits=LIMITS, max_skip_fraction=1.0, workers=1),
                 num_tasks=4, granularity=600, parts_dir=tmp_path / "b.parts")
    assert all(t.reused for t in r.tasks)
    assert_same_dataset(tmp_path / "a", tmp_path / "c")


def _journal_entries(out):
    try:
        return (out / JOURNAL_NAME).read_bytes().count(b"\n") - 1
    except FileNotFoundError:
        return -1


@pytest.mark.slow
def test_sigkilled_task_resumes_to_the_same_part(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rng = random.Random(9)
    for k in range(2):
        with open(src / f"p{k}.jsonl", "w") as fh:
            for _ in range(2500):
                fh.write(json.dumps({"text": "x" * rng.randint(50, 2000)}) + "\n")

    def cmd(out):
        return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--num-tasks", "3", "--task-id", "1",
                                 "--split-granularity", "64KiB", "--shard-size", "16KB",
                                 "--checksum-block-size", "4KiB", "--workers", "1", "--quiet", "-t", "bytes", "--max-skip-fraction", "1"]

    subprocess.run(cmd(tmp_path / "ref"), check=True, capture_output=True)
    out = tmp_path / "out"
    proc = subprocess.Popen(cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _journal_entries(out) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the task finished before the kill point")
    assert not (out / "manifest.json").exists()
    done = subprocess.run(cmd(out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_same_dataset(tmp_path / "ref", out)


def test_compressed_parts_merge_into_the_single_packs_tokens(corpus, tmp_path):
    """A compressed shard's sidecar names its uncompressed NAME.bin too, which is never on disk."""
    from shardkit.writer import Codec, CompressionConfig

    src, single = corpus
    zstd = CompressionConfig(codec=Codec.ZSTD, frame_size=4096)
    parts = []
    for i in range(3):
        out = tmp_path / f"part-{i}"
        pack(PackConfig(inputs=(str(src),), output=str(out), limits=LIMITS, max_skip_fraction=1.0, workers=1, compression=zstd,
                        task=TaskSpec(num_tasks=3, task_id=i, granularity=1 << 30)))
        parts.append(out)
    merge_parts(parts, tmp_path / "merged")
    merged = open_dataset(tmp_path / "merged", cache_dir=tmp_path / "cache")
    assert all(s.compressed for s in merged.shards)
    assert np.array_equal(np.concatenate([s.tokens for s in merged]), _stream(single)[0])
    assert verify_dataset(tmp_path / "merged").ok
