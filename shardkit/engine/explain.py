"""Provenance: what row r of rank k held at step s, and at which steps a document is seen — from the order.

Nothing is replayed. The plan maps (step, row) to (source, sample id) in O(1) (`Plan.global_rows`); a
sample id is a window of `seq_len + 1` tokens of its source's flat token stream (`Windows`), and the
shard's mapped `.idx` says which documents that window covers (a binary search per shard piece). So
`explain` at step 10 and at step 10**8 costs the same: one global batch's rows, a few index lookups, and
the tokens of the rows asked about (for the decoded preview).

The inverse (`document_steps`) runs the same maps backwards: the windows that touch a document's tokens,
their positions in an epoch (`SampleOrder.positions_of`, the Feistel permutation's inverse), and the global
batch holding each position (a binary search over the phase's per-source counters, O(log batches)).

Rows are numbered as the loader deals them: global row g of a batch of size B over W ranks belongs to rank
g // (B/W); with micro-batches of m rows, it is row (g mod B/W) mod m of micro-batch (g mod B/W) // m.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset
from ..verify.decode import load_dataset_tokenizer
from .packed_rows import PackedWindows
from .plan import Stream

__all__ = ["DocPiece", "RowProvenance", "Explanation", "DocumentSighting", "explain", "document_steps"]

PREVIEW_TOKENS = 48


@dataclass(frozen=True)
class DocPiece:
    """Tokens [start, stop) of document `doc` (0-based over the source dataset) fill row tokens [at, at + n)."""

    doc: int
    shard: str
    doc_in_shard: int
    start: int
    stop: int
    at: int


@dataclass(frozen=True)
class RowProvenance:
    """One row of one global batch: where its `seq_len + 1` tokens come from."""

    step: int
    rank: int
    micro: int
    row: int  # within this rank's item (the micro-batch, when there are micro-batches)
    global_row: int  # within the global batch
    source: str
    phase: str
    seq_len: int
    sample_id: int
    epoch: int
    position: int  # in the epoch
    shard: str  # the shard holding the first token
    shard_token: int  # the first token's offset in that shard
    token_start: int  # the first token's offset in the source's flat stream
    docs: list[DocPiece]
    preview: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Explanation:
    step: int
    world_size: int
    micro_batch_size: int | None
    global_batch_size: int
    phase: str
    seq_len: int
    rows: list[RowProvenance]
    notes: list[str] = field(default_factory=list)
    skipped: tuple[int, int] | None = None  # the skip range holding this step: its rows are never delivered

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "world_size": self.world_size, "micro_batch_size": self.micro_batch_size,
                "global_batch_size": self.global_batch_size, "phase": self.phase, "seq_len": self.seq_len,
                "skipped": list(self.skipped) if self.skipped else None,
                "rows": [r.to_json() for r in self.rows], "notes": list(self.notes)}


def _check_index(name: str, value: Any, stop: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
    if stop is not None and value >= stop:
        raise ConfigError(f"{name} {value} is out of range: there are {stop} (0 … {stop - 1})")
    return int(value)


def _pieces(stream: Stream, sample_id: int, mapper: Any) -> list[DocPiece]:
    """The documents window `sample_id` covers, from each shard's mapped `.idx` (binary searches)."""
    if isinstance(stream.windows, PackedWindows):
        return _packed_pieces(stream.windows, sample_id, mapper)
    w = stream.windows
    ds: Dataset = w.dataset
    item = ds.dtype.itemsize
    g0 = sample_id * w.seq_len
    out: list[DocPiece] = []
    for s, lo, hi in w.token_ranges(np.array([g0]), np.array([g0 + w.width])):
        starts = np.asarray(mapper.doc_starts(w.gid_base + s)) // item
        size = int(w.sizes[s])
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi, side="left"))
        at_base = int(w.offsets[s]) + lo - g0
        for j in range(first, last):
            d0 = int(starts[j])
            d1 = int(starts[j + 1]) if j + 1 < starts.size else size
            a, z = max(lo, d0), min(hi, d1)
            if z > a:
                out.append(DocPiece(doc=int(ds.doc_offsets[s]) + j, shard=ds.shards[s].name, doc_in_shard=j,
                                    start=a - d0, stop=z - d0, at=at_base + (a - lo)))
    return out


