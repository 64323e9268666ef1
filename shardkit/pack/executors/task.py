"""What one task does, wherever it runs: pack its slice of the inputs into its part directory.

Kept apart from the executors (local, Ray) that decide *where* tasks run, so every executor runs the
same function and produces the same bytes. Re-running a task is safe: an unfinished part resumes from
its journal (the ordinary pack resume), and a finished part of the same task is kept as it is, so a
retried task or a re-submitted job array only does the work that is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ManifestError, PackError
from ...format.manifest import MANIFEST_NAME, Manifest
from ...sources import list_inputs
from ...tokenizers import load_tokenizer
from ..config import PackConfig
from ..driver import PackProgress, pack
from ..slices import plan_task
from ..tasks import TaskSpec

__all__ = ["TaskOutcome", "run_task"]


@dataclass(frozen=True)
class TaskOutcome:
    """What a finished task reports back: small and JSON-able (it may travel from a cluster node)."""

    task_id: int
    path: str
    fingerprint: str
    docs: int
    tokens: int
    shards: int
    skipped: int  # records skipped (bad input) in this part
    weight: int  # input bytes of the task's slices
    seconds: float
    reused: bool  # the part was already finished: nothing was packed

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _same_task(config: PackConfig, spec: TaskSpec, manifest: Manifest | None) -> str | None:
    """None if `manifest` is the finished part of this very task; else what differs."""
    if manifest is None:
        return "its manifest is unreadable"
    task = manifest.pack.get("task")
    if not isinstance(task, dict):
        return "it is not a task part"
    _, meta = plan_task(spec, list_inputs(config.inputs))
    for key in ("task_id", "num_tasks", "granularity", "plan"):
        if task.get(key) != meta[key]:
            return f"its {key} is {task.get(key)!r}, this task's is {meta[key]!r}"
    if manifest.pack.get("options") != config.options_json():
        return "its pack options differ"
    spec = load_tokenizer(config.tokenize.tokenizer, backend=config.tokenize.backend).spec.to_json()
    if {k: v for k, v in spec.items() if k != "backend"} != manifest.tokenizer:
        return "its tokenizer differs"
    return None


def run_task(config: PackConfig, progress: Callable[[PackProgress], None] | None = None) -> TaskOutcome:
    """Pack task `config.task` into `config.output`, or keep the finished part already there."""
    spec = config.task
    if spec is None:
        raise PackError("run_task needs a PackConfig with a task (TaskSpec)")
    t0 = time.monotonic()
    out = Path(config.output)
    if (out / MANIFEST_NAME).exists() and not config.overwrite:
        try:
            manifest = Manifest.load(out)
        except ManifestError:
            manifest = None
        why = _same_task(config, spec, manifest)
        if why is not None or manifest is None:
            raise PackError(f"{out} holds a finished dataset that is not this task's part ({why}); pass "
                            "--overwrite to replace it or choose another parts directory")
        return TaskOutcome(spec.task_id, str(out), manifest.fingerprint, manifest.num_docs,
                           manifest.num_tokens, len(manifest.shards), int(manifest.stats["skipped"]["count"]),
                           int(manifest.pack.get("input_bytes") or 0), time.monotonic() - t0, reused=True)
    r = pack(config, progress=progress)
    return TaskOutcome(spec.task_id, str(out), r.fingerprint, r.manifest.num_docs, r.manifest.num_tokens,
                       len(r.manifest.shards), int(r.stats["skipped"]["count"]), r.input_bytes,
                       time.monotonic() - t0, reused=False)
