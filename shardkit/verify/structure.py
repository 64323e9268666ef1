"""Structural checks of one shard: files, sizes, the checksum sidecar and the Megatron index.

Reads the sidecar, the `.idx` and the `.ids.jsonl` but never the `.bin` (so `--quick` stays fast at
any size); of a compressed shard's `.bin.zst` only the footer and frame index. Every failure becomes a `Problem` naming the shard and file; checks that do not depend on
a failed one still run, so one shard's report is as complete as its bytes allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import IntegrityError, ManifestError
from ..format.checksums import ShardChecksums, digest_bytes
from ..format.compressed import check_frame_index
from ..format.idx import check_index_arrays, read_index
from ..format.listing import DirListing
from ..format.manifest import Manifest, ShardEntry
from ..format.zstd_frames import FramedReader, FrameIndex
from .report import Check, Problem

__all__ = ["HISTOGRAM_BINS", "ShardState", "check_shard", "size_problem"]

HISTOGRAM_BINS = 40  # the manifest's doc_length_histogram: bin i counts lengths in [2**i, 2**(i+1))


@dataclass
class ShardState:
    """What the structural pass learned about one shard, for the content and token passes."""

    entry: ShardEntry
    problems: list[Problem] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # the shard's files that are present
    sums: ShardChecksums | None = None  # only when its digest matched the manifest
    index_ok: bool = False
    megatron_docs: int = 0  # document-index count − 1
    histogram: np.ndarray | None = None
    frames: FrameIndex | None = None  # a compressed shard's frame index, when its footer and index are sound

    @property
    def ids_name(self) -> str:
        return f"{self.entry.name}.ids.jsonl"

    @property
    def named_files(self) -> set[str]:
        e = self.entry
        return {e.data_name, e.idx_name, e.sum_name} | (set(self.sums.files) if self.sums else set())

    def add(self, check: Check, detail: str, file: str | None = None, **kw) -> None:
        self.problems.append(Problem(check, detail, shard=self.entry.name, file=file, **kw))


def size_problem(shard: str, file: str, actual: int, expected: int, recorder: str = "the manifest") -> Problem:
    lo, hi = sorted((actual, expected))
    how = f"truncated: the last {hi - lo:,} bytes are missing" if actual < expected else \
        f"appended to: {hi - lo:,} extra bytes at the end"
    return Problem(Check.SIZE, f"{actual:,} bytes, {recorder} records {expected:,} ({how})", shard=shard,
                   file=file, byte_range=(lo, hi), expected=str(expected), actual=str(actual))


def check_shard(directory: Path, entry: ShardEntry, manifest: Manifest, listing: DirListing) -> ShardState:
    """Every structural problem of one shard (never raises for bad bytes); reads no `.bin`."""
    st = ShardState(entry=entry)
    for fname, expected in ((entry.data_name, entry.data_bytes), (entry.idx_name, entry.idx_bytes),
                            (entry.sum_name, None)):
        if fname not in listing.files:
            st.add(Check.MISSING, f"{listing.absent_reason(fname)}; restore it or re-pack", fname)
            continue
        st.sizes[fname] = listing.files[fname]
        if expected is not None and st.sizes[fname] != expected:
            st.problems.append(size_problem(entry.name, fname, st.sizes[fname], expected))
    if entry.sum_name in st.sizes:
        _check_sidecar(directory, st, listing)
    if st.sizes.get(entry.idx_name) == entry.idx_bytes:
        _check_index(directory, st, manifest)
    if entry.compression is not None and st.sizes.get(entry.zst_name) == entry.data_bytes:
        _check_frame_index(directory, st)
    if st.sums and st.ids_name in st.sums.files and st.sizes.get(st.ids_name) == st.sums.files[st.ids_name].size:
        _check_ids(directory, st)
    return st


def _check_sidecar(directory: Path, st: ShardState, listing: DirListing) -> None:
    e, where = st.entry, st.entry.sum_name
    try:
        raw = (directory / where).read_bytes()
    except OSError as err:
        st.add(Check.SIDECAR, f"cannot be read ({err.strerror})", where)
        return
    digest = digest_bytes(raw)
    if digest != e.sum_digest:
        st.add(Check.SIDECAR, "changed since the manifest was written (its digest differs); its block "
                              "checksums are not trusted, so this shard's blocks are not checked",
               where, expected=e.sum_digest, actual=digest)
        return
    try:
        sums = ShardChecksums.from_bytes(raw, where)
    except ManifestError as err:
        st.add(Check.SIDECAR, err.problem, where)
        return
    allowed = {e.bin_name: e.bin_bytes, e.idx_name: e.idx_bytes, st.ids_name: None}
    if e.compression is not None:  # NAME.bin: the uncompressed bytes' digests (no such file on disk)
        allowed[e.zst_name] = e.compression.file_bytes
    files = {}
    for name, fc in sums.files.items():
        if name not in allowed:
            st.add(Check.SIDECAR, f"lists {name!r}, which is not a file of shard {e.name} "
                                  f"(expected {', '.join(allowed)})", where)
            continue
        files[name] = fc
        want = allowed[name]
        if want is not None and fc.size != want:
            st.add(Check.SIDECAR, f"records {name} as {fc.size:,} bytes but the manifest says {want:,}", where,
                   expected=str(want), actual=str(fc.size))
        if want is None:  # the ids sidecar: only the checksum file records it
            if name not in listing.files:
                st.add(Check.MISSING, f"{listing.absent_reason(name)} (listed in {where}); restore it or re-pack",
                       name)
            else:
                st.sizes[name] = listing.files[name]
                if st.sizes[name] != fc.size:
                    st.problems.append(size_problem(e.name, name, st.sizes[name], fc.size, recorder=where))
    for required in (e.bin_name, e.idx_name) + ((e.zst_name,) if e.compression else ()):
        if required not in files:
            st.add(Check.SIDECAR, f"has no block checksums for {required}", where)
    st.sums = ShardChecksums(block_size=sums.block_size, files=files)


def _check_index(directory: Path, st: ShardState, manifest: Manifest) -> None:
    e, where = st.entry, st.entry.idx_name
    try:
        idx = read_index(directory / where, check=False)
        h = idx.header
        if h.dtype != manifest.token_dtype:
            raise ManifestError(where, f"index dtype {h.dtype.name} differs from the manifest's {manifest.dtype}")
        if h.num_sequences != e.num_docs:
            raise ManifestError(where, f"index has {h.num_sequences:,} sequences, the manifest records "
                                       f"{e.num_docs:,}")
        check_index_arrays(idx, where, bin_size=e.bin_bytes)
        if "megatron_documents" not in manifest.stats:  # packed by shardkit: one sequence per document
            di = idx.doc_indices
            if h.num_doc_indices != h.num_sequences + 1 or bool(np.any(di != np.arange(di.size))):
                raise ManifestError(where, "document indices are not 0, 1, …, S (shardkit writes one "
                                           "sequence per document)")
        st.megatron_docs = h.num_doc_indices - 1
        bins = np.floor(np.log2(np.maximum(idx.lengths, 1))).astype(np.int64)
        st.histogram = np.bincount(np.minimum(bins, HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS)
        st.index_ok = True
    except ManifestError as err:
        st.add(Check.INDEX, err.problem, where)
    except (OSError, ValueError) as err:
        st.add(Check.INDEX, f"cannot be read ({err})", where)


def _check_frame_index(directory: Path, st: ShardState) -> None:
    """Footer and frame index of a `.bin.zst` (digests, sizes, layout), and that they describe this shard."""
    where = st.entry.zst_name
    try:
        with FramedReader(directory / where, cache_frames=0, name=where) as r:
            check_frame_index(r.index, st.entry, where)
            st.frames = r.index
    except IntegrityError as err:
        st.add(Check.FRAMES, err.problem, where, byte_range=err.byte_range, expected=err.expected,
               actual=err.actual)
    except ManifestError as err:  # an unknown container version: newer shardkit, or a damaged footer
        st.add(Check.FRAMES, f"{err.problem} (or its footer is damaged: the transport checksum of its last "
                             "block tells, in a full verify)", where)


def _check_ids(directory: Path, st: ShardState) -> None:
    name = st.ids_name
    try:
        raw = (directory / name).read_bytes()
    except OSError as err:
        st.add(Check.IDS, f"cannot be read ({err.strerror})", name)
        return
    lines = raw.count(b"\n")
    if lines != st.entry.num_docs or (raw and not raw.endswith(b"\n")):
        st.add(Check.IDS, f"has {lines:,} line(s), expected one per document ({st.entry.num_docs:,})", name)
