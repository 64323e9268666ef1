"""Weighted interleaving of several sources as a pure function of the position, and phases of a mixture.

Position p of a phase is drawn from one source; which one, and how many samples that source gave before, is
looked up directly from p — O(1) per position, exact integer arithmetic, no state between batches — so the
loader costs the same at step 10 and step 10 million, on every platform.

**The order: a quota sequence, one period precomputed.** With exact weights w_j = a_j / D (Σ a_j = D), the
c-th sample of source j (c = 0, 1, …) must sit at a position in its window [⌊c·D/a_j⌋, ⌈(c+1)·D/a_j⌉).
Meeting every window is the same as `count_j(n) ∈ {⌊w_j·n⌋, ⌈w_j·n⌉}` for every prefix n and source j
(the lower end: the sample is not early; the upper end: it is not late). Such an order exists: the
positions [s, t) are asked to hold Σ_j (⌊w_j·t⌋ − ⌈w_j·s⌉) ≤ Σ_j w_j·(t − s) = t − s samples whose windows
lie inside them, which is Hall's condition for unit jobs with release times and deadlines; and
earliest-deadline-first (ties to the lower source index) finds such an order whenever one exists. Positions
[0, D) are computed that way once (D steps of a k-heap); the windows repeat with period D and every count
is exact at multiples of D, so position p is entry p mod D plus (p div D)·a_j samples per source: it never
drifts, at 10**13 positions or 10**18.

**Bounds.** Every prefix: |count_j(n) − w_j·n| < 1. Every window of L consecutive positions (a global
batch, a rank's slice, a micro-batch): |count_j − w_j·L| < 2, the difference of two prefixes. Within 1
for every source in every window is impossible for k ≥ 3 and general weights — that would be a balanced
word, and Fraenkel's theorem (proved for k ≤ 7) allows only the densities 2^(k−i)/(2^k − 1); for the
batches of one particular schedule it is a Pfair scheduling problem, whose known solutions carry state
from batch to batch. With two sources every window is within 1 (checked exhaustively for denominators
≤ 300 and by the property tests).

**Weights** are exact rationals: a float is the decimal it prints as (0.7 is 7/10), a string may be
"1/3". The common denominator is kept when it is at most 100,000 (every weight written with ≤ 5
decimals, or small fractions); otherwise the weights are rounded (largest remainder) to multiples of
1e-5 and `weights` says which rationals are used. A period costs ~0.1 s to build at D = 100,000 and
is cached; the tables take ~6 bytes per position of the period.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..order import BatchSchedule, parse_schedule
from ..order._checks import index_array, nonneg_int, positive_int

__all__ = [
    "MAX_DENOMINATOR",
    "BatchMix",
    "Interleave",
    "Location",
    "Phase",
    "PhaseBounds",
    "PhasePlan",
    "WeightLike",
    "as_weight",
    "normalize_weights",
    "token_to_sample_weights",
]

MAX_DENOMINATOR = 100_000  # the longest period precomputed; finer weights are rounded to multiples of 1e-5
_MAX_POSITION = 1 << 62

WeightLike = int | float | str | Fraction | Decimal


def as_weight(value: Any, what: str = "weight") -> Fraction:
    """`value` as an exact positive rational: a float is the decimal it prints as, a string may be "7/10"."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, str, Fraction, Decimal,
                                                                      np.integer, np.floating)):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    try:
        if isinstance(value, (float, np.floating)):
            if not math.isfinite(value):
                raise ValueError
            w = Fraction(repr(float(value)))
        else:
            w = Fraction(value.strip() if isinstance(value, str) else value)
    except (ValueError, ZeroDivisionError, ArithmeticError):
        raise ConfigError(f"{what} must be a finite number such as 0.7 or '7/10', got {value!r}") from None
    if w <= 0:
        raise ConfigError(f"{what} must be > 0, got {value!r}; leave a source out of the mix to exclude it")
    return w


