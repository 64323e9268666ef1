"""`decompress_dataset`: a plain, Megatron-readable copy of a dataset with compressed shards.

The copy is exactly what `pack` without `--compression` writes for the same job: every `NAME.bin` is
the decompressed tokens (checked frame by frame and against the uncompressed block digests on the
way), `.idx` and `.ids.jsonl` are copied after their digests are checked, each sidecar loses only its
`NAME.bin.zst` entry, and the manifest loses the shards' `compression` records and the pack option.
So the copy's fingerprint equals the plain pack's, and loader state saved on one resumes on the other.
Files are written under temp names and renamed; the manifest comes last, so an interrupted run never
leaves something that opens as a dataset.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError, IntegrityError
from ..format.atomic import atomic_file, atomic_write_bytes, fsync_dir
from ..format.checksums import BlockHasher, FileChecksums, ShardChecksums, digest_bytes
from ..format.compressed import decompress_shard, shard_checksums
from ..format.dataset import open_dataset
from ..format.manifest import Manifest, ShardEntry

__all__ = ["decompress_dataset"]


def _check_copy(raw: bytes, expected: FileChecksums | None, block_size: int, shard: str, name: str) -> None:
    if expected is None:
        return
    h = BlockHasher(block_size)
    h.update(raw)
    got = h.finish()
    if got != expected:
        raise IntegrityError(shard, f"{name} does not match its checksums; run `shardkit verify` on the source")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        tmp = dst.with_name(f".{dst.name}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def _plain_entry(src: Path, out: Path, entry: ShardEntry, threads: int | None) -> ShardEntry:
    sums = shard_checksums(src, entry)
    ids = f"{entry.name}.ids.jsonl"
    for name in (entry.idx_name, ids):
        if name == ids and name not in sums.files:
            continue
        raw = (src / name).read_bytes()
        _check_copy(raw, sums.files.get(name), sums.block_size, entry.name, name)
        atomic_write_bytes(out / name, raw, sync_dir=False)
    if entry.compression is None:
        _link_or_copy(src / entry.bin_name, out / entry.bin_name)
        atomic_write_bytes(out / entry.sum_name, (src / entry.sum_name).read_bytes(), sync_dir=False)
        return entry
    with atomic_file(out / entry.bin_name, sync_dir=False) as f:
        decompress_shard(src, entry, f, threads=threads)
    files = {k: v for k, v in sums.files.items() if k != entry.zst_name}
    sidecar = ShardChecksums(block_size=sums.block_size, files=files).to_bytes()
    atomic_write_bytes(out / entry.sum_name, sidecar, sync_dir=False)
    return replace(entry, sum_digest=digest_bytes(sidecar), compression=None)


def _plain_pack(pack: dict) -> dict:
    out = copy.deepcopy(pack)
    if isinstance(out.get("options"), dict):
        out["options"].pop("compression", None)
    return out


def decompress_dataset(source: str | os.PathLike[str], output: str | os.PathLike[str], *,
                       threads: int | None = None,
                       progress: Callable[[int, int], None] | None = None) -> Manifest:
    """Write a plain copy of the dataset at `source` into the new or empty directory `output`.

    `progress(shards_done, shards_total)` is called after each shard. Plain shards of a mixed dataset
    are hard-linked (copied across filesystems).
    """
    ds = open_dataset(source)
    src, out = ds.path, Path(output)
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"{out} exists and is not a directory")
        if os.path.samefile(src, out):
            raise ConfigError(f"{out} is the source dataset; choose a new output directory")
        if any(out.iterdir()):
            raise ConfigError(f"{out} is not empty; choose a new or empty output directory")
    out.mkdir(parents=True, exist_ok=True)
    m = ds.manifest
    entries = []
    try:
        for i, entry in enumerate(m.shards):
            entries.append(_plain_entry(src, out, entry, threads))
            if progress is not None:
                progress(i + 1, len(m.shards))
    except BaseException:  # no manifest was written, so nothing here opens as a dataset; free the space
        for entry in m.shards[:len(entries) + 1]:
            for name in (entry.bin_name, entry.idx_name, entry.sum_name, f"{entry.name}.ids.jsonl"):
                with contextlib.suppress(FileNotFoundError):
                    (out / name).unlink()
        raise
    fsync_dir(out)
    created = {**m.created, "decompressed_from": m.fingerprint}
    plain = replace(m, shards=tuple(entries), pack=_plain_pack(m.pack), created=created)
    plain.save(out)
    return Manifest.load(out)
