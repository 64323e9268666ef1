"""`pack_job`: one pack split into N tasks, run by an executor, merged into one dataset.

The parts go to `PARTS_DIR/task-0000I` (default: `OUTPUT.parts` beside the output, so hard links
work), are merged into OUTPUT, and removed afterwards unless kept (the merged dataset holds its own
links to the shard files). Running the same job again after a crash keeps every finished part,
resumes the unfinished ones and merges.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import PackError
from ...format.manifest import MANIFEST_NAME
from ...sources import list_inputs
from ..config import PackConfig, ResumeMode
from ..merge import MergeResult, merge_parts
from ..slices import layout_files
from ..tasks import DEFAULT_SPLIT_GRANULARITY, TaskSpec, plan_tasks
from .base import Executor, JobProgress, ProgressBoard
from .local import LocalExecutor
from .task import TaskOutcome

__all__ = ["JobResult", "pack_job", "default_parts_dir"]


@dataclass(frozen=True)
class JobResult:
    merge: MergeResult
    tasks: list[TaskOutcome]
    executor: str
    elapsed: float
    parts_dir: Path
    parts_kept: bool


def default_parts_dir(output: str | Path) -> Path:
    out = Path(output)
    return out.with_name(out.name + ".parts")


def pack_job(config: PackConfig, *, num_tasks: int, executor: Executor | None = None,
             granularity: int = DEFAULT_SPLIT_GRANULARITY, parts_dir: str | Path | None = None,
             keep_parts: bool = False, progress: Callable[[JobProgress], None] | None = None) -> JobResult:
    """Pack `config` as `num_tasks` tasks on `executor` (default: local, one after another), then merge."""
    t0 = time.monotonic()
    executor = executor or LocalExecutor()
    if "://" in str(config.output):
        raise PackError(f"{config.output}: a split pack writes to a local directory (the merge hard-links the "
                        "parts' shards); pack into a local directory, then upload it")
    out = Path(config.output)
    parts = Path(parts_dir) if parts_dir is not None else default_parts_dir(out)
    if (out / MANIFEST_NAME).exists() and not config.overwrite:
        raise PackError(f"{out} already holds a finished dataset; pass --overwrite to replace it or choose "
                        "another output directory")
    listing = list_inputs(config.inputs)
    weights = [p.weight for p in plan_tasks(layout_files(listing, granularity), num_tasks, granularity=granularity)]
    # --resume (insist on an unfinished pack) applies to the job; each task resumes what it finds
    resume = ResumeMode.AUTO if config.resume is ResumeMode.REQUIRE else config.resume
    if config.resume is ResumeMode.REQUIRE and not parts.is_dir():
        raise PackError(f"there is no unfinished job to resume: {parts} does not exist")
    width = max(5, len(str(num_tasks - 1)))
    configs = [dataclasses.replace(config, output=str(parts / f"task-{i:0{width}d}"), resume=resume,
                                   task=TaskSpec(num_tasks=num_tasks, task_id=i, granularity=granularity))
               for i in range(num_tasks)]
    parts.mkdir(parents=True, exist_ok=True)
    board = ProgressBoard(weights, progress)
    outcomes = executor.run(configs, board)
    if not any(o.docs for o in outcomes):
        raise PackError(f"no documents were packed from {len(listing)} input file(s) in {num_tasks} task(s); "
                        f"see the parts in {parts} for the skipped records")
    merged = merge_parts([c.output for c in configs], out, overwrite=config.overwrite)
    if not keep_parts:
        for c in configs:
            shutil.rmtree(c.output, ignore_errors=True)
        if parts.is_dir() and not any(parts.iterdir()):
            parts.rmdir()
    return JobResult(merged, outcomes, executor.name, time.monotonic() - t0, parts, keep_parts)
