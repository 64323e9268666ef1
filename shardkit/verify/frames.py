"""Decompress every frame of compressed shards and check the uncompressed bytes, block by block.

The `.bin.zst`'s own block digests (the transport checksums) are hashed like any file by `content`;
this pass checks what the bytes *mean*: every zstd frame must decode to exactly its length and match
its digest in the frame index, and the decompressed stream must match the sidecar's uncompressed
`NAME.bin` block digests. A damaged frame is named with its index, its byte range in the `.zst` and
the uncompressed range it held. Tasks are runs of whole checksum blocks spanning at least four frames,
so a frame is decoded once (twice at most at a task boundary when frames and blocks do not align).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import xxhash

from ..errors import IntegrityError, ManifestError
from ..format.checksums import FileChecksums
from ..format.zstd_frames import FramedReader, FrameIndex
from .content import bounded_map
from .report import Check, Problem

__all__ = ["FrameTask", "check_frames", "frame_tasks"]


@dataclass(frozen=True, slots=True)
class FrameTask:
    shard: str
    zst_name: str
    bin_name: str
    path: Path
    index: FrameIndex
    sums: FileChecksums  # the uncompressed NAME.bin digests
    block_size: int
    first_block: int
    last_block: int  # exclusive

    @property
    def byte_range(self) -> tuple[int, int]:
        start = self.first_block * self.block_size
        return start, min(self.last_block * self.block_size, self.sums.size)


def frame_tasks(shard: str, zst_name: str, bin_name: str, path: Path, index: FrameIndex, sums: FileChecksums,
                block_size: int) -> Iterator[FrameTask]:
    per_task = max(1, -(-4 * index.block_size // block_size))
    n = len(sums.blocks)
    for j in range(0, n, per_task):
        yield FrameTask(shard, zst_name, bin_name, path, index, sums, block_size, j, min(j + per_task, n))


@dataclass(frozen=True, slots=True)
class _Found:
    task: FrameTask
    bad_frames: list[tuple[int, IntegrityError]]
    bad_blocks: list[tuple[int, str]]  # (block, actual digest)
    decoded: int


def _run(task: FrameTask) -> _Found:
    lo, hi = task.byte_range
    bs, fs = task.block_size, task.index.block_size
    bad_frames: list[tuple[int, IntegrityError]] = []
    bad_blocks: list[tuple[int, str]] = []
    decoded = 0
    try:
        reader = FramedReader(task.path, cache_frames=2, name=task.zst_name)
    except (IntegrityError, ManifestError, OSError):  # the structural pass reported it (or the file changed)
        return _Found(task, [], [], 0)
    with reader:
        failed: set[int] = set()
        for j in range(task.first_block, task.last_block):
            b_lo, b_hi = j * bs, min((j + 1) * bs, task.sums.size)
            h = xxhash.xxh3_128()
            ok = True
            for i in range(b_lo // fs, -(-b_hi // fs)) if b_hi > b_lo else ():
                if i in failed:
                    ok = False
                    continue
                f_lo, f_hi = task.index.frame_range(i)
                a, b = max(f_lo, b_lo), min(f_hi, b_hi)
                try:
                    h.update(reader.read(a, b - a))
                except IntegrityError as e:
                    failed.add(i)
                    ok = False
                    if lo <= f_lo < hi:  # each frame is reported by the task holding its first byte
                        bad_frames.append((i, e))
            if ok:
                decoded += b_hi - b_lo
                actual = h.hexdigest()
                if actual != task.sums.blocks[j]:
                    bad_blocks.append((j, actual))
    return _Found(task, bad_frames, bad_blocks, decoded)


def _frame_problem(task: FrameTask, run: list[tuple[int, IntegrityError]]) -> Problem:
    (first, err), last = run[0], run[-1][0]
    entries = task.index.frames
    file_range = (entries[first].offset, entries[last].offset + entries[last].length)
    u_lo, u_hi = task.index.frame_range(first)[0], task.index.frame_range(last)[1]
    held = f"held uncompressed bytes [{u_lo}, {u_hi}) of {task.bin_name}"
    if len(run) == 1:
        detail = f"{err.problem}; it {held}"
    else:
        detail = f"frames {first}–{last} ({len(run)}) are damaged; they {held}; first: {err.problem}"
    return Problem(Check.FRAMES, detail, shard=task.shard, file=task.zst_name, byte_range=file_range,
                   expected=err.expected if len(run) == 1 else None, actual=err.actual if len(run) == 1 else None)


def _block_problem(task: FrameTask, j: int, actual: str) -> Problem:
    return Problem(Check.CHECKSUM, f"decompressed block {j} of {task.bin_name} does not match its checksum (its "
                                   f"frames decode cleanly: the .zst holds other data than was packed)",
                   shard=task.shard, file=task.zst_name, byte_range=task.sums.block_range(j, task.block_size),
                   expected=task.sums.blocks[j], actual=actual)


def check_frames(tasks: Iterable[FrameTask], pool: Executor | None, *, window: int,
                 on_bytes: Callable[[int], None] | None = None) -> tuple[list[Problem], int]:
    """Problems (runs of adjacent bad frames merged) and the uncompressed bytes decoded and hashed."""
    problems: list[Problem] = []
    decoded = 0
    run: list[tuple[int, IntegrityError]] = []
    run_task: FrameTask | None = None

    def flush() -> None:
        if run and run_task is not None:
            problems.append(_frame_problem(run_task, run))
        run.clear()

    for found in bounded_map(pool, _run, tasks, window):
        decoded += found.decoded
        if on_bytes is not None:
            t_lo, t_hi = found.task.byte_range
            on_bytes(t_hi - t_lo)
        for i, err in found.bad_frames:
            contiguous = bool(run) and run_task is not None and run_task.path == found.task.path \
                and run[-1][0] + 1 == i
            if not contiguous:
                flush()
            run_task = found.task
            run.append((i, err))
        problems += [_block_problem(found.task, j, actual) for j, actual in found.bad_blocks]
    flush()
    return problems, decoded
