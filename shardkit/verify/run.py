"""`verify_dataset`: structure, then block checksums, then (deep) tokens — every problem, one report.

The phases share one thread pool. Nothing raises for bad data: the manifest, each shard and each block
is checked on its own and whatever is wrong becomes a `Problem`, so one bad shard never hides another.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ShardkitError
from ..format.compressed import DecompressCache
from ..format.dataset import Dataset
from ..format.listing import DirListing, scan_directory
from ..format.manifest import MANIFEST_NAME, Manifest
from .content import BlockTask, blocks_of, bounded_map, check_blocks
from .decode import decode_samples, load_dataset_tokenizer, sample_doc_ids
from .deep import check_tokens, token_rules
from .frames import FrameTask, check_frames, frame_tasks
from .layout import extra_files, load_manifest
from .report import Check, Problem, Verdict, VerifyMode, VerifyProgress, VerifyReport
from .structure import ShardState, check_shard

__all__ = ["verify_dataset"]

ProgressFn = Callable[[VerifyProgress], None]
_PROGRESS_EVERY = 0.2  # seconds between progress callbacks


class _Progress:
    """Throttles callbacks to a few per second; always reports a phase's end."""

    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn
        self.phase, self.unit, self.done, self.total, self._last, self.t0 = "", "", 0, 0, 0.0, 0.0

    def start(self, phase: str, total: int, unit: str) -> None:
        self.phase, self.total, self.unit, self.done, self.t0 = phase, total, unit, 0, time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.fn is not None and (now - self._last >= _PROGRESS_EVERY or self.done >= self.total):
            self._last = now
            self.fn(VerifyProgress(self.phase, self.done, self.total, self.unit, now - self.t0))


def _jobs(jobs: int | None) -> int:
    if jobs is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs must be a positive integer, got {jobs!r}")
    return jobs


def verify_dataset(
    path: str | os.PathLike[str],
    *,
    mode: VerifyMode | str = VerifyMode.FULL,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    decode_sample: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    tokenizer: str | None = None,
) -> VerifyReport:
    """Check a dataset directory; `quick` reads no `.bin`, `full` hashes every block, `deep` checks tokens.

    Compressed shards: `full` also decodes every frame and checks the uncompressed block digests;
    `deep` and `decode_sample` read their tokens through the decompression cache (`cache_dir`).
    `tokenizer` decodes the sample (default: the recorded tokenizer, only if its file is inside the dataset).
    """
    try:
        mode = VerifyMode(mode)
    except ValueError:
        raise ConfigError(f"mode must be one of {', '.join(m.value for m in VerifyMode)}, got {mode!r}") from None
    if isinstance(decode_sample, bool) or not isinstance(decode_sample, int) or decode_sample < 0:
        raise ConfigError(f"decode_sample must be a non-negative integer, got {decode_sample!r}")
    n_jobs = _jobs(jobs)
    t0 = time.monotonic()
    report = VerifyReport(path=str(path), mode=mode)
    p = Path(path)
    try:
        listing = scan_directory(p)
    except OSError as e:
        report.problems.append(Problem(Check.DATASET, f"{p} cannot be listed ({e.strerror or e}); expected a "
                                                      "dataset directory"))
        return _done(report, t0)
    loaded = load_manifest(p, listing)
    report.problems += loaded.problems
    report.notes += loaded.notes
    if loaded.incomplete:
        report.verdict = Verdict.INCOMPLETE
    if loaded.manifest is None:
        return _done(report, t0)
    m = loaded.manifest
    report.fingerprint = m.fingerprint
    report.shard_names = [e.name for e in m.shards]
    tick = _Progress(progress)
    window = 4 * n_jobs  # tasks in flight: enough to keep every thread busy, few enough to stay flat
    with ThreadPoolExecutor(n_jobs, thread_name_prefix="verify") if n_jobs > 1 else nullcontext() as pool:
        states = _structure(p, m, listing, report, pool, window, tick)
        _content(p, states, mode, report, pool, window, tick)
        if mode is VerifyMode.DEEP:
            _deep(p, m, states, report, pool, window, tick, cache_dir)
    named = {MANIFEST_NAME} | {f for st in states for f in st.named_files}
    report.bytes_total = sum(listing.files.get(f, 0) for f in named)
    extras = extra_files(listing, named)
    if extras:
        report.notes.append(f"{len(extras)} file(s) not named by the manifest or any sidecar: "
                            f"{', '.join(extras[:8])}{' …' if len(extras) > 8 else ''}")
    if decode_sample:
        _decode(p, m, states, report, decode_sample, cache_dir, tokenizer)
    return _done(report, t0)


def _done(report: VerifyReport, t0: float) -> VerifyReport:
    report.seconds = time.monotonic() - t0
    return report.finish()


def _structure(directory: Path, m: Manifest, listing: DirListing, report: VerifyReport, pool: Executor | None,
               window: int, tick: _Progress) -> list[ShardState]:
    tick.start("structure", len(m.shards), "shards")
    states = []
    for st in bounded_map(pool, lambda e: check_shard(directory, e, m, listing), m.shards, window):
        states.append(st)
        report.problems += st.problems
        tick.add(1)
    report.problems += _stats_problems(m, states)
    return states


