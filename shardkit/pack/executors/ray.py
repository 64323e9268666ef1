"""Run the tasks as Ray tasks — on a cluster, or on a Ray instance started for the job.

Each task is one Ray task calling `run_task` with `cpus_per_task` CPUs (and that many tokenizer
processes; 1 = tokenize in the Ray worker itself). A worker that dies mid-task (a lost node, the OOM
killer, SIGKILL) makes Ray run the task again, up to `max_retries` times; the new attempt resumes the
part from its journal, so the result is byte-identical to an uninterrupted run — and to the same tasks
run by the local executor. Progress travels through one small actor that every task reports to and the
driver polls, so the job shows one progress line whatever the number of nodes.

Ray is optional: `pip install 'shardkit[ray]'`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import MissingDependencyError, PackError, ShardkitError
from ..config import PackConfig
from ..driver import PackProgress
from .base import ProgressBoard
from .task import TaskOutcome, run_task

__all__ = ["RayExecutor", "import_ray"]

_POLL_SECONDS = 0.25


def import_ray() -> Any:
    """The `ray` module, or MissingDependencyError with the install line."""
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("ray", extra="ray", purpose="--executor ray") from None
    return ray


class _ProgressSink:
    """Ray actor (no CPU): each task's latest progress and its number of attempts."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple] = {}
        self.attempts: dict[int, list[int]] = {}

    def started(self, task_id: int, pid: int) -> None:
        self.attempts.setdefault(task_id, []).append(pid)

    def update(self, task_id: int, fields: tuple) -> None:
        self.latest[task_id] = fields

    def snapshot(self) -> tuple[dict[int, tuple], dict[int, list[int]]]:
        return self.latest, self.attempts


def _ray_task(config: PackConfig, sink: Any) -> dict[str, Any]:
    """The body of one Ray task: report the attempt, run the task, return its outcome as JSON."""
    task_id = config.task.task_id if config.task is not None else 0
    ray = import_ray()
    ray.get(sink.started.remote(task_id, os.getpid()))  # waited for: a retry is counted even if killed at once

    def report(p: PackProgress) -> None:
        sink.update.remote(task_id, dataclasses.astuple(p))  # fire and forget

    return run_task(config, progress=report).to_json()


@dataclass(frozen=True)
class RayExecutor:
    """Runs each task as a Ray task; starts (and stops) a Ray session unless this process has one.

    `address`: None = RAY_ADDRESS, else the latest `ray start` cluster on this machine, else a new local
    instance (Ray's own rule); "auto" = an existing cluster; "local" = always a new instance. It is not
    used when Ray is already initialised in this process: that session is the one the tasks run on.
    """

    address: str | None = None
    max_retries: int = 3
    cpus_per_task: int = 1
    init_options: dict[str, Any] = field(default_factory=dict)  # more ray.init arguments (num_cpus, …)
    name: str = "ray"

    def run(self, configs: Sequence[PackConfig], board: ProgressBoard) -> list[TaskOutcome]:
        ray = import_ray()
        # a driver prints Ray's error messages (a worker died, the task will be retried) to stdout even
        # with log_to_driver=False; they belong on stderr, not in `shardkit pack --json`'s output
        with contextlib.redirect_stdout(sys.stderr):
            started = not ray.is_initialized()
            if started:
                ray.init(address=self.address, include_dashboard=False, logging_level=logging.WARNING,
                         log_to_driver=False, **self.init_options)
            try:
                return self._run(ray, configs, board)
            finally:
                if started:
                    ray.shutdown()  # (joins the thread that prints those messages)

    def _run(self, ray: Any, configs: Sequence[PackConfig], board: ProgressBoard) -> list[TaskOutcome]:
        sink = ray.remote(num_cpus=0)(_ProgressSink).remote()
        task = ray.remote(num_cpus=self.cpus_per_task, max_retries=self.max_retries,
                          retry_exceptions=[OSError])(_ray_task)
        refs = {task.remote(dataclasses.replace(c, workers=self.cpus_per_task), sink): i
                for i, c in enumerate(configs)}
        outcomes: list[TaskOutcome | None] = [None] * len(configs)
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_SECONDS)
                self._poll(ray, sink, board)
                for ref in ready:
                    i = refs[ref]
                    outcome = TaskOutcome(**self._result(ray, ref, configs[i]))
                    outcomes[i] = outcome
                    board.finished(outcome)
        except BaseException:
            for ref in pending:  # the interrupted parts resume from their journals on the next run
                ray.cancel(ref, force=True)
            raise
        return [o for o in outcomes if o is not None]

    def _result(self, ray: Any, ref: Any, config: PackConfig) -> dict[str, Any]:
        task_id = config.task.task_id if config.task is not None else 0
        try:
            return ray.get(ref)  # type: ignore[no-any-return]
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, ShardkitError):
                raise PackError(f"task {task_id} ({config.output}) failed: {cause}") from None
            raise
        except ray.exceptions.RayError as e:  # the worker or its node died more than max_retries times
            raise PackError(f"task {task_id} ({config.output}) failed {self.max_retries + 1} time(s) on Ray: "
                            f"{str(e).splitlines()[0]}; run the job again to resume its part") from None

    @staticmethod
    def _poll(ray: Any, sink: Any, board: ProgressBoard) -> None:
        latest, attempts = ray.get(sink.snapshot.remote())
        board.retries = sum(len(pids) - 1 for pids in attempts.values())
        for task_id, fields in latest.items():
            board.update(task_id, PackProgress(*fields))
