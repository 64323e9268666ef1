"""Concurrency: many readers of one dataset, verify while a pack writes, two packs into one directory.

A slow disk is simulated with strace delaying every fsync of the pack's main thread (no hook in the
library), so a pack lasts long enough for another process to race it many times.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from faults_support import (
    STRACE,
    assert_journaled_shards_whole,
    journal_entries,
    kill_pack,
    loader_digests,
    pack_cmd,
    real,
    run,
    verdict,
)
from integration.pack.test_crash_resume import _corpus
from support.dataset_bytes import assert_same_dataset

from shardkit.verify.report import Verdict
from shardkit.writer import write_dataset

BATCHES = 40
HERE = Path(__file__).resolve().parent
READER = """
import sys, time, json
from pathlib import Path
from faults_support import loader_digests
path, seed, release, go, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5]
while not go.exists():  # every reader starts reading at the same moment
    time.sleep(0.001)
Path(out).write_text(json.dumps(loader_digests(path, seed, int(sys.argv[6]), release=release)))
"""


def test_eight_concurrent_readers_get_exactly_the_single_process_batches(tmp_path):
    """8 loader processes on one dataset at once (4 with one seed, 4 with others; page-cache eviction by
    some while others read): each gets the batches one process alone gets."""
    rng = np.random.default_rng(7)
    data = tmp_path / "ds"
    write_dataset(data, [rng.integers(0, 50_000, size=int(rng.integers(10, 900)), dtype=np.uint16)
                         for _ in range(600)], max_tokens_per_shard=20_000, checksum_block_size=4096)
    assert len(list(data.glob("*.bin"))) >= 10
    script, go = tmp_path / "reader.py", tmp_path / "go"
    script.write_text(READER)
    seeds = [0, 0, 0, 0, 1, 2, 3, 4]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    procs = [subprocess.Popen([sys.executable, str(script), str(data), str(s), "evict" if i % 2 else "unmap",
                               str(go), str(tmp_path / f"r{i}.json"), str(BATCHES)], stderr=subprocess.PIPE,
                              text=True, env=env)
             for i, s in enumerate(seeds)]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    alone = {s: loader_digests(data, s, BATCHES) for s in set(seeds)}
    for i, s in enumerate(seeds):
        assert json.loads((tmp_path / f"r{i}.json").read_text()) == alone[s], f"reader {i} (seed {s}) differs"
    assert len({tuple(v) for v in alone.values()}) == len(alone), "different seeds gave the same batches"


# -- verify while a pack writes ---------------------------------------------------------------------------
def _slow(cmd: list[str], tmp: Path, delay: str = "4ms") -> list[str]:
    """`cmd` with every fsync of its main thread delayed (a slow disk), if strace is here."""
    if STRACE is None:
        return cmd
    return [STRACE, "-qq", "-o", str(tmp / "slow.strace"), "-e", "trace=fsync",
            "-e", f"inject=fsync:delay_enter={delay}", *cmd]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = real(tmp_path_factory.mktemp("conc"))
    src = _corpus(base / "in", files=3, docs=300, seed=3)
    ref = base / "ref"
    assert run(pack_cmd(src, ref)).returncode == 0
    return src, ref


def _verify_while(proc: subprocess.Popen, out: Path) -> list[Verdict]:
    """Verify `out` over and over while `proc` runs (from when its lock file exists), and twice after."""
    seen: list[Verdict] = []
    deadline = time.monotonic() + 120
    while not (out / ".shardkit-lock").exists():  # before this, pack has not created anything
        assert proc.poll() is None and time.monotonic() < deadline, "the pack ended before it started"
        time.sleep(0.001)
    while proc.poll() is None:
        report = verdict(out)
        assert report.verdict is not Verdict.CORRUPT, (
            f"verify said corrupt during a pack: {[(p.check.value, p.file, p.detail) for p in report.problems]}")
        seen.append(report.verdict)
        assert time.monotonic() < deadline
    return seen + [verdict(out).verdict, verdict(out).verdict]


def _assert_incomplete_then_ok(seen: list[Verdict], context: str) -> None:
    assert Verdict.CORRUPT not in seen, f"{context}: verify said corrupt during the pack"
    first_ok = seen.index(Verdict.OK) if Verdict.OK in seen else len(seen)
    assert set(seen[:first_ok]) <= {Verdict.INCOMPLETE} and set(seen[first_ok:]) == {Verdict.OK}, (
        f"{context}: verdicts must be incomplete until the manifest appears, then ok: {seen}")


def test_verify_during_a_pack_says_incomplete_until_the_manifest_then_ok(corpus, tmp_path):
    """Verify runs hundreds of times during a real pack, and again during a resumed one."""
    src, ref = corpus
    out = real(tmp_path) / "out"
    # a pack killed half-way (verify loops during it) ...
    proc = subprocess.Popen(_slow(pack_cmd(src, out), tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: list[Verdict] = []
    while len(journal_entries(out)) < 60:
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        if (out / ".shardkit-lock").exists():
            seen.append(verdict(out).verdict)
    kill_pack(proc)
    assert set(seen) <= {Verdict.INCOMPLETE}, seen
    assert_journaled_shards_whole(out)
    # ... then the same command resumes it (verify loops during the resume, its clean-up and the manifest)
    proc = subprocess.Popen(_slow(pack_cmd(src, out), tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    resumed = _verify_while(proc, out)
    assert proc.returncode == 0, proc.stderr.read()  # type: ignore[union-attr]
    _assert_incomplete_then_ok(resumed, "resumed pack")
    print(f"\nverify ran {len(seen)} times during the killed pack, {len(resumed)} during the resumed one")
    assert len(seen) + len(resumed) >= 50, "verify did not race the pack often enough to mean anything"
    assert_same_dataset(ref, out)


def test_verify_during_a_fresh_pack(corpus, tmp_path):
    src, ref = corpus
    out = real(tmp_path) / "out"
    proc = subprocess.Popen(_slow(pack_cmd(src, out), tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = _verify_while(proc, out)
    assert proc.returncode == 0, proc.stderr.read()  # type: ignore[union-attr]
    _assert_incomplete_then_ok(seen, "fresh pack")
    assert seen.count(Verdict.INCOMPLETE) >= 20, seen
    assert_same_dataset(ref, out)


# -- two packs, one directory -------------------------------------------------------------------------------
def _refused(r) -> None:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "another shardkit pack is writing here" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_second_pack_into_the_same_directory_is_refused_and_never_interleaves(corpus, tmp_path):
    src, ref = corpus
    out = real(tmp_path) / "out"
    alias = tmp_path / "alias"
    alias.symlink_to(out, target_is_directory=True)
    first = subprocess.Popen(pack_cmd(src, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while len(journal_entries(out)) < 3:
        assert first.poll() is None, first.communicate()
        time.sleep(0.002)
    os.kill(first.pid, signal.SIGSTOP)  # it holds the lock, mid-pack, for as long as the others take
    try:
        files = sorted(p.name for p in out.iterdir())
        for cmd in (pack_cmd(src, out), pack_cmd(src, out, extra=("--overwrite",)), pack_cmd(src, alias),
                    pack_cmd(src, Path(f"{out}/../{out.name}"), extra=("--no-resume",))):
            _refused(run(cmd))
        assert sorted(p.name for p in out.iterdir()) == files, "a refused pack changed the directory"
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert_same_dataset(ref, out)


def test_two_packs_started_together_one_wins(corpus, tmp_path):
    src, ref = corpus
    out = real(tmp_path) / "out"
    procs = [subprocess.Popen(pack_cmd(src, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 1], results
    loser = next(r for r in results if r[0] == 1)
    assert "another shardkit pack is writing here" in loser[2], loser
    assert_same_dataset(ref, out)


def test_the_lock_dies_with_a_killed_pack(corpus, tmp_path):
    """flock is released by the kernel when its holder dies: a SIGKILLed pack never leaves a stale lock."""
    src, ref = corpus
    out = real(tmp_path) / "out"
    proc = subprocess.Popen(_slow(pack_cmd(src, out), tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(journal_entries(out)) < 2:
        assert proc.poll() is None
        time.sleep(0.01)
    kill_pack(proc)
    done = run(pack_cmd(src, out))
    assert done.returncode == 0, done.stderr
    assert "resumed" in done.stdout
    assert_same_dataset(ref, out)
