"""Weighted interleaving per batch, as a pure function of the batch index: what a mixture phase uses.

Which source each row of a global batch comes from, and how many samples that source gave before it, is
looked up from the batch index alone — exact integer arithmetic, no state carried between batches, the
same work at step 10 and step 10 million — so a loader resumes from a batch index and nothing else.

**Per batch (`BatchInterleave`, what a phase uses).** With exact weights w_j = a_j / D (Σ a_j = D), a batch
of size B gives source j ⌊a_j·B / D⌋ rows plus an extra x_j ∈ {0, 1}: x_j = 0 when a_j·B / D is whole, and
the R = Σ_j (a_j·B mod D) / D extras go to R distinct sources. So **every batch holds ⌊w_j·B⌋ or ⌈w_j·B⌉
rows of source j** (|count_j − w_j·B| < 1), by construction. Which sources get the extras is a Pfair
schedule — R processors, task j of rate c_j / D with c_j = a_j·B mod D — tracking the exact lag
Λ_j = a_j·S − D·C_j (S samples of the phase so far, C_j rows of source j), so the lag is *carried* across
changes of batch size instead of restarting: after every batch **|C_j − w_j·S| ≤ `max_lag`**, computed
exactly for the whole phase at construction, and below 1 whenever the extras can keep it so:

* one constant stage from the phase start: always — PD2 (earliest pseudo-deadline, then the b-bit, then
  the group deadline; Anderson & Srinivasan) is optimal for periodic Pfair tasks, so no lag reaches 1;
* a change of batch size (ramps, piecewise schedules) can leave a state from which *no* choice keeps every
  lag below 1 (an exact search shows such states; an offline schedule within 1 always exists, the
  constraints being two laminar families, hence totally unimodular). When PD2 would overshoot within 24
  batches of a change, the last 24 batches before it and the first 24 after are re-planned by an exact
  breadth-first search over lag vectors (k ≤ 10). In 3,000 random ramp and piecewise schedules of up to
  20 stages and 8 sources, 13 needed it and all came out below 1 (without it 12 overshot, worst 1.17);
  `max_lag` reports the rare remainder instead of hiding it.

**Stateless access.** Each stage is simulated at construction until its lag vector repeats at a multiple
of its period P = D / gcd(D, c_1, …, c_k) — one or two periods in every case seen; after 8 it restarts
from its own zero lag, which PD2 repeats after one period — or until the stage ends. Batch b is then a
row of that table (bit-packed, k bits), the counts before it the table's block sums (every 64 rows) plus
whole cycles in closed form: O(k + 64 + log stages), any index, nothing carried. Each cycle gives every
source exactly its share, so long-run proportions are exact and the error never grows past `max_lag`.
Phases restart the ideal with their own weights; counters carry across them.

**Within a batch** the rows follow the quota order of the batch's own counts (below), so every prefix of a
batch — and every rank's contiguous slice, less than 2 + L/B off w_j·L — holds each source in proportion.

**Costs.** Construction simulates min(stage length, cycle) batches per stage at ~3 µs each (0.3 s for a
period of 100,000 batches; cached per stage and start state); tables take ⌈k/8⌉ + k/8 bytes per simulated
batch (175 kB for that period, k ≤ 8). A batch costs ~25 µs plus, once per distinct count vector, its row
order (~2 ms at B = 4096, cached); a resume (`counters_at`) is O(k + 64 + log stages + log phases).
"""
from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..order import parse_schedule
from ..order._checks import index_array, nonneg_int, positive_int
from .interleave import quota_order
from .weights import normalize_weights

__all__ = [
    "BatchInterleave",
]

# -- the batch level ------------------------------------------------------------------------------------------
#
# A batch of size B with weights a_j / D gives source j ⌊a_j·B / D⌋ rows plus an *extra* x_j ∈ {0, 1}; the
# R = Σ_j (a_j·B mod D) / D extras of a batch go to distinct sources, never to one whose share a_j·B / D is
# whole. Which ones is a Pfair schedule with R processors and task rates c_j / D (c_j = a_j·B mod D),
# driven by the exact lag Λ_j = a_j·S − D·C_j (S samples and C_j rows of source j so far): PD2 (Anderson &
# Srinivasan) on the windows of the ideal Λ_j + c_j·t. The tables below hold one stage at a time.