def normalize_weights(weights: Iterable[Any], names: Sequence[str] | None = None) -> tuple[Fraction, ...]:
    """Exact weights summing to 1 on a common denominator ≤ MAX_DENOMINATOR (else rounded to its grid)."""
    ws = list(weights)
    labels = [f"the weight of {n!r}" for n in names] if names is not None else \
        [f"weight {i}" for i in range(len(ws))]
    ws = [as_weight(w, label) for w, label in zip(ws, labels)]
    if not ws:
        raise ConfigError("an interleave needs at least one source")
    total = sum(ws, Fraction(0))
    ws = [w / total for w in ws]
    if math.lcm(*(w.denominator for w in ws)) <= MAX_DENOMINATOR:
        return tuple(ws)
    scaled = [w * MAX_DENOMINATOR for w in ws]  # largest remainder; ties to the lower index
    units = [math.floor(s) for s in scaled]
    if min(units) < 1:
        i = units.index(0)
        raise ConfigError(f"{labels[i]} is {float(ws[i]):.6g} of the mix, below the resolution 1e-5; "
                          "drop the source or give it more weight")
    for i in sorted(range(len(ws)), key=lambda i: (-(scaled[i] - units[i]), i))[:MAX_DENOMINATOR - sum(units)]:
        units[i] += 1
    return tuple(Fraction(u, MAX_DENOMINATOR) for u in units)


def token_to_sample_weights(token_weights: Mapping[str, Any], seq_len: int | Mapping[str, int]) -> dict[str, Fraction]:
    """Sample shares from token shares: w_j ∝ t_j / L_j, normalized.

    Inside a phase every source is cut at the phase's one `seq_len`, so a sample holds the same number of
    tokens whatever its source and token weights *are* sample weights (the result equals the input). The
    conversion matters only for callers that mix different sample lengths.
    """
    lens = seq_len if isinstance(seq_len, Mapping) else {name: seq_len for name in token_weights}
    raw = {name: as_weight(w, f"token weight of {name!r}") / positive_int(f"seq_len of {name!r}", lens[name])
           for name, w in token_weights.items()}
    total = sum(raw.values(), Fraction(0))
    return {name: w / total for name, w in raw.items()}


# -- the order -------------------------------------------------------------------------------------------------

_BLOCK = 64  # counts_before keeps per-source totals every _BLOCK positions of the period


