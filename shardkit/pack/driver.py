"""`pack()`: inputs → readers → tokenizer processes → one ordered writer → shards, journal, manifest.

The output depends only on the inputs in their order, the tokenizer and the options: documents are
tokenized in parallel but written in input order, shard boundaries depend only on document lengths,
and a resumed run restarts from the exact input position and statistics the journal recorded.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import itertools
import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import PackError, ReaderError, ResumeError
from ..format.checksums import digest_bytes
from ..format.dtypes import token_dtype_for_vocab
from ..format.idx import MAX_SEQUENCE_TOKENS
from ..format.manifest import Manifest, ShardEntry
from ..remote.fs import is_remote, storage_options_scope
from ..remote.retry import is_transient, retrying, retrying_iter
from ..remote.upload import UploadReport
from ..sources import InputFile, list_inputs
from ..tokenizers import Tokenizer, load_tokenizer
from ..tokenizers.spec import needs_self_check, self_check
from ..tokenizers.tiktoken_backend import TiktokenTokenizer
from ..writer import JOURNAL_NAME, Journal, JournalEntry, ShardWriter
from .budget import check_skip_budget, empty_files, is_encoding_problem
from .chunks import Chunk, Skip, first_samples, iter_chunks, sample_texts
from .config import OnError, PackConfig, ResumeMode, usable_cores
from .memory import pin_malloc_thresholds
from .output_dir import locked_output, outside_output, prepare_output, remove_shardkit_files
from .pipeline import ThreadedMap
from .pool import ordered_map, start_pool, stop_pool
from .remote_output import pack_to_remote
from .slices import plan_task, read_slice_records
from .stats import PackStats
from .units import Unit, UnitMerger, work_items
from .worker import WorkerSetup, encode_chunk, encode_item, encode_with, init_worker, preload_worker

__all__ = ["PackProgress", "PackResult", "pack"]

MAX_DOC_TOKENS = MAX_SEQUENCE_TOKENS  # the .idx stores lengths as int32

log = logging.getLogger("shardkit.pack")


@dataclass(frozen=True)
class PackProgress:
    docs: int
    tokens: int
    input_bytes_done: int
    input_bytes_total: int
    shards: int
    skipped: int
    elapsed: float
    resumed_docs: int = 0
    resumed_tokens: int = 0


@dataclass(frozen=True)
class PackResult:
    path: Path
    fingerprint: str
    manifest: Manifest
    stats: dict[str, Any]
    elapsed: float
    workers: int
    tokenizer_backend: str
    tokenizer_note: str | None
    resumed_shards: int = 0
    input_files: int = 0
    input_bytes: int = 0
    skip_examples: list[dict[str, str]] = field(default_factory=list)
    # input files that yielded no document, each with its first problem ({"file", "first_problem"})
    empty_files: list[dict[str, str]] = field(default_factory=list)
    remote_url: str | None = None  # packed to remote storage: the dataset's URL (`path` was the staging copy)
    upload: UploadReport | None = None


def _job(config: PackConfig, files: list[InputFile], tokenizer: dict[str, Any],
         task: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    job = {
        "inputs": [[f.url, f.size] for f in files],
        "tokenizer": tokenizer,
        "options": config.options_json(),
    }
    if task is not None:  # one task of a split job: which one, of which split
        job["task"] = {k: task[k] for k in ("task_id", "num_tasks", "granularity", "plan")}
    job_id = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
    return job, job_id


def _first_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    for key in ("inputs", "tokenizer", "options"):
        if old.get(key) != new.get(key):
            if key == "options":
                for k in sorted(set(old[key]) | set(new[key])):
                    if old[key].get(k) != new[key].get(k):
                        return f"option {k} was {old[key].get(k)!r}, now {new[key].get(k)!r}"
            if key == "inputs":
                return "the input files (or their sizes) changed"
            return key
    return "job"


def _surviving(directory: Path, entries: list[JournalEntry]) -> list[JournalEntry]:
    """Journal entries whose shard files are intact (sizes and sidecar digest); stops at the first bad one."""
    kept = []
    for e in entries:
        s = e.shard
        try:
            ok = ((directory / s.data_name).stat().st_size == s.data_bytes
                  and (directory / s.idx_name).stat().st_size == s.idx_bytes
                  and digest_bytes((directory / s.sum_name).read_bytes()) == s.sum_digest)
        except OSError:
            ok = False
        if not ok:
            break
        kept.append(e)
    return kept


class _Run:
    """The state of one pack run: the writer, the journal and the cumulative statistics."""

    def __init__(self, config: PackConfig, files: list[InputFile], writer: ShardWriter, journal: Journal,
                 stats: PackStats, entries: list[ShardEntry],
                 progress: Callable[[PackProgress], None] | None) -> None:
        self.config = config
        self.files = files
        self.writer = writer
        self.journal = journal
        self.stats = stats
        self.entries = entries
        self.progress = progress
        self.t0 = time.monotonic()
        self.resumed_docs = stats.docs
        self.resumed_tokens = stats.tokens
        self.total_bytes = sum(f.size for f in files)
        self._last_progress = 0.0

    def _skip(self, file: int, location: str, reason: str) -> None:
        chosen = self.config.reader.encoding_errors == "skip" and is_encoding_problem(reason)
        if self.config.on_error is OnError.FAIL and not chosen:
            raise PackError(f"{location}: {reason} (stopped by --on-error fail; use --on-error skip to count "
                            "and skip bad records)")
        self.stats.add_skip(self.files[file].source, location, reason, file=file, chosen=chosen)

    def _commit(self, next_file: int, next_record: int) -> None:
        entry = self.writer.close_shard()
        if entry is None:
            return
        log.debug("shard %s: %d docs, %d tokens; next input position file %d record %d", entry.name,
                  entry.num_docs, entry.num_tokens, next_file, next_record)
        self.entries.append(entry)
        self.journal.append(JournalEntry(entry, next_file, next_record, self.stats.to_json(internal=True)))

    def _add_docs(self, chunk: Chunk, tokens: np.ndarray, lengths: np.ndarray, offsets: np.ndarray,
                  chars: np.ndarray, a: int, b: int) -> None:
        self.writer.write_docs(tokens[offsets[a]:offsets[b]], lengths[a:b],
                               chunk.ids[a:b] if self.writer.with_ids else None)
        files = chunk.doc_file
        i = a
        while i < b:  # one stats update per run of documents from the same input file
            j = i + 1
            while j < b and files[j] == files[i]:
                j += 1
            self.stats.add_docs(self.files[files[i]].source, lengths[i:j], int(chars[i:j].sum()), file=files[i])
            i = j

    def consume(self, chunk: Chunk, tokens: np.ndarray, lengths: np.ndarray) -> None:
        if lengths.size and int(lengths.max()) > MAX_DOC_TOKENS:
            chunk, tokens, lengths = _drop_too_long(chunk, tokens, lengths)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        chars = chunk.doc_chars()
        skips = iter(chunk.skips)
        pending = next(skips, None)
        d, n = 0, int(lengths.size)
        while d < n:
            k = self.writer.fitting_docs(lengths[d:])
            if k == 0:
                while pending is not None and pending.before_doc <= d:
                    self._skip(pending.file, pending.location, pending.reason)
                    pending = next(skips, None)
                self._commit(chunk.doc_file[d], chunk.doc_record[d])
                continue
            self._add_docs(chunk, tokens, lengths, offsets, chars, d, d + k)
            d += k
        while pending is not None:
            self._skip(pending.file, pending.location, pending.reason)
            pending = next(skips, None)
        self._report(chunk.input_bytes_done)

    def _report(self, input_bytes_done: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress is None or (not force and now - self._last_progress < 0.2):
            return
        self._last_progress = now
        self.progress(PackProgress(
            docs=self.stats.docs, tokens=self.stats.tokens, input_bytes_done=input_bytes_done,
            input_bytes_total=self.total_bytes, shards=len(self.entries), skipped=self.stats.skipped,
            elapsed=now - self.t0, resumed_docs=self.resumed_docs,
            resumed_tokens=self.resumed_tokens))

    def finish(self) -> None:
        self._commit(len(self.files), 0)
        self._report(self.total_bytes, force=True)


def pack(config: PackConfig, *, progress: Callable[[PackProgress], None] | None = None,
         upload_progress: Callable[[int, int], None] | None = None) -> PackResult:
    """Pack `config.inputs` into a dataset at `config.output`; resumes an unfinished run of the same job.

    The output is a local directory or any fsspec URL; a remote output is packed into a local staging
    directory and then uploaded (`upload_progress(done, total)` gets bytes; see remote_output.py).
    `config.storage_options` reach every filesystem opened for remote inputs and the output.
    """
    with storage_options_scope(config.inputs, config.storage_options, config.retry):
        if is_remote(config.output):
            return pack_to_remote(config, _pack_local, PackResult, progress=progress,
                                  upload_progress=upload_progress)
        return _pack_local(config, progress=progress)


def _pack_local(config: PackConfig, *, progress: Callable[[PackProgress], None] | None = None) -> PackResult:
    """Pack into the local directory `config.output` (the whole pipeline; `pack` only routes).

    The worker processes start first: their start-up (interpreter, imports: ~0.2 s each, and loading
    the fastokens encoder `auto` is expected to choose, see `preload_worker`) then overlaps listing the
    inputs, loading the tokenizer and its self-check here.
    """
    t0 = time.monotonic()
    pin_malloc_thresholds()
    workers = config.effective_workers
    pool = (start_pool(workers, preload_worker, (config.tokenize.tokenizer, config.tokenize.backend))
            if workers > 1 else None)
    finished = False
    try:
        result = _pack_with(config, progress, pool, t0)
        finished = True
        return result
    finally:
        if pool is not None:
            stop_pool(pool, finished)


def _pack_with(config: PackConfig, progress: Callable[[PackProgress], None] | None,
               pool: ProcessPoolExecutor | None, t0: float) -> PackResult:
    out = Path(config.output)
    remote_inputs = any(is_remote(p) for p in config.inputs)
    files = (retrying(lambda: list_inputs(config.inputs), what=f"list {' '.join(config.inputs)}",
                      policy=config.retry) if remote_inputs else list_inputs(config.inputs))
    files = outside_output(files, out)
    task_meta = None
    if config.task is not None:  # every task lists all inputs and computes the same split
        files, task_meta = plan_task(config.task, files)
    with locked_output(out):
        journal_path = out / JOURNAL_NAME
        previous = Journal.read(journal_path)
        if previous is None:
            if config.resume is ResumeMode.REQUIRE:
                raise ResumeError("journal", f"{out} has no unfinished pack to resume")
            prepare_output(out, overwrite=config.overwrite)
        elif config.overwrite or config.resume is ResumeMode.NEVER:
            if not config.overwrite:
                raise PackError(f"{out} holds an unfinished pack; re-run without --no-resume to finish it, "
                                "or pass --overwrite to start over")
            remove_shardkit_files(out)
            previous = None

        # the fast path's self-check on real input runs once the workers are starting (see _encoded)
        tokenizer = load_tokenizer(config.tokenize.tokenizer, backend=config.tokenize.backend)
        note = getattr(tokenizer, "fastpath_note", None)
        workers = config.effective_workers
        # one worker starting at the first input checks on its first chunk (the same documents, read once)
        samples = (sample_texts(files, config.reader, read=read_slice_records)
                   if needs_self_check(tokenizer) and (workers > 1 or previous is not None) else None)
        spec = tokenizer.spec
        dtype = token_dtype_for_vocab(spec.vocab_size)
        spec_json = {k: v for k, v in spec.to_json().items() if k != "backend"}
        eos = spec.eos_id if config.tokenize.append_eos else None
        bos = spec.bos_id if config.tokenize.prepend_bos else None
        if config.tokenize.append_eos and eos is None:
            raise PackError(f"tokenizer {spec.name} has no end-of-text token; pass --no-eos")
        if config.tokenize.prepend_bos and bos is None:
            raise PackError(f"tokenizer {spec.name} has no beginning-of-text token; drop --bos")
        job, job_id = _job(config, files, spec_json, task_meta)
        log.info("packing %d input file(s), %d bytes, into %s with tokenizer %s (backend %s)", len(files),
                 sum(f.size for f in files), out, spec.name, spec.backend)

        kept: list[JournalEntry] = []
        if previous is not None:
            old_id, old_job, entries = previous
            if old_id != job_id:
                raise ResumeError(_first_difference(old_job, job),
                                  f"{out} holds an unfinished pack of a different job; re-run the original "
                                  "command to finish it, or pass --overwrite to start over")
            kept = _surviving(out, entries)
            log.info("resuming an unfinished pack of the same job: %d of %d journaled shard(s) intact", len(kept),
                     len(entries))
        keep_names = {n for e in kept for n in (e.shard.data_name, e.shard.idx_name, e.shard.sum_name,
                                                f"{e.shard.name}.ids.jsonl")}
        remove_shardkit_files(out, keep=keep_names | {JOURNAL_NAME})
        journal = Journal(journal_path, job, job_id)
        journal.start(kept)

        writer = ShardWriter(out, dtype=dtype, limits=config.limits, next_index=len(kept),
                             prefix=config.task.shard_prefix if config.task is not None else "shard",
                             with_ids=config.reader.id_field is not None, compression=config.compression,
                             compress_threads=config.workers or usable_cores())
        stats = PackStats.from_json(kept[-1].stats) if kept else PackStats()
        run = _Run(config, files, writer, journal, stats, [e.shard for e in kept], progress)
        start_file, start_record = (kept[-1].next_file, kept[-1].next_record) if kept else (0, 0)

        def fail_file(e: ReaderError) -> None:
            if remote_inputs and is_transient(e):
                raise e  # a network fault, not a bad file: never skipped; chunks() reads again from before it
            if (cause := e.device_error) is not None:
                raise PackError(f"{e.path}: {cause.strerror or cause} while reading it; a device error is not "
                                "bad data, so it is never skipped: check the disk or mount, then re-run the "
                                "same command to resume") from e
            if config.on_error is OnError.FAIL:
                raise PackError(f"{e} (stopped by --on-error fail)")

        scratch = tempfile.TemporaryDirectory(prefix="shardkit-pack-")  # the compiled encoding, for workers

        def setup_for(tok: Tokenizer) -> WorkerSetup:
            # workers load exactly the backend chosen here, never decide again
            b = tok.spec.backend
            return WorkerSetup(tokenizer=config.tokenize.tokenizer,
                               backend=b if b in ("hf", "tiktoken", "fastokens") else "auto",
                               dtype=dtype.name, eos_id=eos, bos_id=bos, vocab_size=spec.vocab_size,
                               compiled=str(tok.save_compiled(Path(scratch.name)))
                               if isinstance(tok, TiktokenTokenizer) else None)

        def chunks() -> Iterable[Chunk | Unit]:
            if workers > 1 and not remote_inputs:  # the workers read large local files themselves
                return work_items(files, config.reader, start_file=start_file, start_record=start_record,
                                  on_file_error=fail_file, read=read_slice_records)
            if not remote_inputs:
                return read_from(None)
            # a transient error that outlasted the storage client's own retries: continue just after the
            # last chunk handed on (the output never depends on where chunks start)
            return retrying_iter(read_from, _after, what="read the inputs", policy=config.retry)

        def read_from(at: tuple[int, int] | None) -> Iterable[Chunk]:
            f, r = at if at is not None else (start_file, start_record)
            return iter_chunks(files, config.reader, start_file=f, start_record=r,
                               on_file_error=fail_file, read=read_slice_records)

        def check_after(first: Chunk | None = None) -> Tokenizer | None:
            """The tokenizer to start over with, or None when the one the workers run passed."""
            nonlocal note
            texts = samples if samples is not None else first_samples(first.texts if first is not None else [])
            checked, note = self_check(tokenizer, texts, backend=config.tokenize.backend)
            return None if checked is tokenizer else checked

        try:
            try:
                # the workers start once: the pool is restarted only when a real self-check fails
                deferred = check_after if needs_self_check(tokenizer) else None
                _consume_all(run, _merged(_encoded(chunks(), workers, setup_for(tokenizer), deferred, tokenizer,
                                                   config, pool), fail_file))
            except _UseReference as fallback:  # the self-check failed before any result was consumed
                tokenizer = fallback.tokenizer
                _consume_all(run, _merged(_encoded(chunks(), workers, setup_for(tokenizer), None, tokenizer,
                                                   config, pool), fail_file))
            run.finish()
        except BaseException:
            writer.abort()
            journal.close()
            raise
        finally:
            scratch.cleanup()
        if not run.entries and config.task is None:  # a task's part may be empty (more tasks than data)
            journal.remove()
            firsts = [f"\n  {e['first_problem']}" for e in empty_files(stats, files)[:5]]
            raise PackError(f"no documents were packed from {len(files)} input file(s): "
                            f"{stats.skipped} record(s) skipped "
                            f"({', '.join(f'{k}: {v}' for k, v in stats.skipped_by_reason.items()) or 'none'})"
                            + (f"; the first problem of each file:{''.join(firsts)}" if firsts else ""))
        if note:
            log.info("tokenizer: %s", note)  # (also in the result and the CLI summary)
        try:
            usage = check_skip_budget(stats, files, config.max_skip_fraction, config.reader.encoding_errors)
            if usage.counted:
                log.info("skip budget: %.3f%% of records, about %.3f%% of input bytes skipped (limit %g)",
                         100 * usage.record_fraction, 100 * usage.byte_fraction, config.max_skip_fraction)
        except PackError:
            journal.close()  # kept: the same command with a larger --max-skip-fraction finishes at once
            raise
        elapsed = time.monotonic() - t0
        manifest = Manifest(
            dtype=dtype.name,
            tokenizer=spec_json,
            shards=tuple(run.entries),
            checksum_block_size=config.limits.checksum_block_size,
            eos_appended=config.tokenize.append_eos,
            bos_prepended=config.tokenize.prepend_bos,
            pack={"inputs": list(config.inputs), "input_files": len(files),
                  "input_bytes": run.total_bytes, "options": config.options_json(),
                  **({"task": task_meta} if task_meta is not None else {})},
            stats=stats.to_json(),
            created={"at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     "by": f"shardkit {__version__}", "tokenizer_backend": tokenizer.spec.backend,
                     "tokenizer_note": note, "workers": workers, "seconds": round(elapsed, 3),
                     "resumed_shards": len(kept)},
        )
        fingerprint = manifest.save(out)
        journal.remove()
    saved = Manifest.load(out)
    return PackResult(path=out, fingerprint=fingerprint, manifest=saved, stats=stats.to_json(),
                      elapsed=elapsed, workers=workers, tokenizer_backend=tokenizer.spec.backend, tokenizer_note=note,
                      resumed_shards=len(kept), input_files=len(files), input_bytes=run.total_bytes,
                      skip_examples=list(stats.skip_examples), empty_files=empty_files(stats, files))


def _consume_all(run: _Run, results: Iterator[tuple[Chunk, np.ndarray, np.ndarray]]) -> None:
    """Write every result; on any error (or Ctrl-C) the pipeline behind `results` is stopped at once."""
    with contextlib.closing(results):
        for chunk, tokens, lengths in results:
            run.consume(chunk, tokens, lengths)


def _drop_too_long(chunk: Chunk, tokens: np.ndarray, lengths: np.ndarray
                   ) -> tuple[Chunk, np.ndarray, np.ndarray]:
    """Turn documents past the index format's length limit into skip events (rare: a >2G-token doc)."""
    keep = lengths <= MAX_DOC_TOKENS
    token_keep = np.repeat(keep, lengths)
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    # order key: (position among kept docs, position among original docs, skip-before-doc first)
    keyed = [((s.before_doc, 0), Skip(int(kept_before[s.before_doc]), s.file, s.location, s.reason))
             for s in chunk.skips]
    for i in np.flatnonzero(~keep):
        keyed.append(((int(i), 1), Skip(int(kept_before[i]), chunk.doc_file[i], chunk.doc_location(i),
                                        f"document of {int(lengths[i]):,} tokens exceeds the index format's "
                                        f"limit of {MAX_DOC_TOKENS:,} tokens per document")))
    keyed.sort(key=lambda kv: kv[0])
    skips = [sk for _, sk in keyed]
    idx = np.flatnonzero(keep)
    new = Chunk(texts=[chunk.texts[i] for i in idx] if chunk.texts else [], ids=[chunk.ids[i] for i in idx],
                doc_file=[chunk.doc_file[i] for i in idx], doc_record=[chunk.doc_record[i] for i in idx],
                doc_locations=[chunk.doc_locations[i] for i in idx], skips=skips,
                input_bytes_done=chunk.input_bytes_done,
                char_counts=None if chunk.char_counts is None else chunk.char_counts[idx])
    return new, tokens[token_keep], lengths[keep]