def _packed_pieces(w: PackedWindows, row: int, mapper: Any) -> list[DocPiece]:
    """The document pieces of packed row `row`, in the row's order (a piece never crosses a document)."""
    ds: Dataset = w.dataset
    item = ds.dtype.itemsize
    _, _, starts, lengths = w.table.pieces(np.array([row], dtype=np.int64))
    out: list[DocPiece] = []
    at = 0
    for a, n in zip(starts.tolist(), lengths.tolist()):
        s = int(np.searchsorted(w.offsets, a, side="right")) - 1
        local = a - int(w.offsets[s])
        doc_starts = np.asarray(mapper.doc_starts(w.gid_base + s)) // item
        j = int(np.searchsorted(doc_starts, local, side="right")) - 1
        begin = local - int(doc_starts[j])
        out.append(DocPiece(doc=int(ds.doc_offsets[s]) + j, shard=ds.shards[s].name, doc_in_shard=j, start=begin,
                            stop=begin + n, at=at))
        at += n
    return out


class _Decoders:
    """One tokenizer per dataset, loaded on first use (None, with a note, when it cannot be)."""

    def __init__(self, tokenizer: str | None) -> None:
        self.tokenizer = tokenizer
        self.loaded: dict[int, Any] = {}
        self.notes: list[str] = []

    def decode(self, ds: Dataset, tokens: np.ndarray) -> str | None:
        if id(ds) not in self.loaded:
            tok, notes = load_dataset_tokenizer(ds.tokenizer, ds.path, tokenizer=self.tokenizer)
            self.loaded[id(ds)] = tok
            self.notes += [n for n in notes if n not in self.notes]
        tok = self.loaded[id(ds)]
        return None if tok is None else tok.decode(tokens)


def _row_tokens(stream: Stream, sample_id: int, mapper: Any) -> np.ndarray:
    """The row's tokens (a packed row's pieces back to back, without its padding)."""
    w = stream.windows
    if isinstance(w, PackedWindows):  # a piece lies inside one shard (documents do not cross shards)
        _, _, starts, lengths = w.table.pieces(np.array([sample_id], dtype=np.int64))
        shards = np.searchsorted(w.offsets, starts, side="right") - 1
        local = starts - w.offsets[shards]
        ranges = list(zip(shards.tolist(), local.tolist(), (local + lengths).tolist()))
    else:
        g0 = sample_id * w.seq_len
        ranges = w.token_ranges(np.array([g0]), np.array([g0 + w.width]))
    parts = [mapper.tokens(w.gid_base + s).tokens[lo:hi] for s, lo, hi in ranges]
    return np.concatenate(parts) if parts else np.zeros(0, w.dataset.dtype)


def _first_token(stream: Stream, sample_id: int) -> int:
    """The row's first token in the source's flat stream (a packed row's: its first piece's)."""
    w = stream.windows
    if isinstance(w, PackedWindows):
        return int(w.table.pieces(np.array([sample_id], dtype=np.int64))[2][0])
    return sample_id * w.seq_len


