"""What a dataset holds: tokenizer, sizes, sources and their shares, document-length distribution.

Length statistics come from the `.idx` lengths, not from the manifest's pack-time histogram, so they
describe any dataset (adopted Megatron data too). They stream shard by shard in bounded memory and
are exact: lengths below 2**20 are counted in one dense array, the rare longer ones are kept as values.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from .errors import ConfigError, MissingDependencyError
from .format.dataset import Dataset, Shard, open_dataset
from .format.manifest import MANIFEST_NAME, Manifest
from .remote.fs import is_remote
from .remote.local_copy import remote_copy
from .verify.decode import load_dataset_tokenizer

__all__ = [
    "DatasetSummary",
    "DocumentView",
    "LengthAccumulator",
    "LengthStats",
    "bin_label",
    "inspect_dataset",
    "plot_summary",
    "show_document",
]

HISTOGRAM_BINS = 40  # bin i: lengths in [2**i, 2**(i+1)); empty documents are counted apart
_DENSE = 1 << 20


@dataclass(frozen=True)
class LengthStats:
    """Document lengths in tokens; percentiles are nearest-rank (a length some document really has)."""

    count: int
    mean: float
    min: int
    p50: int
    p90: int
    p99: int
    max: int


@dataclass(frozen=True)
class DatasetSummary:
    path: str
    fingerprint: str
    tokenizer: dict[str, Any] | None
    dtype: str
    shards: int
    docs: int
    tokens: int
    bin_bytes: int
    disk_bytes: int  # every file of the dataset: manifest, .bin, .idx, sidecars
    eos_appended: bool | None
    bos_prepended: bool | None
    lengths: LengthStats
    histogram: list[int]  # HISTOGRAM_BINS log2 bins of nonempty documents
    empty_docs: int
    tokens_per_shard: list[int]
    sources: list[dict[str, Any]] = field(default_factory=list)  # name, docs, tokens, skipped, share
    skipped: int = 0
    created: dict[str, Any] = field(default_factory=dict)
    stored_bytes: int = 0  # token files as stored: .bin, or .bin.zst for compressed shards
    compression: list[dict[str, Any]] = field(default_factory=list)  # per compressed shard, see `_compression`

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def compression_ratio(self) -> float | None:
        """Uncompressed / stored bytes over the compressed shards (None when no shard is compressed)."""
        stored = sum(c["file_bytes"] for c in self.compression)
        return sum(c["bin_bytes"] for c in self.compression) / stored if stored else None


class LengthAccumulator:
    """Exact length statistics over shards added one at a time, in memory bounded by the dense range."""

    def __init__(self) -> None:
        self.dense = np.zeros(0, dtype=np.int64)
        self.long: list[np.ndarray] = []
        self.histogram = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
        self.count = self.total = self.empty = 0

    def add(self, lengths: np.ndarray) -> None:
        if not lengths.size:
            return
        self.count += int(lengths.size)
        self.total += int(lengths.sum(dtype=np.int64))
        self.empty += int(np.count_nonzero(lengths == 0))
        nonempty = lengths[lengths > 0]
        bins = np.minimum(np.floor(np.log2(nonempty)).astype(np.int64), HISTOGRAM_BINS - 1)
        self.histogram += np.bincount(bins, minlength=HISTOGRAM_BINS)
        short = lengths[lengths < _DENSE]
        counts = np.bincount(short)
        if counts.size > self.dense.size:
            self.dense = np.concatenate([self.dense, np.zeros(counts.size - self.dense.size, np.int64)])
        self.dense[:counts.size] += counts
        if short.size < lengths.size:
            self.long.append(np.asarray(lengths[lengths >= _DENSE], dtype=np.int64))

    def stats(self) -> LengthStats:
        if not self.count:
            return LengthStats(0, 0.0, 0, 0, 0, 0, 0)
        cum = np.cumsum(self.dense)
        long = np.sort(np.concatenate(self.long)) if self.long else np.zeros(0, np.int64)

        def rank(k: int) -> int:  # the k-th smallest length, 1-based
            if k <= int(cum[-1] if cum.size else 0):
                return int(np.searchsorted(cum, k))
            return int(long[k - int(cum[-1] if cum.size else 0) - 1])

        def pct(q: float) -> int:
            return rank(max(1, int(np.ceil(q / 100 * self.count))))

        return LengthStats(self.count, self.total / self.count, rank(1), pct(50), pct(90), pct(99), rank(self.count))


def _disk_bytes(ds: Dataset) -> int:
    total = 0
    for name in ["manifest.json"] + [f"{s.name}{ext}" for s in ds.shards
                                     for ext in (".bin", ".bin.zst", ".idx", ".sum.json", ".ids.jsonl")]:
        with contextlib.suppress(FileNotFoundError):  # the ids sidecar is optional
            total += os.stat(ds.path / name).st_size
    return total


def _stored_names(m: Manifest) -> list[str]:
    return [MANIFEST_NAME] + [n for s in m.shards for n in (s.data_name, s.idx_name, s.sum_name, f"{s.name}.ids.jsonl")]


def inspect_dataset(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                    cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None
                    ) -> DatasetSummary:
    """Summarise a dataset; reads the manifest and every `.idx` (never a `.bin`).

    A remote URL (s3://, gs://, ...): the manifest and indexes are fetched into a temporary directory under
    `cache_dir` (see remote/local_copy.py); sizes on disk are the remote files' sizes.
    """
    if is_remote(path):
        with remote_copy(os.fspath(path), lambda m, _sizes: [s.idx_name for s in m.shards], cache_dir=cache_dir,
                         cache_limit=cache_limit, storage_options=storage_options) as copy:
            m = cast(Manifest, copy.manifest)  # parsed: a selection was given
            disk = sum(copy.remote_sizes.get(n, 0) for n in _stored_names(m))
            return _summary(Dataset(copy.path, m), os.fspath(path), disk)
    ds = open_dataset(path)
    return _summary(ds, str(ds.path), _disk_bytes(ds))


def _summary(ds: Dataset, path: str, disk_bytes: int) -> DatasetSummary:
    m = ds.manifest
    acc = LengthAccumulator()
    for entry in m.shards:
        acc.add(Shard(ds.path, entry, ds.dtype).index.lengths)  # a fresh Shard: no map outlives its turn
    sources = []
    raw_sources = m.stats.get("sources")
    if isinstance(raw_sources, dict):
        for name, src in raw_sources.items():
            src = src if isinstance(src, dict) else {}
            tokens = _count(src.get("tokens"))
            sources.append({"name": name, "docs": _count(src.get("docs")), "tokens": tokens,
                            "skipped": _count(src.get("skipped")),
                            "share": tokens / ds.num_tokens if ds.num_tokens else 0.0})
    skipped = m.stats.get("skipped")
    return DatasetSummary(
        path=path, fingerprint=m.fingerprint, tokenizer=m.tokenizer, dtype=m.dtype, shards=ds.num_shards,
        docs=ds.num_docs, tokens=ds.num_tokens, bin_bytes=sum(e.bin_bytes for e in m.shards),
        disk_bytes=disk_bytes, eos_appended=m.eos_appended, bos_prepended=m.bos_prepended,
        lengths=acc.stats(), histogram=acc.histogram.tolist(), empty_docs=acc.empty,
        tokens_per_shard=[e.num_tokens for e in m.shards], sources=sources,
        skipped=_count(skipped.get("count")) if isinstance(skipped, dict) else 0, created=dict(m.created),
        stored_bytes=sum(e.data_bytes for e in m.shards), compression=_compression(ds))


def _compression(ds: Dataset) -> list[dict[str, Any]]:
    out = []
    for e in ds.manifest.shards:
        c = e.compression
        if c is not None:
            out.append({"shard": e.name, "codec": c.codec, "level": c.level, "frame_size": c.frame_size,
                        "bin_bytes": e.bin_bytes, "file_bytes": c.file_bytes,
                        "ratio": e.bin_bytes / c.file_bytes if c.file_bytes else 0.0})
    return out


def _count(value: object) -> int:
    """A statistic from the manifest, or 0 when it is absent or not a count (statistics are informative)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(frozen=True)
class DocumentView:
    doc: int
    shard: str
    doc_in_shard: int
    tokens: np.ndarray
    total_tokens: int  # the document's length (tokens may be cut to max_tokens)
    text: str | None
    doc_id: Any = None  # the value kept in NAME.ids.jsonl (--id-field), if any
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"doc": self.doc, "shard": self.shard, "doc_in_shard": self.doc_in_shard,
                "total_tokens": self.total_tokens, "tokens": self.tokens.tolist(), "text": self.text,
                "id": self.doc_id, "notes": list(self.notes)}