class _UseReference(Exception):
    """The fast backend's self-check failed: encode with `tokenizer` (the next exact backend) instead."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__("self-check failed")
        self.tokenizer = tokenizer


def _checked(chunks: Iterable[Chunk | Unit], check: Callable[[], Tokenizer | None] | None, ahead: int = 1
             ) -> Iterator[Chunk | Unit]:
    """The chunks, with the self-check run after the first `ahead` are handed over (one per worker: they
    start encoding while it runs).

    The ordered map takes `workers + 2` chunks before it returns any result, so a check run before the
    next chunk is taken stops a failing run before anything is written; pack then starts over with the
    tokenizer the check fell back to.
    """
    it = iter(chunks)
    yield from itertools.islice(it, ahead)
    if check is not None:
        replacement = check()
        if replacement is not None:
            raise _UseReference(replacement)
    yield from it


def _encoded(chunks: Iterable[Chunk | Unit], workers: int, setup: WorkerSetup,
             check: Callable[..., Tokenizer | None] | None, loaded: Tokenizer | None, config: PackConfig,
             pool: ProcessPoolExecutor | None = None):
    """Only the texts (or a unit to read) travel to the workers; positions and skips stay here.

    In-process (workers ≤ 1) the tokenizer already `loaded` here encodes: loading it again would cost
    as much as encoding ~10 MB of text with fastokens.
    """
    if workers <= 1:
        return _in_threads(chunks, setup, check, loaded)  # type: ignore[arg-type]  # (never units here)

    def payload(item: Chunk | Unit) -> list[str] | tuple[Unit, Any]:
        return (item, config.reader) if isinstance(item, Unit) else item.texts

    if pool is not None:  # started before the tokenizer was chosen: each task names the setup
        return ordered_map(encode_with, _checked(chunks, check, ahead=workers),
                           payload=lambda item: (setup, payload(item)),
                           workers=workers, initializer=init_worker, initargs=(setup,), pool=pool)
    return ordered_map(encode_item, _checked(chunks, check), payload=payload, workers=workers,
                       initializer=init_worker, initargs=(setup, loaded) if workers <= 1 else (setup,))


def _in_threads(chunks: Iterable[Chunk], setup: WorkerSetup, check: Callable[[Chunk], Tokenizer | None] | None,
                loaded: Tokenizer | None) -> Iterator[tuple[Chunk, tuple[np.ndarray, np.ndarray]]]:
    """One worker: reading, tokenizing and writing overlap in threads (pipeline.py), results in order.

    The self-check runs in the tokenizing thread before it encodes the first chunk (given the chunk:
    a fresh pack samples its first documents there), while the reading thread reads on; the tokenizer
    is never used by two threads at once, and a failing check stops the run before anything was written.
    """
    init_worker(setup, loaded)
    pending = check

    def encode(chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
        nonlocal pending
        if pending is not None:
            replacement, pending = pending(chunk), None
            if replacement is not None:
                raise _UseReference(replacement)
        return encode_chunk(chunk.texts)

    with ThreadedMap(encode, chunks) as results:
        yield from results


def _merged(results: Iterable[tuple[Chunk | Unit, Any]], on_file_error: Callable[[ReaderError], None]
            ) -> Iterator[tuple[Chunk, np.ndarray, np.ndarray]]:
    """(chunk, tokens, lengths) in input order; a unit's result becomes a chunk with the file's own positions."""
    merger = UnitMerger(on_file_error)
    for item, result in results:
        if isinstance(item, Unit):
            yield merger.chunk(item, result)
        else:
            tokens, lengths = result
            yield item, tokens, lengths


def _after(chunk: Chunk) -> tuple[int, int]:
    """The input position (file, record) just after a chunk's last document, where a re-read continues."""
    if not chunk.doc_file:  # only the final chunk can hold no document; nothing is read after it
        return 1 << 62, 0
    return chunk.doc_file[-1], chunk.doc_record[-1] + 1
