"""SIGKILL a real `shardkit pack --executor ray` job, its Ray workers and its driver in turn, on one output.

One real cluster for the module (`ray start --head --block` in its own session, so a driver can die
without taking the cluster down) and real CLI drivers reaching it through RAY_ADDRESS. One chain of
runs of the same command on one output directory, every kill at a seeded random moment:

  (b) a Ray worker holding a part's lock is SIGKILLed (a lost node, the OOM killer) when that part has
      journaled a random number more shards: Ray runs the task again, and the new attempt takes the
      part's lock and resumes it from its journal while the job goes on by itself;
  (a) then the driver (the `shardkit pack` process) is SIGKILLed: while the retry is still pending,
      a random number of shards into the retry, or a random delay into it.

After each driver kill: no process holds a part's lock within LINGER seconds (a dead job's tasks
die with it), every journaled shard of every part is whole and kept by the next kill, an unfinished
part verifies INCOMPLETE and a finished one OK, the output never verifies CORRUPT. The last run
survives two (b) kills and finishes (exit 0, its stdout the --json document alone: Ray's "a worker
died" messages go to stderr), byte-identical to an uninterrupted Ray job, itself byte-identical to the
local executor's. The cluster has its own ports, temp dir and auth token, never ~/.ray's; ~45 s on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from faults_support import (
    assert_incomplete,
    assert_journaled_shards_whole,
    assert_prefix,
    pack_cmd,
    real,
    verdict,
)
from support.dataset_bytes import assert_same_dataset

from shardkit.format.manifest import MANIFEST_NAME
from shardkit.pack.output_dir import LOCK_NAME
from shardkit.verify.report import Verdict
from shardkit.writer.journal import JOURNAL_NAME

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

SEED = 2026  # every kill point; change only deliberately (the printed table lists what each run hit)
TASKS = 3
RUNS = 6  # five end with (b) then (a); the last takes two (b) kills and finishes
LINGER = 20.0  # seconds a dead driver's task may keep a part's lock
JOB = ("--num-tasks", str(TASKS), "--executor", "ray", "--json")
WORDS = ["ab", "cde", "f", "ghij", "klm", "nö", "pqrs", "tu", "vwxyz", "ë"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_pids(sid: int, marker: str) -> list[int]:
    """The live processes of session `sid`, or whose command line names `marker` (the cluster's temp dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        state, _, _, session = stat.rsplit(")", 1)[1].split()[:4]
        if state not in ("Z", "X") and (int(session) == sid or marker.encode() in cmdline):
            found.append(int(pid))
    return found


@dataclass
class Cluster:
    """The module's cluster: `ray start` runs while the corpus and the local reference are made."""

    head: subprocess.Popen
    log: Path
    env: dict[str, str]  # for the drivers: RAY_ADDRESS and the cluster's token
    t0: float
    started: float = 0.0  # seconds `ray start` took

    @property
    def sid(self) -> int:
        """The session every cluster process (and so every Ray worker) runs in."""
        return self.head.pid

    def ready(self) -> Cluster:
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            if self.head.poll() is not None or time.monotonic() - self.t0 > 90:
                pytest.fail(f"`ray start` did not start a cluster (exit {self.head.poll()}): "
                            f"{self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        self.started = self.started or time.monotonic() - self.t0
        return self


@pytest.fixture(scope="module")
def cluster():
    """One `ray start --head` for the module: 2 CPUs, its own ports, temp dir, session and token."""
    temp = tempfile.mkdtemp(prefix="sk-ray-")  # short: Ray's unix sockets live under it (108-byte limit)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    port = _free_port()
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--num-cpus", "2",
           "--include-dashboard=false", "--disable-usage-stats", "--port", str(port), "--temp-dir", temp,
           "--dashboard-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
           "--object-store-memory", str(100 << 20)]
    log = Path(temp) / "ray-start.log"
    with open(log, "w") as f:
        head = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield Cluster(head, log, {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}, time.monotonic())
    finally:
        head.terminate()  # `ray start --block` stops every process of its cluster on SIGTERM
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=30)
        deadline = time.monotonic() + 10
        while (left := _session_pids(head.pid, temp)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if head.poll() is None:
            head.kill()
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"the Ray cluster left processes behind after `ray start --block` was stopped: {left}"


def _corpus(d: Path) -> Path:
    """Three JSONL files of short documents, one per task: ~110 shards of 24 KB in each part."""
    rng = random.Random(5)
    d.mkdir()
    for k in range(TASKS):
        with open(d / f"p{k}.jsonl", "w", encoding="utf-8") as f:
            for i in range(4200):
                f.write(json.dumps({"text": f"{k}.{i} " + " ".join(rng.choices(WORDS, k=rng.randint(5, 150)))})
                        + "\n")
    return d


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def reference(cluster, tmp_path_factory):
    """The corpus, an uninterrupted Ray job of it (checked against the local executor's), shards per part."""
    base = real(tmp_path_factory.mktemp("ray-crash"))
    src = _corpus(base / "in")
    local = _run(pack_cmd(src, base / "local", extra=("--num-tasks", str(TASKS))), cluster.env)
    assert local.returncode == 0, local.stderr[-3000:]
    cluster.ready()
    t0 = time.monotonic()
    r = _run(pack_cmd(src, base / "ref", extra=JOB), cluster.env)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["executor"] == "ray", r.stdout
    assert_same_dataset(base / "local", base / "ref")
    names = [s["name"] for s in json.loads((base / "ref" / MANIFEST_NAME).read_text())["shards"]]
    totals = [sum(n.startswith(f"task-{i:05d}-") for n in names) for i in range(TASKS)]
    assert sum(totals) == len(names) and min(totals) >= 100, totals
    return src, base / "ref", totals, took


# -- a running job's parts ---------------------------------------------------------------------------------
def _entries(part: Path) -> int:
    """Shards the part's journal lists (-1 before it has a journal); cheap enough to poll."""
    try:
        return (part / JOURNAL_NAME).read_bytes().count(b"\n") - 1
    except FileNotFoundError:
        return -1


def _finished(part: Path) -> bool:
    return (part / MANIFEST_NAME).exists()


def _holders(locks: list[Path]) -> dict[Path, list[int]]:
    """The processes that have each lock file open (the one packing a part holds its lock)."""
    want = {str(p): p for p in locks}
    found: dict[Path, list[int]] = {p: [] for p in locks}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in want:
                found[want[target]].append(int(pid))
    return found


def _describe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "(gone)"


def _session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Job:
    """One run of the chain's command, its output in files (a pipe nobody reads could stall it)."""

    proc: subprocess.Popen
    out: Path
    err: Path
    ctx: str
    events: list[str] = field(default_factory=list)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")[-3000:]

    def check_running(self, waiting_for: str) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"{self.ctx}: the job ended (exit {self.proc.returncode}) before {waiting_for}: "
                        f"{self.stderr()}")


