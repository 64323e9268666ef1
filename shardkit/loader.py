"""The two public loaders — one dataset (`Loader`) or a recipe (`MixtureLoader`) — as facades over one engine.

A single dataset is a recipe of one source (named "data") and one endless phase whose order seed is the
loader's `seed`: the same read engine (`shardkit.engine`) plans, maps, gathers and assembles for both, and
both have the same state format, the same resume overrides, the same metrics and the same lifecycle:

* `state_dict()` / `load_state_dict()` resume exactly, in O(1), on any world size that divides the batches
  (torch's `Stateful` protocol, so `torch.distributed.checkpoint` saves the data position with the model);
* a loader pickles to (configuration, position) and reopens its files lazily in the new process, so
  DataLoader workers work with fork, spawn and forkserver alike;
* `close()` (or `with`) stops its hint thread and releases its mappings; a dropped loader does too.
"""

from __future__ import annotations

import difflib
import os
import warnings
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .engine import (
    ENDLESS_TOKENS,
    BatchFields,
    Engine,
    Overrides,
    Placement,
    Plan,
    ReadOptions,
    SourceDef,
    make_state,
    parse_state,
    resume,
    stream_fingerprint,
)
from .engine.config import check_flag, check_optional_positive
from .engine.state import SINGLE_SOURCE
from .errors import ConfigError
from .format import Dataset
from .mixture.phases import Phase, PhasePlan
from .mixture.recipe import MixtureWarning, Recipe, load_recipe
from .mixture.sources import open_sources
from .order import BatchSchedule, ShuffleMode, parse_schedule
from .remote.dataset import RemoteDataset, open_any

__all__ = ["Loader", "LoaderConfig", "MixtureConfig", "MixtureLoader", "MixtureWarning"]


def _schedule(value: Any) -> BatchSchedule:
    if isinstance(value, BatchSchedule):
        return value
    if isinstance(value, (bool, float, str)):
        raise ConfigError(f"batch_schedule must be an int (a constant global batch size), a Constant/Ramp/"
                          f"Piecewise schedule or its dict form, got {value!r} ({type(value).__name__})")
    if isinstance(value, (int, np.integer)) and value < 1:
        raise ConfigError(f"batch_schedule must be a positive global batch size, got {value!r}")
    try:
        return parse_schedule(value)
    except ConfigError as e:
        raise ConfigError(f"batch_schedule: {e}") from None


@dataclass(frozen=True, kw_only=True)
class _ReadConfig:
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
    # resume overrides (load_state_dict may also pass them): see engine.state.Overrides
    allow_budget_change: bool = False
    allow_recipe_change: bool = False
    allow_data_change: bool = False

    def read_options(self) -> ReadOptions:
        return ReadOptions(fields=self.fields, readahead=self.readahead, release=self.release,
                           max_open_shards=self.max_open_shards, cache_dir=self.cache_dir,
                           cache_limit=self.cache_limit, storage_options=self.storage_options)

    def overrides(self) -> Overrides:
        return Overrides(allow_budget_change=self.allow_budget_change, allow_recipe_change=self.allow_recipe_change,
                         allow_data_change=self.allow_data_change)

    def _check_common(self) -> None:
        object.__setattr__(self, "fields", self.read_options().fields)  # validates every read option
        check_optional_positive("micro_batch_size", self.micro_batch_size)
        self.overrides()


