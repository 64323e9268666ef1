"""Split one pack job into N independent tasks: a pure function of the input listing.

Every task of a job array computes the same split from the same listing, so no coordinator is needed.
The inputs are laid end to end as one byte stream, in pack order, and cut into N contiguous pieces of
about equal size. A cut falls on a file boundary, on a Parquet row-group boundary, or inside an
uncompressed JSON-lines file at a multiple of the split granularity; there the record straddling the cut
belongs to the task that holds its first byte (see `slices.py`). Because each task covers one contiguous
piece, the parts merged in task order hold the same documents in the same order as a single pack.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import ConfigError

__all__ = [
    "DEFAULT_SPLIT_GRANULARITY",
    "SplitKind",
    "FileLayout",
    "Slice",
    "TaskPlan",
    "TaskSpec",
    "plan_tasks",
    "plan_digest",
]

DEFAULT_SPLIT_GRANULARITY = 16 << 20  # a big JSON-lines file may be cut every 16 MiB


class SplitKind(Enum):
    """Where a file may be cut between tasks."""

    WHOLE = "whole"  # never: compressed streams, .txt documents, files under the granularity
    BYTES = "bytes"  # uncompressed JSON lines: at multiples of the granularity (records resolved by newline)
    ROW_GROUPS = "row_groups"  # Parquet: between row groups


@dataclass(frozen=True, slots=True)
class FileLayout:
    """What the planner needs of one input file: its size and where it may be cut."""

    size: int
    kind: SplitKind = SplitKind.WHOLE
    groups: tuple[tuple[int, int], ...] = ()  # ROW_GROUPS: (compressed bytes, rows) of each row group

    def cut_points(self) -> list[int]:
        """ROW_GROUPS: the byte position of each group boundary, 0 … size (groups weighted by bytes)."""
        total = sum(b for b, _ in self.groups)
        if not total:
            return [0] * len(self.groups) + [self.size]
        out, acc = [0], 0
        for b, _ in self.groups[:-1]:
            acc += b
            out.append(self.size * acc // total)
        return out + [self.size]


@dataclass(frozen=True, slots=True)
class Slice:
    """The part of one input file a task reads.

    WHOLE: the file. BYTES: records whose first byte lies in [start, stop). ROW_GROUPS: row groups
    [start, stop), which are rows [row_start, row_stop).
    """

    file: int  # index into the listing
    kind: SplitKind
    start: int = 0
    stop: int = 0
    row_start: int = 0
    row_stop: int = 0
    weight: int = 0  # bytes of the input stream this slice accounts for

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "kind": self.kind.value, "weight": self.weight}
        if self.kind is SplitKind.BYTES:
            d["bytes"] = [self.start, self.stop]
        elif self.kind is SplitKind.ROW_GROUPS:
            d["row_groups"] = [self.start, self.stop]
            d["rows"] = [self.row_start, self.row_stop]
        return d


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """One task's contiguous piece [start, stop) of the input stream, as slices in pack order."""

    task_id: int
    num_tasks: int
    start: int
    stop: int
    slices: tuple[Slice, ...]

    @property
    def weight(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Which task of how many this pack is (`--num-tasks N --task-id I`), and the split granularity."""

    num_tasks: int
    task_id: int
    granularity: int = DEFAULT_SPLIT_GRANULARITY

    def __post_init__(self) -> None:
        if self.num_tasks < 1:
            raise ConfigError(f"num_tasks must be ≥ 1, got {self.num_tasks}")
        if not 0 <= self.task_id < self.num_tasks:
            raise ConfigError(f"task id must be in [0, {self.num_tasks - 1}] for {self.num_tasks} task(s), "
                              f"got {self.task_id}")
        if self.granularity < 1:
            raise ConfigError(f"split granularity must be ≥ 1 byte, got {self.granularity}")

    @property
    def shard_prefix(self) -> str:
        """Shards of task 3 are `task-00003-shard-00000`, …: unique across parts, so a merge only links."""
        return f"task-{self.task_id:0{max(5, len(str(self.num_tasks - 1)))}d}-shard"


def _local_cut(layout: FileLayout, x: int, granularity: int, points: list[int] | None) -> int:
    """The allowed cut inside one file nearest to offset `x` (ties go to the lower one)."""
    size = layout.size
    if layout.kind is SplitKind.BYTES and size > granularity:
        lo = x // granularity * granularity
        hi = min(lo + granularity, size)
    elif layout.kind is SplitKind.ROW_GROUPS and points is not None and len(points) > 2:
        j = bisect.bisect_right(points, x) - 1
        lo, hi = points[j], points[min(j + 1, len(points) - 1)]
    else:
        lo, hi = 0, size
    return lo if x - lo <= hi - x else hi


def plan_tasks(layouts: Sequence[FileLayout], num_tasks: int, *, granularity: int = DEFAULT_SPLIT_GRANULARITY
               ) -> tuple[TaskPlan, ...]:
    """The N tasks' pieces of the inputs: contiguous, in order, each byte and record in exactly one.

    Cut i is the allowed cut point nearest to i·T/N (T = total bytes), so every task's size is within
    one unit (the largest uncuttable file, row group or granularity step) of T/N. Empty tasks are
    possible (N larger than the number of units) and are valid: they pack an empty part.
    """
    if num_tasks < 1:
        raise ConfigError(f"num_tasks must be ≥ 1, got {num_tasks}")
    starts = [0]
    for lay in layouts:
        starts.append(starts[-1] + lay.size)
    total = starts[-1]
    points = [lay.cut_points() if lay.kind is SplitKind.ROW_GROUPS else None for lay in layouts]
    cuts = [0]
    for i in range(1, num_tasks):
        t = i * total // num_tasks
        if t <= 0 or t >= total:
            cuts.append(min(max(t, 0), total))
            continue
        f = bisect.bisect_right(starts, t) - 1  # the (non-empty) file holding byte t
        cuts.append(starts[f] + _local_cut(layouts[f], t - starts[f], granularity, points[f]))
    cuts.append(total)
    heads = cuts[:num_tasks]
    slices: list[list[Slice]] = [[] for _ in range(num_tasks)]
    for f, lay in enumerate(layouts):
        lo, hi = starts[f], starts[f + 1]
        first = bisect.bisect_right(heads, lo) - 1  # the last task starting at or before the file
        if lo == hi:
            slices[first].append(Slice(f, SplitKind.WHOLE))
            continue
        for i in range(first, num_tasks):
            a, b = max(lo, cuts[i]), min(hi, cuts[i + 1])
            if a >= hi:
                break
            if a < b:
                slices[i].append(_slice(f, lay, a - lo, b - lo, points[f]))
    return tuple(TaskPlan(i, num_tasks, cuts[i], cuts[i + 1], tuple(slices[i])) for i in range(num_tasks))


def _slice(f: int, lay: FileLayout, a: int, b: int, points: list[int] | None) -> Slice:
    if a == 0 and b == lay.size:
        return Slice(f, SplitKind.WHOLE, weight=b - a)
    if lay.kind is SplitKind.BYTES:
        return Slice(f, SplitKind.BYTES, a, b, weight=b - a)
    if lay.kind is not SplitKind.ROW_GROUPS or points is None:
        raise AssertionError(f"cut inside an uncuttable file {f}")  # unreachable: cuts only where allowed
    g0 = _group_at(points, a, lay.size)
    g1 = _group_at(points, b, lay.size)
    rows = [0]
    for _, n in lay.groups:
        rows.append(rows[-1] + n)
    return Slice(f, SplitKind.ROW_GROUPS, g0, g1, rows[g0], rows[g1], weight=b - a)


def _group_at(points: list[int], p: int, size: int) -> int:
    """The first row group at or after byte position `p` (every trailing group belongs to the end)."""
    return len(points) - 1 if p >= size else bisect.bisect_left(points, p)


def plan_digest(urls: Sequence[str], layouts: Sequence[FileLayout], num_tasks: int, granularity: int) -> str:
    """A hash naming the split: parts with the same digest come from the same listing, N and granularity."""
    h = hashlib.sha256()
    h.update(json.dumps({"version": 1, "num_tasks": num_tasks, "granularity": granularity}).encode())
    for url, lay in zip(urls, layouts):
        h.update(json.dumps([url, lay.size, lay.kind.value, [list(g) for g in lay.groups]]).encode() + b"\n")
    return h.hexdigest()
