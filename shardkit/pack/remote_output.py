"""Pack to a remote URL: pack into a local staging directory with all the local crash safety, then upload.

The local pack (journal, atomic shards, resume after SIGKILL) runs unchanged in a staging directory keyed
by the output URL; the upload then sends every file, verified, and `manifest.json` last, so the remote
dataset appears complete or not at all. After a crash, re-running the same command resumes whichever
phase was interrupted: the local journal continues the pack, the upload ledger skips verified objects.
The staging directory is removed once the upload is complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import PackError, ResumeError
from ..format.atomic import atomic_write_bytes
from ..format.manifest import MANIFEST_NAME, Manifest
from ..remote.retry import retrying
from ..remote.upload import UploadConfig, list_remote, remove_remote, upload_dataset
from ..sources import list_inputs
from ..writer import JOURNAL_NAME
from .config import PackConfig, ResumeMode
from .output_dir import is_shardkit_file, locked_output

__all__ = ["STAGING_ENV", "pack_to_remote", "staging_dir_for"]

STAGING_ENV = "SHARDKIT_STAGING_DIR"
_DATASET = "dataset"
_JOB = "job.json"
_LEDGER = "upload.jsonl"

R = TypeVar("R")  # driver.PackResult (passed in: the driver imports this module, not the other way round)


def staging_dir_for(config: PackConfig) -> Path:
    """The local directory where `config.output` is staged: stable per URL, so a re-run finds it."""
    root = Path(config.staging_dir or os.environ.get(STAGING_ENV) or
                Path(tempfile.gettempdir()) / "shardkit-staging")
    url = config.output.rstrip("/")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rsplit("/", 1)[-1])[:40].strip("-.") or "dataset"
    return root / f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def _job(config: PackConfig) -> dict[str, Any]:
    """What identifies the job for its staged output (the local journal checks the finer details)."""
    return {"output": config.output.rstrip("/"), "inputs": list(config.inputs),
            "tokenizer": config.tokenize.tokenizer, "options": config.options_json()}


def _dataset_files(directory: Path) -> list[str]:
    """The files of a finished staged dataset to upload: all but the manifest, hidden and temp files."""
    return sorted(p.name for p in directory.iterdir()
                  if p.is_file() and p.name != MANIFEST_NAME and not p.name.startswith(".")
                  and not p.name.endswith(".tmp"))


def _clear(staging: Path) -> None:
    for name in (_JOB, _LEDGER):
        (staging / name).unlink(missing_ok=True)
    shutil.rmtree(staging / _DATASET, ignore_errors=True)


def _check_remote(config: PackConfig, existing: dict[str, Any]) -> None:
    url = config.output
    if MANIFEST_NAME in existing and not config.overwrite:
        raise PackError(f"{url} already holds a finished dataset; pass --overwrite to replace it or choose "
                        "another output URL")
    foreign = sorted(n for n in existing if not is_shardkit_file(n))
    if foreign:
        raise PackError(f"{url} is not empty and not a shardkit output (found {', '.join(foreign[:3])}"
                        f"{', …' if len(foreign) > 3 else ''}); choose an empty or new location")


def _staged_result(config: PackConfig, dataset: Path, result_type: Callable[..., R]) -> R:
    """A PackResult for a dataset packed by an earlier run whose upload did not finish."""
    manifest = Manifest.load(dataset)
    files = retrying(lambda: list_inputs(config.inputs), what=f"list {' '.join(config.inputs)}",
                     policy=config.retry)
    pack = manifest.pack
    if (pack.get("input_files"), pack.get("input_bytes")) != (len(files), sum(f.size for f in files)):
        raise ResumeError("inputs", f"the inputs changed since {dataset} was packed for {config.output}; pass "
                          "--overwrite to pack them again")
    created = manifest.created
    return result_type(path=dataset, fingerprint=manifest.fingerprint, manifest=manifest, stats=manifest.stats,
                       elapsed=0.0, workers=0, tokenizer_backend=str(created.get("tokenizer_backend", "")),
                       tokenizer_note=created.get("tokenizer_note"), resumed_shards=len(manifest.shards),
                       input_files=len(files), input_bytes=sum(f.size for f in files))


def pack_to_remote(config: PackConfig, local_pack: Callable[..., R], result_type: Callable[..., R], *,
                   progress: Callable[..., None] | None = None,
                   upload_progress: Callable[[int, int], None] | None = None) -> R:
    """Pack `config.inputs` into the remote `config.output` (a URL) via a local staging directory.

    `local_pack(config, progress=...)` is the driver's local pack and `result_type` its PackResult.
    Refuses a remote location holding a finished dataset (unless `overwrite`: its manifest is deleted
    first, so the old dataset is never half-replaced while visible) or foreign objects.
    """
    url = config.output.rstrip("/")
    staging = staging_dir_for(config)
    dataset = staging / _DATASET
    upload = UploadConfig(storage_options=config.storage_options, verify=config.upload_verify,
                          retry=config.retry, parallel=config.upload_parallel)
    with locked_output(staging, own_layout=True):  # one pack per remote output on this machine
        existing = list_remote(url, storage_options=config.storage_options, policy=config.retry)
        _check_remote(config, existing)
        if config.overwrite:
            remove_remote(url, [MANIFEST_NAME], storage_options=config.storage_options, policy=config.retry)
            _clear(staging)
        job = _job(config)
        job_path = staging / _JOB
        old_job = json.loads(job_path.read_bytes()) if job_path.exists() else None
        staged_finished = (dataset / MANIFEST_NAME).exists() and not (dataset / JOURNAL_NAME).exists()
        if old_job is not None and old_job != job and dataset.exists() and any(dataset.iterdir()):
            raise ResumeError("job", f"the staging directory {staging} holds an unfinished pack to {url} of a "
                              "different job; re-run the original command to finish it, or pass --overwrite "
                              "to start over")
        if staged_finished:
            if config.resume is ResumeMode.NEVER:
                raise PackError(f"{url} has an unfinished upload staged in {staging}; re-run without "
                                "--no-resume to finish it, or pass --overwrite to start over")
            result = _staged_result(config, dataset, result_type)
        else:
            if config.resume is ResumeMode.REQUIRE and not (dataset / JOURNAL_NAME).exists():
                raise ResumeError("journal", f"{url} has no unfinished pack to resume (staging {staging})")
            staging.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(job_path, json.dumps(job, sort_keys=True).encode())
            local = dataclasses.replace(config, output=str(dataset), overwrite=False)
            result = local_pack(local, progress=progress)
        names = _dataset_files(dataset)
        stale = [n for n in existing if is_shardkit_file(n) and n not in names and n != MANIFEST_NAME]
        report = upload_dataset(dataset, url, names, manifest=MANIFEST_NAME, config=upload,
                                ledger=staging / _LEDGER, remove=stale, progress=upload_progress)
        _clear(staging)
    shutil.rmtree(staging, ignore_errors=True)
    return dataclasses.replace(result, remote_url=url, upload=report)  # type: ignore[type-var]
