"""`merge_parts`: one dataset over the parts of a split pack, without copying token data.

Each part is an ordinary dataset written by one task (`--num-tasks N --task-id I`), its shards named
`task-0000I-shard-…`, so names never collide. The merge hard-links every shard file into the output
(same inode: no byte is copied or rewritten, the checksum sidecars stay valid as they are) and writes
one manifest over all shards, parts in task order, last and atomically. Hard links rather than moves
keep the parts intact, so a merge can be re-run or repeated at will; rather than references, because a
manifest never names a path outside its directory. The cost: parts and output must share a filesystem.

Idempotent: the merged manifest depends only on the parts' contents, so merging the same parts again
gives the same fingerprint (an output already holding it is left as it is), and a merge that stopped
part-way finishes when run again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import ManifestError, PackError
from ..format.atomic import atomic_write_bytes, fsync_dir, temp_path
from ..format.checksums import ShardChecksums, digest_bytes
from ..format.dataset import open_dataset
from ..format.manifest import MANIFEST_NAME, Manifest
from ..writer import JOURNAL_NAME, MERGE_MARKER_NAME, Journal
from .output_dir import locked_output, prepare_output, remove_shardkit_files
from .stats import MAX_SKIP_EXAMPLES, PackStats

__all__ = ["MergeResult", "merge_parts"]

# what every part of one job must share, with the words used when one differs
_SAME = (("dtype", "token dtype"), ("tokenizer", "tokenizer"), ("eos_appended", "EOS setting"),
         ("bos_prepended", "BOS setting"), ("checksum_block_size", "checksum block size"))


@dataclass(frozen=True)
class MergeResult:
    path: Path
    fingerprint: str
    manifest: Manifest
    parts: int
    linked_files: int  # new links made by this run (0 when the output already held this merge)
    already_merged: bool
    elapsed: float


@dataclass(frozen=True)
class _Part:
    path: Path
    manifest: Manifest
    task: dict[str, Any]

    @property
    def task_id(self) -> int:
        return int(self.task["task_id"])


def _load_part(path: Path) -> _Part:
    if not path.is_dir():
        raise PackError(f"part {path}: not a directory; give the output directories of the tasks")
    if not (path / MANIFEST_NAME).exists():
        unfinished = Journal.read(path / JOURNAL_NAME) if (path / JOURNAL_NAME).exists() else None
        if unfinished is not None and "task" in unfinished[1]:
            t = unfinished[1]["task"]
            raise PackError(f"part {path} is unfinished (task {t['task_id']} of {t['num_tasks']} was interrupted): "
                            f"re-run its `shardkit pack … --task-id {t['task_id']}` command to finish it, "
                            "then merge again")
        raise PackError(f"part {path} is not a finished part (no {MANIFEST_NAME}); pack its task first")
    ds = open_dataset(path)  # validates the manifest and that every shard file is there, full size
    task = ds.manifest.pack.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("task_id"), int):
        raise PackError(f"part {path} was not packed as a task (no --num-tasks/--task-id); merge combines "
                        "the parts of one split pack")
    return _Part(path, ds.manifest, task)


def _check_compatible(parts: list[_Part]) -> None:
    """Same split, tokenizer and options; every task id exactly once."""
    by_id: dict[int, _Part] = {}
    for p in parts:
        if p.task_id in by_id:
            raise PackError(f"task {p.task_id} is given twice: {by_id[p.task_id].path} and {p.path}; pass each "
                            "part once")
        by_id[p.task_id] = p
    ref = min(parts, key=lambda p: p.task_id)
    for p in parts:
        for key, what in (("num_tasks", "number of tasks"), ("granularity", "split granularity"),
                          ("plan", "split (listing of inputs)")):
            if p.task.get(key) != ref.task.get(key):
                raise PackError(f"part {p.path} comes from a different split than {ref.path}: {what} "
                                f"{p.task.get(key)!r} vs {ref.task.get(key)!r}; merge only the parts of one job "
                                "(same inputs, --num-tasks and split granularity)")
        for attr, what in _SAME:
            a, b = getattr(p.manifest, attr), getattr(ref.manifest, attr)
            if attr == "tokenizer":  # where the file lies may differ between machines; its content may not
                a, b = (_without(x, "path") for x in (a, b))
            if a != b:
                raise PackError(f"part {p.path} was packed with a different {what} than {ref.path} "
                                f"({a!r} vs {b!r}); re-pack it with the same settings")
        opts, ref_opts = p.manifest.pack.get("options"), ref.manifest.pack.get("options")
        if opts != ref_opts:
            diff = sorted(k for k in set(opts or {}) | set(ref_opts or {})
                          if (opts or {}).get(k) != (ref_opts or {}).get(k))
            raise PackError(f"part {p.path} was packed with different options than {ref.path} "
                            f"({', '.join(f'{k}: {(opts or {}).get(k)!r} vs {(ref_opts or {}).get(k)!r}' for k in diff)});"
                            " re-pack it with the same options")
    n = int(ref.task["num_tasks"])
    missing = [i for i in range(n) if i not in by_id]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", …" if len(missing) > 10 else "")
        raise PackError(f"missing part(s) for task(s) {shown} of {n}: pack them with --num-tasks {n} --task-id "
                        f"{missing[0]} (and so on), then merge again")
    out_of_range = sorted(i for i in by_id if not 0 <= i < n)
    if out_of_range:
        raise PackError(f"task id(s) {out_of_range} are outside [0, {n - 1}]")


def _without(d: Any, key: str) -> Any:
    return {k: v for k, v in d.items() if k != key} if isinstance(d, dict) else d


def _merge_stats(parts: list[_Part]) -> dict[str, Any]:
    """Counts add up; skip examples are the first ones in task order (as a single pack keeps its first)."""
    total = PackStats()
    for p in parts:
        s = PackStats.from_json(p.manifest.stats)
        total.docs += s.docs
        total.tokens += s.tokens
        total.chars += s.chars
        total.histogram = [a + b for a, b in zip(total.histogram, s.histogram)]
        for name, counts in s.sources.items():
            acc = total.sources.setdefault(name, {})
            for k, v in counts.items():
                acc[k] = acc.get(k, 0) + v
        total.skipped += s.skipped
        for reason, count in s.skipped_by_reason.items():
            total.skipped_by_reason[reason] = total.skipped_by_reason.get(reason, 0) + count
        total.skip_examples += s.skip_examples[:MAX_SKIP_EXAMPLES - len(total.skip_examples)]
    return total.to_json()


def _merged_manifest(parts: Sequence[_Part]) -> Manifest:
    """The merge's manifest: the parts' shards in task order; a pure function of the parts' contents."""
    ordered = sorted(parts, key=lambda p: p.task_id)
    ref = ordered[0]
    task = ref.task
    names: set[str] = set()
    shards = []
    for p in ordered:
        for s in p.manifest.shards:
            if s.name in names:
                raise PackError(f"shard name {s.name} occurs in two parts (the second is {p.path}); parts of "
                                "one job name their shards by task id, so this part is not from this job")
            names.add(s.name)
            shards.append(s)
    return Manifest(
        dtype=ref.manifest.dtype,
        tokenizer=ref.manifest.tokenizer,
        shards=tuple(shards),
        checksum_block_size=ref.manifest.checksum_block_size,
        eos_appended=ref.manifest.eos_appended,
        bos_prepended=ref.manifest.bos_prepended,
        pack={"inputs": ref.manifest.pack.get("inputs"),
              "input_files": task.get("listing", {}).get("files"),
              "input_bytes": task.get("listing", {}).get("bytes"),
              "options": ref.manifest.pack.get("options"),
              "tasks": {"num_tasks": task["num_tasks"], "granularity": task["granularity"], "plan": task["plan"],
                        "parts": [{"task_id": p.task_id, "fingerprint": p.manifest.fingerprint,
                                   "shards": len(p.manifest.shards)} for p in ordered]}},
        stats=_merge_stats(ordered),
    )


