"""Where the tasks of a split pack run (local, Ray), kept apart from what a task does (`task.py`)."""

from .base import Executor, JobProgress, ProgressBoard
from .job import JobResult, default_parts_dir, pack_job
from .local import LocalExecutor
from .ray import RayExecutor
from .task import TaskOutcome, run_task

__all__ = [
    "Executor",
    "JobProgress",
    "JobResult",
    "LocalExecutor",
    "ProgressBoard",
    "RayExecutor",
    "TaskOutcome",
    "default_parts_dir",
    "pack_job",
    "run_task",
]