def explain(loader: Any, step: int, rank: int | None = None, row: int | None = None, *, micro: int | None = None,
            decode: bool = True, tokenizer: str | None = None, preview_tokens: int = PREVIEW_TOKENS
            ) -> Explanation:
    """Where every row of global batch `step` comes from (or rank `rank`'s rows, or its row `row`).

    `loader` is a `Loader` or `MixtureLoader` (its world size and micro-batch size say how rows are dealt;
    its position is not used or moved). `row` counts within the rank's item: within micro-batch `micro`
    when the loader has micro-batches. The preview decodes the row's first `preview_tokens` tokens with the
    source dataset's tokenizer (`decode=False`: none; `tokenizer`: a spec of your own, as `shardkit show`).
    """
    engine = loader.engine
    plan = engine.plan
    step = _check_index("step", step)
    if step < plan.cursor.anchor:
        raise ConfigError(f"step {step} comes before step {plan.cursor.anchor}, where this loader took over the run "
                          "with a changed stream; explain it with the loader configuration of that time")
    if step >= plan.end:
        raise ConfigError(f"step {step} is past the end of the stream: it has {plan.end:,} steps (0 … {plan.end - 1:,})")
    w, m = loader.placement.world_size, loader.placement.micro_batch_size
    loc = plan.phases.locate(step)
    phase = plan.phases.phases[loc.phase]
    size = plan.batch_size(step)
    per = size // w
    ranks = range(w) if rank is None else [_check_index("rank", rank, w)]
    if micro is not None and not m:
        raise ConfigError("micro is given but the loader has no micro-batches (micro_batch_size is None)")
    span = m or per
    micros = range(per // span) if micro is None else [_check_index("micro", micro, per // span)]
    if row is not None:
        if rank is None:
            raise ConfigError("row needs rank: rows are numbered within a rank's item")
        if m and micro is None:
            raise ConfigError("row needs micro: with micro-batches, rows are numbered within a micro-batch")
        picked = [(ranks[0], micros[0], _check_index("row", row, span))]
    else:
        picked = [(r, k, i) for r in ranks for k in micros for i in range(span)]
    wanted = [r * per + k * span + i for r, k, i in picked]
    rows = plan.rows(loc.phase, loc.sample + np.asarray(wanted, np.int64))
    decoders = _Decoders(tokenizer)
    out = []
    for n, (r, k, i) in enumerate(picked):
        j = int(rows.src[n])
        stream = rows.streams[j]
        sid = int(rows.ids[n])
        ds = stream.windows.dataset
        shard_index = int(rows.gid[n]) - stream.windows.gid_base
        preview = None
        if decode and preview_tokens > 0:
            preview = decoders.decode(ds, _row_tokens(stream, sid, engine.mapper)[:preview_tokens])
        out.append(RowProvenance(step=step, rank=r, micro=k, row=i, global_row=wanted[n], source=stream.name,
                                 phase=phase.name, seq_len=phase.seq_len, sample_id=sid, epoch=int(rows.epochs[n]),
                                 position=int(rows.within[n]), shard=ds.shards[shard_index].name,
                                 shard_token=int(rows.local[n]), token_start=_first_token(stream, sid),
                                 docs=_pieces(stream, sid, engine.mapper), preview=preview))
    skip = _skip_of(loader, step)
    return Explanation(step=step, world_size=w, micro_batch_size=m, global_batch_size=size, phase=phase.name,
                       seq_len=phase.seq_len, rows=out, notes=decoders.notes, skipped=skip)


def _skip_of(loader: Any, step: int) -> tuple[int, int] | None:
    return next(((a, b) for a, b in getattr(loader, "skips", ()) if a <= step <= b), None)


@dataclass(frozen=True)
class DocumentSighting:
    """Document tokens [start, stop) are in row `global_row` of step `step` (rank `rank`, micro `micro`, row
    `row`), as sample `sample_id` at `position` of epoch `epoch` of its source at `seq_len`."""

    step: int
    rank: int
    micro: int
    row: int
    global_row: int
    phase: str
    seq_len: int
    sample_id: int
    epoch: int
    position: int
    start: int
    stop: int
    skipped: bool = False  # the step is in a skip range: the loader never delivers it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def document_steps(loader: Any, doc: int, *, source: str | None = None, epoch: int = 0) -> list[DocumentSighting]:
    """Every step at which document `doc` of `source` is in a row during epoch `epoch` of that source's order.

    A window that holds any token of the document counts (so a document ending at a window's last token,
    which is only a label there, is listed). With several seq_lens, each has its own order and epochs:
    sightings of every seq_len the source is read at are listed, by step. Cost: O(windows of the document ×
    log batches), independent of where in the run they fall.
    """
    engine = loader.engine
    plan = engine.plan
    if source is None:
        if len(plan.names) != 1:
            raise ConfigError(f"source is required: the recipe has sources {', '.join(plan.names)}")
        source = plan.names[0]
    if source not in plan.names:
        raise ConfigError(f"unknown source {source!r}; the sources are {', '.join(plan.names)}")
    j = plan.names.index(source)
    ds: Dataset = plan.sources[source].dataset
    doc = _check_index("doc", doc, ds.num_docs)
    epoch = _check_index("epoch", epoch)
    shard, k = ds.locate_doc(doc)
    s = ds.shards.index(shard)
    starts = np.asarray(engine.mapper.doc_starts(plan.streams[next(key for key in plan.streams if key[0] == j)]
                                                 .windows.gid_base + s)) // ds.dtype.itemsize
    d0 = int(ds.token_offsets[s]) + int(starts[k])
    d1 = int(ds.token_offsets[s]) + (int(starts[k + 1]) if k + 1 < starts.size else shard.num_tokens)
    w, m = loader.placement.world_size, loader.placement.micro_batch_size
    found: list[DocumentSighting] = []
    for p_index, (phase, bounds) in enumerate(zip(plan.phases.phases, plan.phases.bounds)):
        if source not in dict(phase.mix):
            continue
        stream = plan.streams[(j, phase.seq_len)]
        L = phase.seq_len
        sids, tok_lo, tok_hi = _rows_holding(stream, d0, d1)
        if not sids.size:
            continue
        pos = stream.order.positions_of(epoch, sids) + epoch * stream.num_samples
        if stream.limit is not None:
            keep = pos < stream.limit
            sids, pos, tok_lo, tok_hi = sids[keep], pos[keep], tok_lo[keep], tok_hi[keep]
        lo_b = max(bounds.first_batch, plan.cursor.anchor)
        hi_b = min(bounds.first_batch + bounds.num_batches, plan.end)
        if lo_b >= hi_b:
            continue
        base = int(plan.cursor.bases[p_index][j])

        def before(b: int, base: int = base) -> int:  # stream position of source j at the start of batch b
            return base + int(plan.cursor.samples_before(b)[j] - plan.cursor.offset_samples[j])

        for sid, ps, a_tok, z_tok in zip(sids.tolist(), pos.tolist(), tok_lo.tolist(), tok_hi.tolist()):
            if not before(lo_b) <= ps < before(hi_b):
                continue
            a, z = lo_b, hi_b - 1  # the last batch b with before(b) <= ps
            while a < z:
                mid = (a + z + 1) // 2
                if before(mid) <= ps:
                    a = mid
                else:
                    z = mid - 1
            step = a
            rows = plan.global_rows(step)
            hit = np.flatnonzero((rows.src == j) & (rows.ids == sid) & (rows.epochs == epoch))
            if not hit.size:  # the plan's maps disagree with each other: a bug, never bad input
                raise RuntimeError(f"document_steps: position {ps} of {source!r} is not in step {step}")
            g = int(hit[0])
            per = rows.size // w
            span = m or per
            found.append(DocumentSighting(step=step, rank=g // per, micro=(g % per) // span, row=(g % per) % span,
                                          global_row=g, phase=phase.name, seq_len=L, sample_id=sid, epoch=epoch,
                                          position=ps - epoch * stream.num_samples, start=a_tok - d0,
                                          stop=z_tok - d0, skipped=_skip_of(loader, step) is not None))
    return sorted(found, key=lambda f: (f.step, f.global_row))


def _rows_holding(stream: Stream, d0: int, d1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sample ids holding any token of flat-stream tokens [d0, d1) — a document —, the first and end
    flat-stream token of the document each holds). Windows: arithmetic. Packed rows: the document's pieces start at
    d0 + k·seq_len (`packing.split_pieces`), looked up in the table (one pass over its piece starts)."""
    L = stream.seq_len
    if d1 <= d0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    w = stream.windows
    if isinstance(w, PackedWindows):
        t = w.table
        if not hasattr(t, "row_ptr"):  # Megatron's samples: computed, not a table of pieces to search
            raise ConfigError("the steps of a document are found in window and packed orders; order='megatron' "
                              "samples are not searched (explain a step instead)")
        starts = d0 + L * np.arange(max(1, -(-(d1 - d0 - 1) // L)), dtype=np.int64)
        pieces = np.flatnonzero(np.isin(t.start, starts))
        rows = np.searchsorted(t.row_ptr, pieces, side="right") - 1
        return rows.astype(np.int64), t.start[pieces], t.start[pieces] + t.length[pieces]
    first_id = max(0, -(-(d0 - L) // L))
    last_id = min(stream.num_samples - 1, (d1 - 1) // L)
    sids = np.arange(first_id, last_id + 1, dtype=np.int64)
    return sids, np.maximum(d0, sids * L), np.minimum(d1, sids * L + L + 1)