def _shard_files(part: Path, name: str, sum_name: str, sum_digest: str) -> list[str]:
    """Every file of a shard: the ones its checksum sidecar covers, and the sidecar (checked against the
    manifest, so what is linked is what the part's manifest vouches for)."""
    raw = (part / sum_name).read_bytes()
    if digest_bytes(raw) != sum_digest:
        raise PackError(f"part {part}: {sum_name} does not match its manifest (corrupted or replaced); run "
                        f"`shardkit verify {part}` and re-pack that task")
    sums = ShardChecksums.from_bytes(raw, str(part / sum_name))
    return [*sorted(sums.files), sum_name]


def _link(src: Path, dst: Path) -> bool:
    """Hard-link `src` at `dst` (atomically replacing whatever is there); False if it already is that file."""
    try:
        if os.path.samefile(src, dst):
            return False
    except FileNotFoundError:
        pass
    tmp = temp_path(dst)
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError as e:
        if e.errno == errno.EXDEV:
            raise PackError(f"cannot hard-link {src} into {dst.parent}: they are on different filesystems; merge "
                            "never copies token data, so put the output on the parts' filesystem") from None
        raise PackError(f"cannot hard-link {src} to {tmp}: {e.strerror}; merge needs a filesystem with hard "
                        "links, the parts on the same filesystem as the output") from None
    try:
        os.replace(tmp, dst)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise PackError(f"cannot place {dst.name} in {dst.parent}: {e.strerror}; remove what is in the way "
                        "and run the merge again (it continues where it stopped)") from None
    return True


