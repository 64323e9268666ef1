"""What both public loaders are: a stream definition and read options over one `Engine`, plus a position.

`Loader` (one dataset) and `MixtureLoader` (a recipe) in `shardkit/loader.py` subclass `StreamFacade` and
only say what their stream is (`_definition_parts`, `_stream_definition`, `_dataset_fingerprints`) and how
they pickle. Everything else — iteration, items for DataLoader workers, state and resume with the named
overrides, metrics, pickling to (configuration, position), `close()` — is here, once.
"""

from __future__ import annotations

import difflib
import os
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..format import Dataset
from ..mixture.phases import PhasePlan
from .accounting import accounting
from .config import Placement, ReadOptions, check_flag, check_optional_positive
from .core import Engine
from .fields import BatchFields
from .packed_rows import PackedWindows
from .plan import Plan, SourceDef
from .resume import resume
from .skips import parse_skips, skips_json, union
from .state import Overrides, make_state, parse_state, stream_fingerprint
from .windows import Windows

__all__ = ["ReadConfig", "StreamFacade", "build_config"]


@dataclass(frozen=True, kw_only=True)
class ReadConfig:
    """What both loaders share: where this rank sits and how it reads (not what is streamed)."""

    rank: int | None = None
    world_size: int | None = None
    micro_batch_size: int | None = None
    fields: BatchFields = field(default_factory=BatchFields)
    readahead: bool = True  # local page-cache hints (see engine/readahead.py)
    # what happens to a finished group's pages: "evict" from the page cache, or "unmap" (leave them cached
    # for other readers of the same files); either way this process's RSS does not grow
    release: str = "evict"
    max_open_shards: int | None = None  # shard mappings held at once (one descriptor each); None: ulimit -n / 4
    # remote dataset URLs (s3://, gs://, ...) stream through a bounded local block cache: see docs/remote.md
    cache_dir: str | os.PathLike[str] | None = None  # default $SHARDKIT_REMOTE_CACHE_DIR
    cache_limit: int | str | None = None  # bytes or "20GiB"; default $SHARDKIT_REMOTE_CACHE_LIMIT, else 16 GiB
    storage_options: dict[str, Any] | None = None
    # packed rows' tables (packing=): default $SHARDKIT_PACK_CACHE_DIR or ~/.cache/shardkit/packing
    packing_cache_dir: str | os.PathLike[str] | None = None
    # packed rows read from a store of the rows materialised beside their table (engine/row_store.py)
    packing_store: bool = False
    # packed rows: deal each global batch's rows to ranks so their attention cost (Σ len²) is even
    balance_ranks: bool = False
    # resume overrides (load_state_dict may also pass them): see engine.state.Overrides
    allow_budget_change: bool = False
    allow_recipe_change: bool = False
    allow_data_change: bool = False
    # global batch ranges [first, last] (inclusive) never delivered, on every rank: see engine/skips.py
    skip: Any = ()
    # hash each local checksum block on its first read, and what a damaged block costs: engine/verify_read.py
    verify_on_read: bool = False
    on_corrupt: str = "raise"  # "raise", "refetch" or "skip"

    def read_options(self) -> ReadOptions:
        return ReadOptions(fields=self.fields, readahead=self.readahead, release=self.release,
                           max_open_shards=self.max_open_shards, cache_dir=self.cache_dir,
                           cache_limit=self.cache_limit, storage_options=self.storage_options,
                           balance_ranks=self.balance_ranks, verify_on_read=self.verify_on_read,
                           on_corrupt=self.on_corrupt)

    def overrides(self) -> Overrides:
        return Overrides(allow_budget_change=self.allow_budget_change, allow_recipe_change=self.allow_recipe_change,
                         allow_data_change=self.allow_data_change)

    def _check_common(self) -> None:
        object.__setattr__(self, "fields", self.read_options().fields)  # validates every read option
        if self.packing_cache_dir is not None and not isinstance(self.packing_cache_dir, (str, os.PathLike)):
            raise ConfigError(f"packing_cache_dir must be a path or None, got {self.packing_cache_dir!r}")
        check_flag("packing_store", self.packing_store)
        check_optional_positive("micro_batch_size", self.micro_batch_size)
        self.overrides()
        object.__setattr__(self, "skip", parse_skips(self.skip))


