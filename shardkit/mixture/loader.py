"""The mixture loader: global batch b → this rank's rows drawn from several sources, as a pure function.

For global batch `b` the phase plan names, per row, a source and that source's sample counter
(`PhasePlan.assign_batch`); the cursor turns the counter into a position of the source's own order at the
phase's seq_len (`cursor.py`); `divmod(position, samples per epoch)` is (epoch, k), and the source's
`SampleOrder` gives the sample id. Rows are copied with the single-source loader's machinery — whole
slabs of windows gathered per source in one C call, never per token. Nothing is stored between batches
except the batch index (and, after a recipe change, one offset per source), so `load_state_dict` is O(1).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..batching import BatchFields
from ..batching.state import check_mid_step
from ..batching.units import UnitIndex
from ..distributed_env import resolve_rank_world
from ..errors import ConfigError, ResumeError
from ..order import item_sequence
from .assign import Assigner
from .cursor import Cursor, Exhaustion
from .gather import AddressSpace
from .metrics import MixtureMetrics
from .recipe import Recipe, RecipeWarning, load_recipe
from .rows import ChunkRows
from .sources import build_streams, open_sources
from .state import STATE_FORMAT, STATE_VERSION, SavedState, parse_state

__all__ = ["MixtureConfig", "MixtureLoader", "MixtureWarning"]

# the same chunk and slab sizes as the Loader
from ..loader import _CHUNK_BYTES, _CHUNK_ROWS, _FIRST_CHUNK_ROWS, _SLAB_BYTES


class MixtureWarning(RecipeWarning):
    """The run differs from what the recipe asks for in full: a capped source ends it early, or the sources
    were packed with different tokenizers. (A RecipeWarning, so one filter covers both.)"""


@dataclass(frozen=True, kw_only=True)
class MixtureConfig:
    """How this process reads the recipe's stream; the stream itself is the recipe's alone."""

    rank: int | None = None
    world_size: int | None = None
    micro_batch_size: int | None = None
    fields: BatchFields = field(default_factory=BatchFields)
    readahead: bool = True  # page-cache hints for each source's next shuffle group (batching/readahead.py)
    release: str = "evict"  # finished groups: "evict" from the page cache, or "unmap" only (as the Loader)
    allow_recipe_change: bool = False  # load_state_dict: continue a run saved on another recipe/datasets
    strict: bool = False  # refuse weights that do not sum to 1 instead of normalizing them with a warning
    base_dir: str | os.PathLike[str] | None = None  # relative source paths; default: the recipe file's folder

    def __post_init__(self) -> None:
        if self.release not in ("evict", "unmap"):
            raise ConfigError(f"release must be 'evict' or 'unmap', got {self.release!r}")
        m = self.micro_batch_size
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m <= 0):
            raise ConfigError(f"micro_batch_size must be a positive integer or None, got {m!r}")


class MixtureLoader(UnitIndex):
    """Iterate this rank's batches of a recipe; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    def __init__(self, recipe: str | os.PathLike[str] | Mapping[str, Any] | Recipe,
                 config: MixtureConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = MixtureConfig(**kwargs)
        elif kwargs:
            config = replace(config, **kwargs)
        self.config = config
        is_file = isinstance(recipe, (str, os.PathLike))
        base = Path(config.base_dir) if config.base_dir is not None else \
            (Path(recipe).resolve().parent if is_file else Path.cwd())  # type: ignore[arg-type]
        self.recipe = load_recipe(recipe, strict=config.strict)
        self.recipe_path = str(recipe) if is_file else None
        rank, world = resolve_rank_world(config.rank, config.world_size)
        self.rank, self.world_size = rank, world
        self.recipe.validate_world_size(world, micro_batch_size=config.micro_batch_size)
        self.plan = self.recipe.plan
        self.sources: tuple[str, ...] = self.plan.sources
        self.fingerprint = self.recipe.fingerprint()
        self.datasets = open_sources(self.recipe, base)
        self._check_tokenizers()
        self.dtype = np.result_type(*(self.datasets[n].dtype for n in self.sources))
        self.streams = build_streams(self.recipe, self.datasets, self.sources, readahead=config.readahead,
                                     evict=config.release == "evict")
        self._assign = Assigner(self.plan)
        self._space = AddressSpace.build([self.datasets[n] for n in self.sources])
        self._phase_starts = np.array([b.first_batch for b in self.plan.bounds], dtype=np.int64)
        self._retired: dict[str, tuple[int, int]] = {}  # sources of an earlier recipe, kept in the state
        self._batch = self._micro = 0
        self._groups: dict[tuple[int, int], tuple[int, int]] = {}
        reads: dict[str, list[Any]] = {n: [] for n in self.sources}
        for (j, _), s in sorted(self.streams.items()):
            reads[self.sources[j]].append(s.reads)
        self.metrics = MixtureMetrics(plan=self.plan, cursor=Cursor(self.plan),
                                      num_tokens={n: self.datasets[n].num_tokens for n in self.sources},
                                      epochs={n: self.recipe.source(n).epochs for n in self.sources}, reads=reads,
                                      itemsize=self.dtype.itemsize, position=lambda: self._batch)
        self._set_cursor(Cursor(self.plan), warn=True)

    # -- setup ----------------------------------------------------------------------------------------------
    def _check_tokenizers(self) -> None:
        specs = {n: self.datasets[n].tokenizer for n in self.sources}
        keyed = {n: tuple((t or {}).get(k) for k in ("kind", "name", "vocab_size")) for n, t in specs.items() if t}
        if len(set(keyed.values())) > 1:
            desc = ", ".join(f"{n}: {k[1] or k[0]} ({k[2]} tokens)" for n, k in sorted(keyed.items()))
            warnings.warn(f"the sources were packed with different tokenizers ({desc}); their token ids do "
                          "not mean the same thing", MixtureWarning, stacklevel=3)

    def _set_cursor(self, cursor: Cursor, *, warn: bool = False) -> None:
        self._cursor = cursor
        self.exhausted: Exhaustion | None = cursor.first_exhausted(self._limit)
        self._end = self.exhausted.batch if self.exhausted is not None else self.plan.num_batches
        self.metrics.cursor, self.metrics.end_batch, self.metrics.exhausted = cursor, self._end, self.exhausted
        self._warned_end = False
        if warn and self.exhausted is not None:
            warnings.warn(self.end_reason, MixtureWarning, stacklevel=3)

    def _limit(self, source: int, seq_len: int) -> int | None:
        return self.streams[(source, seq_len)].limit

    @property
    def end_reason(self) -> str:
        """Why the stream ends where it does (`num_batches()`)."""
        if self.exhausted is None:
            p = self.plan.phases[-1]
            return f"the recipe ends after {self.plan.num_batches:,} batches (phase {p.name!r} budget reached)"
        e = self.exhausted
        name, phase = self.sources[e.source], self.plan.phases[e.phase]
        local = e.batch - self.plan.bounds[e.phase].first_batch
        return (f"source {name!r} runs out of data at global batch {e.batch:,} (batch {local:,} of phase "
                f"{phase.name!r}): it is capped at epochs: {self.recipe.source(name).epochs}, so the run ends "
                f"there, before the recipe's {self.plan.num_batches:,} batches; set epochs: auto to repeat "
                "it with a new permutation per epoch, or raise the cap")

    # -- the stream as a pure function ----------------------------------------------------------------------
    def num_batches(self) -> int:
        """Global batches in the run: the recipe's phases, or fewer when a capped source runs out first."""
        return self._end

    def phase_at(self, batch: int) -> int:
        return int(self._cursor.locate(batch).phase)

    def seq_len_at(self, batch: int) -> int:
        return self.plan.phases[self.plan.locate(batch).phase].seq_len

    def global_sample_ids(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source index, sample id) of every row of global batch `batch` (all ranks), in order."""
        self._check_position(batch)
        mix = self.plan.assign_batch(batch)
        length = self.plan.phases[mix.phase].seq_len
        pos = self._cursor.positions(mix.phase, mix.source, mix.counter)
        ids = np.empty_like(pos)
        for j in np.unique(mix.source).tolist():
            sel = mix.source == j
            ids[sel] = self.streams[(j, length)].sample_ids(pos[sel])[0]
        return mix.source, ids

    def _check_position(self, batch: int) -> None:
        if not isinstance(batch, (int, np.integer)) or batch < 0:
            raise ConfigError(f"batch must be a non-negative integer, got {batch!r}")
        if batch < self._cursor.anchor:
            raise ConfigError(f"batch {batch} comes before batch {self._cursor.anchor}, where this loader took "
                              "over the run with a changed recipe; it only produces batches from there on")

    # -- iteration --------------------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """Index of the next global batch to be delivered."""
        return self._batch

    @property
    def phase(self) -> int:
        """Index of the phase the next batch belongs to (len(phases) at the end of the plan)."""
        return self.phase_at(min(self._batch, self.plan.num_batches))

    @property
    def global_batch_size(self) -> int:
        loc = self.plan.locate(self._batch)
        return int(self.plan.phases[loc.phase].batch.size(loc.batch))

    @property
    def consumed_samples(self) -> int:
        return self._cursor.global_samples_before(min(self._batch, self.plan.num_batches))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch, micro, rows in self.iter_batches(self._batch, self._micro):
            self._batch, self._micro = (batch, micro + 1) if micro + 1 < rows["num_micro"] else (batch + 1, 0)
            yield rows
        if self.exhausted is not None and self._batch >= self._end and not self._warned_end:
            self._warned_end = True
            warnings.warn(self.end_reason, MixtureWarning, stacklevel=2)

    def iter_batches(self, first: int, first_micro: int = 0, *, stride: int = 1, run: int = 1,
                     stop: int | None = None) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """(batch, micro index, batch dict) for batches first, first+stride, … (runs of `run`), below `stop`.

        The same split for DataLoader workers as `Loader.iter_batches`; batches never straddle a chunk of
        another phase, so every chunk has one seq_len.
        """
        self._check_position(first)
        end = self._end if stop is None else min(self._end, stop)
        t, limit_rows = 0, _FIRST_CHUNK_ROWS
        while True:
            batches = item_sequence(first, stride, run, t, 4096)
            batches = batches[batches < end]
            if not batches.size:
                return
            phase = int(np.searchsorted(self._phase_starts, batches[0], side="right")) - 1
            later = batches >= self.plan.bounds[phase].first_batch + self.plan.bounds[phase].num_batches
            if later.any():  # one phase (one seq_len) per chunk
                batches = batches[:int(np.argmax(later))]
            p = self.plan.phases[phase]
            sizes = p.batch.size(batches - self.plan.bounds[phase].first_batch)
            per = sizes // self.world_size
            row_bytes = (p.seq_len + 1) * self.dtype.itemsize
            # each source's ids are one SampleOrder call per chunk (~0.5 ms fixed cost), so a chunk holds
            # the single-source loader's rows per source
            rows = max(1, min(limit_rows, _CHUNK_BYTES // row_bytes) * len(p.mix))
            n = max(1, int(np.searchsorted(np.cumsum(per), rows, side="right")))
            batches, sizes, per = batches[:n], sizes[:n], per[:n]
            lo = p.batch.start(batches - self.plan.bounds[phase].first_batch) + self.rank * per
            yield from self._materialise(phase, batches, lo, lo + per, sizes, first_micro)
            first_micro = 0
            t += batches.size
            limit_rows = min(limit_rows * 4, _CHUNK_ROWS)

    def _materialise(self, phase: int, batches: np.ndarray, lo: np.ndarray, hi: np.ndarray, sizes: np.ndarray,
                     first_micro: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """Phase positions [lo, hi) of each global batch (one phase): ids for the whole chunk at once, then
        slab by slab one gather over all sources (see gather.py)."""
        p = self.plan.phases[phase]
        width = p.seq_len + 1
        rows = ChunkRows(self._assign, self._cursor, self._space, self.streams, self.dtype, phase, batches, lo, hi)
        counts = hi - lo
        bounds = np.concatenate([[0], np.cumsum(counts)])
        slab_of = (bounds[:-1] // max(1, _SLAB_BYTES // (width * self.dtype.itemsize))).tolist()
        per_batch = np.bincount(np.repeat(np.arange(batches.size) * len(self.sources), counts) + rows.src,
                                minlength=batches.size * len(self.sources)).reshape(batches.size, -1)
        metrics = self.metrics
        metrics.open_chunk(phase, per_batch)
        m = self.config.micro_batch_size
        fields = self.config.fields
        plain = not (fields.tokens_only or fields.loss_mask or fields.needs_docs)
        name = p.name
        src = rows.src
        bl = bounds.tolist()
        slab: np.ndarray | None = None
        slab_base = slab_end = 0
        n = batches.size
        for i, (b, size) in enumerate(zip(batches.tolist(), sizes.tolist())):
            a, z = bl[i], bl[i + 1]
            if z > slab_end:  # the next slab: batches i..j-1, ~_SLAB_BYTES (cache-sized, as in the Loader)
                j = i + 1
                while j < n and slab_of[j] == slab_of[i]:
                    j += 1
                slab_base, slab_end = a, bl[j]
                slab = rows.fill(a, slab_end)
            if i == 1 or n == 1:  # hint the groups ahead once the first batch is out: a resume is not slowed
                rows.hint(self._groups)
            tokens = slab[a - slab_base:z - slab_base]  # type: ignore[index]
            metrics.pending = i + 1
            if not m:
                if plain:  # the common case, without a call: this loop is most of the per-batch cost
                    yield b, 0, {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:], "source": src[a:z],
                                 "batch_index": b, "global_batch_size": size, "micro_index": 0, "num_micro": 1,
                                 "phase": phase, "phase_name": name}
                    continue
                out = rows.assemble(tokens, slice(a, z), fields)
                out.update(batch_index=b, global_batch_size=size, micro_index=0, num_micro=1, phase=phase,
                           phase_name=name)
                yield b, 0, out
                continue
            num_micro = (z - a) // m
            for q in range(first_micro if i == 0 else 0, num_micro):
                r = slice(a + q * m, a + (q + 1) * m)
                out = rows.assemble(tokens[q * m:(q + 1) * m], r, fields)
                out.update(batch_index=b, global_batch_size=size, micro_index=q, num_micro=num_micro, phase=phase,
                           phase_name=name)
                yield b, q, out
        metrics.close_chunk()

    # -- units: what one DataLoader item is (a micro-batch, or the rank's whole batch) ------------------------
    def _samples_before(self, batch: int) -> int:
        return self._cursor.global_samples_before(batch)

    def _batch_at_sample(self, sample: int) -> int:
        return self._cursor.batch_at_global_sample(sample)

    def iter_units(self, first_unit: int, *, stride: int = 1, run: int = 1, stop: int | None = None
                   ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(unit index, item) for the units `item_sequence(first_unit, stride, run)` names, below `stop`."""
        m = self.config.micro_batch_size
        if not m:
            for b, _, item in self.iter_batches(first_unit, stride=stride, run=run, stop=stop):
                yield b, item
            return
        for u, b, q in self._unit_walk(first_unit, stride, run, stop, self._end):
            self._check_position(b)
            loc = self.plan.locate(b)
            size = int(self.plan.phases[loc.phase].batch.size(loc.batch))
            lo = loc.sample + self.rank * (size // self.world_size) + q * m
            one = np.array([b], dtype=np.int64)
            _, _, item = next(self._materialise(loc.phase, one, one * 0 + lo, one * 0 + lo + m, one * 0 + size, 0))
            item.update(micro_index=q, num_micro=size // self.world_size // m)
            yield u, item

    # -- resume ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A small JSON-able dict; save it with the model checkpoint."""
        return self.state_at(self._batch, self._micro)

    def state_at(self, batch: int, micro: int = 0) -> dict[str, Any]:
        """The state of a loader about to deliver `batch` (for trainers that track the batch index)."""
        self._check_position(batch)
        if batch > self.plan.num_batches:
            raise ConfigError(f"batch {batch} is past the end of the recipe ({self.plan.num_batches} batches)")
        c = self._cursor
        samples, tokens = c.samples_before(batch).tolist(), c.tokens_before(batch).tolist()
        loc = c.locate(batch)
        sources: dict[str, dict[str, Any]] = {n: {"samples": s, "tokens": t}
                                              for n, s, t in zip(self.sources, samples, tokens)}
        for n, (s, t) in sorted(self._retired.items()):
            sources[n] = {"samples": s, "tokens": t, "active": False}
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "recipe": self.fingerprint,
            "datasets": {n: self.datasets[n].fingerprint for n in self.sources},
            "batch": batch,
            "micro": micro,
            "samples": c.global_samples_before(batch),
            "phase": self.plan.phases[loc.phase].name if loc.phase < len(self.plan.phases) else None,
            "sources": sources,
            "anchor": c.anchor,
            "offsets": dict(c.offsets_json(self.sources)),
            "world_size": self.world_size,  # any world size that divides the batches resumes (at a step boundary)
            "rank": self.rank,
            "micro_batch_size": self.config.micro_batch_size,
        }

    def load_state_dict(self, state: dict[str, Any], *, allow_recipe_change: bool | None = None,
                        force: bool = False) -> None:
        """Continue exactly where `state` was taken, on any world size that divides the batches.

        A state from another recipe or other datasets is refused (ResumeError) unless
        `allow_recipe_change` (default: the config's; `force` is a synonym): then this recipe takes over at
        the saved batch index and every source continues its order where the saved run left it.
        """
        saved = parse_state(state)
        allow = force or (self.config.allow_recipe_change if allow_recipe_change is None else allow_recipe_change)
        mine = {n: self.datasets[n].fingerprint for n in self.sources}
        if saved.recipe != self.fingerprint:
            if not allow:
                raise ResumeError("recipe", f"the state was saved on recipe {saved.recipe[:16]}, this loader "
                                            f"reads recipe {self.fingerprint[:16]}; pass allow_recipe_change=True "
                                            f"to continue with this recipe from batch {saved.batch}, each source "
                                            "continuing its order where it was")
            cursor, retired = self._take_over(saved)
        else:
            changed = sorted(n for n in set(mine) & set(saved.datasets) if mine[n] != saved.datasets[n])
            if changed and not allow:
                n = changed[0]
                raise ResumeError(f"datasets.{n}", f"source {n!r} was {saved.datasets[n][:16]} when the state was "
                                                   f"saved, it is now {mine[n][:16]}; pass allow_recipe_change=True "
                                                   "to continue on the new data from the same positions")
            cursor, retired = self._resume_same(saved)
        self._check_micro(saved.batch, saved.micro)
        check_mid_step(state, saved.micro, world_size=self.world_size, micro_batch_size=self.config.micro_batch_size)
        self._retired = retired  # every check passed: commit
        self._set_cursor(cursor, warn=cursor.anchor == saved.batch and saved.recipe != self.fingerprint)
        self._batch, self._micro = saved.batch, saved.micro

    def _resume_same(self, saved: SavedState) -> tuple[Cursor, dict[str, tuple[int, int]]]:
        """The cursor of a plain resume (same recipe): the saved offsets, every position checked."""
        if saved.batch > self.plan.num_batches:
            raise ResumeError("batch", f"{saved.batch} is past the end of the recipe ({self.plan.num_batches} "
                                       "batches)")
        idx = {n: j for j, n in enumerate(self.sources)}
        ot, os_ = np.zeros(len(self.sources), np.int64), np.zeros(len(self.sources), np.int64)
        for n, (s, t) in saved.offsets.items():
            if n not in idx:
                raise ResumeError(f"offsets.{n}", f"no source {n!r} in this recipe")
            os_[idx[n]], ot[idx[n]] = s, t
        cursor = Cursor(self.plan, offset_tokens=ot, offset_samples=os_, anchor=saved.anchor)
        if cursor.global_samples_before(saved.batch) != saved.samples:
            raise ResumeError("samples", f"{saved.samples} consumed samples do not match batch {saved.batch} "
                                         "of this recipe")
        for n, s, t in zip(self.sources, cursor.samples_before(saved.batch).tolist(),
                           cursor.tokens_before(saved.batch).tolist()):
            if saved.sources.get(n) != (s, t):
                found = dict(zip(("samples", "tokens"), saved.sources[n])) if n in saved.sources else "nothing"
                raise ResumeError(f"sources.{n}", f"saved {found}, this recipe has {{'samples': {s}, 'tokens': "
                                                  f"{t}}} at batch {saved.batch}: the state was edited or is corrupt")
        return cursor, {n: v for n, v in saved.sources.items() if n not in idx}

    def _take_over(self, saved: SavedState) -> tuple[Cursor, dict[str, tuple[int, int]]]:
        """A changed recipe continues at the saved batch index; each source's offset keeps its position."""
        if saved.batch >= self.plan.num_batches:
            raise ResumeError("batch", f"the state is at batch {saved.batch}, but the new recipe has only "
                                       f"{self.plan.num_batches} batches; extend its last phase")
        plain = Cursor(self.plan)
        samples, tokens = plain.samples_before(saved.batch), plain.tokens_before(saved.batch)
        ot, os_ = np.zeros_like(tokens), np.zeros_like(samples)
        for j, n in enumerate(self.sources):  # a source new to the run has given nothing yet: it starts at 0
            given_samples, given_tokens = saved.sources.get(n, (0, 0))
            os_[j], ot[j] = given_samples - samples[j], given_tokens - tokens[j]
        retired = {n: v for n, v in saved.sources.items() if n not in self.sources}
        return Cursor(self.plan, offset_tokens=ot, offset_samples=os_, anchor=saved.batch), retired

    def _check_micro(self, batch: int, micro: int) -> None:
        if not micro:
            return
        m = self.config.micro_batch_size
        if not m:
            raise ResumeError("micro", "the state is mid-step but this loader has no micro_batch_size")
        if batch >= self.plan.num_batches:
            raise ResumeError("micro", f"{micro} is set but batch {batch} is the end of the recipe")
        loc = self.plan.locate(batch)
        num = int(self.plan.phases[loc.phase].batch.size(loc.batch)) // self.world_size // m
        if micro >= num:
            raise ResumeError("micro", f"micro-batch {micro} of batch {batch}, which has {num} per rank here")