def _content(directory: Path, states: list[ShardState], mode: VerifyMode, report: VerifyReport,
             pool: Executor | None, window: int, tick: _Progress) -> None:
    def tasks() -> Iterator[BlockTask]:  # generated twice rather than held: millions of blocks at 100 TB
        return (t for st in states for t in _tasks(directory, st, mode))

    def ftasks() -> Iterator[FrameTask]:
        return (t for st in states if mode is not VerifyMode.QUICK for t in _frame_tasks(directory, st))

    tick.start("content", sum(t.end - t.start for t in tasks())
               + sum(t.byte_range[1] - t.byte_range[0] for t in ftasks()), "bytes")
    problems, report.bytes_hashed = check_blocks(tasks(), pool, window=window, on_bytes=tick.add)
    report.problems += problems
    problems, report.bytes_decompressed = check_frames(ftasks(), pool, window=window, on_bytes=tick.add)
    report.bytes_hashed += report.bytes_decompressed
    report.problems += problems


def _tasks(directory: Path, st: ShardState, mode: VerifyMode) -> Iterator[BlockTask]:
    if st.sums is None:
        return
    for name, fc in st.sums.files.items():
        if name in (st.entry.bin_name, st.entry.zst_name) and mode is VerifyMode.QUICK:
            continue
        if name in st.sizes:
            yield from blocks_of(st.entry.name, directory / name, fc, st.sums.block_size, st.sizes[name])


def _frame_tasks(directory: Path, st: ShardState) -> Iterator[FrameTask]:
    """A compressed shard's decode-and-hash tasks, when its frame index and sidecar are sound."""
    e = st.entry
    if st.frames is None or st.sums is None or e.bin_name not in st.sums.files:
        return iter(())
    return frame_tasks(e.name, e.zst_name, e.bin_name, directory / e.zst_name, st.frames,
                       st.sums.files[e.bin_name], st.sums.block_size)


def _stats_problems(m: Manifest, states: list[ShardState]) -> list[Problem]:
    """The manifest's statistics must describe the shards it lists (checked once every index is readable)."""
    out: list[Problem] = []
    stats = m.stats
    for key, actual in (("docs", m.num_docs), ("tokens", m.num_tokens)):
        if isinstance(stats.get(key), int) and stats[key] != actual:
            out.append(Problem(Check.STATS, f"stats.{key} is {stats[key]:,} but the shards hold {actual:,}",
                               file=MANIFEST_NAME))
    if not all(st.index_ok for st in states):
        return out
    if isinstance(stats.get("megatron_documents"), int):
        actual = sum(st.megatron_docs for st in states)
        if stats["megatron_documents"] != actual:
            out.append(Problem(Check.STATS, f"stats.megatron_documents is {stats['megatron_documents']:,} but the "
                                            f"indexes hold {actual:,} documents", file=MANIFEST_NAME))
    hist = stats.get("doc_length_histogram")
    counts = hist.get("counts") if isinstance(hist, dict) else None
    if isinstance(counts, list) and states:
        actual_h = np.sum([st.histogram for st in states], axis=0).tolist()
        if counts != actual_h:
            out.append(Problem(Check.STATS, "stats.doc_length_histogram disagrees with the document lengths in "
                                            "the indexes", file=MANIFEST_NAME))
    return out


def _deep(directory: Path, m: Manifest, states: list[ShardState], report: VerifyReport, pool: Executor | None,
          window: int, tick: _Progress, cache_dir: str | os.PathLike[str] | None) -> None:
    rules, notes = token_rules(m)
    report.notes += notes
    if not rules.any:
        return
    damaged = {p.shard for p in report.problems}

    def sound(st: ShardState) -> bool:
        if st.entry.compression is not None:  # its frames were all decoded and checked just before
            return st.index_ok and st.frames is not None and st.entry.name not in damaged
        return st.index_ok and st.sizes.get(st.entry.bin_name) == st.entry.bin_bytes

    ready = [st for st in states if sound(st)]
    skipped = len(states) - len(ready)
    if skipped:
        report.notes.append(f"token checks skipped for {skipped} shard(s) whose index or .bin is damaged")
    tick.start("tokens", sum(st.entry.bin_bytes for st in ready), "bytes")
    cache = DecompressCache(cache_dir, fingerprint=m.fingerprint)

    def one(st: ShardState) -> tuple[list[Problem], int]:
        try:
            if st.entry.compression is None:
                return check_tokens(directory, st.entry, m.token_dtype, rules)
            with cache.scratch_copy(directory, st.entry) as plain:
                return check_tokens(directory, st.entry, m.token_dtype, rules, bin_path=plain)
        except ShardkitError as e:
            return [Problem(Check.TOKENS, f"cannot be decompressed ({e})", shard=st.entry.name,
                            file=st.entry.data_name)], 0
        except (OSError, ValueError) as e:
            return [Problem(Check.TOKENS, f"cannot be read ({e})", shard=st.entry.name,
                            file=st.entry.bin_name)], 0

    for problems, n in bounded_map(pool, one, ready, window):
        report.problems += problems
        report.bytes_scanned += n
        tick.add(n)


def _decode(directory: Path, m: Manifest, states: list[ShardState], report: VerifyReport, n: int,
            cache_dir: str | os.PathLike[str] | None, given: str | None) -> None:
    tokenizer, notes = load_dataset_tokenizer(m.tokenizer, directory, tokenizer=given)
    report.notes += notes
    if tokenizer is None:
        return
    bad = {p.shard for p in report.problems}
    ds = Dataset(directory, m, cache_dir=cache_dir)
    good_ids = [i for i in sample_doc_ids(ds.num_docs, n) if ds.locate_doc(i)[0].name not in bad]
    if len(good_ids) < min(n, ds.num_docs):
        report.notes.append("documents in damaged shards were not decoded")
    samples, problems = decode_samples(ds, tokenizer, good_ids)
    report.samples += samples
    report.problems += problems