def build_config(cls: type, config: Any, kwargs: dict[str, Any]) -> Any:
    """`config` updated by `kwargs`, or one built from them; unknown names get a did-you-mean."""
    names = [f.name for f in fields(cls)]
    for key in kwargs:
        if key not in names:
            if key == "batch_size":
                hint = "; a constant global batch size is batch_schedule=8 (or Ramp/Piecewise for a schedule)"
            else:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (options: {', '.join(names)})"
            raise ConfigError(f"{cls.__name__}: unknown option {key!r}{hint}")
    if config is None:
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
                   and f.name not in kwargs]
        if missing:
            hint = ": the number of tokens a sample's inputs hold (e.g. 2048)" if missing[0] == "seq_len" else ""
            raise ConfigError(f"{missing[0]} is required{hint}")
        return cls(**kwargs)
    if not isinstance(config, cls):
        raise ConfigError(f"config must be a {cls.__name__}, got {type(config).__name__}")
    return replace(config, **kwargs) if kwargs else config


class StreamFacade:
    """What both loaders are: a stream definition and a read config over one engine, plus a position."""

    _kind: str
    config: ReadConfig

    # -- construction (subclasses build the plan), pickling and lifecycle ---------------------------------
    def _start(self, placement: Placement) -> None:
        self.placement = placement
        self.rank, self.world_size = placement.rank, placement.world_size
        self._batch = self._micro = 0
        self._retired: dict[str, tuple[int, int]] = {}
        self._skips = union(self.config.skip, self._definition_skips())
        self._engine: Engine | None = None
        self._open()

    def _open(self) -> Engine:
        """Build (or rebuild, after unpickling) the plan and the engine: datasets are opened here."""
        if self._engine is None:
            datasets, sources, phases, seed = self._definition_parts()
            unique = list({id(d): d for d in datasets.values()}.values())
            bases, at = {}, 0
            for d in unique:
                bases[id(d)] = at
                at += d.num_shards
            plan = Plan(phases, sources, seed, bases, self._windows_of())
            self._engine = Engine(plan, unique, self.placement, self.config.read_options(),
                                  label_sources=self._kind == "recipe")
            self._engine.metrics.position = _Position(self)
            self._engine.set_skips(self._skips)
        return self._engine

    def _definition_skips(self) -> tuple[tuple[int, int], ...]:
        """Skips the stream definition itself carries (a recipe's `skip:`)."""
        return ()

    @property
    def skips(self) -> tuple[tuple[int, int], ...]:
        """Global batch ranges [first, last] this loader never delivers (configured ∪ resumed from a state)."""
        return self._skips

    def _definition_parts(self) -> tuple[dict[str, Dataset], dict[str, SourceDef], PhasePlan, int]:
        raise NotImplementedError

    def _windows_of(self) -> Callable[[Dataset, int, int], Windows]:
        """How the plan cuts a source into samples at a seq_len: windows, or packed rows (`packing=`)."""
        return Windows

    @property
    def engine(self) -> Engine:
        return self._engine if self._engine is not None else self._open()

    def __getstate__(self) -> dict[str, Any]:
        """(configuration, position): the new process reopens the files when it first reads."""
        return {"args": self._pickle_args(), "placement": self.placement, "state": self.state_dict()}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self._unpickle_args(saved["args"])
        self._start(saved["placement"])
        self.load_state_dict(saved["state"])

    def _pickle_args(self) -> dict[str, Any]:
        raise NotImplementedError

    def _unpickle_args(self, args: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the hint thread and release every shard mapping and descriptor (the loader reopens them if it
        is used again). Packing tables and row stores stay mapped, holding no descriptor, until the loader is
        dropped: reopening them would verify them again."""
        if self._engine is not None:
            self._engine.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the stream ------------------------------------------------------------------------------------------
    @property
    def metrics(self) -> Any:
        """Consumption per source and phase, and this process's reads (`metrics.to_json()`)."""
        return self.engine.metrics

    def accounting(self, batch: int | None = None) -> dict[str, Any]:
        """Per source and phase: tokens delivered vs the recipe's target, achieved proportion, error, epochs,
        documents seen — of the global stream before `batch` (default: the next batch); see engine/accounting.py."""
        return accounting(self, batch)

    @property
    def dtype(self) -> np.dtype:
        return self.engine.dtype

    def num_batches(self) -> int | None:
        """Global batches in the run (None for an endless stream)."""
        return self.engine.plan.end

    @property
    def step(self) -> int:
        """Index of the next global batch to be delivered."""
        return self._batch

    @property
    def micro(self) -> int:
        """Index of the next micro-batch within `step` (0 without micro-batches)."""
        return self._micro

    @property
    def global_batch_size(self) -> int | None:
        """Size of the next global batch (None when the stream has ended)."""
        if self._batch >= self.engine.plan.end:
            return None
        return self.engine.plan.batch_size(self._batch)

    @property
    def consumed_samples(self) -> int:
        """Global samples (all ranks) before the next batch."""
        return self.engine.plan.samples_before(min(self._batch, self.engine.plan.phases.num_batches))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """This rank's items from the current position on; the position follows what was handed out."""
        engine = self.engine
        for _, b, k, nm, item in engine.items(self.unit_index(self._batch, self._micro)):
            if k + 1 < nm:
                self._batch, self._micro = b, k + 1
            else:
                self._batch, self._micro = b + 1, 0
            yield item
        self._after_end()

    def _after_end(self) -> None:
        pass

    def iter_units(self, first_unit: int, *, stride: int = 1, run: int = 1, stop: int | None = None,
                   fields: BatchFields | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(item index, item) for items first, first+stride, … (runs of `run`), below `stop`: how DataLoader
        workers split a rank's items. `fields` overrides the batch fields (adapters ship `tokens`)."""
        yield from self.engine.iter_units(first_unit, stride=stride, run=run, stop=stop, fields=fields)

    @property
    def packs_rows(self) -> bool:
        """Whether some rows are packed (packing=, order='megatron'): their items carry the document fields
        (`BatchFields.for_packed_rows`), and row_identity per document piece instead of per row."""
        return any(isinstance(s.windows, PackedWindows) for s in self.engine.plan.streams.values())

    def max_item_shape(self) -> tuple[int, int]:
        """(most rows in one item, widest token row) anywhere in the run: what a transfer buffer must hold."""
        phases = self.engine.plan.phases.phases
        m = self.placement.micro_batch_size
        rows = m or max(size for p in phases for _, _, size in p.batch.stages) // self.world_size
        return rows, max(p.seq_len for p in phases) + 1

    def item_shape(self, batch: int) -> tuple[int, int]:
        """(rows, token row width) of the items of global batch `batch` (the last batch's past the end)."""
        plan = self.engine.plan
        b = min(batch, plan.end - 1)
        return self.placement.micro_batch_size or plan.batch_size(b) // self.world_size, plan.seq_len_at(b) + 1

    @property
    def labels_sources(self) -> bool:
        """Whether items carry a per-row `source` array (recipes do)."""
        return self.engine.label_sources

    def iter_batches(self, first: int, first_micro: int = 0, *, stop: int | None = None
                     ) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """(batch, micro, item) from (first, first_micro) on, before batch `stop`, without moving the position."""
        end = None if stop is None else self.unit_index(min(stop, self.engine.plan.phases.num_batches))
        for _, item in self.engine.iter_units(self.unit_index(first, first_micro), stop=end):
            yield item["batch_index"], item["micro_index"], item

    def unit_index(self, batch: int, micro: int = 0) -> int:
        """Index of (batch, micro) in the flat sequence of items this rank delivers."""
        return self.engine.unit_index(batch, micro)

    def unit_position(self, unit: int) -> tuple[int, int]:
        """(batch, micro) of item `unit`, O(log stages)."""
        return self.engine.unit_position(unit)

    # -- state ---------------------------------------------------------------------------------------------------
    def _stream_definition(self) -> dict[str, Any]:
        raise NotImplementedError

    def _dataset_fingerprints(self) -> dict[str, str]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-able dict; save it with the model checkpoint."""
        return self.state_at(self._batch, self._micro)

    def state_at(self, batch: int, micro: int = 0) -> dict[str, Any]:
        """The state of a loader about to deliver (batch, micro) — for trainers that track the batch index."""
        plan = self.engine.plan
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 0:
            raise ConfigError(f"batch must be a non-negative integer, got {batch!r}")
        batch = int(batch)
        if batch < plan.cursor.anchor:
            raise ConfigError(f"batch {batch} comes before batch {plan.cursor.anchor}, where this loader took "
                              "over the run with a changed stream; it only produces batches from there on")
        if batch > plan.phases.num_batches:
            raise ConfigError(f"batch {batch} is past the end of the stream ({plan.phases.num_batches:,} batches)")
        c = plan.cursor
        samples, tokens = c.samples_before(batch).tolist(), c.tokens_before(batch).tolist()
        loc = c.locate(batch)
        sources: dict[str, dict[str, Any]] = {n: {"samples": s, "tokens": t}
                                              for n, s, t in zip(plan.names, samples, tokens)}
        for n, (s, t) in sorted(self._retired.items()):
            sources[n] = {"samples": s, "tokens": t, "active": False}
        phases = plan.phases.phases
        return make_state(kind=self._kind, definition=self._stream_definition(),
                          datasets=self._dataset_fingerprints(), batch=batch, micro=int(micro),
                          samples=c.global_samples_before(batch),
                          phase=phases[loc.phase].name if loc.phase < len(phases) else None, sources=sources,
                          anchor=c.anchor, offsets=dict(c.offsets_json(plan.names)), world_size=self.world_size,
                          rank=self.rank, micro_batch_size=self.placement.micro_batch_size,
                          skips=skips_json(self._skips))

    def load_state_dict(self, state: dict[str, Any], *, allow_budget_change: bool | None = None,
                        allow_recipe_change: bool | None = None, allow_data_change: bool | None = None,
                        force: bool = False) -> None:
        """Continue exactly where `state` was taken, on any world size that divides the batches.

        A state of another stream or data is refused (`ResumeError` naming the field) unless the override
        that covers it is given (here or in the config; see `shardkit.engine.state.Overrides` for what each
        keeps exact and what it gives up). `force=True` is the deprecated spelling of all three.
        """
        overrides = self.config.overrides().merged(allow_budget_change=allow_budget_change,
                                                   allow_recipe_change=allow_recipe_change,
                                                   allow_data_change=allow_data_change)
        if force:
            warnings.warn("load_state_dict(force=True) is deprecated: pass the override that covers the change "
                          "(allow_budget_change, allow_recipe_change, allow_data_change)", DeprecationWarning,
                          stacklevel=2)
            overrides = Overrides.everything()
        saved = parse_state(state)
        plan = self.engine.plan
        definition = self._stream_definition()
        got = resume(saved, plan=plan, kind=self._kind, definition=definition,
                     fingerprint=stream_fingerprint(self._kind, definition), datasets=self._dataset_fingerprints(),
                     placement=self.placement, overrides=overrides)
        self._retired = got.retired  # every check passed: commit
        self._skips = union(self._skips, saved.skips)
        plan.set_cursor(got.cursor)
        self.engine.set_skips(self._skips)  # item indices follow the (possibly new) cursor's batch geometry
        metrics = self.engine.metrics
        metrics.cursor, metrics.end_batch, metrics.exhausted = got.cursor, plan.end, plan.exhausted
        self._batch, self._micro = got.batch, got.micro
        self._resumed(took_over=got.cursor.anchor == saved.batch and saved.fingerprint !=
                      stream_fingerprint(self._kind, definition))

    def _resumed(self, took_over: bool) -> None:
        pass


class _Position:
    """The loader's next batch, for its metrics, without a reference cycle (metrics → loader → engine)."""

    def __init__(self, facade: StreamFacade) -> None:
        self._ref = weakref.ref(facade)

    def __call__(self) -> int:
        f = self._ref()
        return f._batch if f is not None else 0