def _start(cmd: list[str], env: dict[str, str], tmp: Path, ctx: str, n: int) -> Job:
    out, err = tmp / f"run{n}.out", tmp / f"run{n}.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env)
    return Job(proc, out, err, ctx)


def _kill_worker(job: Job, parts: list[Path], totals: list[int], rng: random.Random, sid: int) -> int:
    """(b): once a random unfinished part has journaled 0-3 more shards, SIGKILL the Ray worker packing it."""
    while True:
        open_parts = [i for i, p in enumerate(parts) if not _finished(p)]
        assert open_parts, f"{job.ctx}: every part is finished, no worker is left to kill (a bigger corpus)"
        i = rng.choice(open_parts)
        part, lock = parts[i], parts[i] / LOCK_NAME
        now = max(_entries(part), 0)
        at = now + rng.randint(0, min(3, max(totals[i] - now - 1, 0)))
        while not _finished(part):
            job.check_running(f"task {i} journaled {at} shards")
            if _entries(part) >= at:
                pids = _holders([lock])[lock]
                assert job.proc.pid not in pids, f"{job.ctx}: the driver itself packs task {i}"
                if pids:
                    pid, got = pids[0], _entries(part)
                    assert _session(pid) == sid, (f"{job.ctx}: task {i} runs in {_describe(pid)}, not in a worker "
                                                  "of the module's cluster (a new local Ray instance?)")
                    os.kill(pid, signal.SIGKILL)
                    job.events.append(f"worker {pid} of task {i} at {got}/{totals[i]}")
                    return i
            time.sleep(0.002)
        job.events.append(f"(task {i} finished before {at})")  # draw again among the unfinished parts


def _retry_taken_over(job: Job, part: Path, task: int) -> None:
    """Wait until Ray's new attempt at `task` holds the part's lock, or has already finished the part."""
    lock, deadline = part / LOCK_NAME, time.monotonic() + 60
    while time.monotonic() < deadline:
        if _holders([lock])[lock] or _finished(part):
            job.events.append(f"retried at {max(_entries(part), 0)}" + (" (finished)" if _finished(part) else ""))
            return
        job.check_running(f"Ray retried task {task}")
        time.sleep(0.01)
    pytest.fail(f"{job.ctx}: Ray did not run task {task} again within 60 s of its worker's SIGKILL")


def _kill_driver(job: Job, how: str, part: Path, task: int, total: int, rng: random.Random) -> None:
    """(a): SIGKILL the driver 0-300 ms after the worker but before the retry holds the lock ("pending"),
    1-3 shards into the retry ("shards"), or 0-50 ms into it ("delay": mid-shard, or while it resumes)."""
    if how == "pending":  # at the random moment, or as soon as the retry holds the part's lock
        lock, deadline = part / LOCK_NAME, time.monotonic() + rng.uniform(0, 0.3)
        while time.monotonic() < deadline and not _holders([lock])[lock]:
            time.sleep(0.002)
    else:
        _retry_taken_over(job, part, task)
        if how == "shards":
            now = max(_entries(part), 0)
            at = now + rng.randint(1, max(1, min(3, total - now - 1)))
            while _entries(part) < at and not _finished(part):
                job.check_running(f"task {task} journaled {at} shards")
                time.sleep(0.002)
        else:
            time.sleep(rng.uniform(0, 0.05))
    job.check_running("the driver was killed")
    job.proc.send_signal(signal.SIGKILL)
    job.proc.wait(timeout=30)
    assert job.proc.returncode == -signal.SIGKILL, f"{job.ctx}: the job ended ({job.proc.returncode}) first"
    job.events.append(f"driver ({how}) at task {task} {max(_entries(part), 0)}/{total}")


