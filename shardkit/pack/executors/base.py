"""The executor contract and the one progress view every executor reports through.

An executor runs a list of task configurations (each a `PackConfig` with a `TaskSpec`) through
`run_task` and returns their outcomes in task order; it decides only *where* and *how concurrently*
they run. The output bytes never depend on the executor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..config import PackConfig
from ..driver import PackProgress
from .task import TaskOutcome

__all__ = ["Executor", "JobProgress", "ProgressBoard"]


@dataclass(frozen=True)
class JobProgress:
    """All tasks at once: the summed pack progress, and how many tasks have finished."""

    pack: PackProgress
    tasks_done: int
    tasks_total: int
    retries: int = 0  # task attempts restarted so far (Ray: a worker died or a retriable error)


class ProgressBoard:
    """Keeps each task's latest progress and reports the sum, at most every `interval` seconds.

    Thread-safe: executors may update it from a polling thread while tasks finish on another.
    """

    def __init__(self, weights: Sequence[int], callback: Callable[[JobProgress], None] | None,
                 interval: float = 0.2) -> None:
        self.weights = list(weights)
        self.callback = callback
        self.interval = interval
        self.t0 = time.monotonic()
        self.retries = 0
        self._latest: dict[int, PackProgress] = {}
        self._done: set[int] = set()
        self._lock = threading.Lock()
        self._last = 0.0

    def update(self, task_id: int, p: PackProgress) -> None:
        with self._lock:
            if task_id not in self._done:
                self._latest[task_id] = p
        self.emit()

    def finished(self, outcome: TaskOutcome) -> None:
        with self._lock:
            self._done.add(outcome.task_id)
            self._latest[outcome.task_id] = PackProgress(
                docs=outcome.docs, tokens=outcome.tokens, input_bytes_done=self.weights[outcome.task_id],
                input_bytes_total=self.weights[outcome.task_id], shards=outcome.shards, skipped=outcome.skipped, elapsed=0.0,
                resumed_docs=outcome.docs if outcome.reused else 0,
                resumed_tokens=outcome.tokens if outcome.reused else 0)
        self.emit(force=True)

    def snapshot(self) -> JobProgress:
        with self._lock:
            ps = list(self._latest.values())
            done = len(self._done)
        return JobProgress(
            pack=PackProgress(
                docs=sum(p.docs for p in ps), tokens=sum(p.tokens for p in ps),
                input_bytes_done=sum(p.input_bytes_done for p in ps), input_bytes_total=sum(self.weights),
                shards=sum(p.shards for p in ps), skipped=sum(p.skipped for p in ps),
                elapsed=time.monotonic() - self.t0, resumed_docs=sum(p.resumed_docs for p in ps),
                resumed_tokens=sum(p.resumed_tokens for p in ps)),
            tasks_done=done, tasks_total=len(self.weights), retries=self.retries)

    def emit(self, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self.callback(self.snapshot())


class Executor(Protocol):
    """Runs task configurations through `run_task`; returns their outcomes in the order given."""

    name: str

    def run(self, configs: Sequence[PackConfig], board: ProgressBoard) -> list[TaskOutcome]: ...
