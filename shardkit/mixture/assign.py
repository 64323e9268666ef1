"""(source, counter) for the rows of many global batches of one phase at once — `assign_batch`, vectorised.

`PhasePlan.assign_batch(b)` is the contract: per row of global batch `b`, the source and that source's
carried sample counter. Calling it once per batch costs ~15 µs of Python, as much as the whole
single-source loader spends on a batch of 8, so the loader asks for whole chunks instead:

* `plan.assign_positions(phase, positions)` when the plan offers it (the vectorised form of the contract);
* else the plan's interleave directly (`plan.interleaves[phase].assign`, which is what `assign_batch`
  evaluates today), after checking at construction that it reproduces `assign_batch` on the first, a
  middle and the last batch of every phase;
* else (the check failed) `assign_batch` per batch — exact, only slower.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from .interleave import PhasePlan

__all__ = ["Assigner", "AssignMode"]


class AssignMode(Enum):
    PLAN = "plan.assign_positions"
    INTERLEAVE = "interleave"
    PER_BATCH = "assign_batch per batch"


class Assigner:
    """Row positions of a phase → (source index into plan.sources, carried counter), exact in every mode."""

    def __init__(self, plan: PhasePlan, mode: AssignMode | None = None) -> None:
        self.plan = plan
        index = {name: j for j, name in enumerate(plan.sources)}
        self._maps = [np.array([index[name] for name, _ in p.mix], dtype=np.int64) for p in plan.phases]
        self._c0 = [np.asarray(plan.counters_at(b.first_batch), np.int64) for b in plan.bounds]
        if mode is None:
            mode = AssignMode.PLAN if callable(getattr(plan, "assign_positions", None)) else AssignMode.INTERLEAVE
            if mode is AssignMode.INTERLEAVE and not self._agrees():
                mode = AssignMode.PER_BATCH
        self.mode = mode

    def _interleave(self, phase: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        local, counter = self.plan.interleaves[phase].assign(positions)
        source = self._maps[phase][local]
        return source, counter + self._c0[phase][source]

    def _agrees(self) -> bool:
        """Whether the interleave shortcut reproduces assign_batch (probed at three batches of every phase)."""
        try:
            for i, (p, bounds) in enumerate(zip(self.plan.phases, self.plan.bounds)):
                for local in sorted({0, bounds.num_batches // 2, bounds.num_batches - 1}):
                    mix = self.plan.assign_batch(bounds.first_batch + local)
                    start = int(p.batch.start(local))
                    pos = np.arange(start, start + mix.source.size, dtype=np.int64)
                    source, counter = self._interleave(i, pos)
                    if not (np.array_equal(source, mix.source) and np.array_equal(counter, mix.counter)):
                        return False
        except (AttributeError, TypeError, IndexError):
            return False
        return True

    def rows(self, phase: int, batches: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows [lo, hi) (phase positions) of each of `batches` (global indices, all in `phase`), concatenated."""
        if self.mode is AssignMode.PER_BATCH:
            first = self.plan.bounds[phase].first_batch
            starts = self.plan.phases[phase].batch.start(batches - first)
            srcs, cnts = [], []
            for b, s, a, z in zip(batches.tolist(), starts.tolist(), lo.tolist(), hi.tolist()):
                mix = self.plan.assign_batch(b)
                srcs.append(mix.source[a - s:z - s])
                cnts.append(mix.counter[a - s:z - s])
            return np.concatenate(srcs), np.concatenate(cnts)
        counts = hi - lo
        offsets = np.cumsum(counts) - counts
        positions = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lo - offsets, counts)
        if self.mode is AssignMode.PLAN:
            source, counter = self.plan.assign_positions(phase, positions)  # type: ignore[attr-defined]
            return np.asarray(source, np.int64), np.asarray(counter, np.int64)
        return self._interleave(phase, positions)
