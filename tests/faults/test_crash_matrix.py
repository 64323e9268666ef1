"""The crash matrix: SIGKILL a real `shardkit pack` at exact syscalls, and a training loop at random steps.

Pack: each point is "the N-th SYSCALL on FILE" (strace delivers SIGKILL as the thread that makes the call
enters it: the 1-worker pack reads its inputs in a thread of its own and writes in its main thread, see
pack/pipeline.py and faults_support). The points are targeted — every phase: taking the lock, writing the journal,
opening and reading inputs, the moment a chunk has been tokenized, writing, fsyncing and renaming each
kind of shard file, the journal appends, the directory fsyncs, the manifest — plus a seeded random draw
over (syscall, shard, file, occurrence). They run as one chain on one output directory, in the order
they occur in an uninterrupted run: each run resumes what the previous kill left and is killed at the
next point. After every kill: verify says INCOMPLETE, every journaled shard is whole (sizes, sidecar
digest, every block checksum), the resumed run kept every journaled shard; at the end, the dataset is
byte-identical to the uninterrupted pack. Two more points kill the pack's main process while its
tokenizer workers hold chunks, and one tokenizer worker (as the OOM killer would).

A kill between two syscalls leaves exactly the on-disk state of a kill at the next syscall (nothing
outside the process changes in between), so syscall points cover every moment of the run, including
those spent tokenizing in-process: "tokenized" points are the first syscall after a chunk was encoded.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from faults_support import (
    STRACE,
    SYSCALLS,
    assert_incomplete,
    assert_journaled_shards_whole,
    assert_prefix,
    journal_entries,
    last_call,
    pack_cmd,
    real,
    run,
    strace_cmd,
    verdict,
)
from integration.pack.test_crash_resume import _corpus
from support.dataset_bytes import assert_same_dataset

from shardkit.verify.report import Verdict
from shardkit.writer import write_dataset
from shardkit.writer.journal import JOURNAL_NAME, MERGE_MARKER_NAME

try:  # the training chain reuses the SIGKILL training test's constants and log reader (it needs torch)
    from integration import test_train_crash_resume as train
except pytest.skip.Exception:
    train = None

pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")

SEED = 8  # the random points; change only deliberately (the printed table lists what each one hit)
RANDOM_POINTS = 10
_CALL = re.compile(r'^(\w+)\((.*)')
_PID = re.compile(r"^\d+ +")  # strace -f: the thread's id before each call


@dataclass(frozen=True)
class Point:
    """Kill the pack as it enters the `nth` `syscall` on `name` (in the output dir, or `in/NAME`)."""

    phase: str
    syscall: str
    name: str  # a file in the output directory, "." for the directory, "in/FILE" for an input
    nth: int = 1
    shard: int | None = None  # journal append / directory fsync of this shard: nth counts from the run's first
    expect: Verdict = Verdict.INCOMPLETE
    after: str | None = None  # run right after the point of this phase; name is then the run's first shard

    def path(self, src: Path, out: Path, kept: int = 0) -> Path:
        if self.after is not None:  # the run's first write: its first chunk has just been tokenized
            return out / f".shard-{kept:05d}.bin.tmp"
        if self.name.startswith("in/"):
            return src / self.name[3:]
        return out if self.name == "." else out / self.name

    def nth_in_run(self, kept: int) -> int:
        return self.nth if self.shard is None else self.shard - kept + 1


def _calls(log: Path) -> list[tuple[str, str]]:
    """(syscall, file path) of each call in a strace log (fd arguments resolved by -y)."""
    names = {v: k for k, group in SYSCALLS.items() for v in group.split(",")}
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _CALL.match(_PID.sub("", line))
        if not m:
            continue
        args = re.sub(r"AT_FDCWD<[^>]*>", "", m.group(2))
        paths = re.findall(r'(?:<|")(/[^>"]*)', args)
        if paths:
            out.append((names.get(m.group(1), m.group(1)), paths[0]))
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus, an uninterrupted pack of it, and that pack's syscalls (traced, never injected)."""
    base = real(tmp_path_factory.mktemp("matrix"))
    src = _corpus(base / "in", files=4, docs=1500, seed=3)
    for p in src.iterdir():  # short documents: 4096-document chunks, so reading and writing interleave
        lines = [json.loads(line) for line in p.read_text().splitlines()]
        p.write_text("".join(json.dumps({"text": d["text"][:300]}) + "\n" for d in lines))
    ref = base / "ref"
    log = base / "ref.strace"
    traced = ",".join(SYSCALLS.values()) + ",flock"
    r = run([STRACE, "-f", "-qq", "-y", "-o", str(log), "-e", f"trace={traced}", *pack_cmd(src, ref)])
    assert r.returncode == 0, r.stderr
    return src, ref, _calls(log)


