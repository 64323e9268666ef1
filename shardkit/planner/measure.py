"""Measure what one node really reads from storage, to check the planner's model on this machine.

A node is simulated by `G` loaders (its ranks of world size `W`) in one fresh process whose data files
were evicted from the page cache first; the kernel's count of bytes read from storage (`/proc/self/io`
`read_bytes`, all threads) is taken after some warm-up steps and again after the measured steps, each time
once every hint was issued. With `memory_limit`, the process runs in a fresh memory cgroup (v1 or v2)
limited to its own baseline plus that many bytes: the node's page cache. Needs Linux, a file system that
drops clean pages on `POSIX_FADV_DONTNEED`, and (for the limit) permission to create cgroups.

    python -m shardkit.planner.measure '<json spec>'     # what `measure_node` runs
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["memory_cgroup", "measure_node"]


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[Path | None]:
    """A fresh memory cgroup limited to `limit_bytes` (yields its `cgroup.procs`), or None if not allowed."""
    made = None
    for root, limit in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                        (Path("/sys/fs/cgroup/unified"), "memory.max"), (Path("/sys/fs/cgroup"), "memory.max")):
        try:
            if not (root / "cgroup.procs").exists():
                continue
            d = root / f"shardkit-plan-{os.getpid()}"
            d.mkdir()
            if (d / limit).exists():
                (d / limit).write_text(str(int(limit_bytes)))
                made = d
                break
            d.rmdir()
        except OSError:
            continue
    try:
        yield None if made is None else made / "cgroup.procs"
    finally:
        if made is not None:
            with contextlib.suppress(OSError):  # the child has exited: the group is empty
                made.rmdir()


def measure_node(data: str | os.PathLike[str] | dict[str, Any], *, world_size: int, ranks: list[int],
                 warm_steps: int, steps: int, memory_limit: int | None = None, step_seconds: float = 0.0,
                 loader_options: dict[str, Any] | None = None, timeout: float = 900) -> dict[str, Any]:
    """Storage bytes read by a node running `ranks` of a loader over steps [warm, warm + steps): `data` is a
    dataset path (a `Loader`, `loader_options` its keyword arguments) or a recipe dict (a `MixtureLoader`).
    `step_seconds`: the time a training step takes (the loaders wait that long between steps), so that the
    hints run ahead of the copies as they do in a real run.

    Returns {"read_bytes", "rows", "evicted", "limited", "baseline_bytes"}; `evicted` False means the page
    cache could not be emptied (the count would be too low), `limited` whether the cgroup limit applied.
    """
    kind, source = ("recipe", data) if isinstance(data, dict) else ("dataset", os.fspath(data))
    spec = {"kind": kind, "source": source, "world_size": world_size, "ranks": ranks, "warm_steps": warm_steps,
            "steps": steps, "step_seconds": step_seconds, "options": loader_options or {}}
    cmd = [sys.executable, "-m", "shardkit.planner.measure", json.dumps(spec)]
    if memory_limit is None:
        return _run(cmd, None, timeout) | {"limited": False, "baseline_bytes": 0}
    # the cgroup also holds what the process allocates after joining it (the loaders' own memory): measured
    # by a run of the warm-up steps in an unlimited group
    probe = json.loads(cmd[-1]) | {"steps": 1}
    with memory_cgroup(1 << 50) as procs:
        if procs is None:
            return _run(cmd, None, timeout) | {"limited": False, "baseline_bytes": 0}
        baseline = _run(cmd[:-1] + [json.dumps(probe)], procs, timeout)["charged_anon_bytes"] + (2 << 20)
    with memory_cgroup(baseline + memory_limit) as procs:
        return _run(cmd, procs, timeout) | {"limited": procs is not None, "baseline_bytes": baseline}


def _run(cmd: list[str], procs: Path | None, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    if procs is not None:
        env["SHARDKIT_MEASURE_CGROUP"] = str(procs)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"the measuring process failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no read_bytes line")


def _evict(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)  # pages still being written back are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    procs = os.environ.get("SHARDKIT_MEASURE_CGROUP")
    if procs:
        Path(procs).write_text(str(os.getpid()))
    from ..loader import Loader, MixtureLoader  # imported after joining the cgroup: its memory counts

    make = MixtureLoader if spec["kind"] == "recipe" else Loader
    loaders = [make(spec["source"], world_size=spec["world_size"], rank=r, **spec["options"])
               for r in spec["ranks"]]
    files = sorted({s.bin_path for ld in loaders for st in ld.engine.plan.streams.values()
                    for s in st.windows.dataset.shards})
    _evict(files)
    biggest = max(files, key=lambda f: f.stat().st_size)
    before = _read_bytes()
    with open(biggest, "rb") as f:  # is the page cache really emptied here?
        f.seek(biggest.stat().st_size // 2)
        f.read(1)
    evicted = _read_bytes() > before
    _evict(files)
    its = [iter(ld) for ld in loaders]

    pause = float(spec.get("step_seconds", 0.0))

    def run(n: int) -> int:
        rows = 0
        for _ in range(n):
            for it in its:
                rows += len(next(it)["input_ids"])
            if pause:
                time.sleep(pause)
        for ld in loaders:
            ld.engine.wait_hints()
        return rows

    run(spec["warm_steps"])
    before = _read_bytes()
    rows = run(spec["steps"])
    out = {"read_bytes": _read_bytes() - before, "rows": rows, "evicted": evicted}
    if procs:
        stat = dict(line.split() for line in (Path(procs).parent / "memory.stat").read_text().splitlines())
        out["charged_anon_bytes"] = int(stat.get("rss", stat.get("anon", 0)))  # v1 / v2 names
    return out


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
