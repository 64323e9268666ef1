"""Run the tasks in this process, one after another, each with the pack's own tokenizer processes.

Sequential on purpose: each task already uses every core (`workers`), so running tasks side by side
would only add processes. The result is byte-identical to any other executor's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..config import PackConfig
from .base import ProgressBoard
from .task import TaskOutcome, run_task

__all__ = ["LocalExecutor"]


@dataclass(frozen=True)
class LocalExecutor:
    name: str = "local"

    def run(self, configs: Sequence[PackConfig], board: ProgressBoard) -> list[TaskOutcome]:
        outcomes = []
        for config in configs:
            task_id = config.task.task_id if config.task is not None else 0
            outcome = run_task(config, progress=lambda p, i=task_id: board.update(i, p))
            board.finished(outcome)
            outcomes.append(outcome)
        return outcomes
