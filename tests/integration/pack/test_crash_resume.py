"""SIGKILL a real `shardkit pack` at several points; re-running the command finishes byte-identically."""

import json
import random
import signal
import subprocess
import time

import pytest
from support.cli import shardkit_cmd
from support.dataset_bytes import assert_same_dataset

from shardkit.writer.journal import JOURNAL_NAME


def _corpus(d, files=3, docs=1500, seed=3):
    rng = random.Random(seed)
    d.mkdir()
    for f in range(files):
        with open(d / f"p{f}.jsonl", "w") as fh:
            for _ in range(docs):
                fh.write(json.dumps({"text": "x" * rng.randint(50, 3000)}) + "\n")
    return d


def _cmd(src, out, workers=2):
    return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--shard-size", "24KB",
                             "--checksum-block-size", "4KiB", "--workers", str(workers), "--quiet", "-t", "bytes"]


def _journal_entries(out):
    try:
        return (out / JOURNAL_NAME).read_bytes().count(b"\n") - 1
    except FileNotFoundError:
        return -1


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash")
    src = _corpus(base / "in")
    ref = base / "ref"
    subprocess.run(_cmd(src, ref), check=True, capture_output=True)
    return src, ref


@pytest.mark.parametrize("kill_after_shards", [0, 1, 17, 140])
def test_kill_at_shard_counts_then_resume(reference, tmp_path, kill_after_shards):
    src, ref = reference
    out = tmp_path / "out"
    proc = subprocess.Popen(_cmd(src, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _journal_entries(out) < kill_after_shards and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("pack finished before the kill point")
    assert not (out / "manifest.json").exists()
    done = subprocess.run(_cmd(src, out, workers=1), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if kill_after_shards > 1:
        assert "resumed" in done.stdout
    assert_same_dataset(ref, out)


def _children_of(pid):
    import os
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def test_killed_pack_leaves_no_worker_behind(reference, tmp_path):
    import os
    src, _ = reference
    proc = subprocess.Popen(_cmd(src, tmp_path / "out"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    workers = []
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = _children_of(proc.pid)
        time.sleep(0.05)
    assert workers, "pack started no worker processes"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    def running(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split()[2] != "Z"
        except FileNotFoundError:
            return False

    alive = [w for w in workers if running(w)]
    assert not alive, f"orphaned workers still running: {alive}"


@pytest.mark.parametrize("workers", [1, 2])  # 1: reading, tokenizing and writing in threads (pipeline.py)
def test_kill_at_random_moments_repeatedly(reference, tmp_path, workers):
    """Several kills in a row on the same output, then finish: still identical."""
    src, ref = reference
    out = tmp_path / "out"
    rng = random.Random(11)
    kills = 0
    for _ in range(4):
        proc = subprocess.Popen(_cmd(src, out, workers), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.5))
        if proc.poll() is not None:  # it finished before this kill (a fast machine): nothing left to resume
            assert proc.returncode == 0
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        if (out / "manifest.json").exists():  # the kill landed after the last rename, before the exit
            break
    else:
        done = subprocess.run(_cmd(src, out, workers), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert kills >= 1, "every pack finished before its kill: the test killed nothing"
    assert_same_dataset(ref, out)
