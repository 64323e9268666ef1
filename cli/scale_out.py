"""The scale-out options of `shardkit pack`: one task of a job array, or a whole job on an executor."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from shardkit.format.manifest import Manifest
from shardkit.pack import PackConfig
from shardkit.pack.executors import (
    JobProgress,
    JobResult,
    LocalExecutor,
    RayExecutor,
    TaskOutcome,
    pack_job,
    run_task,
)
from shardkit.pack.tasks import DEFAULT_SPLIT_GRANULARITY, TaskSpec
from shardkit.units import human_bytes, human_count

from .options import ByteSize
from .progress import StatusLine, format_duration, pack_status

__all__ = ["scale_out_options", "run_scaled"]

_OPTIONS = [
    click.option("--num-tasks", type=click.IntRange(min=1), default=None,
                 help="Split the job into N tasks balanced by input size (by file, JSONL byte range or "
                      "Parquet row group). Without --task-id: run all N here or on --executor, then merge."),
    click.option("--task-id", type=click.IntRange(min=0), default=None,
                 help="Pack only task I of --num-tasks into OUTPUT, as a part for `shardkit merge` "
                      "(job arrays: $SLURM_ARRAY_TASK_ID)."),
    click.option("--split-granularity", type=ByteSize(), default=DEFAULT_SPLIT_GRANULARITY,
                 help="Uncompressed JSONL files may be cut between tasks every SIZE bytes.  [default: 16MiB]"),
    click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                 help="Where the --num-tasks tasks run: here, one after another, or as Ray tasks."),
    click.option("--ray-address", default=None,
                 help="Ray cluster: 'auto' (a running one), HOST:PORT, or 'local' (a new instance); "
                      "default: $RAY_ADDRESS, else the latest `ray start` here, else a new instance."),
    click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True,
                 help="Ray: run a task again up to N times when its worker dies (it resumes its part)."),
    click.option("--parts-dir", type=click.Path(file_okay=False), default=None,
                 help="Where the tasks' parts go (default: OUTPUT.parts; must be on OUTPUT's filesystem)."),
    click.option("--keep-parts", is_flag=True, help="Keep the parts after the merge (default: remove them)."),
]


def scale_out_options(f):
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def run_scaled(config: PackConfig, opts: dict, *, quiet: bool, as_json: bool) -> bool:
    """Run what --num-tasks asks for (one task's part, or all tasks and the merge); False: a plain pack."""
    config = with_task(config, opts)
    if config.task is not None:
        run_part(config, quiet=quiet, as_json=as_json)
        return True
    if wants_job(config, opts):
        run_job(config, opts, quiet=quiet, as_json=as_json)
        return True
    return False


def with_task(config: PackConfig, opts: dict) -> PackConfig:
    """With --task-id, the config of that one task (this run writes a part)."""
    if opts["task_id"] is None:
        return config
    if opts["num_tasks"] is None:
        raise click.UsageError("--task-id needs --num-tasks (how many tasks the job is split into)")
    if opts["task_id"] >= opts["num_tasks"]:
        raise click.BadParameter(f"{opts['task_id']} is not below --num-tasks {opts['num_tasks']} "
                                 "(task ids are 0 … N-1)", param_hint="--task-id")
    if opts["executor"] != "local":
        raise click.UsageError("--task-id packs one task here; --executor runs a whole job (drop --task-id)")
    return dataclasses.replace(config, task=TaskSpec(num_tasks=opts["num_tasks"], task_id=opts["task_id"],
                                                     granularity=opts["split_granularity"]))


def wants_job(config: PackConfig, opts: dict) -> bool:
    if config.task is not None:
        return False
    if opts["executor"] != "local" and opts["num_tasks"] is None:
        raise click.UsageError(f"--executor {opts['executor']} needs --num-tasks (how many tasks to run)")
    return opts["num_tasks"] is not None


def run_part(config: PackConfig, *, quiet: bool, as_json: bool) -> None:
    """One task of a job array: its part (a finished part of the same task is kept, so re-runs are no-ops)."""
    status = StatusLine(enabled=not quiet and not as_json)
    try:
        t = run_task(config, progress=lambda p: status.update(pack_status(p)))
    finally:
        status.close()
    click.echo(json.dumps(t.to_json(), indent=2) if as_json else part_text(config, t))


def part_text(config: PackConfig, t: TaskOutcome) -> str:
    spec = config.task
    m = Manifest.load(Path(t.path))
    head = (f"task {t.task_id} of {spec.num_tasks if spec else '?'}: "
            + ("the finished part is kept (nothing to do)" if t.reused else
               f"packed {len(m.pack['task']['slices'])} slice(s), {human_bytes(t.weight)}") + f" → {t.path}")
    lines = [head, f"  {human_count(t.docs)} docs, {human_count(t.tokens)} tokens ({m.dtype}) in {t.shards} shard(s)"
                   f" in {format_duration(t.seconds)}", f"  fingerprint {t.fingerprint[:16]}; merge all "
                   f"{spec.num_tasks if spec else 'N'} parts with `shardkit merge PARTS... -o DATASET`"]
    sk = m.stats.get("skipped", {})
    if sk.get("count"):
        lines.append(f"  skipped {sk['count']} record(s); first:")
        lines += [f"    {e['location']}: {e['reason']}" for e in sk["examples"][:5]]
    return "\n".join(lines)


def _status(p: JobProgress) -> str:
    retried = f" | {p.retries} retried" if p.retries else ""
    return f"{pack_status(p.pack)} | tasks {p.tasks_done}/{p.tasks_total}{retried}"


def run_job(config: PackConfig, opts: dict, *, quiet: bool, as_json: bool) -> None:
    executor = (RayExecutor(address=opts["ray_address"], max_retries=opts["max_retries"])
                if opts["executor"] == "ray" else LocalExecutor())
    status = StatusLine(enabled=not quiet and not as_json)
    try:
        r = pack_job(config, num_tasks=opts["num_tasks"], executor=executor, granularity=opts["split_granularity"],
                     parts_dir=opts["parts_dir"], keep_parts=opts["keep_parts"], progress=lambda p: status.update(_status(p)))
    finally:
        status.close()
    click.echo(json.dumps(job_json(r), indent=2) if as_json else job_text(r))


def job_json(r: JobResult) -> dict:
    m = r.merge.manifest
    return {"path": str(r.merge.path), "fingerprint": r.merge.fingerprint, "shards": len(m.shards),
            "docs": m.num_docs, "tokens": m.num_tokens, "dtype": m.dtype, "seconds": round(r.elapsed, 3),
            "executor": r.executor, "num_tasks": len(r.tasks), "input_files": m.pack.get("input_files"),
            "input_bytes": m.pack.get("input_bytes"), "skipped": m.stats["skipped"],
            "parts_dir": str(r.parts_dir) if r.parts_kept else None, "tasks": [t.to_json() for t in r.tasks]}


def job_text(r: JobResult) -> str:
    m = r.merge.manifest
    el = max(r.elapsed, 1e-9)
    reused = sum(t.reused for t in r.tasks)
    lines = [
        f"packed {m.pack.get('input_files')} file(s), {human_bytes(m.pack.get('input_bytes') or 0)} as "
        f"{len(r.tasks)} task(s) on {r.executor} → {r.merge.path}",
        f"  {human_count(m.num_docs)} docs, {human_count(m.num_tokens)} tokens ({m.dtype}) in {len(m.shards)} "
        f"shard(s), {human_bytes(sum(s.bin_bytes for s in m.shards))}",
        f"  {format_duration(r.elapsed)}: {human_count(m.num_tokens / el)} tok/s"
        + (f"; {reused} finished part(s) kept from an earlier run" if reused else ""),
        f"  fingerprint {r.merge.fingerprint[:16]}",
        f"  parts {'kept in' if r.parts_kept else 'merged (hard links) and removed from'} {r.parts_dir}",
    ]
    sk = m.stats["skipped"]
    if sk["count"]:
        reasons = ", ".join(f"{k}: {v}" for k, v in sk["by_reason"].items())
        lines.append(f"  skipped {sk['count']} record(s) ({reasons}); first:")
        lines += [f"    {e['location']}: {e['reason']}" for e in sk["examples"][:5]]
    return "\n".join(lines)
