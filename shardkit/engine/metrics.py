"""What a loader has done so far: the current phase, per source tokens, samples and epoch, and its reads.

Consumption is of the *global* stream (all ranks) before the loader's next batch — computed from the plan
when read, so it is exact after a resume and costs nothing per batch. Rows and bytes copied, shuffle
blocks touched and the page-cache hints are this process's own reads (`ReadMetrics`, one per stream). The
same dict for every loader: a single dataset is a recipe of one source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..mixture.cursor import Cursor, Exhaustion
from ..mixture.phases import PhasePlan
from .readahead import ReadMetrics
from .windows import num_windows

__all__ = ["LoaderMetrics"]


@dataclass
class LoaderMetrics:
    """`to_json()` gives what `shardkit stream` prints; `steps.record_step` is the per-item part."""

    plan: PhasePlan
    cursor: Cursor
    num_tokens: dict[str, int]  # per source: tokens in its dataset (epochs at any seq_len)
    epochs: dict[str, int | None]
    reads: dict[str, list[ReadMetrics]]  # per source: one per seq_len stream (hints)
    steps: ReadMetrics = None  # type: ignore[assignment]  # every item this process delivered, all sources
    position: Callable[[], int] = lambda: 0  # the loader's next batch
    end_batch: int = 0
    exhausted: Exhaustion | None = None
    integrity: Callable[[], dict[str, Any]] | None = None

    itemsize: int = 2

    def __post_init__(self) -> None:
        # rows this process delivered, per phase and source: finished chunks, plus the open chunk's first
        # items delivered since it opened (counted by `steps`; the sums are done here, when read)
        self.rows = np.zeros((len(self.plan.phases), len(self.plan.sources)), dtype=np.int64)
        self.batches = 0
        self._handed = [0]  # items of the open chunk handed out (the engine stores into it per item)
        self._reads: tuple[Any, ...] | None = None
        self._flushed = 0
        self._open: tuple[int, np.ndarray] | None = None
        if self.steps is None:
            self.steps = ReadMetrics()

    def open_chunk(self, phase: int, per_batch: np.ndarray, reads: tuple[Any, ...] | None = None) -> list[int]:
        """A chunk of items starts: `per_batch[i]` = rows of each source in its i-th item; `reads` is what
        `ReadMetrics.record_items` needs for it (epochs, bounds, counted, blocks, row bytes, blocks in all).
        Returns the one-element list the engine stores the number of items handed out into: nothing else
        is done per item, the counts are made when read or when the chunk closes."""
        self.close_chunk()
        self._open, self._handed, self._reads, self._flushed = (phase, per_batch), [0], reads, 0
        return self._handed

    def flush(self) -> None:
        """Count the open chunk's items handed out since the last flush into `steps`."""
        if self._open is not None and self._reads is not None and self._handed[0] > self._flushed:
            self.steps.record_items(*self._reads, self._flushed, self._handed[0])
            self._flushed = self._handed[0]

    @property
    def pending(self) -> int:
        """Items of the open chunk delivered so far."""
        return self._handed[0] if self._open is not None else 0

    def close_chunk(self) -> None:
        self.flush()
        pending = self.pending
        if self._open is not None and pending:
            phase, per_batch = self._open
            self.rows[phase] += per_batch[:pending].sum(axis=0)
            self.batches += pending
        self._open = None

    def _delivered(self) -> tuple[np.ndarray, int]:
        rows, batches = self.rows.copy(), self.batches
        pending = self.pending
        if self._open is not None and pending:
            rows[self._open[0]] += self._open[1][:pending].sum(axis=0)
            batches += pending
        return rows, batches

    def to_json(self, batch: int | None = None) -> dict[str, Any]:
        """The metrics at the loader's next batch (or at `batch`: e.g. where DataLoader workers got to)."""
        plan, b = self.plan, self.position() if batch is None else batch
        loc = self.cursor.locate(b)
        phase_i = min(loc.phase, len(plan.phases) - 1)
        phase = plan.phases[phase_i]
        weights = phase.weights
        samples = self.cursor.samples_before(b).tolist()
        tokens = self.cursor.tokens_before(b).tolist()
        widths = np.array([(p.seq_len + 1) * self.itemsize for p in plan.phases], dtype=np.int64)
        delivered, batches = self._delivered()
        rows, copied = delivered.sum(axis=0).tolist(), (delivered * widths[:, None]).sum(axis=0).tolist()
        sources = {}
        for j, name in enumerate(plan.sources):
            per_epoch = num_windows(self.num_tokens[name], phase.seq_len)
            position = -(-tokens[j] // phase.seq_len)
            reads = self.reads[name]
            sources[name] = {
                "weight": float(weights.get(name, 0)),
                "samples": samples[j],
                "tokens": tokens[j],
                "epoch": position // per_epoch if per_epoch else 0,
                "epoch_fraction": round(position / per_epoch, 6) if per_epoch else 0.0,
                "epochs": "auto" if self.epochs[name] is None else self.epochs[name],
                "rows_delivered": rows[j],
                "bytes_copied": copied[j],
                "groups_entered": sum(r.groups_entered for r in reads),
                "bytes_prefetched": sum(r.bytes_prefetched for r in reads),
            }
        self.flush()
        out: dict[str, Any] = self.steps.to_json()
        out.update({
            "batch": b,
            "phase": loc.phase if loc.phase < len(plan.phases) else None,
            "phase_name": phase.name if loc.phase < len(plan.phases) else None,
            "phase_batch": loc.batch,
            "phase_batches": plan.bounds[phase_i].num_batches,
            "seq_len": phase.seq_len,
            "end_batch": self.end_batch,
            "exhausted": None if self.exhausted is None else {
                "source": plan.sources[self.exhausted.source], "batch": self.exhausted.batch,
                "phase": plan.phases[self.exhausted.phase].name},
            "samples": int(sum(samples)),
            "tokens": int(sum(tokens)),
            "sources": sources,
            "items": batches,
            "groups_entered": sum(s["groups_entered"] for s in sources.values()),
            "bytes_prefetched": sum(s["bytes_prefetched"] for s in sources.values()),
            "bytes_released": sum(r.bytes_released for rs in self.reads.values() for r in rs),
        })
        if self.integrity is not None:  # verify_on_read / on_corrupt: blocks verified, damage met, rows replaced
            out["integrity"] = self.integrity()
        return out
