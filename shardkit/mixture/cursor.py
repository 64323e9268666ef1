"""Where each source's own order stands at any global batch: a pure function of (plan, offsets, batch).

A source's progress is the number of **tokens** it has given, `T_j` (samples × the seq_len they were cut
at). A sample the source gives at seq_len `L` is position `⌈T_j / L⌉` of its `L`-stream — the source's
order at that length — so while the seq_len stays the same the position is simply the source's sample
counter, and when a phase changes the seq_len the source continues at the same fraction of its data
(its epoch progress carries over, at the new window length). Epoch `e` and position `k` in it are
`divmod(position, samples per epoch at L)`.

Inside phase `i` the counters of `PhasePlan.assign_batch` grow by one per sample, so the position of a
sample with counter `c` is `base_i[j] + c` with `base_i[j] = ⌈(T_j at the phase start + Δt_j) / L_i⌉ −
(counter at the phase start)`: one gather per row, the same cost at any batch.

**Offsets** (`Δt_j` tokens, `Δs_j` samples) make a recipe change exact: a loader that continues a run with
a new recipe from global batch `a` (the *anchor*) sets `Δ_j = (what source j had given in the old run at
a) − (what the new plan says it has given at a)`, so every source continues its order exactly where it
was. Without a change all offsets are zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError
from .phases import Location, PhasePlan

__all__ = ["Cursor", "Exhaustion", "phase_starts"]


def _ceil_div(x: np.ndarray, d: int) -> np.ndarray:
    return -((-x) // d)


class Exhaustion(NamedTuple):
    """The first global batch that would need a sample past a source's epoch cap (ordered by batch)."""

    batch: int
    source: int  # index into PhasePlan.sources
    phase: int