def _unmark(out: Path) -> None:
    try:
        (out / MERGE_MARKER_NAME).unlink()
    except FileNotFoundError:
        return
    fsync_dir(out)


def merge_parts(parts: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
                overwrite: bool = False) -> MergeResult:
    """Merge the parts of one split pack (all N of them, any order) into a dataset at `output`."""
    t0 = time.monotonic()
    if not parts:
        raise PackError("no parts given: name the output directories of all the tasks")
    out = Path(output)
    loaded = [_load_part(Path(p)) for p in parts]
    real_out = os.path.realpath(out)
    for p in loaded:
        if os.path.realpath(p.path) == real_out:
            raise PackError(f"the output {out} is one of the parts; merge into a new directory")
    _check_compatible(loaded)
    manifest = _merged_manifest(loaded)
    if not manifest.shards:
        raise PackError(f"the {len(loaded)} part(s) hold no documents; nothing to merge (see their "
                        "manifests' stats.skipped)")
    fingerprint = manifest.to_json()["fingerprint"]
    ordered = sorted(loaded, key=lambda p: p.task_id)
    with locked_output(out):
        if (out / JOURNAL_NAME).exists() and not overwrite:
            raise PackError(f"{out} holds an unfinished pack; merge into another directory, or pass --overwrite")
        if (out / MANIFEST_NAME).exists() and not overwrite:
            try:
                existing = Manifest.load(out)
            except ManifestError:
                existing = None
            if existing is None or existing.fingerprint != fingerprint:
                raise PackError(f"{out} already holds a dataset that is not the merge of these parts; pass "
                                "--overwrite to replace it or choose another output directory")
            open_dataset(out)  # every file still there
            _unmark(out)  # a merge killed just after writing the manifest
            return MergeResult(out, fingerprint, existing, len(loaded), 0, True, time.monotonic() - t0)
        prepare_output(out, overwrite=overwrite)
        files = [(p.path, name) for p in ordered for s in p.manifest.shards
                 for name in _shard_files(p.path, s.name, s.sum_name, s.sum_digest)
                 # a compressed shard's sidecar also covers its uncompressed NAME.bin, which is not on disk
                 if not (s.compression is not None and name == s.bin_name)]
        # the marker goes first and stays until the manifest is in place: from now on the output reads as an
        # unfinished merge (verify: INCOMPLETE), never as shards that lost their manifest
        atomic_write_bytes(out / MERGE_MARKER_NAME, json.dumps(
            {"merging": fingerprint, "parts": len(loaded)}, sort_keys=True).encode() + b"\n")
        # temp files and strays of an earlier try
        remove_shardkit_files(out, keep={name for _, name in files} | {MERGE_MARKER_NAME})
        linked = sum(_link(src / name, out / name) for src, name in files)
        fsync_dir(out)
        saved_fp = dataclasses.replace(manifest, created={
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "by": f"shardkit {__version__}", "merged_parts": len(loaded),
            "seconds": round(time.monotonic() - t0, 3)}).save(out)
        _unmark(out)
    return MergeResult(out, saved_fp, Manifest.load(out), len(loaded), linked, False, time.monotonic() - t0)
