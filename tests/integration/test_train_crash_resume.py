"""SIGKILL examples/train_torch.py mid-run, restart it, and check the run is the uninterrupted one.

The reference is one uninterrupted run with no DataLoader workers; every crashed-and-resumed variant
(plain DataLoader with 0 or 2 workers resuming through `ds.state_after`, StatefulDataLoader with 2 workers
resuming through its own `state_dict`) must log the same batch hash and the bit-identical loss at every step.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from shardkit.writer import write_dataset  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_torch.py"
STEPS, CKPT_EVERY, SEQ, BATCH, VOCAB = 48, 5, 32, 16, 2048
SLACK = 12  # a kill is requested at least this many steps before the end, so the run cannot finish first
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(2024)
    docs = [rng.integers(0, VOCAB, size=int(rng.integers(5, 300)), dtype=np.uint16) for _ in range(250)]
    path = tmp_path_factory.mktemp("train") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=6000, checksum_block_size=4096)
    assert len(list(path.glob("*.bin"))) >= 4
    return path


def _start(data: Path, run: Path, attempt: int, *, workers: int, stateful: bool) -> subprocess.Popen:
    cmd = [sys.executable, str(SCRIPT), "--data", str(data), "--ckpt-dir", str(run / "ckpt"),
           "--steps", str(STEPS), "--seq-len", str(SEQ), "--batch", str(BATCH), "--workers", str(workers),
           "--ckpt-every", str(CKPT_EVERY), "--log", str(run / f"log{attempt}.jsonl"), "--seed", "5",
           "--vocab", str(VOCAB), *(["--stateful"] if stateful else [])]
    with open(run / f"out{attempt}.txt", "wb") as out:
        # its own session and process group, so the test can find (and kill) its DataLoader workers
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _output(run: Path, attempt: int) -> str:
    return (run / f"out{attempt}.txt").read_text(errors="replace")


def _read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for_step(proc: subprocess.Popen, log: Path, step: int, run: Path, attempt: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if any(e["step"] >= step for e in _read_log(log)):
            return
        if proc.poll() is not None:
            pytest.fail(f"run exited ({proc.returncode}) before logging step {step}:\n{_output(run, attempt)}")
        time.sleep(0.001)
    pytest.fail(f"step {step} not logged within {TIMEOUT}s")


def _group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) in process group `pgid`, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:  # exited while we looked
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _wait_group_gone(pgid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _kill(proc: subprocess.Popen, *, whole_group: bool) -> None:
    """SIGKILL the trainer alone (as the OOM killer would: its workers must notice and exit) or its group."""
    if whole_group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL, f"the run ended ({proc.returncode}) before it could be killed"


def _assert_no_orphans(pgid: int, timeout: float) -> None:
    orphans = _wait_group_gone(pgid, timeout)
    assert not orphans, f"processes {orphans} of killed trainer {pgid} still run after {timeout}s"


@pytest.fixture()
def started():
    """Processes the test started; any group member still alive at the end is killed."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("reference")
    proc = _start(data, run, 0, workers=0, stateful=False)
    assert proc.wait(timeout=TIMEOUT) == 0, _output(run, 0)
    log = _read_log(run / "log0.jsonl")
    assert [e["step"] for e in log] == list(range(STEPS))
    assert len({e["hash"] for e in log}) == STEPS  # distinct batches: a hash that ignores data would fail
    return {e["step"]: e for e in log}


@pytest.mark.parametrize(("workers", "stateful", "kills"), [(0, False, 1), (2, False, 2), (2, True, 2)],
                         ids=["dataloader-0-workers", "dataloader-2-workers", "stateful-2-workers"])
def test_sigkilled_training_resumes_bit_identically(data, reference, tmp_path, started, workers, stateful, kills):
    rng = random.Random(f"crash-resume/{workers}/{stateful}")
    kill_at = [rng.randint(CKPT_EVERY + 1, 20)]  # past the first checkpoint, so the restart really resumes
    if kills == 2:
        kill_at.append(rng.randint(kill_at[0] + CKPT_EVERY + 1, STEPS - SLACK))
    for attempt, step in enumerate(kill_at):
        started.append(_start(data, tmp_path, attempt, workers=workers, stateful=stateful))
        _wait_for_step(started[-1], tmp_path / f"log{attempt}.jsonl", step, tmp_path, attempt)
        last = attempt == len(kill_at) - 1
        _kill(started[-1], whole_group=not last)  # the whole process group, and finally the trainer alone
        if not last:
            _assert_no_orphans(started[-1].pid, timeout=2.0)
    final = len(kill_at)
    started.append(_start(data, tmp_path, final, workers=workers, stateful=stateful))
    # while the restart runs: the workers of the trainer killed alone must exit by themselves (torch's
    # worker watchdog looks for a dead parent every 5 s, MP_STATUS_CHECK_INTERVAL)
    _assert_no_orphans(started[-2].pid, timeout=15.0)
    assert started[-1].wait(timeout=TIMEOUT) == 0, _output(tmp_path, final)

    logs = [_read_log(tmp_path / f"log{a}.jsonl") for a in range(final + 1)]
    for a, log in enumerate(logs):
        steps = [e["step"] for e in log]
        assert steps == list(range(steps[0], steps[0] + len(steps))), f"attempt {a} skipped or repeated a step"
        for e in log:
            assert e == reference[e["step"]], f"attempt {a}, step {e['step']}: {e} != {reference[e['step']]}"
        if a:
            resumed, last_before = steps[0], logs[a - 1][-1]["step"]
            # from the newest checkpoint: the one after the last logged step, or one before it if the
            # kill fell between logging a step and committing its checkpoint
            assert resumed % CKPT_EVERY == 0 and last_before + 1 - CKPT_EVERY <= resumed <= last_before + 1
            assert f"resumed at step {resumed}" in _output(tmp_path, a)
    assert logs[0][0]["step"] == 0
    assert set().union(*({e["step"] for e in log} for log in logs)) == set(range(STEPS))
    assert logs[-1][-1]["step"] == STEPS - 1
    assert logs[-1][-1]["loss"] == reference[STEPS - 1]["loss"]  # bit-identical final loss

    record = json.loads((tmp_path / "ckpt" / "latest.json").read_text())
    assert record["step"] == STEPS
    assert record["data_kind"] == ("stateful_dataloader" if stateful else "loader")
    assert "shardkit-loader-state" in json.dumps(record["data"])  # the data state is plain JSON
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["latest.json", f"weights-{STEPS:08d}.pt"]
