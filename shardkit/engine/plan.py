"""The plan: which rows make up global batch b — source, stream position, sample id — as pure functions.

One plan serves both loaders: a recipe is phases of weighted sources; a single dataset is a recipe of one
source and one endless phase whose order seed is the loader's own `seed` (so its order is the one the
single-source loader has always had). For the rows of any batches of one phase the plan gives, per row:

    source j  ─ `PhasePlan` (per-batch weighted interleave; one source: every row)
    position  ─ `Cursor` (the source's own counter, continued by tokens across seq_len changes)
    epoch, k  ─ divmod(position, samples per epoch at the phase's seq_len)
    sample id ─ the source's `SampleOrder` at that seq_len (a Feistel permutation, O(1) per sample)
    shard     ─ `Windows.locate` (global shard id for the `Mapper`, and the start within the shard)

Nothing is stored per row or per batch between calls; a chunk of up to ~16k rows is computed with a
handful of vectorised calls per source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset
from ..mixture.cursor import Cursor, Exhaustion
from ..mixture.phases import PhasePlan
from ..mixture.sources import stream_seed
from ..order import SampleOrder, ShuffleConfig, ShuffleMode
from .windows import Windows

__all__ = ["ENDLESS_TOKENS", "Plan", "Rows", "SourceDef", "Stream"]

# the token budget of an endless phase (a single dataset without max_tokens / max_epochs): 2**60 tokens is
# ~10**18, beyond any run, and keeps every count of the plan far inside int64
ENDLESS_TOKENS = 1 << 60


@dataclass(frozen=True)
class SourceDef:
    """One source as the plan sees it. `seed` None: the order seed is `stream_seed(plan seed, name, seq_len)`
    (a recipe source); an int: that seed at every seq_len (the single-source loader's `seed`)."""

    name: str
    dataset: Dataset
    shuffle: ShuffleMode
    epochs: int | None = None  # None: repeat with a new permutation per epoch as long as needed
    max_samples: int | None = None  # a cap on stream positions (the single-source loader's token budget)
    block_samples: int | None = None
    group_blocks: int | None = None
    seed: int | None = None


@dataclass
class Stream:
    """One source at one seq_len: its windows, its epoch order, and how far it may be drawn."""

    index: int  # into PhasePlan.sources
    name: str
    seq_len: int
    windows: Windows
    order: SampleOrder
    limit: int | None  # positions that may be drawn (epochs × samples per epoch, or max_samples)

    @property
    def num_samples(self) -> int:
        return self.windows.num_samples


@dataclass
class Rows:
    """Per row of a chunk (rows of consecutive items, concatenated): where the window comes from."""

    src: np.ndarray  # source index
    ids: np.ndarray  # sample id in its source
    epochs: np.ndarray
    within: np.ndarray  # position within the epoch
    gid: np.ndarray  # global shard id (Mapper)
    local: np.ndarray  # first token within that shard
    inside: np.ndarray  # the window lies inside its shard
    streams: dict[int, Stream]  # by source index, at this chunk's seq_len
    select: dict[int, slice | np.ndarray] | None = None  # by source index, its rows (as planned; None: compute)

    def rows_of(self, j: int) -> slice | np.ndarray:
        """The rows of source j (ascending)."""
        if self.select is not None:
            return self.select[j]
        return slice(None) if len(self.streams) == 1 else np.flatnonzero(self.src == j)

    @property
    def size(self) -> int:
        return int(self.src.size)

    def slice(self, a: int, z: int) -> Rows:
        """Rows [a, z) (views)."""
        return Rows(src=self.src[a:z], ids=self.ids[a:z], epochs=self.epochs[a:z], within=self.within[a:z],
                    gid=self.gid[a:z], local=self.local[a:z], inside=self.inside[a:z], streams=self.streams)


class Plan:
    """The rows of every global batch, for a phase plan over sources (see the module docstring)."""

    def __init__(self, phases: PhasePlan, sources: dict[str, SourceDef], seed: int, gid_base: dict[int, int],
                 windows_of: Callable[[Dataset, int, int], Windows] = Windows) -> None:
        self.phases = phases
        self._windows_of = windows_of  # (dataset, seq_len, gid base) → its samples: windows, or packed rows
        self.sources = sources
        self.seed = seed
        self.names: tuple[str, ...] = phases.sources
        self.streams: dict[tuple[int, int], Stream] = {}
        for phase in phases.phases:
            for name, _ in phase.mix:
                j, length = self.names.index(name), phase.seq_len
                if (j, length) not in self.streams:
                    self.streams[(j, length)] = self._stream(j, sources[name], length,
                                                             gid_base[id(sources[name].dataset)])
        self.single = [len(p.mix) == 1 for p in phases.phases]
        self._phase_sources = [np.array([self.names.index(n) for n, _ in p.mix], np.int64) for p in phases.phases]
        self._first_batches = np.array([b.first_batch for b in phases.bounds], dtype=np.int64)
        self.set_cursor(Cursor(phases))

    def _stream(self, j: int, src: SourceDef, length: int, gid_base: int) -> Stream:
        ds = src.dataset
        windows = self._windows_of(ds, length, gid_base)
        shuffle = ShuffleConfig.default(src.shuffle, seq_len=length, itemsize=ds.dtype.itemsize,
                                        num_samples=windows.num_samples)
        if src.block_samples or src.group_blocks:
            shuffle = ShuffleConfig(mode=shuffle.mode, block_samples=src.block_samples or shuffle.block_samples,
                                    group_blocks=src.group_blocks or shuffle.group_blocks)
        seed = src.seed if src.seed is not None else stream_seed(self.seed, src.name, length)
        order = SampleOrder(windows.num_samples, shuffle, seed)
        caps = [c for c in (src.max_samples, None if src.epochs is None else src.epochs * windows.num_samples)
                if c is not None]
        return Stream(index=j, name=src.name, seq_len=length, windows=windows, order=order,
                      limit=min(caps) if caps else None)

    # -- where the run ends ------------------------------------------------------------------------------------
    def set_cursor(self, cursor: Cursor) -> None:
        """Use `cursor` (offsets after a recipe change); recomputes where the first capped source runs out."""
        self.cursor = cursor
        self.exhausted: Exhaustion | None = cursor.first_exhausted(lambda j, length: self.streams[(j, length)].limit)
        self.end = self.exhausted.batch if self.exhausted is not None else self.phases.num_batches

    # -- batch geometry ----------------------------------------------------------------------------------------
    def phase_of(self, batches: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._first_batches, batches, side="right") - 1

    def batch_size(self, batch: int) -> int:
        loc = self.phases.locate(batch)
        return int(self.phases.phases[loc.phase].batch.size(loc.batch))

    def seq_len_at(self, batch: int) -> int:
        return self.phases.phases[self.phases.locate(batch).phase].seq_len

    def sizes(self, phase: int, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(global size, first phase position) of global batches of one phase."""
        local = batches - int(self._first_batches[phase])
        sched = self.phases.phases[phase].batch
        return sched.size(local), sched.start(local)

    def samples_before(self, batch: int) -> int:
        """Global samples (all phases, all sources) before global batch `batch` (S(b))."""
        return self.cursor.global_samples_before(batch)

    def batch_at_samples(self, samples: np.ndarray) -> np.ndarray:
        """The global batch holding each global sample."""
        return self.cursor.batch_at_global_samples(samples)

    # -- rows ----------------------------------------------------------------------------------------------------
    def rows(self, phase: int, positions: np.ndarray) -> Rows:
        """Rows at phase positions `positions` (ascending runs) of phase `phase`."""
        p = self.phases.phases[phase]
        length = p.seq_len
        by_source = self._by_source(phase, positions)
        src = by_source[0]
        n = positions.size
        ids, epochs, within = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        gid, local = np.empty(n, np.int64), np.empty(n, np.int64)
        inside = np.empty(n, bool)
        streams: dict[int, Stream] = {}
        select: dict[int, slice | np.ndarray] = {}
        for j, sel, part in by_source[1]:
            stream = streams[j] = self.streams[(j, length)]
            select[j] = sel
            if stream.limit is not None and part.size and int(part.max()) >= stream.limit:
                src_def = self.sources[stream.name]
                cap = f"capped at epochs: {src_def.epochs}" if src_def.max_samples is None else \
                    f"capped at {stream.limit:,} samples by the token/epoch budget"
                raise ConfigError(f"source {stream.name!r} has no sample at position {int(part.max()):,}: it is "
                                  f"{cap}; the loader's num_batches() ({self.end:,}) ends before it")
            e, w = np.divmod(part, stream.num_samples)
            sid = _sample_ids(stream.order, e, w)
            shard, loc = stream.windows.locate(sid)
            ids[sel], epochs[sel], within[sel] = sid, e, w
            gid[sel], local[sel] = shard + stream.windows.gid_base, loc
            inside[sel] = stream.windows.inside(shard, loc)
        return Rows(src=src, ids=ids, epochs=epochs, within=within, gid=gid, local=local, inside=inside,
                    streams=streams, select=select)

    def _by_source(self, phase: int, positions: np.ndarray
                   ) -> tuple[np.ndarray, list[tuple[int, slice | np.ndarray, np.ndarray]]]:
        """(each row's source, [(source, its rows, their stream positions)] for the sources present)."""
        bases = self.cursor.bases[phase]
        if self.single[phase]:  # one source: no interleave, its counter is the position in the phase
            j = int(self._phase_sources[phase][0])
            pos = positions + (int(self.phases.counters_at_start(phase)[j]) + int(bases[j]))
            return np.full(positions.size, j, dtype=np.int64), [(j, slice(None), pos)]
        if positions.size:
            cut = np.flatnonzero(np.diff(positions) != 1) + 1
            starts = positions[np.concatenate(([0], cut))]
            lengths = np.diff(np.concatenate(([0], cut, [positions.size])))
            runs = self.phases.assign_runs(phase, starts, lengths)
            if runs is not None:  # a source's counters are consecutive within a run: numbered, not looked up
                src, first, sources = runs
                out = []
                for c, j in enumerate(sources.tolist()):
                    sel = np.flatnonzero(src == j)
                    if not sel.size:
                        continue
                    if lengths.size == 1:
                        pos = np.arange(sel.size, dtype=np.int64) + (int(first[0, c]) + int(bases[j]))
                    else:  # per run: its first counter, less the rows of this source in the runs before it
                        m = np.bincount(np.searchsorted(cut, sel, side="right"), minlength=lengths.size)
                        pos = np.arange(sel.size, dtype=np.int64)
                        pos += np.repeat(first[:, c] - (np.cumsum(m) - m) + int(bases[j]), m)
                    out.append((j, slice(None) if sel.size == src.size else sel, pos))
                return src, out
        src, counter = self.phases.assign_positions(phase, positions)
        src, counter = np.asarray(src, np.int64), np.asarray(counter, np.int64)
        pos = self.cursor.positions(phase, src, counter)
        present = np.flatnonzero(np.bincount(src, minlength=len(self.names))).tolist()
        out = []
        for j in present:
            sel = slice(None) if len(present) == 1 else np.flatnonzero(src == j)
            out.append((j, sel, pos[sel]))
        return src, out

    def global_rows(self, batch: int) -> Rows:
        """The rows of the whole global batch `batch` (all ranks), in order."""
        loc = self.phases.locate(batch)
        size = int(self.phases.phases[loc.phase].batch.size(loc.batch))
        return self.rows(loc.phase, np.arange(loc.sample, loc.sample + size, dtype=np.int64))


def _sample_ids(order: SampleOrder, epochs: np.ndarray, within: np.ndarray) -> np.ndarray:
    """`order.sample_ids` for positions of one or more epochs: one call per epoch (ascending epochs: cut by
    binary search, no masks)."""
    if not epochs.size:
        return within.copy()
    first, last = int(epochs[0]), int(epochs[-1])
    if first == last and (epochs.size < 2 or bool((epochs == first).all())):
        return order.sample_ids(first, within)
    if bool((np.diff(epochs) >= 0).all()):
        cuts = np.searchsorted(epochs, np.arange(first + 1, last + 1, dtype=np.int64))
        parts = np.split(within, cuts)
        return np.concatenate([order.sample_ids(first + i, part) for i, part in enumerate(parts) if part.size])
    out = np.empty_like(within)
    for e in np.unique(epochs).tolist():
        m = epochs == e
        out[m] = order.sample_ids(int(e), within[m])
    return out
