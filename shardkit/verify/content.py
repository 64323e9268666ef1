"""Recompute block digests in parallel and locate every mismatch to a shard, file and byte range.

Threads, not processes: xxhash and `os.preadv` both release the GIL, so N threads hash at the speed of
N processes (measured in benchmarks/bench_verify.py) without pickling results or re-opening state.
Each thread reads into one reused buffer; at most a few tasks per thread are in flight, so memory and
futures stay flat however many blocks the dataset has.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import xxhash

from ..format.checksums import FileChecksums
from .report import Check, Problem

__all__ = ["BlockTask", "blocks_of", "check_blocks", "bounded_map"]

READ_CHUNK = 16 << 20  # per-thread buffer; larger blocks are hashed in chunks of this size
_local = threading.local()
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class BlockTask:
    shard: str
    file: str
    path: Path
    index: int
    start: int
    end: int
    expected: str


def blocks_of(shard: str, path: Path, sums: FileChecksums, block_size: int, actual_size: int) -> Iterator[BlockTask]:
    """The blocks of one file that are wholly present (a size problem already covers the rest)."""
    for i, digest in enumerate(sums.blocks):
        start, end = sums.block_range(i, block_size)
        if end > actual_size:
            return
        yield BlockTask(shard, path.name, path, i, start, end, digest)


class _Shrank(Exception):
    """The file ended before the block did: it was truncated after its size was checked."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _hash_range(path: Path, start: int, end: int) -> str:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(READ_CHUNK))
    h = xxhash.xxh3_128()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in fails instead of hanging
    try:
        pos = start
        while pos < end:
            got = os.preadv(fd, [buf[:min(READ_CHUNK, end - pos)]], pos)
            if got == 0:  # the file shrank while we read it
                raise _Shrank(pos)
            h.update(buf[:got])
            pos += got
    finally:
        os.close(fd)
    return h.hexdigest()


def _check_one(task: BlockTask) -> tuple[BlockTask, str | None, int]:
    """(task, actual digest or an error text prefixed with '!', bytes read)."""
    try:
        return task, _hash_range(task.path, task.start, task.end), task.end - task.start
    except _Shrank as e:
        return task, f"!cannot be read: the file ends at byte {e.size:,}, it shrank while being read", 0
    except OSError as e:
        return task, f"!cannot be read ({e.strerror})", 0


def bounded_map(pool: Executor | None, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """`pool.map` in order with at most `window` calls in flight (inline when `pool` is None)."""
    if pool is None:
        yield from map(fn, items)
        return
    pending: deque[Future[R]] = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def check_blocks(tasks: Iterable[BlockTask], pool: Executor | None, *, window: int,
                 on_bytes: Callable[[int], None] | None = None) -> tuple[list[Problem], int]:
    """Hash every task; returns problems (adjacent bad blocks of a file merged) and bytes hashed."""
    bad: list[tuple[BlockTask, str]] = []
    hashed = 0
    for task, actual, n in bounded_map(pool, _check_one, tasks, window):
        hashed += n
        if on_bytes is not None:
            on_bytes(n)
        if actual != task.expected:
            bad.append((task, actual or ""))
    return _merge(bad), hashed


def _merge(bad: list[tuple[BlockTask, str]]) -> list[Problem]:
    out: list[Problem] = []
    run: list[tuple[BlockTask, str]] = []

    def flush() -> None:
        if not run:
            return
        first, last = run[0][0], run[-1][0]
        if run[0][1].startswith("!"):
            detail = f"block {first.index} {run[0][1][1:]}"
        elif len(run) == 1:
            detail = f"block {first.index} does not match its checksum"
        else:
            detail = f"blocks {first.index}–{last.index} ({len(run)}) do not match their checksums"
        single = len(run) == 1 and not run[0][1].startswith("!")
        out.append(Problem(Check.CHECKSUM, detail, shard=first.shard, file=first.file,
                           byte_range=(first.start, last.end), expected=first.expected if single else None,
                           actual=run[0][1] if single else None))
        run.clear()

    for task, actual in bad:
        prev = run[-1][0] if run else None
        if prev is None or prev.path != task.path or prev.index + 1 != task.index:
            flush()
        run.append((task, actual))
    flush()
    return out
