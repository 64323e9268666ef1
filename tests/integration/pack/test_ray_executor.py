"""The Ray executor on a real local Ray cluster: byte-identical to the local executor, even when a worker dies."""

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.dataset_bytes import assert_same_dataset, dataset_files

from shardkit import open_dataset, verify_dataset
from shardkit.pack import PackConfig
from shardkit.pack.executors import LocalExecutor, RayExecutor, pack_job
from shardkit.writer import ShardLimits
from shardkit.writer.journal import JOURNAL_NAME

ray = pytest.importorskip("ray")

LIMITS = ShardLimits(max_bytes=16_000, checksum_block_size=4096)


@pytest.fixture(scope="module")
def cluster():
    """One real Ray instance for the module (2 CPUs, no dashboard), never an existing cluster."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=80 << 20,
             logging_level=logging.WARNING, log_to_driver=False)
    yield
    ray.shutdown()


def _corpus(d, files=3, docs=600, seed=2):
    rng = random.Random(seed)
    d.mkdir()
    for k in range(files):
        with open(d / f"p{k}.jsonl", "w", encoding="utf-8") as f:
            for i in range(docs):
                f.write(json.dumps({"text": f"{k}.{i} " + "ü" * rng.randint(10, 900)}) + "\n")
    return d


def _config(src, out):
    return PackConfig(inputs=(str(src),), output=str(out), limits=LIMITS, workers=1)


def test_ray_is_byte_identical_to_local(cluster, tmp_path):
    src = _corpus(tmp_path / "in", docs=300)
    seen = []
    local = pack_job(_config(src, tmp_path / "local"), num_tasks=4, granularity=64 << 10,
                     executor=LocalExecutor(), keep_parts=True)
    remote = pack_job(_config(src, tmp_path / "ray"), num_tasks=4, granularity=64 << 10,
                      executor=RayExecutor(), keep_parts=True, progress=seen.append)
    assert remote.executor == "ray" and [t.task_id for t in remote.tasks] == [0, 1, 2, 3]
    assert remote.merge.fingerprint == local.merge.fingerprint
    assert_same_dataset(tmp_path / "local", tmp_path / "ray")
    for i in range(4):  # and every part, byte for byte
        assert_same_dataset(tmp_path / "local.parts" / f"task-{i:05d}", tmp_path / "ray.parts" / f"task-{i:05d}")
    last = seen[-1]
    assert last.tasks_done == 4 and last.pack.docs == open_dataset(tmp_path / "ray").num_docs
    assert last.pack.input_bytes_done == last.pack.input_bytes_total
    assert verify_dataset(tmp_path / "ray", mode="full").ok


def _holder_of(path: Path) -> int | None:
    """The pid of the process with `path` open (the Ray worker packing that part holds its lock file)."""
    target = str(path)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
        except OSError:
            continue
    return None


def _journal_entries(part: Path) -> int:
    try:
        return (part / JOURNAL_NAME).read_bytes().count(b"\n") - 1
    except FileNotFoundError:
        return -1


@pytest.mark.slow
def test_worker_sigkilled_mid_task_is_retried_and_the_result_is_identical(cluster, tmp_path):
    src = _corpus(tmp_path / "in", files=2, docs=1000, seed=4)
    pack_job(_config(src, tmp_path / "ref"), num_tasks=2, granularity=256 << 10)
    seen, result, error = [], [], []

    def run():
        try:
            result.append(pack_job(_config(src, tmp_path / "ray"), num_tasks=2, granularity=256 << 10,
                                   executor=RayExecutor(max_retries=2), progress=seen.append))
        except BaseException as e:  # surfaced below
            error.append(e)

    job = threading.Thread(target=run)
    job.start()
    part = tmp_path / "ray.parts" / "task-00001"
    killed = None
    deadline = time.monotonic() + 60
    while job.is_alive() and time.monotonic() < deadline:
        if _journal_entries(part) >= 3 and not (part / "manifest.json").exists():
            pid = _holder_of(part / ".shardkit-lock")
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.005)
    job.join(120)
    assert not error, error
    if killed is None:
        pytest.skip("the task finished before its worker could be killed")
    assert seen[-1].retries >= 1
    assert_same_dataset(tmp_path / "ref", tmp_path / "ray")


def test_missing_ray_names_the_install_line():
    code = ("import sys; sys.modules['ray'] = None\n"
            "from shardkit.pack.executors.ray import import_ray\n"
            "try:\n    import_ray()\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("MissingDependencyError") and "pip install 'shardkit[ray]'" in out


def test_cli_ray_executor_matches_cli_local(cluster, tmp_path):
    from click.testing import CliRunner

    from cli.main import cli
    src = _corpus(tmp_path / "in", files=2, docs=200)
    common = [str(src), "--num-tasks", "3", "--split-granularity", "32KiB", "--shard-size", "16KB",
              "--checksum-block-size", "4KiB", "--workers", "1", "--quiet", "--json", "-t", "bytes"]
    a = CliRunner().invoke(cli, ["pack", *common, "-o", str(tmp_path / "a")])
    b = CliRunner().invoke(cli, ["pack", *common, "-o", str(tmp_path / "b"), "--executor", "ray"])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ja, jb = json.loads(a.output), json.loads(b.output)
    assert ja["executor"] == "local" and jb["executor"] == "ray" and ja["fingerprint"] == jb["fingerprint"]
    assert dataset_files(tmp_path / "a") == dataset_files(tmp_path / "b")