_MAX_PERIODS = 8  # periods simulated without finding a cycle before a stage restarts from its own zero lag
_REPAIR_BEFORE, _REPAIR_AFTER = 24, 24  # batches re-planned around a stage change that would overshoot
_REPAIR_STATES = 256  # states kept per batch by that search
_REPAIR_MAX_SOURCES = 10  # beyond, the search is skipped (its cost grows as C(k, R) per state)


def _pd2_run(c: Sequence[int], den: int, lag: Sequence[int], x0: Sequence[int], t0: int, stop: int | None,
             period: int) -> tuple[list[int], int, int]:
    """Extras of slots t0, t0+1, … from x0 extras so far: (picks, R per slot; end slot; cycle length or 0).

    Slot t gives an extra to the R sources of highest PD2 priority among those whose next subtask is
    released: earliest deadline, then the overlapping window (b-bit), then the later group deadline, then
    the lower index. A lag vector that repeats at two multiples of `period` repeats everything after it,
    so the run stops there (`cycle` = the distance) or at `stop`. With no released source left (only after
    a change of stage that no schedule could absorb) the earliest release goes next and the lag overshoots.
    """
    k, rate = len(c), sum(c) // den
    lag, x = list(lag), list(x0)
    active = [j for j in range(k) if c[j]]
    push, pop = heapq.heappush, heapq.heappop

    def key(j: int, n: int) -> tuple[int, int, int, int]:  # PD2 priority of subtask n of source j
        cj, lj = c[j], lag[j]
        num = den * n - lj
        d = -(-num // cj)
        if num % cj == 0:
            return (d, 0, 0, j)
        if 2 * cj < den:
            return (d, -1, 0, j)
        m = -(-((den - cj) * d - lj) // den)
        return (d, -1, (den * m + lj) // (cj - den), j)  # −(group deadline) = −⌈(D·m + Λ)/(D − c)⌉

    def start(t: int) -> tuple[list[Any], list[tuple[int, int]]]:
        ready: list[Any] = []
        waiting = []
        for j in active:
            r = (den * x[j] - lag[j]) // c[j]  # release of subtask x_j + 1
            if r <= t:
                ready.append(key(j, x[j] + 1))
            else:
                waiting.append((r, j))
        heapq.heapify(ready)
        heapq.heapify(waiting)
        return ready, waiting

    picks: list[int] = []
    t = t0
    seen: dict[tuple[int, ...], int] = {}
    ready, waiting = start(t)
    while stop is None or t < stop:
        if t % period == 0:
            state = tuple(lag[j] + c[j] * t - den * x[j] for j in range(k))
            if state in seen:
                return picks, t, t - seen[state]
            if len(seen) == _MAX_PERIODS:  # never seen in practice: restart from this state's own zero lag
                lag = [lag[j] - state[j] for j in range(k)]
                seen.clear()
                ready, waiting = start(t)
                state = (0,) * k
            seen[state] = t
        while waiting and waiting[0][0] <= t:
            j = pop(waiting)[1]
            push(ready, key(j, x[j] + 1))
        chosen = [pop(ready)[3] if ready else pop(waiting)[1] for _ in range(rate)]
        for j in chosen:
            x[j] += 1
            push(waiting, ((den * x[j] - lag[j]) // c[j], j))
        picks.extend(chosen)
        t += 1
    return picks, t, 0


def _search(den: int, lag: Sequence[int], slots: Sequence[Sequence[int]]) -> list[tuple[int, ...]] | None:
    """Extras for consecutive slots (rates per slot) keeping every lag in (−1, 1): breadth-first, exact.

    States are lag vectors; a slot must give its extra to every source whose lag would reach 1 and may
    give it only to sources whose lag stays above −1. Up to _REPAIR_STATES states per slot are kept (the
    most central first); None when no path survives.
    """
    layers: list[dict[tuple[int, ...], tuple[tuple[int, ...], tuple[int, ...]]]] = []
    frontier: list[tuple[int, ...]] = [tuple(lag)]
    for c in slots:
        rate, nxt = sum(c) // den, {}
        for st in frontier:
            v = [s + cj for s, cj in zip(st, c)]
            forced = [j for j, vj in enumerate(v) if vj >= den]
            free = [j for j, vj in enumerate(v) if 0 < vj < den and c[j]]
            if len(forced) > rate or len(forced) + len(free) < rate:
                continue
            for extra in itertools.combinations(free, rate - len(forced)):
                chosen = tuple(sorted(forced + list(extra)))
                new = list(v)
                for j in chosen:
                    new[j] -= den
                nxt.setdefault(tuple(new), (st, chosen))
        if not nxt:
            return None
        layers.append(nxt)
        frontier = sorted(nxt, key=lambda s: (max(map(abs, s)), s))[:_REPAIR_STATES]
    path, st = [], frontier[0]
    for layer in reversed(layers):
        st, chosen = layer[st]
        path.append(chosen)
    return path[::-1]


class _Table:
    """Extras of consecutive slots, bit-packed (k bits a slot); past the table its last `cycle` rows repeat.

    `cum` holds the extras before every 64th row, so the extras before any slot cost O(k + 64).
    """

    __slots__ = ("bits", "cum", "cycle", "k", "per_cycle")

    def __init__(self, picks: Sequence[int], rows: int, cycle: int, k: int) -> None:
        table = np.zeros((rows, k), dtype=bool)
        if picks:
            table[np.repeat(np.arange(rows), len(picks) // rows), np.asarray(picks, dtype=np.int64)] = True
        self.cum = np.zeros((rows // 64 + 1, k), dtype=np.int64)
        self.cum[1:] = table[:rows // 64 * 64].reshape(-1, 64, k).sum(axis=1).cumsum(axis=0)
        self.bits, self.cycle, self.k = np.packbits(table, axis=1), cycle, k
        self.per_cycle = self.before(rows) - self.before(rows - cycle)
        for a in (self.bits, self.cum, self.per_cycle):
            a.setflags(write=False)

    def before(self, t: int) -> np.ndarray:
        rows = len(self.bits)
        if t > rows:
            q, r = divmod(t - rows, self.cycle)
            return self.before(rows - self.cycle + r) + (q + 1) * self.per_cycle
        b = t // 64
        return self.cum[b] + np.unpackbits(self.bits[b * 64:t], axis=1, count=self.k).sum(axis=0, dtype=np.int64)

    def rows_at(self, t: np.ndarray) -> np.ndarray:
        """`row` for an array of slots: (len(t), k) extras."""
        rows = len(self.bits)
        idx = np.where(t < rows, t, rows - self.cycle + (t - rows) % self.cycle) if self.cycle else t
        return np.unpackbits(self.bits[idx], axis=1, count=self.k).astype(np.int64)

    def row(self, t: int) -> np.ndarray:
        rows = len(self.bits)
        return np.unpackbits(self.bits[t if t < rows else rows - self.cycle + (t - rows) % self.cycle],
                             count=self.k).astype(np.int64)

    def lags(self, c: Sequence[int], lag: Sequence[int], den: int, t0: int, x0: np.ndarray, rows: int) -> np.ndarray:
        """D·(ideal − actual) after each of the first `rows` rows, the table starting at slot t0 with x0 extras."""
        x = x0 + np.unpackbits(self.bits[:rows], axis=1, count=self.k).astype(np.int64).cumsum(axis=0)
        return np.asarray(lag) + np.asarray(c) * np.arange(t0 + 1, t0 + len(x) + 1)[:, None] - den * x


@lru_cache(maxsize=128)  # a table is at most 8 periods: ≤ 1.4 MB at D = 100,000, k ≤ 8
def _extras_table(c: tuple[int, ...], den: int, lag: tuple[int, ...], prefix: tuple[tuple[int, ...], ...],
                  stop: int | None) -> _Table:
    """The extras of a stage with rates c/D from lag Λ: the given first slots, then PD2 until a cycle or `stop`."""
    picks = [j for chosen in prefix for j in chosen]
    x0 = [0] * len(c)
    for j in picks:
        x0[j] += 1
    more, rows, cycle = _pd2_run(c, den, lag, x0, len(prefix), stop, den // math.gcd(den, *c))
    return _Table(picks + more, rows, cycle, len(c))


class _Stage:
    """One constant stage of a phase: where it sits, its counts at the start, its extras (and repaired tail)."""

    __slots__ = ("base", "c", "first", "lag", "length", "main", "size", "start", "tail", "tail_at")

    def __init__(self, first: int, length: int | None, size: int, base: np.ndarray, c: tuple[int, ...],
                 lag: tuple[int, ...], start: np.ndarray, main: _Table) -> None:
        self.first, self.length, self.size, self.base, self.c, self.lag = first, length, size, base, c, lag
        self.start, self.main = start, main
        self.tail: _Table | None = None
        self.tail_at = -1

    def extras_before(self, t: int) -> np.ndarray:
        if self.tail is not None and t > self.tail_at:
            return self.main.before(self.tail_at) + self.tail.before(t - self.tail_at)
        return self.main.before(t)

    def extras(self, t: int) -> np.ndarray:
        if self.tail is not None and t >= self.tail_at:
            return self.tail.row(t - self.tail_at)
        return self.main.row(t)

    def extras_at(self, t: np.ndarray) -> np.ndarray:
        """`extras` for an array of slots."""
        if self.tail is None:
            return self.main.rows_at(t)
        out = np.empty((t.size, len(self.c)), dtype=np.int64)
        late = t >= self.tail_at
        out[~late] = self.main.rows_at(t[~late])
        out[late] = self.tail.rows_at(t[late] - self.tail_at)
        return out

    def counts_before(self, t: int) -> np.ndarray:
        return self.start + self.base * t + self.extras_before(t)

    def lags(self, den: int) -> np.ndarray:
        """D·(ideal − actual) after every slot the tables spell out (the slots after them repeat them)."""
        k = len(self.c)
        if self.tail is None:
            return self.main.lags(self.c, self.lag, den, 0, np.zeros(k, np.int64), len(self.main.bits))
        return np.concatenate([
            self.main.lags(self.c, self.lag, den, 0, np.zeros(k, np.int64), min(self.tail_at, len(self.main.bits))),
            self.tail.lags(self.c, self.lag, den, self.tail_at, self.main.before(self.tail_at), len(self.tail.bits))])


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(rows, axis=0, return_inverse=True)` for small non-negative count vectors, through one int64
    key per row (a 1-D unique is a hash, the 2-D one a lexicographic sort); the order of the distinct rows
    does not matter to the caller."""
    k = rows.shape[1]
    bits = 63 // max(1, k)
    if rows.size and int(rows.max()) < (1 << bits) and int(rows.min()) >= 0:
        keys = rows[:, 0].copy()
        for j in range(1, k):
            keys |= rows[:, j] << (bits * j)
        _, first, which = np.unique(keys, return_index=True, return_inverse=True)
        return rows[first], which.reshape(-1)
    vectors, which = np.unique(rows, axis=0, return_inverse=True)
    return vectors, which.reshape(-1)


@lru_cache(maxsize=256)  # 16 bytes a row: 16 MB at B = 4096
def _batch_rows(counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a batch holding counts[j] of source j: (source, rank among that source's rows).

    The quota order over the batch itself, so every prefix of the batch — and so every rank's contiguous
    slice, less than 2 off — holds each source in proportion; a pure function of the counts.
    """
    present = [j for j, n in enumerate(counts) if n]
    source = np.asarray(present, dtype=np.int64)[quota_order([counts[j] for j in present])]
    order = np.argsort(source, kind="stable")
    nonzero = np.array([counts[j] for j in present], dtype=np.int64)
    rank = np.empty(len(source), dtype=np.int64)
    rank[order] = np.arange(len(source)) - np.repeat(np.cumsum(nonzero) - nonzero, nonzero)
    for a in (source, rank):
        a.setflags(write=False)
    return source, rank


@lru_cache(maxsize=256)
def _pattern_prefix(source: tuple[int, ...], k: int) -> np.ndarray:
    """Rows of each source among the first w rows of a batch with row sources `source`: (B + 1, k)."""
    out = np.zeros((len(source) + 1, k), dtype=np.int64)
    out[1:] = np.eye(k, dtype=np.int64)[list(source)].cumsum(axis=0)
    out.setflags(write=False)
    return out


class BatchInterleave:
    """How many rows of every global batch of a phase each source gives, and in which order.

    Every batch of size B holds ⌊w_j·B⌋ or ⌈w_j·B⌉ rows of source j (exactly w_j·B when that is whole);
    the counts before any batch come in O(k + 64 + log stages) and its rows in O(B), for any index.
    `max_lag` is the largest |rows of source j − w_j·S| at any batch boundary (S samples so far) over the
    whole phase — exact, computed at construction; below 1 unless a change of batch size forced more.
    """

    def __init__(self, weights: Iterable[Any], schedule: Any, num_batches: int | None = None) -> None:
        self.weights: tuple[Fraction, ...] = normalize_weights(weights)
        self.denominator = den = math.lcm(*(w.denominator for w in self.weights))
        self.units: tuple[int, ...] = tuple(int(w * den) for w in self.weights)
        self.schedule = parse_schedule(schedule)
        self.num_batches = None if num_batches is None else positive_int("number of batches", num_batches)
        units = np.array(self.units, dtype=np.int64)
        last = self.num_batches
        rows = [(b, s, size) for b, s, size in self.schedule.stages if last is None or b < last]
        ends = [b for b, _, _ in rows[1:]] + [last]
        self._stages: list[_Stage] = []
        counts = np.zeros(len(units), dtype=np.int64)
        for (first, samples, size), end in zip(rows, ends):
            length = None if end is None else end - first
            c, lag = self._rates(size), self._lag(samples, counts)
            table = _extras_table(c, den, lag, (), length)
            if self._stages and self._overshoots(table, c, lag):
                prefix = self._repair(self._stages[-1], c, min(len(table.bits), _REPAIR_AFTER))
                if prefix:
                    counts = self._stages[-1].counts_before(self._stages[-1].length)
                    lag = self._lag(samples, counts)
                    table = _extras_table(c, den, lag, prefix, length)
            self._stages.append(_Stage(first, length, size, units * size // den, c, lag, counts, table))
            if length is not None:
                counts = self._stages[-1].counts_before(length)
        self._firsts = [s.first for s in self._stages]
        self.max_lag = Fraction(max(int(np.abs(s.lags(den)).max(initial=0)) for s in self._stages), den)

    def _rates(self, size: int) -> tuple[int, ...]:
        return tuple(u * size % self.denominator for u in self.units)

    def _lag(self, samples: int, counts: np.ndarray) -> tuple[int, ...]:
        return tuple(u * samples - self.denominator * int(n) for u, n in zip(self.units, counts))

    def _overshoots(self, table: _Table, c: tuple[int, ...], lag: tuple[int, ...]) -> bool:
        """Whether a stage's first _REPAIR_AFTER batches take a lag out of (−1, 1)."""
        rows, k = min(len(table.bits), _REPAIR_AFTER), len(c)
        worst = np.abs(table.lags(c, lag, self.denominator, 0, np.zeros(k, np.int64), rows)).max(initial=0)
        return k <= _REPAIR_MAX_SOURCES and worst >= self.denominator

    def _repair(self, stage: _Stage, c: tuple[int, ...], after: int) -> tuple[tuple[int, ...], ...]:
        """Re-plan the batches around a change of stage at which PD2 would overshoot.

        An exact search over the last _REPAIR_BEFORE batches of `stage` and the first `after` of the next
        (rates c) looks for extras that keep every lag inside (−1, 1). On success `stage`'s tail is
        replaced and the next stage's first rows are returned (to continue from); else nothing changes.
        """
        den, k, length = self.denominator, len(c), stage.length
        assert length is not None
        before = min(_REPAIR_BEFORE, length)
        at = length - before
        lag_at = [lj + cj * at - den * int(x) for lj, cj, x in zip(stage.lag, stage.c, stage.extras_before(at))]
        path = _search(den, lag_at, [stage.c] * before + [c] * after) if max(map(abs, lag_at)) < den else None
        if path is None:
            return ()
        stage.tail_at, stage.tail = at, _Table([j for chosen in path[:before] for j in chosen], before, 0, k)
        return tuple(path[before:])

    @property
    def num_sources(self) -> int:
        return len(self.weights)

    def _stage(self, batch: int, end_ok: bool = False) -> tuple[_Stage, int]:
        b = nonneg_int("batch", batch)
        if self.num_batches is not None and b >= self.num_batches + end_ok:
            raise ConfigError(f"batch {b} is past the end of the phase ({self.num_batches} batches)")
        stage = self._stages[bisect_right(self._firsts, b) - 1]
        return stage, b - stage.first

    def counts_before(self, batch: int) -> np.ndarray:
        """Rows each source gave in batches [0, batch): exact, O(k + log stages), any batch ≤ num_batches."""
        stage, t = self._stage(batch, end_ok=True)
        return stage.counts_before(t)

    def counts(self, batch: int) -> np.ndarray:
        """Rows each source gives in batch `batch`: ⌊w_j·B⌋ or ⌈w_j·B⌉."""
        stage, t = self._stage(batch)
        return stage.base + stage.extras(t)

    def assign(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, counter) per row of batch `batch`; counter = rows the source gave before this one."""
        stage, t = self._stage(batch)
        source, rank = _batch_rows(tuple((stage.base + stage.extras(t)).tolist()))
        return source, stage.counts_before(t)[source] + rank

    def assign_positions(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """`assign` for arbitrary sample positions of the phase (any shape), vectorised over batches.

        Per constant stage: the extras of the whole span of batches touched in one unpack, their counts
        before by one cumulative sum, and each distinct count vector's row pattern broadcast over the
        batches that have it — no Python work per batch. A run of consecutive positions inside one stage
        (what a loader plans) is then a slice of those rows, with no per-position lookup at all.
        """
        pos = index_array(positions, None, "position")
        flat = pos.reshape(-1)
        if flat.size > 1 and int(flat[-1]) - int(flat[0]) == flat.size - 1 and bool((np.diff(flat) == 1).all()):
            run = self._assign_run(int(flat[0]), flat.size)
            if run is not None:
                return run[0].reshape(pos.shape), run[1].reshape(pos.shape)
        source = np.zeros(flat.size, dtype=np.int64)
        counter = np.zeros(flat.size, dtype=np.int64)
        if not flat.size:
            return source.reshape(pos.shape), counter.reshape(pos.shape)
        batches = np.asarray(self.schedule.batch_at_sample(flat), dtype=np.int64)
        within = flat - np.asarray(self.schedule.start(batches), dtype=np.int64)
        step = np.diff(batches)
        ascending = bool((step >= 0).all())
        if ascending:  # every chunk a loader plans: distinct batches, and each position's, without a sort
            uniq = batches[np.concatenate(([0], np.flatnonzero(step) + 1))]
            index_of = np.concatenate(([0], np.cumsum(step != 0)))
        else:
            uniq = np.unique(batches)
        self._stage(int(uniq[-1]))  # past the end of the phase: the same error as `assign`
        stage_of = np.searchsorted(self._firsts, uniq, side="right") - 1
        for si in np.unique(stage_of).tolist():
            stage = self._stages[si]
            ub = uniq[stage_of == si]
            t = ub - stage.first
            lo, hi = int(t[0]), int(t[-1]) + 1
            src, cnt = self._stage_rows(stage, lo, hi)
            if ub.size != hi - lo:
                src, cnt = src[t - lo], cnt[t - lo]
            if ub.size == uniq.size:  # one stage: every position is in it
                at = index_of if ascending else np.searchsorted(ub, batches)
                source, counter = src[at, within], cnt[at, within]
                continue
            mine = (batches >= ub[0]) & (batches <= ub[-1])
            at = np.searchsorted(ub, batches[mine])
            source[mine] = src[at, within[mine]]
            counter[mine] = cnt[at, within[mine]]
        return source.reshape(pos.shape), counter.reshape(pos.shape)

    def _assign_run(self, first: int, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """`assign_positions` of positions [first, first + n) when they lie in one stage (else None)."""
        got = self._span(first, first + n - 1)
        if got is None:
            return None
        stage, lo, hi, b0_start = got
        src, cnt = self._stage_rows(stage, lo, hi)
        at = first - b0_start
        return src.reshape(-1)[at:at + n], cnt.reshape(-1)[at:at + n]

    def assign_runs(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Runs of consecutive positions (ascending, not overlapping) inside one stage: (the source of each
        of their rows, concatenated; rows each source gave before each run's first position, runs × k).

        Within a run a source's counters are consecutive, so these are all a caller needs to number its
        rows — no counter per row is looked up. None when the runs span a change of stage.
        """
        got = self._span(int(starts[0]), int(starts[-1] + lengths[-1]) - 1)
        if got is None:
            return None
        stage, lo, hi, b0_start = got
        before, which, patterns = self._stage_patterns(stage, lo, hi)
        sources = np.stack([p[0] for p in patterns])[which].reshape(-1)
        offset = starts - b0_start  # where each run starts in the stage rows: (batch, row within it)
        if starts.size == 1:
            rows = sources[int(offset[0]):int(offset[0] + lengths[0])]
        else:
            at = np.repeat(offset - np.concatenate(([0], np.cumsum(lengths[:-1]))), lengths)
            at += np.arange(at.size, dtype=np.int64)
            rows = sources[at]
        batch, row = np.divmod(offset, stage.size)
        prefix = np.stack([_pattern_prefix(tuple(p[0].tolist()), len(self.units)) for p in patterns])
        return rows, before[batch] + prefix[which[batch], row]

    def _span(self, first: int, last: int) -> tuple[_Stage, int, int, int] | None:
        """(stage, its local batches [lo, hi) holding positions first..last, S(first batch)), or None when
        they are not in one stage."""
        b0 = int(self.schedule.batch_at_sample(first))
        b1 = int(self.schedule.batch_at_sample(last))
        stage, t1 = self._stage(b1)  # past the end of the phase: the same error as `assign`
        if b0 < stage.first:
            return None
        return stage, b0 - stage.first, t1 + 1, int(self.schedule.start(b0))

    def _stage_patterns(self, stage: _Stage, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, list]:
        """For the stage's batches [lo, hi) (stage-local): (rows each source gave before each batch, each
        batch's row pattern as an index into the list of distinct patterns, the patterns (source, rank)).

        A batch's counts are the stage's base plus a 0/1 extra per source, so its pattern is one of at most
        2^k, named by the extras' bits: patterns are looked up per batch, not searched for.
        """
        extras = stage.extras_at(np.arange(lo, hi, dtype=np.int64))
        per_batch = extras + stage.base
        before = np.empty_like(per_batch)
        before[0] = stage.counts_before(lo)
        np.cumsum(per_batch[:-1], axis=0, out=before[1:])
        before[1:] += before[0]
        k = per_batch.shape[1]
        if k <= 16:
            keys = (extras << np.arange(k, dtype=np.int64)).sum(axis=1)
            seen = np.flatnonzero(np.bincount(keys, minlength=1 << k))
            vectors = stage.base + ((seen[:, None] >> np.arange(k, dtype=np.int64)) & 1)
            lookup = np.empty(1 << k, dtype=np.int64)
            lookup[seen] = np.arange(seen.size)
            which = lookup[keys]
        else:
            vectors, which = _distinct_rows(per_batch)
        return before, which, [_batch_rows(tuple(v)) for v in vectors.tolist()]

    def _stage_rows(self, stage: _Stage, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, counter) of every row of the stage's batches [lo, hi) (stage-local), as (batches, size)."""
        before, which, patterns = self._stage_patterns(stage, lo, hi)
        src = np.stack([p[0] for p in patterns])[which]
        cnt = np.take_along_axis(before, src, axis=1)
        cnt += np.stack([p[1] for p in patterns])[which]
        return src, cnt

    def __repr__(self) -> str:
        return (f"BatchInterleave(weights={[str(w) for w in self.weights]}, schedule={self.schedule.to_json()}, "
                f"num_batches={self.num_batches})")