def _position(calls: list[tuple[str, str]], src: Path, ref: Path, p: Point, points: list[Point]) -> float:
    """Where `p` falls in the uninterrupted run (points are run in this order)."""
    if p.after is not None:
        return _position(calls, src, ref, next(q for q in points if q.phase == p.after), points) + 0.5
    want = str(p.path(src, ref))
    nth = p.nth if p.shard is None else p.shard + 1
    seen = 0
    for i, (name, path) in enumerate(calls):
        if name == p.syscall and path == want:
            seen += 1
            if seen == nth:
                return i
    raise AssertionError(f"{p} does not occur in the uninterrupted pack ({seen} such calls): fix the schedule")


def _count(calls: list[tuple[str, str]], syscall: str, path: Path) -> int:
    return sum(1 for name, q in calls if name == syscall and q == str(path))


def _targeted(calls: list[tuple[str, str]], src: Path, shards: int) -> list[Point]:
    files = sorted(p.name for p in src.iterdir())
    last_input = src / files[-1]
    s = [shards // 8, shards // 6, shards // 4, shards // 3, shards // 2, (2 * shards) // 3]
    return [
        Point("start: lock taken", "flock", ".shardkit-lock"),
        Point("start: journal header", "write", f"{JOURNAL_NAME}.tmp"),
        Point("start: journal rename", "rename", f"{JOURNAL_NAME}.tmp"),
        Point("reading: first input opened", "openat", f"in/{files[0]}"),
        Point("reading: second input", "read", f"in/{files[1]}"),
        Point("tokenized: first chunk, nothing written", "openat", ".shard-00000.bin.tmp"),
        Point("writing: .bin", "write", f".shard-{s[0]:05d}.bin.tmp"),
        Point("writing: .idx", "write", f".shard-{s[0] + 1:05d}.idx.tmp"),
        Point("writing: .sum.json", "write", f".shard-{s[0] + 2:05d}.sum.json.tmp"),
        Point("writing: journal append", "write", JOURNAL_NAME, shard=s[1]),
        Point("fsync: .bin", "fsync", f".shard-{s[2]:05d}.bin.tmp"),
        Point("fsync: .idx", "fsync", f".shard-{s[2] + 1:05d}.idx.tmp"),
        Point("fsync: .sum.json", "fsync", f".shard-{s[2] + 2:05d}.sum.json.tmp"),
        Point("fsync: directory after a shard", "fsync", ".", shard=s[3]),
        Point("fsync: journal append", "fsync", JOURNAL_NAME, shard=s[3] + 3),
        Point("rename: .bin", "rename", f".shard-{s[4]:05d}.bin.tmp"),
        Point("rename: .idx", "rename", f".shard-{s[4] + 1:05d}.idx.tmp"),
        Point("rename: .sum.json (the shard's last rename)", "rename", f".shard-{s[4] + 2:05d}.sum.json.tmp"),
        Point("reading: a later input opened", "openat", f"in/{files[-1]}"),
        Point("reading: end of the last input", "read", f"in/{files[-1]}", nth=_count(calls, "read", last_input)),
        # resumed after the point above, the run reads the rest in one chunk: its first write follows the
        # tokenization of the last chunk
        Point("tokenized: last chunk, nothing of it written", "write", "(first shard of the run)",
              after="reading: end of the last input"),
        Point("writing: last shard .bin", "write", f".shard-{shards - 1:05d}.bin.tmp"),
        Point("manifest: write", "write", ".manifest.json.tmp"),
        Point("manifest: fsync", "fsync", ".manifest.json.tmp"),
        Point("manifest: rename", "rename", ".manifest.json.tmp"),
        Point("manifest: directory fsync (after its rename)", "fsync", ".", shard=shards, expect=Verdict.OK),
        Point("finish: journal removal (manifest is in place)", "unlink", JOURNAL_NAME, expect=Verdict.OK),
    ]


def _random(shards: int, rng: random.Random) -> list[Point]:
    """Seeded points over (syscall, shard, file); always a file's first such call (how many writes one
    `.bin` gets depends on where chunks start, which moves when a run resumes)."""
    kinds = [("write", "bin"), ("write", "idx"), ("write", "sum.json"), ("fsync", "bin"), ("fsync", "idx"),
             ("fsync", "sum.json"), ("rename", "bin"), ("rename", "idx"), ("rename", "sum.json"),
             ("write", "journal"), ("fsync", "journal"), ("fsync", "dir")]
    out = []
    for _ in range(RANDOM_POINTS):
        syscall, kind = rng.choice(kinds)
        shard = rng.randrange(1, shards)
        if kind == "journal":
            out.append(Point(f"random: journal {syscall}", syscall, JOURNAL_NAME, shard=shard))
        elif kind == "dir":
            out.append(Point("random: directory fsync", syscall, ".", shard=shard))
        else:
            out.append(Point(f"random: .{kind} {syscall}", syscall, f".shard-{shard:05d}.{kind}.tmp"))
    return out


def _show(rows: list[tuple]) -> None:
    print(f"\n{'#':>3}  {'phase':<48} {'injected at':<34} {'journaled shards':>16}  verdict")
    for i, (phase, call, before, after, v) in enumerate(rows, 1):
        print(f"{i:>3}  {phase:<48} {call:<34} {before:>7} → {after:<6}  {v}")


def _chain(points: list[Point], src: Path, out: Path, tmp: Path) -> list[tuple]:
    """Run `points` in order on one output directory: each run resumes what the previous kill left."""
    rows = []
    for i, p in enumerate(points):
        before = journal_entries(out) if out.exists() else []
        log = tmp / f"{out.name}-kill{i}.strace"
        target = p.path(src, out, len(before))
        cmd = strace_cmd(pack_cmd(src, out), syscall=p.syscall, path=target, nth=p.nth_in_run(len(before)),
                         log=log)
        r = run(cmd)
        where = f"{out.name} point {i + 1} ({p.phase}: {p.syscall} #{p.nth_in_run(len(before))} on {target.name})"
        assert r.returncode == -signal.SIGKILL, f"{where}: the run ended ({r.returncode}) first: {r.stderr[-500:]}"
        after = assert_journaled_shards_whole(out)
        assert_prefix(before, after, where)
        if p.expect is Verdict.INCOMPLETE:
            assert not (out / "manifest.json").exists(), where
            assert_incomplete(out, where)
        else:
            assert verdict(out).verdict is p.expect, where
        rows.append((p.phase, last_call(log), len(before), len(after), p.expect.value))
    done = run(pack_cmd(src, out))
    assert done.returncode == 0, done.stderr
    assert "resumed" in done.stdout
    return rows


def test_sigkill_matrix_resumes_byte_identically(reference, tmp_path):
    src, ref, calls = reference
    shards = len(json.loads((ref / "manifest.json").read_text())["shards"])
    assert shards >= 60, shards
    targeted = _targeted(calls, src, shards)
    points = targeted + _random(shards, random.Random(SEED))
    at = {p: _position(calls, src, ref, p, points) for p in points}
    points.sort(key=at.__getitem__)
    # two chains side by side (one per core), each in order; a point run "after" another stays with it
    chains: list[list[Point]] = [[], []]
    c = 1
    for p in points:
        c = c if p.after else 1 - c
        chains[c].append(p)
    outs = [real(tmp_path) / f"out{c}" for c in range(2)]
    with ThreadPoolExecutor(2) as pool:
        rows = [f.result() for f in [pool.submit(_chain, c, src, o, tmp_path) for c, o in zip(chains, outs)]]
    for c, r in enumerate(rows):
        print(f"\nchain {c}:")
        _show(r)
    for out in outs:
        assert_same_dataset(ref, out)
        assert verdict(out).verdict is Verdict.OK
    phases = {p.phase.split(":")[0] for p in targeted}
    assert phases >= {"start", "reading", "tokenized", "writing", "fsync", "rename", "manifest", "finish"}
    print(f"crash matrix: {len(points)} SIGKILL points ({len(targeted)} targeted, {RANDOM_POINTS} random, "
          f"seed {SEED}) in 2 chains, {len(points) + 2} pack runs, both final datasets byte-identical "
          f"({shards} shards)")


# -- kills while the tokenizer workers hold chunks -------------------------------------------------------
def _workers(pid: int) -> list[int]:
    """The pack's tokenizer processes (its spawn children; not the resource tracker)."""
    found = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # it exited
        return []
    for tid in threads:
        try:  # (threads and children come and go while we look)
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for k in kids:
            try:
                if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes():
                    found.append(int(k))
            except OSError:
                pass
    return found


def _until(cond, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def many_chunks(tmp_path_factory):
    """40,000 short documents (ten 4096-document chunks, so work stays in flight) and their pack."""
    base = real(tmp_path_factory.mktemp("workers"))
    src = base / "in"
    src.mkdir()
    rng = random.Random(4)
    with open(src / "w.jsonl", "w") as f:
        for _ in range(40_000):
            f.write(json.dumps({"text": " ".join(rng.choice(["ab", "cde", "f", "ghij"]) for _ in range(6))}) + "\n")
    ref = base / "ref"
    assert run(pack_cmd(src, ref)).returncode == 0
    return src, ref


def _start_with_workers(src: Path, out: Path, *, more_than: int) -> subprocess.Popen:
    """A 2-worker pack, returned once both workers run and it journaled a shard beyond `more_than`."""
    proc = subprocess.Popen(pack_cmd(src, out, workers=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # (pack starts a first 1-process pool it discards when no self-check is needed: wait for 2 workers)
    _until(lambda: len(_workers(proc.pid)) >= 2 and len(journal_entries(out)) > more_than
           or proc.poll() is not None, what="2 workers and a journaled shard")
    return proc


def test_main_killed_while_workers_hold_chunks(many_chunks, tmp_path):
    """SIGKILL the pack while its 2 tokenizer workers hold chunks: they exit too, and the re-run resumes."""
    src, ref = many_chunks
    out = real(tmp_path) / "out"
    proc = _start_with_workers(src, out, more_than=0)
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the pack finished before the kill"
    kept = assert_journaled_shards_whole(out)
    assert_incomplete(out, "main process killed")
    _until(lambda: not any(_alive(w) for w in workers), 15, "the killed pack's workers to exit")
    done = run(pack_cmd(src, out, workers=2))
    assert done.returncode == 0, done.stderr
    assert f"resumed: {len(kept)} shard(s)" in done.stdout
    assert_same_dataset(ref, out)


def test_a_killed_worker_stops_the_pack_cleanly(many_chunks, tmp_path):
    """SIGKILL one tokenizer worker (the OOM killer's choice): the pack stops, nothing half-written, resumes.

    It must stop promptly and say so in one line (exit 1) — before pool.py watched worker liveness it
    either printed a BrokenProcessPool traceback or, when the worker died while sending a result, hung
    forever (the executor's thread waited for the rest of a half-written message).
    """
    src, ref = many_chunks
    out = real(tmp_path) / "out"
    proc = _start_with_workers(src, out, more_than=0)
    victims = _workers(proc.pid)
    assert victims, "the pack finished before a worker could be killed"
    before = journal_entries(out)
    os.kill(victims[0], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=20)
        hung = False
    except subprocess.TimeoutExpired:
        others = _workers(proc.pid)
        proc.kill()
        _, err = proc.communicate()
        _until(lambda: not any(_alive(w) for w in others), 15, "the hung pack's workers to exit")
        hung = True
    assert hung or proc.returncode == 1, f"exit {proc.returncode}: {err[-1000:]}"
    assert_prefix(before, assert_journaled_shards_whole(out), "worker killed")
    assert_incomplete(out, "worker killed")
    done = run(pack_cmd(src, out, workers=2))
    assert done.returncode == 0, done.stderr
    assert_same_dataset(ref, out)
    assert not hung, "the pack hung after a tokenizer worker was SIGKILLed (no exit in 20 s)"
    assert "Traceback" not in err and "worker process died" in err, err[-1000:]


# -- a training loop killed at 20 random steps ------------------------------------------------------------
ZYGOTE = r"""
import importlib.util, json, os, sys
import torch  # imported once here; every run is a fork of this process
import torch._inductor  # noqa: F401  (use_deterministic_algorithms imports it: 2 s in every run otherwise)
spec = importlib.util.spec_from_file_location("train_torch", sys.argv[1])
train_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_torch)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1), os.dup2(fd, 2)
        code = 0
        try:
            train_torch.main(job["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback; traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class _Zygote:
    """A process that imported torch and the example once; each run is a fork, so 20 restarts cost ~nothing."""

    def __init__(self, tmp: Path) -> None:
        script = tmp / "zygote.py"
        script.write_text(ZYGOTE)
        self.proc = subprocess.Popen([sys.executable, str(script), str(train.SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def start(self, argv: list[str], out: Path) -> int:
        self.proc.stdin.write(json.dumps({"argv": argv, "out": str(out)}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return int(self.proc.stdout.readline())  # type: ignore[union-attr]

    def wait(self) -> int:
        return int(json.loads(self.proc.stdout.readline())["exit"])  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=30)


def test_training_killed_at_20_random_steps_resumes_identically(tmp_path):
    """One chain of 21 runs of examples/train_torch.py: 20 SIGKILLs at seeded random steps, then the finish."""
    if train is None:
        pytest.skip("torch is not installed")
    rng = np.random.default_rng(2024)
    data = tmp_path / "ds"
    write_dataset(data, [rng.integers(0, train.VOCAB, size=int(rng.integers(5, 300)), dtype=np.uint16)
                         for _ in range(250)], max_tokens_per_shard=6000, checksum_block_size=4096)
    steps = train.STEPS

    def argv(ckpt: Path, log: Path) -> list[str]:
        return ["--data", str(data), "--ckpt-dir", str(ckpt), "--steps", str(steps), "--seq-len", str(train.SEQ),
                "--batch", str(train.BATCH), "--workers", "0", "--ckpt-every", str(train.CKPT_EVERY),
                "--log", str(log), "--seed", "5", "--vocab", str(train.VOCAB)]

    zygote = _Zygote(tmp_path)
    pid = None
    try:
        zygote.start(argv(tmp_path / "ref-ckpt", tmp_path / "ref.jsonl"), tmp_path / "ref.out")
        assert zygote.wait() == 0, (tmp_path / "ref.out").read_text()
        reference = {e["step"]: e for e in train._read_log(tmp_path / "ref.jsonl")}
        assert sorted(reference) == list(range(steps)) and len({e["hash"] for e in reference.values()}) == steps
        kills = random.Random("train-kill-chain")
        ckpt, resumed_at, killed_at = tmp_path / "ckpt", [], []
        for attempt in range(21):
            log, out = tmp_path / f"log{attempt}.jsonl", tmp_path / f"out{attempt}.txt"
            start = json.loads((ckpt / "latest.json").read_text())["step"] if (ckpt / "latest.json").exists() else 0
            pid = zygote.start(argv(ckpt, log), out)
            if attempt < 20:
                step = kills.randint(start, min(start + 2 * train.CKPT_EVERY - 3, steps - train.SLACK))
                _until(lambda s=step, lg=log: any(e["step"] >= s for e in train._read_log(lg)), 60,
                       f"attempt {attempt} to log step {step}")
                os.kill(pid, signal.SIGKILL)
                assert zygote.wait() == -signal.SIGKILL, out.read_text()
                killed_at.append(step)
            else:
                assert zygote.wait() == 0, out.read_text()
            pid = None
            entries = train._read_log(log)
            got = [e["step"] for e in entries]
            assert got == list(range(start, start + len(got))), f"attempt {attempt} skipped or repeated a step"
            for e in entries:
                assert e == reference[e["step"]], f"attempt {attempt}, step {e['step']}: {e} != reference"
            if start:
                assert f"resumed at step {start}" in out.read_text()
            resumed_at.append(start)
        assert got[-1] == steps - 1 and entries[-1]["loss"] == reference[steps - 1]["loss"]
        print(f"\ntraining: 20 SIGKILLs at steps {killed_at}; runs resumed at {resumed_at}; every logged batch "
              f"and loss equals the uninterrupted run")
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            zygote.wait()
        zygote.close()


# -- a scale-out job (--num-tasks): the tasks' parts, then the merge ----------------------------------------
def test_a_killed_scale_out_job_resumes_byte_identically(reference, tmp_path):
    """SIGKILL a `--num-tasks 2` job in a task's part, at the merge's first hard link and at the merged
    manifest: the same command finishes it, byte-identical to an uninterrupted job.

    The local executor (the merge and the task code are the executors' common code; a Ray job adds ~12 s
    of cluster start per run, so its driver is not in this matrix: see docs/reliability.md).
    """
    src, _, _ = reference
    job = ("--num-tasks", "2")
    ref, out = real(tmp_path) / "ref", real(tmp_path) / "out"
    assert run(pack_cmd(src, ref, extra=job)).returncode == 0
    parts = Path(f"{out}.parts")
    marker = out / MERGE_MARKER_NAME
    points = [("a part's shard fsync", "fsync", parts / "task-00001" / ".task-00001-shard-00005.bin.tmp", 1),
              ("the merge marker's rename", "rename", out / f".{MERGE_MARKER_NAME}.tmp", 1),
              ("the merge's first hard link", "link,linkat", out / ".task-00000-shard-00000.bin.tmp", 1),
              ("the merge's fifth hard link", "link,linkat", out / ".task-00000-shard-00004.bin.tmp", 1),
              ("the merged manifest's rename", "rename", out / ".manifest.json.tmp", 1)]
    for what, syscall, path, nth in points:
        r = run(strace_cmd(pack_cmd(src, out, extra=job), syscall=syscall, path=path, nth=nth,
                           log=tmp_path / "job.strace"))
        assert r.returncode == -signal.SIGKILL, f"{what}: the job ended ({r.returncode}) first: {r.stderr[-500:]}"
        part = parts / "task-00001"
        if what.startswith("a part"):
            assert_journaled_shards_whole(part)
            assert_incomplete(part, what)
        else:
            assert verdict(out).verdict is Verdict.INCOMPLETE, f"{what}: {verdict(out).verdict.value}"
    done = run(pack_cmd(src, out, extra=job))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert_same_dataset(ref, out)
    # killed between the manifest and the marker's removal: a finished dataset (the marker is only noted)
    shutil.rmtree(out)
    r = run(strace_cmd(pack_cmd(src, out, extra=job), syscall="unlink", path=marker, nth=1,
                       log=tmp_path / "job.strace"))
    assert r.returncode == -signal.SIGKILL and marker.exists(), r.stderr[-500:]
    report = verdict(out)
    assert report.verdict is Verdict.OK and any(MERGE_MARKER_NAME in n for n in report.notes), report.notes
    marker.unlink()  # the one file more than an uninterrupted job's
    assert_same_dataset(ref, out)