def show_document(path: str | os.PathLike[str], doc: int, *, max_tokens: int | None = None,
                  decode: bool = True, tokenizer: str | None = None, cache_dir: str | os.PathLike[str] | None = None,
                  cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None
                  ) -> DocumentView:
    """Document `doc` (0-based over the whole dataset): its ids and, if the tokenizer loads, its text.

    `tokenizer` decodes it (default: the recorded tokenizer, only if its file is inside the dataset). A remote
    URL: the manifest and the one shard holding the document are fetched into a temporary directory under
    `cache_dir` (see remote/local_copy.py).
    """
    if is_remote(path):
        def one_shard(m: Manifest, _sizes: dict[str, int]) -> list[str]:
            first = 0
            for s in m.shards:
                if doc < first + s.num_docs:
                    return [s.idx_name, s.data_name, s.sum_name, f"{s.name}.ids.jsonl"]
                first += s.num_docs
            return []  # out of range: the check below says so

        with remote_copy(os.fspath(path), one_shard, cache_dir=cache_dir, cache_limit=cache_limit,
                         storage_options=storage_options) as copy:
            return _show(Dataset(copy.path, cast(Manifest, copy.manifest)), doc, max_tokens, decode, tokenizer)
    return _show(open_dataset(path), doc, max_tokens, decode, tokenizer)