def _no_lock_held(parts: list[Path], ctx: str) -> float:
    """Seconds until no process holds any part's lock; failing past LINGER (a dead job's task goes on)."""
    t0 = time.monotonic()
    locks = [p / LOCK_NAME for p in parts]
    while held := {lk: pids for lk, pids in _holders(locks).items() if pids}:
        if time.monotonic() - t0 > LINGER:
            pytest.fail(f"{ctx}: {LINGER:.0f} s after the driver's SIGKILL, "
                        + "; ".join(f"{_describe(p)} (pid {p}) still holds {lk}" for lk, ps in held.items()
                                    for p in ps))
        time.sleep(0.01)
    return time.monotonic() - t0


def _check_parts(out: Path, parts: list[Path], kept: list[list], ctx: str) -> None:
    """Every journaled shard whole and still there; unfinished parts INCOMPLETE; nothing CORRUPT."""
    for i, part in enumerate(parts):
        if not part.is_dir():
            continue
        if _finished(part):
            report = verdict(part)
            assert report.verdict is Verdict.OK, f"{ctx}: finished task {i}: {report.verdict.value} " \
                                                 f"{[p.detail for p in report.problems][:3]}"
            continue
        entries = assert_journaled_shards_whole(part)
        assert_prefix(kept[i], entries, f"{ctx}, task {i}")
        kept[i] = entries
        assert_incomplete(part, f"{ctx}, task {i}")
    if out.exists():
        assert verdict(out).verdict is not Verdict.CORRUPT, f"{ctx}: the output verifies CORRUPT"


def test_ray_job_killed_worker_then_driver_resumes_byte_identically(cluster, reference, tmp_path):
    """Runs killed in a worker, then in the driver; the last survives two worker kills: the same bytes."""
    src, ref, totals, ref_seconds = reference
    t_chain = time.monotonic()
    rng = random.Random(SEED)
    out = real(tmp_path) / "out"
    parts = [Path(f"{out}.parts") / f"task-{i:05d}" for i in range(TASKS)]
    cmd = pack_cmd(src, out, extra=JOB)
    kept: list[list] = [[] for _ in parts]
    kills = {"driver": 0, "worker": 0}
    driver_kills = rng.sample(["pending", "pending", "shards", "shards", "delay"], RUNS - 1)  # each kind
    print(f"\nray crash chain (seed {SEED}): cluster start {cluster.started:.1f} s, uninterrupted job "
          f"{ref_seconds:.1f} s, shards per part {totals}")
    for n in range(RUNS):
        last = n == RUNS - 1
        done_before = {i for i, p in enumerate(parts) if _finished(p)}
        t0 = time.monotonic()
        job = _start(cmd, cluster.env, tmp_path, f"seed {SEED}, run {n}", n)
        try:
            for _ in range(2 if last else 1):
                task = _kill_worker(job, parts, totals, rng, cluster.sid)
                kills["worker"] += 1
                if last:  # the job must go on by itself: a new attempt takes the part over
                    _retry_taken_over(job, parts[task], task)
            if not last:
                _kill_driver(job, driver_kills[n], parts[task], task, totals[task], rng)
                kills["driver"] += 1
            else:
                job.proc.wait(timeout=180)
        finally:
            if job.proc.poll() is None:
                job.proc.kill()
                job.proc.wait()
        seconds = time.monotonic() - t0
        if not last:
            linger = _no_lock_held(parts, job.ctx)
            job.events.append(f"locks free after {linger:.2f} s")
            _check_parts(out, parts, kept, job.ctx)
        print(f"  run {n}: {seconds:5.1f} s  " + "; ".join(job.events), flush=True)
    assert job.proc.returncode == 0, f"{job.ctx}: the job did not finish after its workers were killed: " \
                                     f"{job.stderr()}"
    try:  # (Ray's driver printed "a worker died… will be retried" to stdout until the executor redirected it)
        result = json.loads(job.out.read_text())
    except json.JSONDecodeError:
        pytest.fail(f"{job.ctx}: stdout is not the --json document: {job.out.read_text()[:600]!r}")
    assert {t["task_id"] for t in result["tasks"] if t["reused"]} == done_before, (job.ctx, result["tasks"])
    assert_same_dataset(ref, out)
    assert verdict(out).verdict is Verdict.OK
    assert not Path(f"{out}.parts").exists(), "the finished job left its parts behind"
    assert not any(_holders([p / LOCK_NAME for p in parts]).values())
    print(f"  {kills['worker']} worker and {kills['driver']} driver SIGKILLs in {RUNS} runs, "
          f"{time.monotonic() - t_chain:.1f} s; byte-identical to the uninterrupted job")
