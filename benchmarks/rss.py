"""Peak resident memory of a process tree, sampled from /proc (Linux), for benchmark scripts."""

from __future__ import annotations

import os
import subprocess
import threading
import time

__all__ = ["run_measured"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _tree_rss(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * _PAGE
        except OSError:
            continue
        stack += _children(p)
    return total


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float, int]:
    """Run `cmd`; return (completed process, wall seconds, peak RSS of the whole process tree in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    stop.set()
    t.join()
    wall = time.perf_counter() - t0
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), wall, peak[0]