def _show(ds: Dataset, doc: int, max_tokens: int | None, decode: bool, tokenizer: str | None) -> DocumentView:
    if not 0 <= doc < ds.num_docs:
        raise ConfigError(f"document {doc} is out of range: the dataset has {ds.num_docs:,} documents "
                          f"(0 … {ds.num_docs - 1:,})")
    shard, j = ds.locate_doc(doc)
    full = ds.doc(doc)
    tokens = np.array(full[:max_tokens] if max_tokens is not None else full)
    notes: list[str] = []
    text = None
    if decode:
        loaded, notes = load_dataset_tokenizer(ds.tokenizer, ds.path, tokenizer=tokenizer)
        if loaded is not None:
            text = loaded.decode(tokens)
    return DocumentView(doc=doc, shard=shard.name, doc_in_shard=j, tokens=tokens, total_tokens=int(full.size),
                        text=text, doc_id=_doc_id(ds.path / f"{shard.name}.ids.jsonl", j), notes=notes)


def _doc_id(path: Path, j: int) -> Any:
    if path.is_symlink() or not path.is_file():  # never follow a link out, never open a FIFO
        return None
    try:
        with open(path, "rb") as f:
            line = next(itertools.islice(f, j, None), None)
    except FileNotFoundError:
        return None
    try:
        return json.loads(line) if line is not None else None
    except ValueError:
        return None


def plot_summary(summary: DatasetSummary, out: str | os.PathLike[str]) -> None:
    """Write the length histogram and tokens per shard as one PNG (needs the `plot` extra)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", extra="plot", purpose="inspect --plot") from None
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax_h, ax_s = fig.subplots(1, 2, width_ratios=[3, 2])
    nz = [i for i, c in enumerate(summary.histogram) if c]
    lo, hi = (nz[0], nz[-1]) if nz else (0, 0)
    xs = list(range(lo, hi + 1))
    bars = ax_h.bar(xs, [summary.histogram[i] for i in xs], color="#4878a8")
    ax_h.bar_label(bars, [f"{c:,}" if c else "" for c in (summary.histogram[i] for i in xs)], fontsize=7)
    ax_h.set_xticks(xs, [bin_label(i) for i in xs], rotation=45, ha="right", fontsize=8)
    ax_h.set_xlabel("document length (tokens, log2 bins)")
    ax_h.set_ylabel("documents")
    L = summary.lengths
    ax_h.set_title(f"{summary.docs:,} documents — p50 {L.p50:,} · p90 {L.p90:,} · p99 {L.p99:,} · max {L.max:,}")
    tps = summary.tokens_per_shard
    ax_s.bar(range(len(tps)), tps, color="#6a9f58", width=1.0 if len(tps) > 50 else 0.8)
    ax_s.set_xlabel("shard")
    ax_s.set_ylabel("tokens")
    ax_s.set_title(f"{summary.tokens:,} tokens in {summary.shards:,} shards")
    fig.suptitle(f"{Path(summary.path).name} ({summary.dtype}, fingerprint {summary.fingerprint[:12]})")
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror}") from None


def bin_label(i: int) -> str:
    """`[1K, 2K)` for bin 10: the half-open token range of histogram bin `i`."""
    return f"[{_pow2(i)}, {_pow2(i + 1)})"


def _pow2(i: int) -> str:
    return f"{2 ** (i % 10)}{' KMGT'[i // 10].strip()}"