def _quota_order(units: Sequence[int]) -> np.ndarray:
    """One period of the quota order: source j's c-th sample lands in [⌊c·D/a_j⌋, ⌈(c+1)·D/a_j⌉).

    Earliest deadline first over those windows, ties to the lower source index. Hall's condition holds
    (any L consecutive positions must hold at most Σ_j w_j·L = L samples whose windows lie inside them) and
    EDF is optimal for unit jobs, so every deadline is met — the assertion below documents that.
    """
    period, k = sum(units), len(units)
    out = np.empty(period, dtype=np.int32 if k > 32767 else np.int16)
    count = [0] * k
    ready: list[tuple[int, int]] = []  # (deadline, source) of each source's next sample, once released
    waiting = [(0, j) for j in range(k)]  # (release, source)
    push, pop = heapq.heappush, heapq.heappop
    for n in range(period):
        while waiting and waiting[0][0] <= n:
            _, j = pop(waiting)
            push(ready, (-(-(count[j] + 1) * period // units[j]), j))
        deadline, j = pop(ready)
        assert deadline > n, "quota order missed a deadline"  # impossible, see the docstring
        out[n] = j
        count[j] += 1
        if count[j] < units[j]:
            push(waiting, (count[j] * period // units[j], j))
    return out


@lru_cache(maxsize=64)
def _tables(units: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source per position, its counter within the period, per-source totals before every block)."""
    source = _quota_order(units)
    order = np.argsort(source, kind="stable")
    starts = np.concatenate([[0], np.cumsum(units)[:-1]])
    counter = np.empty(len(source), dtype=np.int32)
    counter[order] = np.arange(len(source)) - np.repeat(starts, units)
    k, blocks_in = len(units), len(source) // _BLOCK + 1  # block b starts at position b·_BLOCK
    per_block = np.bincount(np.arange(len(source)) // _BLOCK * k + source, minlength=blocks_in * k)
    blocks = np.zeros((blocks_in, k), dtype=np.int64)
    blocks[1:] = per_block.reshape(blocks_in, k).cumsum(axis=0)[:-1]
    for table in (source, counter, blocks):
        table.setflags(write=False)
    return source, counter, blocks


class Interleave:
    """Which source each position of a phase comes from, and that source's running sample counter.

    After any n positions source j has given ⌊w_j·n⌋ or ⌈w_j·n⌉ samples (|count − w_j·n| < 1), so any L
    consecutive positions — a batch, a rank's slice — hold w_j·L ± (less than 2) of source j's samples.
    """

    def __init__(self, weights: Iterable[Any]) -> None:
        self.weights: tuple[Fraction, ...] = normalize_weights(weights)
        self.denominator = math.lcm(*(w.denominator for w in self.weights))  # the period of the order
        self.units: tuple[int, ...] = tuple(int(w * self.denominator) for w in self.weights)
        self._source, self._counter, self._blocks = _tables(self.units)
        self._units = np.array(self.units, dtype=np.int64)

    @property
    def num_sources(self) -> int:
        return len(self.weights)

    def counts_before(self, n: int) -> np.ndarray:
        """Samples each source contributes among positions [0, n): exact, O(k + 64), for any n ≤ 2**62."""
        n = nonneg_int("position", n)
        if n > _MAX_POSITION:
            raise ConfigError(f"position {n} is beyond the supported range [0, 2**62]")
        q, r = divmod(n, self.denominator)
        b = r // _BLOCK
        tail = np.bincount(self._source[b * _BLOCK:r], minlength=self.num_sources)
        return q * self._units + self._blocks[b] + tail

    def assign(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """(source, counter) per position: counter = how many earlier positions went to the same source.

        O(1) per position, vectorised; `counter[i] == counts_before(p)[source[i]]` for p = positions[i].
        """
        pos = index_array(positions, _MAX_POSITION + 1, "position")
        q, r = np.divmod(pos, self.denominator)
        source = self._source[r].astype(np.int64)
        return source, q * self._units[source] + self._counter[r]

    def __repr__(self) -> str:
        return f"Interleave(weights={[str(w) for w in self.weights]})"


# -- phases -----------------------------------------------------------------------------------------------------


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

    def __post_init__(self) -> None:
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
        self.interleaves = tuple(Interleave(w for _, w in p.mix) for p in phases)
        self._maps = tuple(np.array([index[name] for name, _ in p.mix], dtype=np.int64) for p in phases)
        bounds, counters, tokens = [], [], []
        b = s = t = 0
        carried = np.zeros(len(self.sources), dtype=np.int64)
        carried_tokens = np.zeros(len(self.sources), dtype=np.int64)
        for p, inter, gmap in zip(phases, self.interleaves, self._maps):
            need = -(-p.tokens // p.seq_len)
            nb = int(p.batch.batch_at_sample(need - 1)) + 1
            ns = int(p.batch.start(nb))
            bounds.append(PhaseBounds(b, nb, s, ns, t, ns * p.seq_len))
            counters.append(carried.copy())
            tokens.append(carried_tokens.copy())
            drawn = inter.counts_before(ns)
            carried[gmap] += drawn
            carried_tokens[gmap] += drawn * p.seq_len
            b, s, t = b + nb, s + ns, t + ns * p.seq_len
        self.bounds: tuple[PhaseBounds, ...] = tuple(bounds)
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
        out[self._maps[loc.phase]] += self.interleaves[loc.phase].counts_before(loc.sample)
        return out

    def assign_batch(self, global_batch: int) -> BatchMix:
        """Source and carried counter of every sample of a global batch: O(B + k), any batch index."""
        loc = self.locate(global_batch)
        size = int(self.phases[loc.phase].batch.size(loc.batch))
        local, counter = self.interleaves[loc.phase].assign(np.arange(loc.sample, loc.sample + size))
        source = self._maps[loc.phase][local]
        return BatchMix(loc.phase, loc.batch, source, counter + self._counters[loc.phase][source])

    def _phase_arg(self, phase: int) -> int:
        i = nonneg_int("phase", phase)
        if i > len(self.phases):
            raise ConfigError(f"phase {i} is out of range: the plan has {len(self.phases)} phases")
        return i
