"""The loader: global batch b → this rank's rows, as a pure function of (data, config, seed, b).

Nothing is stored between batches except the batch index, so `load_state_dict` is O(1) at any step,
any world size that divides the batch gives the same global stream, and DataLoader workers can each
compute their own batches independently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .batching import BatchFields, WindowSource, assemble, check_state, make_state
from .batching.readahead import Readahead, ReadMetrics
from .batching.state import check_mid_step
from .batching.units import UnitIndex
from .distributed_env import resolve_rank_world
from .errors import ConfigError, ResumeError
from .format import Dataset
from .order import (
    BatchSchedule,
    Constant,
    SampleOrder,
    ShuffleConfig,
    ShuffleMode,
    item_sequence,
    parse_schedule,
    rank_slice,
)
from .remote.dataset import open_any

__all__ = ["LoaderConfig", "Loader"]

# sample ids and row plans are computed for this many upcoming rows at once (NumPy's per-call cost is
# paid per chunk, not per batch); the first chunk after a (re)start is small, so the first batch is quick
_CHUNK_BYTES = 64 << 20
_CHUNK_ROWS = 16384
_FIRST_CHUNK_ROWS = 256
_SLAB_BYTES = 256 << 10  # rows are gathered this many bytes at a time (L2-sized: see _materialise)


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    seq_len: int
    seed: int = 0
    batch_schedule: BatchSchedule | int = 8
    shuffle: ShuffleMode | str = "block"
    block_samples: int | None = None
    group_blocks: int | None = None
    max_tokens: int | None = None
    max_epochs: int | None = None
    micro_batch_size: int | None = None
    fields: BatchFields = field(default_factory=BatchFields)
    rank: int | None = None
    world_size: int | None = None
    readahead: bool = True  # page-cache hints for the next shuffle group (see batching/readahead.py)
    # what happens to a finished group's pages: "evict" from the page cache, or "unmap" (leave them cached
    # for other readers of the same files); either way this process's RSS does not grow
    release: str = "evict"
    # a remote dataset URL (s3://, gs://, ...) streams through a bounded local block cache: see docs/remote.md
    cache_dir: str | os.PathLike[str] | None = None  # default $SHARDKIT_REMOTE_CACHE_DIR
    cache_limit: int | str | None = None  # bytes or "20GiB"; default $SHARDKIT_REMOTE_CACHE_LIMIT, else 16 GiB
    storage_options: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise ConfigError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        schedule = self.batch_schedule
        if isinstance(schedule, int):
            schedule = Constant(schedule)
        elif isinstance(schedule, dict):
            schedule = parse_schedule(schedule)
        object.__setattr__(self, "batch_schedule", schedule)
        object.__setattr__(self, "shuffle", ShuffleMode.parse(self.shuffle))
        if self.release not in ("evict", "unmap"):
            raise ConfigError(f"release must be 'evict' or 'unmap', got {self.release!r}")
        for name in ("max_tokens", "max_epochs", "micro_batch_size"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise ConfigError(f"{name} must be a positive integer or None, got {v!r}")


class Loader(UnitIndex):
    """Iterate this rank's batches; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    def __init__(self, data: str | os.PathLike[str] | Dataset, config: LoaderConfig | None = None,
                 **kwargs: Any) -> None:
        if config is None:
            config = LoaderConfig(**kwargs)
        elif kwargs:
            config = replace(config, **kwargs)
        self.dataset = data if isinstance(data, Dataset) else open_any(
            data, cache_dir=config.cache_dir, cache_limit=config.cache_limit, storage_options=config.storage_options)
        rank, world = resolve_rank_world(config.rank, config.world_size)
        self.config = config
        self.rank, self.world_size = rank, world
        self.schedule: BatchSchedule = config.batch_schedule  # type: ignore[assignment]
        self.source = WindowSource(self.dataset, config.seq_len)
        self.num_samples = self.source.num_samples
        default = ShuffleConfig.default(config.shuffle, seq_len=config.seq_len,
                                        itemsize=self.dataset.dtype.itemsize, num_samples=self.num_samples)
        self.shuffle = replace(default, **{k: v for k, v in (("block_samples", config.block_samples),
                                                              ("group_blocks", config.group_blocks)) if v})
        self.order = SampleOrder(self.num_samples, self.shuffle, config.seed)
        budgets = [config.max_tokens // config.seq_len if config.max_tokens else None,
                   config.max_epochs * self.num_samples if config.max_epochs else None]
        self.budget_samples: int | None = min((b for b in budgets if b is not None), default=None)
        self._batch = 0
        self._micro = 0
        self._group: tuple[int, int] | None = None
        self.metrics = ReadMetrics()
        self.readahead = Readahead(self.dataset, config.seq_len, self.order.block, self.metrics,
                                   tokens_of=self.source.shard_tokens,
                                   enabled=config.readahead,
                                   evict=config.release == "evict")
        self.source.on_map = self.readahead.mapping_advice(full_shuffle=self.shuffle.mode is ShuffleMode.FULL)
        self._check_batch(0)

    @classmethod
    def from_recipe(cls, recipe: Any, **kwargs: Any) -> Any:
        """A `MixtureLoader` over a recipe (YAML/TOML/JSON path, dict or Recipe): see docs/mixtures.md."""
        from .mixture.loader import MixtureLoader  # (the mixture package builds on the loader's parts)

        return MixtureLoader(recipe, **kwargs)

    # -- the stream as a pure function -------------------------------------------------------------------
    def stream_config(self) -> dict[str, Any]:
        """Everything the global sample stream depends on (besides the data): compared on resume."""
        return {"seq_len": self.config.seq_len, "seed": self.config.seed, "shuffle": self.shuffle.to_json(),
                "schedule": self.schedule.to_json(), "budget_samples": self.budget_samples}

    def global_sample_ids(self, batch: int) -> np.ndarray:
        """Sample ids of the whole global batch `batch` (all ranks), in order."""
        start, size = self.schedule.start(batch), self.schedule.size(batch)
        return self._ids(np.arange(start, start + size, dtype=np.int64))

    def _ids(self, global_positions: np.ndarray) -> np.ndarray:
        n = self.num_samples
        if global_positions.size and bool((np.diff(global_positions) >= 0).all()):
            # ascending (every chunk the loader plans): one contiguous run per epoch, no masks
            first, last = int(global_positions[0]) // n, int(global_positions[-1]) // n
            if first == last:
                return self.order.sample_ids(first, global_positions - first * n)
            cuts = np.searchsorted(global_positions, np.arange(first + 1, last + 1, dtype=np.int64) * n)
            parts = np.split(global_positions, cuts)
            return np.concatenate([self.order.sample_ids(first + i, part - (first + i) * n)
                                   for i, part in enumerate(parts) if part.size])
        epochs, within = np.divmod(global_positions, n)
        out = np.empty_like(global_positions)
        for e in np.unique(epochs).tolist():
            m = epochs == e
            out[m] = self.order.sample_ids(int(e), within[m])
        return out

    def _rank_rows(self, batch: int) -> tuple[int, int]:
        start, size = self.schedule.start(batch), self.schedule.size(batch)
        lo, hi = rank_slice(start, size, self.rank, self.world_size)
        return lo, hi

    def _check_batch(self, batch: int) -> None:
        size = self.schedule.size(batch)
        if size % self.world_size:
            raise ConfigError(f"global batch {batch} has {size} samples, not divisible by world_size "
                              f"{self.world_size}")
        m = self.config.micro_batch_size
        if m and (size // self.world_size) % m:
            raise ConfigError(f"global batch {batch}: {size // self.world_size} rows per rank are not a "
                              f"multiple of micro_batch_size {m}")

    def num_batches(self) -> int | None:
        """Batches in the token/epoch budget (None for an endless stream); a partial last batch is dropped."""
        if self.budget_samples is None:
            return None
        b = self.schedule.batch_at_sample(self.budget_samples)
        return b if self.schedule.start(b) + self.schedule.size(b) > self.budget_samples else b + 1

    # -- iteration ------------------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """Index of the next global batch to be delivered."""
        return self._batch

    @property
    def global_batch_size(self) -> int:
        return self.schedule.size(self._batch)

    @property
    def consumed_samples(self) -> int:
        return self.schedule.start(self._batch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch, micro, rows in self.iter_batches(self._batch, self._micro):
            self._batch, self._micro = (batch, micro + 1) if micro + 1 < rows["num_micro"] else (batch + 1, 0)
            yield rows

    def iter_batches(self, first: int, first_micro: int = 0, *, stride: int = 1, run: int = 1,
                     stop: int | None = None) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """(batch, micro index, batch dict) for the batches `_sequence` names, below `stop` and the budget.

        stride=1: every batch from `first`; stride=k: every k-th (worker w of k); run=g with stride=g·k:
        runs of g consecutive batches, every k-th run (workers that ship groups of g batches).
        """
        end = self.num_batches()
        if stop is not None:
            end = stop if end is None else min(end, stop)
        t = 0
        rows = _FIRST_CHUNK_ROWS
        while True:
            plan = self._plan_chunk(item_sequence(first, stride, run, t, 4096), end, rows)
            rows = _CHUNK_ROWS
            if plan is None:
                return
            yield from self._materialise(*plan, first_micro)
            first_micro = 0
            t += plan[0].size

    def _plan_chunk(self, batches: np.ndarray, end: int | None, max_rows: int = _CHUNK_ROWS
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(batch indices, first row, end row, global size) of the next chunk of `batches`, vectorised.

        A chunk holds up to ~_CHUNK_BYTES of this rank's rows (at least one batch); it stops before a batch
        that does not divide over the ranks, so the batches before it are delivered before the error.
        """
        if end is not None:
            batches = batches[batches < end]
        if not batches.size:
            return None
        limit = max(1, min(max_rows, _CHUNK_BYTES // ((self.config.seq_len + 1) * self.dataset.dtype.itemsize)))
        sizes = self.schedule.size(batches)
        per = sizes // self.world_size
        n = max(1, int(np.searchsorted(np.cumsum(per), limit, side="right")))
        m = self.config.micro_batch_size
        bad = (sizes[:n] % self.world_size != 0) | ((per[:n] % m != 0) if m else False)
        if bad.any():
            n = int(np.argmax(bad))
            if n == 0:
                self._check_batch(int(batches[0]))  # raises, naming the batch
        batches, sizes, per = batches[:n], sizes[:n], per[:n]
        lo = self.schedule.start(batches) + self.rank * per
        return batches, lo, lo + per, sizes

    def _materialise(self, batches: np.ndarray, lo: np.ndarray, hi: np.ndarray, sizes: np.ndarray,
                     first_micro: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """Compute ids for a whole chunk of batches at once, copy rows slab by slab, hand out views."""
        counts = hi - lo
        offsets = np.concatenate([[0], np.cumsum(counts)])
        positions = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(lo - offsets[:-1], counts)
        ids = self._ids(positions)
        epochs, within = np.divmod(positions, self.num_samples)
        groups = self.order.group_of_position(within)
        width = self.config.seq_len + 1
        row_bytes = width * self.dataset.dtype.itemsize
        m = self.config.micro_batch_size
        fields = self.config.fields
        shard, local = self.source.locate(ids)
        blocks = ids // self.order.block
        num_blocks = self.order.full_blocks + 1
        bounds = offsets.tolist()
        first_rows = bounds[:-1]
        batch_epoch = epochs[first_rows].tolist()
        group_key = epochs[first_rows] * self.order.num_groups + groups[first_rows]
        entering = np.diff(group_key, prepend=-1) != 0  # batches that start a group
        enters = np.flatnonzero(entering).tolist()
        # Slabs: runs of whole batches of ~_SLAB_BYTES, each filled by one gather when its first batch is
        # due (one C call for many small batches; a slab that stays in L2 copies much faster than a big
        # one, see docs/benchmarks.md). Batches are views of their slab: nothing a caller keeps is overwritten.
        # A slab also ends where a shuffle group does, so one read spans at most two groups (short rows
        # would otherwise put many groups in one slab: more than a remote cache sized for two groups holds).
        slab_first = np.flatnonzero((np.diff(offsets[:-1] // max(1, _SLAB_BYTES // row_bytes), prepend=-1) != 0)
                                    | entering)
        one_shard, view_rows, inside = self.source.plan(shard, local, offsets[slab_first])
        one_shard_list = one_shard.tolist()
        slab_bounds = offsets[np.append(slab_first, len(counts))].tolist()
        batch_group = groups[first_rows].tolist()
        n = len(first_rows)
        slab: np.ndarray | None = None
        slab_base = slab_end = 0
        next_slab = 0
        next_enter = enters.pop(0) if enters else n
        record = self.metrics.record_step
        plain = not m and not fields.needs_docs
        tokens_only = fields.tokens_only
        for i, (b, size) in enumerate(zip(batches.tolist(), sizes.tolist())):
            a, z = bounds[i], bounds[i + 1]
            if z > slab_end:  # batch i starts the next slab
                slab_base, slab_end = slab_bounds[next_slab], slab_bounds[next_slab + 1]
                slab = (self.source.gather_rows(int(shard[slab_base]), view_rows[slab_base:slab_end])
                        if one_shard_list[next_slab] else
                        self.source.gather(shard[slab_base:slab_end], local[slab_base:slab_end],
                                           inside[slab_base:slab_end]))
                next_slab += 1
            e = batch_epoch[i]
            if i == next_enter:
                next_enter = enters.pop(0) if enters else n
                if (e, batch_group[i]) != self._group:
                    self._enter_group(e, batch_group[i])
            tokens = slab[a - slab_base:z - slab_base]  # type: ignore[index]
            record(e, blocks, a, z, row_bytes, num_blocks)
            if plain:  # the common case, without a call per field
                out = ({"tokens": tokens} if tokens_only else
                       {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]})
                if fields.loss_mask:
                    out["loss_mask"] = np.ones((z - a, width - 1), dtype=np.float32)
                out["batch_index"], out["global_batch_size"], out["micro_index"], out["num_micro"] = b, size, 0, 1
                yield b, 0, out
                continue
            batch_ids = ids[a:z]
            if not m:
                out = assemble(tokens, batch_ids, self.source, fields)
                out.update(batch_index=b, global_batch_size=size, micro_index=0, num_micro=1)
                yield b, 0, out
                continue
            num_micro = (z - a) // m
            for k in range(first_micro if i == 0 else 0, num_micro):
                out = assemble(tokens[k * m:(k + 1) * m], batch_ids[k * m:(k + 1) * m], self.source, fields)
                out.update(batch_index=b, global_batch_size=size, micro_index=k, num_micro=num_micro)
                yield b, k, out

    def _enter_group(self, epoch: int, group: int) -> None:
        self._group = (epoch, group)
        if not self.readahead.enabled or self.shuffle.mode is ShuffleMode.FULL:
            return
        order = self.order
        self.readahead.enter_group(epoch, group, order.blocks_of_group(epoch, group),
                                   order.blocks_of_group(*order.group_after(epoch, group)),
                                   later=lambda k: order.blocks_of_group(*order.group_after(epoch, group, k)))

    # -- units: what one DataLoader item is (a micro-batch, or the rank's whole batch) ------------------------
    def _samples_before(self, batch: int) -> int:
        return self.schedule.start(batch)

    def _batch_at_sample(self, sample: int) -> int:
        return self.schedule.batch_at_sample(sample)

    def iter_units(self, first_unit: int, *, stride: int = 1, run: int = 1, stop: int | None = None
                   ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(unit index, item) for the units `item_sequence(first_unit, stride, run)` names, below `stop`: how
        workers split a rank's work (see `iter_batches`)."""
        if not self.config.micro_batch_size:
            for b, _, item in self.iter_batches(first_unit, stride=stride, run=run, stop=stop):
                yield b, item
            return
        for u, b, k in self._unit_walk(first_unit, stride, run, stop, self.num_batches()):
            self._check_batch(b)
            lo, _ = self._rank_rows(b)
            m = self.config.micro_batch_size
            size = self.schedule.size(b)
            one = np.array([b], dtype=np.int64)
            _, _, item = next(self._materialise(one, one * 0 + lo + k * m, one * 0 + lo + (k + 1) * m,
                                                one * 0 + size, 0))
            item.update(micro_index=k, num_micro=size // self.world_size // m)
            yield u, item

    # -- resume ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A small JSON-able dict; save it with the model checkpoint."""
        return make_state(fingerprint=self.dataset.fingerprint, config=self.stream_config(), batch=self._batch,
                          samples=self.schedule.start(self._batch), micro=self._micro,
                          world_size=self.world_size, rank=self.rank,
                          micro_batch_size=self.config.micro_batch_size)

    def state_at(self, batch: int, micro: int = 0) -> dict[str, Any]:
        """The state of a loader about to deliver `batch` (for trainers that track the batch index)."""
        return make_state(fingerprint=self.dataset.fingerprint, config=self.stream_config(), batch=batch,
                          samples=self.schedule.start(batch), micro=micro, world_size=self.world_size,
                          rank=self.rank, micro_batch_size=self.config.micro_batch_size)

    def load_state_dict(self, state: dict[str, Any], *, force: bool = False) -> None:
        """Continue exactly where `state` was taken, on any world size that divides the batches."""
        batch, samples, micro = check_state(state, fingerprint=self.dataset.fingerprint,
                                            config=self.stream_config(), force=force)
        if not force and self.schedule.start(batch) != samples:
            raise ResumeError("samples", f"{samples} consumed samples do not match batch {batch} of the schedule")
        if micro and not self.config.micro_batch_size:
            raise ResumeError("micro", "the state is mid-step but this loader has no micro_batch_size")
        check_mid_step(state, micro, world_size=self.world_size, micro_batch_size=self.config.micro_batch_size)
        self._check_batch(batch)
        self._batch, self._micro = batch, micro
