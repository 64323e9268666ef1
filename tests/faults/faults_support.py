"""Shared by the fault tests: syscall-exact kills and faults with strace, pack state checks, small mounts.

`strace -P FILE -e inject=SYSCALL:signal=KILL:when=N` delivers SIGKILL as the traced process enters its
N-th SYSCALL on FILE (`error=ENOSPC` makes that call fail instead): an exact, repeatable point with no hook
in the library. Only the main thread is traced (no `-f`): it does every read of the inputs and every
write, fsync and rename of the output; the tokenizer workers are not slowed down.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.cli import shardkit_cmd

from shardkit import Loader
from shardkit.format.checksums import ShardChecksums, digest_bytes, file_block_digests
from shardkit.verify import verify_dataset
from shardkit.verify.report import Verdict, VerifyReport
from shardkit.writer.journal import JOURNAL_NAME, Journal, JournalEntry

STRACE = shutil.which("strace")
# the variants the C library may use for one Python call (os.replace → rename, os.unlink → unlink, …)
SYSCALLS = {"rename": "rename,renameat,renameat2", "unlink": "unlink,unlinkat", "openat": "open,openat",
            "read": "read,pread64,readv,preadv,preadv2", "write": "write,pwrite64,writev", "fsync": "fsync,fdatasync"}


def pack_cmd(src: Path, out: Path, *, workers: int = 1, extra: tuple[str, ...] = ()) -> list[str]:
    """The pack command of the fault tests: small shards and blocks, so a small corpus has many of both."""
    return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--shard-size", "24KB", "--checksum-block-size",
                             "4KiB", "--workers", str(workers), "--quiet", "-t", "bytes", *extra]


def strace_cmd(cmd: list[str], *, syscall: str, path: Path, nth: int, log: Path, action: str = "signal=KILL"
               ) -> list[str]:
    """`cmd` under strace, with `action` injected into the `nth` `syscall` on `path` (logged to `log`).

    `-f` follows the process's threads: a 1-worker pack reads its inputs in a thread of its own
    (pack/pipeline.py). strace counts `nth` per thread; each file is read, or written, by one thread.
    """
    if STRACE is None:
        raise RuntimeError("strace is not installed")
    calls = SYSCALLS.get(syscall, syscall)
    return [STRACE, "-f", "-qq", "-y", "-o", str(log), "-P", str(path), "-e", f"trace={calls}",
            "-e", f"inject={calls}:{action}:when={nth}", *cmd]


_PID = re.compile(r"^\d+ +")  # strace -f -o: each line starts with the thread's id


def last_call(log: Path) -> str:
    """The syscall strace saw last (the injected one), shortened to `name(path…)`."""
    lines = [_PID.sub("", ln) for ln in log.read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if "(" in ln and not ln.startswith(("+++", "<..."))]
    if not lines:
        return "(no traced call)"
    line = re.sub(r"AT_FDCWD<[^>]*>", "", lines[-1])
    paths = re.findall(r'(?:<|")(/[^>"]*)', line)
    return f"{line.split('(', 1)[0]}({Path(paths[0]).name if paths else '?'})"


def real(p: Path) -> Path:
    """strace compares resolved paths: every path handed to it must have no symlink in it."""
    return Path(os.path.realpath(p))


# -- the state a killed or failed pack leaves -----------------------------------------------------------
def journal_entries(out: Path) -> list[JournalEntry]:
    got = Journal.read(out / JOURNAL_NAME)
    return got[2] if got else []


def assert_journaled_shards_whole(out: Path) -> list[JournalEntry]:
    """Every shard the journal lists is complete: sizes, sidecar digest, and every block checksum."""
    entries = journal_entries(out)
    for e in entries:
        s = e.shard
        raw = (out / s.sum_name).read_bytes()
        assert digest_bytes(raw) == s.sum_digest, f"{s.sum_name}: sidecar differs from the journal's digest"
        sums = ShardChecksums.from_bytes(raw, s.sum_name)
        assert (out / s.bin_name).stat().st_size == s.bin_bytes and (out / s.idx_name).stat().st_size == s.idx_bytes
        for name, fc in sums.files.items():
            assert file_block_digests(out / name, sums.block_size) == fc, f"{name} is not what its sidecar says"
    names = [n for e in entries for n in (e.shard.bin_name, e.shard.idx_name, e.shard.sum_name)]
    assert not [n for n in names if n.endswith(".tmp")], "a temp file is journaled"
    return entries


def verdict(out: Path) -> VerifyReport:
    return verify_dataset(out, mode="full", jobs=1)


def assert_incomplete(out: Path, context: str) -> VerifyReport:
    report = verdict(out)
    assert report.verdict is Verdict.INCOMPLETE, (
        f"{context}: verify says {report.verdict.value}, expected incomplete: "
        f"{[p.detail for p in report.problems][:3]} {report.notes}")
    return report


def assert_prefix(before: list[JournalEntry], after: list[JournalEntry], context: str) -> None:
    """A resumed run keeps every shard the journal had (SIGKILL loses nothing that was journaled)."""
    assert [e.shard for e in after[:len(before)]] == [e.shard for e in before], (
        f"{context}: the resumed run lost or rewrote journaled shards ({len(before)} before, {len(after)} now)")


# -- small file systems ------------------------------------------------------------------------------------
def can_mount() -> str | None:
    """None if this process may mount a tmpfs, else why not (tests that need one skip with this reason)."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root (CI runs the suite as root)"
    probe = tempfile.mkdtemp(prefix="shardkit-mount-probe-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe], capture_output=True,
                           text=True)
        if r.returncode:
            return f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}"
        subprocess.run(["umount", probe], check=True)
        return None
    except FileNotFoundError:
        return "no mount command"
    finally:
        os.rmdir(probe)


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the block (unmounted, lazily if busy, afterwards)."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def resize_tmpfs(where: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def run(cmd: list[str], timeout: float = 120) -> Run:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return Run(r.returncode, r.stdout, r.stderr)


def loader_digests(path: str | os.PathLike[str], seed: int, batches: int, *, release: str = "evict") -> list[str]:
    """A digest of every field of the first `batches` batches (small blocks: many shuffle groups)."""
    loader = Loader(path, seq_len=64, batch_schedule=16, seed=seed, block_samples=32, group_blocks=2,
                    release=release)
    out = []
    for _, batch in zip(range(batches), loader):
        h = hashlib.blake2b(digest_size=16)
        for k in sorted(batch):
            v = batch[k]
            h.update(k.encode() + (v.tobytes() if hasattr(v, "tobytes") else repr(v).encode()))
        out.append(h.hexdigest())
    return out


def traced_pid(proc: subprocess.Popen) -> int:
    """The pid of the command `proc` runs, strace or not (killing strace would only detach it: it goes on)."""
    if proc.args[0] != STRACE:  # type: ignore[index]
        return proc.pid
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.001)
    raise AssertionError("strace started no process")


def kill_pack(proc: subprocess.Popen) -> None:
    """SIGKILL the pack itself (under strace, strace then exits the same way)."""
    os.kill(traced_pid(proc), signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the pack ended ({proc.returncode}) before it was killed"