@dataclass(frozen=True, kw_only=True)
class LoaderConfig(_ReadConfig):
    """What to stream from one dataset, and how this process reads it (every value checked here)."""

    seq_len: int
    seed: int = 0
    batch_schedule: BatchSchedule | int = 8
    shuffle: ShuffleMode | str = "block"
    block_samples: int | None = None
    group_blocks: int | None = None
    max_tokens: int | None = None
    max_epochs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise ConfigError(f"seq_len must be a positive integer, got {self.seq_len!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 64:
            raise ConfigError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        object.__setattr__(self, "batch_schedule", _schedule(self.batch_schedule))
        object.__setattr__(self, "shuffle", ShuffleMode.parse(self.shuffle))
        for name in ("block_samples", "group_blocks", "max_tokens", "max_epochs"):
            check_optional_positive(name, getattr(self, name))
        self._check_common()


@dataclass(frozen=True, kw_only=True)
class MixtureConfig(_ReadConfig):
    """How this process reads a recipe's stream; the stream itself is the recipe's alone."""

    strict: bool = False  # refuse weights that do not sum to 1 instead of normalizing them with a warning
    base_dir: str | os.PathLike[str] | None = None  # relative source paths; default: the recipe file's folder

    def __post_init__(self) -> None:
        check_flag("strict", self.strict)
        self._check_common()


def _config(cls: type, config: Any, kwargs: dict[str, Any]) -> Any:
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
        if cls is LoaderConfig and "seq_len" not in kwargs:
            raise ConfigError("seq_len is required: the number of tokens a sample's inputs hold (e.g. 2048)")
        return cls(**kwargs)
    if not isinstance(config, cls):
        raise ConfigError(f"config must be a {cls.__name__}, got {type(config).__name__}")
    return replace(config, **kwargs) if kwargs else config


class _Facade:
    """What both loaders are: a stream definition and a read config over one engine, plus a position."""

    _kind: str
    config: _ReadConfig

    # -- construction (subclasses build the plan), pickling and lifecycle ---------------------------------
    def _start(self, placement: Placement) -> None:
        self.placement = placement
        self.rank, self.world_size = placement.rank, placement.world_size
        self._batch = self._micro = 0
        self._retired: dict[str, tuple[int, int]] = {}
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
            plan = Plan(phases, sources, seed, bases)
            self._engine = Engine(plan, unique, self.placement, self.config.read_options(),
                                  label_sources=self._kind == "recipe")
            self._engine.metrics.position = _Position(self)
        return self._engine

    def _definition_parts(self) -> tuple[dict[str, Dataset], dict[str, SourceDef], PhasePlan, int]:
        raise NotImplementedError

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
        """Stop the hint thread and release every mapping (the loader reopens them if it is used again)."""
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
        for _, item in engine.iter_units(self.unit_index(self._batch, self._micro)):
            k = item["micro_index"]
            self._batch, self._micro = (item["batch_index"], k + 1) if k + 1 < item["num_micro"] else \
                (item["batch_index"] + 1, 0)
            yield item
        self._after_end()

    def _after_end(self) -> None:
        pass

    def iter_units(self, first_unit: int, *, stride: int = 1, run: int = 1, stop: int | None = None,
                   fields: BatchFields | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(item index, item) for items first, first+stride, … (runs of `run`), below `stop`: how DataLoader
        workers split a rank's items. `fields` overrides the batch fields (adapters ship `tokens`)."""
        yield from self.engine.iter_units(first_unit, stride=stride, run=run, stop=stop, fields=fields)

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
                          rank=self.rank, micro_batch_size=self.placement.micro_batch_size)

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
        plan.set_cursor(got.cursor)
        metrics = self.engine.metrics
        metrics.cursor, metrics.end_batch, metrics.exhausted = got.cursor, plan.end, plan.exhausted
        self._batch, self._micro = got.batch, got.micro
        self._resumed(took_over=got.cursor.anchor == saved.batch and saved.fingerprint !=
                      stream_fingerprint(self._kind, definition))

    def _resumed(self, took_over: bool) -> None:
        pass


class _Position:
    """The loader's next batch, for its metrics, without a reference cycle (metrics → loader → engine)."""

    def __init__(self, facade: _Facade) -> None:
        self._ref = weakref.ref(facade)

    def __call__(self) -> int:
        f = self._ref()
        return f._batch if f is not None else 0


class Loader(_Facade):
    """Iterate this rank's batches of one dataset; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    _kind = "dataset"

    def __init__(self, data: str | os.PathLike[str] | Dataset, config: LoaderConfig | None = None,
                 **kwargs: Any) -> None:
        self.config: LoaderConfig = _config(LoaderConfig, config, kwargs)
        c = self.config
        self.dataset = data if isinstance(data, Dataset) else open_any(
            data, cache_dir=c.cache_dir, cache_limit=c.cache_limit, storage_options=c.storage_options,
            check_files=False)
        self._start(Placement.resolve(c.rank, c.world_size, c.micro_batch_size))

    @classmethod
    def from_recipe(cls, recipe: Any, **kwargs: Any) -> MixtureLoader:
        """A `MixtureLoader` over a recipe (YAML/TOML/JSON path, dict or Recipe): see docs/mixtures.md."""
        return MixtureLoader(recipe, **kwargs)

    def _definition_parts(self) -> tuple[dict[str, Dataset], dict[str, SourceDef], PhasePlan, int]:
        c = self.config
        budget = self.budget_samples_of(c, self.dataset)
        phase = Phase(name="main", tokens=ENDLESS_TOKENS, seq_len=c.seq_len, batch=c.batch_schedule,
                      mix={SINGLE_SOURCE: 1})
        source = SourceDef(name=SINGLE_SOURCE, dataset=self.dataset, shuffle=c.shuffle, max_samples=budget,
                           block_samples=c.block_samples, group_blocks=c.group_blocks, seed=c.seed)
        return {SINGLE_SOURCE: self.dataset}, {SINGLE_SOURCE: source}, PhasePlan([phase]), c.seed

    @staticmethod
    def budget_samples_of(c: LoaderConfig, dataset: Dataset) -> int | None:
        n = max(0, (dataset.num_tokens - 1) // c.seq_len)
        budgets = [c.max_tokens // c.seq_len if c.max_tokens else None, c.max_epochs * n if c.max_epochs else None]
        return min((b for b in budgets if b is not None), default=None)

    def _pickle_args(self) -> dict[str, Any]:
        ds = self.dataset
        where = ds.url if isinstance(ds, RemoteDataset) else str(ds.path)
        return {"data": where, "config": self.config}

    def _unpickle_args(self, args: dict[str, Any]) -> None:
        self.config = args["config"]
        c = self.config
        self.dataset = open_any(args["data"], cache_dir=c.cache_dir, cache_limit=c.cache_limit,
                                storage_options=c.storage_options, check_files=False)

    # -- what the single-dataset loader has always shown ---------------------------------------------------------
    @property
    def _stream(self) -> Any:
        return next(iter(self.engine.plan.streams.values()))

    @property
    def order(self) -> Any:
        """The dataset's `SampleOrder` (sample k of epoch e is `order.sample_id(e, k)`)."""
        return self._stream.order

    @property
    def shuffle(self) -> Any:
        return self._stream.order.config

    @property
    def schedule(self) -> BatchSchedule:
        return self.config.batch_schedule  # type: ignore[return-value]

    @property
    def num_samples(self) -> int:
        """Samples (windows of seq_len + 1 tokens) in one epoch."""
        return self._stream.num_samples

    @property
    def budget_samples(self) -> int | None:
        return self.budget_samples_of(self.config, self.dataset)

    def num_batches(self) -> int | None:
        """Batches in the token/epoch budget (None for an endless stream); a partial last batch is dropped."""
        return None if self.budget_samples is None else self.engine.plan.end

    def stream_config(self) -> dict[str, Any]:
        """Everything the global sample stream depends on (besides the data): compared on resume."""
        return self._stream_definition()

    def _stream_definition(self) -> dict[str, Any]:
        c = self.config
        return {"seq_len": c.seq_len, "seed": c.seed, "shuffle": self.shuffle.to_json(),
                "schedule": self.schedule.to_json(), "budget_samples": self.budget_samples}

    def _dataset_fingerprints(self) -> dict[str, str]:
        return {SINGLE_SOURCE: self.dataset.fingerprint}

    def global_sample_ids(self, batch: int) -> np.ndarray:
        """Sample ids of the whole global batch `batch` (all ranks), in order."""
        return self.engine.plan.global_rows(batch).ids


class MixtureLoader(_Facade):
    """Iterate this rank's batches of a recipe; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    _kind = "recipe"

    def __init__(self, recipe: str | os.PathLike[str] | Mapping[str, Any] | Recipe,
                 config: MixtureConfig | None = None, **kwargs: Any) -> None:
        self.config: MixtureConfig = _config(MixtureConfig, config, kwargs)
        c = self.config
        is_file = isinstance(recipe, (str, os.PathLike))
        self.base_dir = Path(c.base_dir).resolve() if c.base_dir is not None else \
            (Path(recipe).resolve().parent if is_file else Path.cwd())  # type: ignore[arg-type]
        self.recipe = load_recipe(recipe, strict=c.strict)
        self.recipe_path = str(recipe) if is_file else None
        self._open_datasets()
        self._start(Placement.resolve(c.rank, c.world_size, c.micro_batch_size))
        if self.engine.plan.exhausted is not None:
            warnings.warn(self.end_reason, MixtureWarning, stacklevel=2)

    def _open_datasets(self) -> None:
        c = self.config
        self.plan: PhasePlan = self.recipe.plan
        self.sources: tuple[str, ...] = self.plan.sources
        self.fingerprint = self.recipe.fingerprint()
        self.datasets = open_sources(self.recipe, self.base_dir, cache_dir=c.cache_dir, cache_limit=c.cache_limit,
                                     storage_options=c.storage_options, check_files=False)
        self._check_tokenizers()

    def _check_tokenizers(self) -> None:
        specs = {n: self.datasets[n].tokenizer for n in self.sources}
        keyed = {n: tuple((t or {}).get(k) for k in ("kind", "name", "vocab_size")) for n, t in specs.items() if t}
        if len(set(keyed.values())) > 1:
            desc = ", ".join(f"{n}: {k[1] or k[0]} ({k[2]} tokens)" for n, k in sorted(keyed.items()))
            warnings.warn(f"the sources were packed with different tokenizers ({desc}); their token ids do "
                          "not mean the same thing", MixtureWarning, stacklevel=4)

    def _definition_parts(self) -> tuple[dict[str, Dataset], dict[str, SourceDef], PhasePlan, int]:
        r = self.recipe
        sources = {n: SourceDef(name=n, dataset=self.datasets[n], shuffle=r.shuffle_of(n),
                                epochs=r.source(n).epochs) for n in self.sources}
        return dict(self.datasets), sources, self.plan, r.seed

    def _pickle_args(self) -> dict[str, Any]:
        return {"recipe": self.recipe.to_json(), "base_dir": str(self.base_dir), "config": self.config,
                "recipe_path": self.recipe_path}

    def _unpickle_args(self, args: dict[str, Any]) -> None:
        self.config = args["config"]
        self.base_dir = Path(args["base_dir"])
        self.recipe = load_recipe(args["recipe"], strict=False)
        self.recipe_path = args["recipe_path"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MixtureWarning)  # said once, in the process that built it
            self._open_datasets()

    def _stream_definition(self) -> dict[str, Any]:
        return self.recipe.to_json()

    def _dataset_fingerprints(self) -> dict[str, str]:
        return {n: self.datasets[n].fingerprint for n in self.sources}

    # -- the recipe's view ---------------------------------------------------------------------------------------
    @property
    def streams(self) -> dict[tuple[int, int], Any]:
        """(source index, seq_len) → the source's windows and epoch order at that seq_len."""
        return self.engine.plan.streams

    @property
    def _cursor(self) -> Any:
        return self.engine.plan.cursor

    @property
    def exhausted(self) -> Any:
        return self.engine.plan.exhausted

    def num_batches(self) -> int:
        """Global batches in the run: the recipe's phases, or fewer when a capped source runs out first."""
        return self.engine.plan.end

    @property
    def end_reason(self) -> str:
        """Why the stream ends where it does (`num_batches()`)."""
        plan = self.engine.plan
        if plan.exhausted is None:
            p = self.plan.phases[-1]
            return f"the recipe ends after {self.plan.num_batches:,} batches (phase {p.name!r} budget reached)"
        e = plan.exhausted
        name, phase = self.sources[e.source], self.plan.phases[e.phase]
        local = e.batch - self.plan.bounds[e.phase].first_batch
        return (f"source {name!r} runs out of data at global batch {e.batch:,} (batch {local:,} of phase "
                f"{phase.name!r}): it is capped at epochs: {self.recipe.source(name).epochs}, so the run ends "
                f"there, before the recipe's {self.plan.num_batches:,} batches; set epochs: auto to repeat "
                "it with a new permutation per epoch, or raise the cap")

    def _after_end(self) -> None:
        if self.engine.plan.exhausted is not None and self._batch >= self.engine.plan.end and \
                not getattr(self, "_warned_end", False):
            self._warned_end = True
            warnings.warn(self.end_reason, MixtureWarning, stacklevel=3)

    def _resumed(self, took_over: bool) -> None:
        self._warned_end = False
        if took_over and self.engine.plan.exhausted is not None:
            warnings.warn(self.end_reason, MixtureWarning, stacklevel=3)

    @property
    def phase(self) -> int:
        """Index of the phase the next batch belongs to (len(phases) at the end of the plan)."""
        return self.phase_at(min(self._batch, self.plan.num_batches))

    def phase_at(self, batch: int) -> int:
        return int(self.engine.plan.cursor.locate(batch).phase)

    def seq_len_at(self, batch: int) -> int:
        return self.plan.phases[self.plan.locate(batch).phase].seq_len

    def global_sample_ids(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source index, sample id) of every row of global batch `batch` (all ranks), in order."""
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 0:
            raise ConfigError(f"batch must be a non-negative integer, got {batch!r}")
        if batch < self.engine.plan.cursor.anchor:
            raise ConfigError(f"batch {batch} comes before batch {self.engine.plan.cursor.anchor}, where this "
                              "loader took over the run with a changed recipe; it only produces batches from there on")
        rows = self.engine.plan.global_rows(int(batch))
        return rows.src, rows.ids
