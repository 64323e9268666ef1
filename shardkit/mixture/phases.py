"""Phases of a mixture laid end to end on global-batch boundaries, with per-source counters carried across.

Each phase has its own token budget, seq_len, batch schedule and weights, planned by a `BatchInterleave`;
`PhasePlan` maps a global batch index to (phase, batch within it) and knows every source's counters there.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..order import BatchSchedule, PackingStrategy, parse_schedule
from ..order._checks import nonneg_int, positive_int
from .batch_interleave import BatchInterleave
from .weights import normalize_weights

__all__ = [
    "BatchMix",
    "Location",
    "Phase",
    "PhaseBounds",
    "PhasePlan",
]

@dataclass(frozen=True, kw_only=True)
class Phase:
    """One training phase: a token budget, one seq_len, a batch schedule (restarting at 0) and a mixture.

    `mix` takes a mapping or (source, weight) pairs; it is stored sorted by source name with the weights
    normalized to exact fractions summing to 1, so the order never depends on how the mapping was written.
    Weights are shares of the phase's samples — equally of its tokens, since every sample is `seq_len` long.
    """

    name: str
    tokens: int
    seq_len: int
    batch: BatchSchedule
    mix: tuple[tuple[str, Fraction], ...]
    packing: PackingStrategy = PackingStrategy.WINDOW  # rows: windows, or documents packed (per phase)

    def __post_init__(self) -> None:
        object.__setattr__(self, "packing", PackingStrategy.parse(self.packing))
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"phase name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "tokens", positive_int(f"phase {self.name!r} tokens", self.tokens))
        object.__setattr__(self, "seq_len", positive_int(f"phase {self.name!r} seq_len", self.seq_len))
        object.__setattr__(self, "batch", parse_schedule(self.batch))
        items = list(self.mix.items() if isinstance(self.mix, Mapping) else self.mix)
        names = [name for name, _ in items]
        if not items:
            raise ConfigError(f"phase {self.name!r}: the mix is empty; give at least one source a weight")
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
            raise ConfigError(f"phase {self.name!r}: mix sources must be distinct non-empty names, got {names}")
        items.sort()
        names = [name for name, _ in items]
        try:
            weights = normalize_weights([w for _, w in items], names)
        except ConfigError as e:
            raise ConfigError(f"phase {self.name!r}: {e}") from None
        object.__setattr__(self, "mix", tuple(zip(names, weights)))

    @property
    def weights(self) -> dict[str, Fraction]:
        return dict(self.mix)


class PhaseBounds(NamedTuple):
    """Where a phase sits in the run: global batches, samples and tokens before it, and its own totals."""

    first_batch: int
    num_batches: int
    first_sample: int
    num_samples: int
    first_token: int
    num_tokens: int


class Location(NamedTuple):
    phase: int
    batch: int  # within the phase: the index its batch schedule sees
    sample: int  # samples of the phase before this batch: the batch's first interleave position


class BatchMix(NamedTuple):
    phase: int
    batch: int
    source: np.ndarray  # index into PhasePlan.sources, per sample of the global batch
    counter: np.ndarray  # the source's sample counter, carried across phases


class PhasePlan:
    """Phases laid end to end on global-batch boundaries, with per-source counters carried across them.

    **Rounding rule:** a phase ends at the first batch boundary at or after its token budget (tokens =
    samples × seq_len), i.e. it runs ⌈budget / seq_len⌉ samples rounded *up* to a whole batch. This is the
    rule of `Piecewise(unit="tokens")` and of Megatron's ramp — a budget that falls inside a batch takes
    effect at the next boundary, a batch is never split — so every phase gets at least its budget
    (overshooting by less than one of its batches) and no phase is ever empty.

    Source j's counter at the start of phase i is the number of samples it gave in phases 0..i−1, so each
    source continues its own order where it left off. The schedule restarts at batch 0 in every phase.

    **Bounds** (`mixers[i]`, a `BatchInterleave`, plans phase i): every global batch of size B holds
    ⌊w_j·B⌋ or ⌈w_j·B⌉ samples of source j; after every batch of phase i, source j has given
    w_j·n ± `mixers[i].max_lag` of the phase's n samples (below 1 except after a rare unabsorbable change of
    batch size — see the module docstring). `counters_at` is exact for any batch, in O(k + log stages).
    """

    def __init__(self, phases: Sequence[Phase]) -> None:
        if not phases:
            raise ConfigError("a phase plan needs at least one phase")
        seen: dict[str, int] = {}
        for i, p in enumerate(phases):
            if not isinstance(p, Phase):
                raise ConfigError(f"phase {i} must be a Phase, got {type(p).__name__}")
            if p.name in seen:
                raise ConfigError(f"phase {i} repeats the name {p.name!r} of phase {seen[p.name]}")
            seen[p.name] = i
        self.phases: tuple[Phase, ...] = tuple(phases)
        self.sources: tuple[str, ...] = tuple(sorted({name for p in phases for name, _ in p.mix}))
        index = {name: j for j, name in enumerate(self.sources)}
        self._maps = tuple(np.array([index[name] for name, _ in p.mix], dtype=np.int64) for p in phases)
        bounds, counters, tokens, mixers = [], [], [], []
        b = s = t = 0
        carried = np.zeros(len(self.sources), dtype=np.int64)
        carried_tokens = np.zeros(len(self.sources), dtype=np.int64)
        for p, gmap in zip(phases, self._maps):
            need = -(-p.tokens // p.seq_len)
            nb = int(p.batch.batch_at_sample(need - 1)) + 1
            ns = int(p.batch.start(nb))
            bounds.append(PhaseBounds(b, nb, s, ns, t, ns * p.seq_len))
            counters.append(carried.copy())
            tokens.append(carried_tokens.copy())
            mixers.append(BatchInterleave((w for _, w in p.mix), p.batch, nb))
            drawn = mixers[-1].counts_before(nb)
            carried[gmap] += drawn
            carried_tokens[gmap] += drawn * p.seq_len
            b, s, t = b + nb, s + ns, t + ns * p.seq_len
        self.bounds: tuple[PhaseBounds, ...] = tuple(bounds)
        self.mixers: tuple[BatchInterleave, ...] = tuple(mixers)
        self._counters = counters + [carried]
        self._tokens = tokens + [carried_tokens]
        self._first_batches = [x.first_batch for x in bounds]
        self.num_batches = b

    def phase_index(self, name: str) -> int:
        for i, p in enumerate(self.phases):
            if p.name == name:
                return i
        raise ConfigError(f"no phase named {name!r} (phases: {', '.join(p.name for p in self.phases)})")

    def locate(self, global_batch: int) -> Location:
        """(phase, batch within the phase, samples of the phase before it), O(log phases)."""
        g = nonneg_int("global batch", global_batch)
        if g >= self.num_batches:
            raise ConfigError(f"batch {g} is past the end of the plan ({self.num_batches} batches in "
                              f"{len(self.phases)} phases); extend the last phase's token budget to train longer")
        i = bisect_right(self._first_batches, g) - 1
        local = g - self.bounds[i].first_batch
        return Location(i, local, int(self.phases[i].batch.start(local)))

    def counters_at_start(self, phase: int) -> np.ndarray:
        """Samples each source (in `sources` order) gave before phase `phase`; `phase = len(phases)`: in total."""
        return self._counters[self._phase_arg(phase)].copy()

    def tokens_at_start(self, phase: int) -> np.ndarray:
        """Tokens each source gave before phase `phase` — differs from counters × seq_len when seq_len changes."""
        return self._tokens[self._phase_arg(phase)].copy()

    def counters_at(self, global_batch: int) -> np.ndarray:
        """Each source's carried counter at the start of a global batch (for resume and inspection)."""
        loc = self.locate(global_batch)
        out = self._counters[loc.phase].copy()
        out[self._maps[loc.phase]] += self.mixers[loc.phase].counts_before(loc.batch)
        return out

    def assign_batch(self, global_batch: int) -> BatchMix:
        """Source and carried counter of every sample of a global batch: O(B + k + log stages), any index."""
        loc = self.locate(global_batch)
        local, counter = self.mixers[loc.phase].assign(loc.batch)
        source = self._maps[loc.phase][local]
        return BatchMix(loc.phase, loc.batch, source, counter + self._counters[loc.phase][source])

    def assign_positions(self, phase: int, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """`assign_batch` for sample positions of phase `phase` (any shape): (source, carried counter) each."""
        i = self._phase_arg(phase)
        if i == len(self.phases):
            raise ConfigError(f"phase {i} is out of range: the plan has {len(self.phases)} phases")
        local, counter = self.mixers[i].assign_positions(positions)
        source = self._maps[i][local]
        return source, counter + self._counters[i][source]

    def assign_runs(self, phase: int, starts: np.ndarray, lengths: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """For runs of consecutive sample positions of phase `phase` (ascending, inside one constant stage):
        (each row's source; each run's carried counter of the phase's sources at its first row, runs × k;
        the k sources' indices). None when the runs span a change of batch size (use `assign_positions`)."""
        i = self._phase_arg(phase)
        if i == len(self.phases):
            raise ConfigError(f"phase {i} is out of range: the plan has {len(self.phases)} phases")
        got = self.mixers[i].assign_runs(starts, lengths)
        if got is None:
            return None
        local, before = got
        maps = self._maps[i]
        return maps[local], before + self._counters[i][maps], maps

    def _phase_arg(self, phase: int) -> int:
        i = nonneg_int("phase", phase)
        if i > len(self.phases):
            raise ConfigError(f"phase {i} is out of range: the plan has {len(self.phases)} phases")
        return i