def phase_starts(plan: PhasePlan) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-source (samples, tokens) given before each phase and, last, in the whole plan.

    From the `counters_at` / `assign_batch` contract alone: tokens add up each phase's samples × its seq_len.
    """
    k = len(plan.sources)
    counters = [np.asarray(plan.counters_at(b.first_batch), np.int64) for b in plan.bounds]
    last = plan.num_batches - 1
    end = np.asarray(plan.counters_at(last), np.int64) + np.bincount(plan.assign_batch(last).source, minlength=k)
    counters.append(end)
    tokens = [np.zeros(k, np.int64)]
    for i, p in enumerate(plan.phases):
        tokens.append(tokens[-1] + (counters[i + 1] - counters[i]) * p.seq_len)
    return counters, tokens


class Cursor:
    """Per-source tokens/samples consumed and stream positions at any global batch, in O(k + log phases)."""

    def __init__(self, plan: PhasePlan, *, offset_tokens: np.ndarray | None = None,
                 offset_samples: np.ndarray | None = None, anchor: int = 0) -> None:
        k = len(plan.sources)
        self.plan = plan
        self.offset_tokens = np.zeros(k, np.int64) if offset_tokens is None else np.asarray(offset_tokens, np.int64)
        self.offset_samples = np.zeros(k, np.int64) if offset_samples is None else np.asarray(offset_samples,
                                                                                                 np.int64)
        if self.offset_tokens.shape != (k,) or self.offset_samples.shape != (k,):
            raise ConfigError(f"offsets must have one entry per source ({k})")
        self.anchor = int(anchor)
        self._c0, self._t0 = phase_starts(plan)
        self.bases = tuple(_ceil_div(self._t0[i] + self.offset_tokens, p.seq_len) - self._c0[i]
                           for i, p in enumerate(plan.phases))

    @property
    def num_batches(self) -> int:
        return self.plan.num_batches

    def locate(self, batch: int) -> Location:
        """(phase, batch within the phase, phase samples before it); the end of the plan is (n, 0, 0)."""
        if batch == self.plan.num_batches:
            return Location(len(self.plan.phases), 0, 0)
        return self.plan.locate(batch)

    def _counters(self, batch: int) -> np.ndarray:
        return self._c0[-1].copy() if batch == self.plan.num_batches else self.plan.counters_at(batch)

    def samples_before(self, batch: int) -> np.ndarray:
        """Samples each source has given before global batch `batch` (all ranks), offsets included."""
        return self._counters(batch) + self.offset_samples

    def tokens_before(self, batch: int) -> np.ndarray:
        """Tokens each source has given before global batch `batch` (all ranks), offsets included."""
        loc = self.locate(batch)
        if loc.phase == len(self.plan.phases):
            return self._t0[-1] + self.offset_tokens
        length = self.plan.phases[loc.phase].seq_len
        return self._t0[loc.phase] + (self._counters(batch) - self._c0[loc.phase]) * length + self.offset_tokens

    def global_samples_before(self, batch: int) -> int:
        """Samples of all sources in the global batches before `batch` (the unit index base)."""
        loc = self.locate(batch)
        if loc.phase == len(self.plan.phases):
            last = self.plan.bounds[-1]
            return last.first_sample + last.num_samples
        return self.plan.bounds[loc.phase].first_sample + loc.sample

    def positions(self, phase: int, source: np.ndarray, counter: np.ndarray) -> np.ndarray:
        """Stream position (at the phase's seq_len) of samples given by `assign_batch` in phase `phase`."""
        return self.bases[phase][source] + counter

    def batch_at_global_samples(self, samples: np.ndarray) -> np.ndarray:
        """The global batch holding each global sample (samples summed over all phases); a sample past the
        plan's last batch maps to `num_batches` (the end), where unit walks stop."""
        bounds = self.plan.bounds
        firsts = np.array([b.first_sample for b in bounds], dtype=np.int64)
        i = np.maximum(np.searchsorted(firsts, samples, side="right") - 1, 0)
        out = np.empty_like(samples)
        for p in np.unique(i).tolist():
            sel = i == p
            b = bounds[p]
            local = self.plan.phases[p].batch.batch_at_sample(samples[sel] - b.first_sample)
            out[sel] = b.first_batch + np.minimum(local, b.num_batches)
        out[samples >= bounds[-1].first_sample + bounds[-1].num_samples] = self.plan.num_batches
        return out

    def first_exhausted(self, limit: Callable[[int, int], int | None]) -> Exhaustion | None:
        """The first global batch ≥ the anchor that draws a position ≥ limit(source, seq_len), by bisection.

        A batch with counters [C(b), C(b+1)) of source j draws positions base + C(b) … base + C(b+1) − 1,
        so it passes the cap exactly when C(b+1) > limit − base: O(log batches) `counters_at` calls.
        """
        plan = self.plan
        start = self.locate(self.anchor)
        for i in range(start.phase, len(plan.phases)):
            phase, bounds = plan.phases[i], plan.bounds[i]
            lo0 = start.batch if i == start.phase else 0
            found: list[Exhaustion] = []
            for name, _ in phase.mix:
                j = plan.sources.index(name)
                cap = limit(j, phase.seq_len)
                if cap is None:
                    continue
                cmax = cap - int(self.bases[i][j])
                if int(self._counters(bounds.first_batch + bounds.num_batches)[j]) <= cmax:
                    continue
                lo, hi = lo0, bounds.num_batches - 1  # the answer is in [lo, hi]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if int(self._counters(bounds.first_batch + mid + 1)[j]) > cmax:
                        hi = mid
                    else:
                        lo = mid + 1
                found.append(Exhaustion(bounds.first_batch + lo, j, i))
            if found:
                return min(found)
        return None

    def offsets_json(self, names: tuple[str, ...]) -> Mapping[str, dict[str, int]]:
        return {n: {"samples": int(s), "tokens": int(t)}
                for n, s, t in zip(names, self.offset_samples.tolist(), self.offset_tokens.tolist()) if s or t}
