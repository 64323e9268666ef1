"""(source, counter) for the rows of many global batches of one phase at once — `assign_batch`, vectorised.

`PhasePlan.assign_batch(b)` is the contract: per row of global batch `b`, the source and that source's
carried sample counter. Calling it once per batch costs ~25 µs of Python, more than the whole
single-source loader spends on a batch of 8, so the loader asks `plan.assign_positions(phase, positions)`
for whole chunks (one vectorised pass per constant stage). `AssignMode.PER_BATCH` evaluates
`assign_batch` batch by batch: the reference the property tests compare against.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from .phases import PhasePlan

__all__ = ["Assigner", "AssignMode"]


class AssignMode(Enum):
    PLAN = "plan.assign_positions"
    PER_BATCH = "assign_batch per batch"


class Assigner:
    """Row positions of a phase → (source index into plan.sources, carried counter), exact in every mode."""

    def __init__(self, plan: PhasePlan, mode: AssignMode = AssignMode.PLAN) -> None:
        self.plan = plan
        self.mode = mode

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
        source, counter = self.plan.assign_positions(phase, positions)
        return np.asarray(source, np.int64), np.asarray(counter, np.int64)
