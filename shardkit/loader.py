"""The two public loaders — one dataset (`Loader`) or a recipe (`MixtureLoader`) — as facades over one engine.

Each says only what its stream is; iteration, state, resume, pickling and lifecycle are the shared
`engine.facade.StreamFacade`.

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

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .engine import ENDLESS_TOKENS, SourceDef
from .engine.config import Placement, check_flag, check_optional_positive
from .engine.facade import ReadConfig, StreamFacade, build_config
from .engine.megatron_rows import MegatronRows
from .engine.pack_table import cached_table
from .engine.packed_rows import packed_windows, windows_factory
from .engine.packing import PackingStrategy, PackSpec, PackTable
from .engine.state import SINGLE_SOURCE
from .engine.windows import Windows
from .errors import ConfigError, ResumeError
from .format import Dataset
from .format.union import DatasetUnion
from .megatron.options import MegatronOptions
from .megatron.order import BlendOrder, GPTOrder
from .mixture.megatron_recipe import read_recipe
from .mixture.phases import Phase, PhasePlan
from .mixture.recipe import MixtureWarning, Recipe, RecipeWarning, load_recipe
from .mixture.sources import open_sources
from .order import BatchSchedule, ShuffleMode, parse_schedule
from .order._checks import positive_int
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
class LoaderConfig(ReadConfig):
    """What to stream from one dataset, and how this process reads it (every value checked here)."""

    seq_len: int
    seed: int = 0
    batch_schedule: BatchSchedule | int = 8
    shuffle: ShuffleMode | str = "block"
    block_samples: int | None = None
    group_blocks: int | None = None
    max_tokens: int | None = None
    max_epochs: int | None = None
    # "window": fixed windows over the token stream; "first_fit" / "best_fit": whole documents packed into
    # rows (engine/packing.py), which then carry loss_mask, position_ids and cu_seqlens (or the boundary
    # fields named in `fields`: BatchFields.for_packed_rows)
    packing: PackingStrategy | str = "window"
    # "shardkit": shardkit's own order; "megatron": megatron-core's GPTDataset/BlendedDataset order over the
    # dataset's shards as data prefixes, sliced as Megatron-LM's sampler slices it (`megatron=` options)
    order: str = "shardkit"
    megatron: MegatronOptions | dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_len", positive_int("seq_len", self.seq_len))
        self._check_order()
        object.__setattr__(self, "packing", PackingStrategy.parse(self.packing))
        if self.balance_ranks is True and self.packing is PackingStrategy.WINDOW:
            raise ConfigError("balance_ranks=True deals packed rows by attention cost; windows all cost the same: "
                              "use packing='best_fit' (or 'first_fit'), or drop balance_ranks")
        if self.packing_store is True and self.packing is PackingStrategy.WINDOW:
            raise ConfigError("packing_store=True stores packed rows; windows are read from the shards as they are: "
                              "use packing='best_fit' (or 'first_fit'), or drop packing_store")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 64:
            raise ConfigError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        object.__setattr__(self, "batch_schedule", _schedule(self.batch_schedule))
        object.__setattr__(self, "shuffle", ShuffleMode.parse(self.shuffle))
        for name in ("block_samples", "group_blocks", "max_tokens", "max_epochs"):
            check_optional_positive(name, getattr(self, name))
        self._check_common()

    def _check_order(self) -> None:
        if self.order not in ("shardkit", "megatron"):
            raise ConfigError(f"order must be 'shardkit' or 'megatron', got {self.order!r}")
        if self.order == "shardkit":
            if self.megatron is not None:
                raise ConfigError("megatron= options apply to order='megatron' only; add order='megatron'")
            return
        if self.megatron is None:
            raise ConfigError("order='megatron' needs megatron={'num_samples': ...} (Megatron's --train-samples; "
                              "also prefixes, weights, split as in --data-path / --split)")
        object.__setattr__(self, "megatron", MegatronOptions.parse(self.megatron))
        clashes = [n for n, v in (("packing", self.packing != "window"), ("max_tokens", self.max_tokens),
                                  ("max_epochs", self.max_epochs), ("block_samples", self.block_samples),
                                  ("group_blocks", self.group_blocks), ("balance_ranks", self.balance_ranks))
                   if v]
        if clashes:
            raise ConfigError(f"order='megatron' takes its samples, order and length from Megatron's indices; "
                              f"{clashes[0]} does not apply: drop it")


@dataclass(frozen=True, kw_only=True)
class MixtureConfig(ReadConfig):
    """How this process reads a recipe's stream; the stream itself is the recipe's alone."""

    strict: bool = False  # refuse weights that do not sum to 1 instead of normalizing them with a warning
    base_dir: str | os.PathLike[str] | None = None  # relative source paths; default: the recipe file's folder

    def __post_init__(self) -> None:
        check_flag("strict", self.strict)
        self._check_common()


class Loader(StreamFacade):
    """Iterate this rank's batches of one dataset; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    _kind = "dataset"

    def __init__(self, data: str | os.PathLike[str] | Dataset | Sequence[str | os.PathLike[str] | Dataset],
                 config: LoaderConfig | None = None, **kwargs: Any) -> None:
        """`data`: a dataset (directory, URL or opened); with order='megatron', a list of local datasets whose
        shards are the blend's data prefixes (a Megatron `--data-path` over several directories)."""
        self.config: LoaderConfig = build_config(LoaderConfig, config, kwargs)
        self.dataset = self._open_data(data)
        c = self.config
        self._start(Placement.resolve(c.rank, c.world_size, c.micro_batch_size))

    def _open_data(self, data: Any) -> Dataset:
        c = self.config
        if isinstance(data, (list, tuple)):
            if c.order != "megatron":
                raise ConfigError("a list of datasets is a Megatron blend over their shards (order='megatron'); "
                                  "to mix datasets by weight in shardkit's order use MixtureLoader with a recipe")
            parts = [self._open_data(d) for d in data]
            return parts[0] if len(parts) == 1 else DatasetUnion(parts)
        if isinstance(data, Dataset):
            return data
        return open_any(data, cache_dir=c.cache_dir, cache_limit=c.cache_limit, storage_options=c.storage_options,
                        check_files=False)

    @classmethod
    def from_recipe(cls, recipe: Any, **kwargs: Any) -> Loader | MixtureLoader:
        """A loader over a recipe (YAML/TOML/JSON path, dict, Recipe or MegatronRecipe): a `MixtureLoader`
        (docs/mixtures.md), or for `order: megatron` the `Loader` of that Megatron blend (docs/megatron.md).
        `kwargs`: how this process reads (rank, world_size, ...; `base_dir` for relative source paths)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecipeWarning)  # a mixture's MixtureLoader reads it again and says them
            parsed = read_recipe(recipe, strict=bool(kwargs.get("strict", False)))
        if isinstance(parsed, Recipe):
            return MixtureLoader(recipe if isinstance(recipe, (str, os.PathLike)) else parsed, **kwargs)
        base = kwargs.pop("base_dir", None)
        kwargs.pop("strict", None)
        base_dir = Path(base).resolve() if base is not None else \
            (Path(recipe).resolve().parent if isinstance(recipe, (str, os.PathLike)) else Path.cwd())
        data, fields = parsed.loader_args(base_dir)
        clash = sorted(set(fields) & set(kwargs))
        if clash:
            raise ConfigError(f"{clash[0]} is set by the recipe; drop it from the loader's arguments")
        return cls(data, **fields, **kwargs)

    @property
    def megatron_order(self) -> GPTOrder | BlendOrder | None:
        """The Megatron order (`order="megatron"`; None otherwise): built once per loader object."""
        c = self.config
        if c.order != "megatron":
            return None
        order = self.__dict__.get("_megatron_order_cache")
        if order is None:
            assert isinstance(c.megatron, MegatronOptions)
            order = self.__dict__["_megatron_order_cache"] = c.megatron.build(self.dataset, c.seq_len, c.seed)
        return order

    def _windows_of(self) -> Any:
        order = self.megatron_order
        if order is not None:
            return lambda dataset, seq_len, gid_base: MegatronRows(dataset, order, gid_base)
        table = self._packed_table
        if table is None:
            return Windows
        c = self.config
        spec = PackSpec(strategy=c.packing, seq_len=c.seq_len)
        return lambda dataset, seq_len, gid_base: packed_windows(dataset, table, spec, gid_base,
                                                                 c.packing_cache_dir, c.packing_store)

    @property
    def _packed_table(self) -> PackTable | None:
        """The packing table (None for windows): opened (or built) once per loader object."""
        c = self.config
        if c.packing is PackingStrategy.WINDOW:
            return None
        table = self.__dict__.get("_packed_table_cache")
        if table is None:
            spec = PackSpec(strategy=c.packing, seq_len=c.seq_len)
            table = self.__dict__["_packed_table_cache"] = cached_table(self.dataset, spec, c.packing_cache_dir)
        return table

    @property
    def _packed_rows(self) -> int | None:
        """Rows per epoch of the packing table (None for windows): what max_epochs counts in."""
        table = self._packed_table
        return None if table is None else table.num_rows

    def _definition_parts(self) -> tuple[dict[str, Dataset], dict[str, SourceDef], PhasePlan, int]:
        c = self.config
        budget = self.budget_samples
        phase = Phase(name="main", tokens=ENDLESS_TOKENS, seq_len=c.seq_len, batch=c.batch_schedule,
                      mix={SINGLE_SOURCE: 1})
        shuffle = ShuffleMode.NONE if c.order == "megatron" else c.shuffle  # position p is Megatron's sample p
        source = SourceDef(name=SINGLE_SOURCE, dataset=self.dataset, shuffle=shuffle, max_samples=budget,
                           block_samples=c.block_samples, group_blocks=c.group_blocks, seed=c.seed)
        return {SINGLE_SOURCE: self.dataset}, {SINGLE_SOURCE: source}, PhasePlan([phase]), c.seed

    @staticmethod
    def budget_samples_of(c: LoaderConfig, dataset: Dataset, rows: int | None = None) -> int | None:
        """Samples in the token/epoch budget; `rows`: an epoch's packed rows (else windows)."""
        n = max(0, (dataset.num_tokens - 1) // c.seq_len) if rows is None else rows
        budgets = [c.max_tokens // c.seq_len if c.max_tokens else None, c.max_epochs * n if c.max_epochs else None]
        return min((b for b in budgets if b is not None), default=None)

    def _pickle_args(self) -> dict[str, Any]:
        ds = self.dataset
        where: str | list[str] = [str(d.path) for d in ds.parts] if isinstance(ds, DatasetUnion) else \
            ds.url if isinstance(ds, RemoteDataset) else str(ds.path)
        return {"data": where, "config": self.config}

    def _unpickle_args(self, args: dict[str, Any]) -> None:
        self.config = args["config"]
        self.dataset = self._open_data(args["data"])

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
        order = self.megatron_order
        if order is not None:  # one pass over Megatron's samples (its sampler's total_samples)
            return len(order)
        return self.budget_samples_of(self.config, self.dataset, self._packed_rows)

    def num_batches(self) -> int | None:
        """Batches in the token/epoch budget (None for an endless stream); a partial last batch is dropped."""
        return None if self.budget_samples is None else self.engine.plan.end

    def stream_config(self) -> dict[str, Any]:
        """Everything the global sample stream depends on (besides the data): compared on resume."""
        return self._stream_definition()

    def _stream_definition(self) -> dict[str, Any]:
        c = self.config
        out = {"seq_len": c.seq_len, "seed": c.seed, "shuffle": self.shuffle.to_json(),
               "schedule": self.schedule.to_json(), "budget_samples": self.budget_samples}
        if c.order == "megatron":  # shardkit's order keeps the definition (and fingerprint) it had
            assert isinstance(c.megatron, MegatronOptions)
            order = {"kind": "megatron", **c.megatron.to_json()}
            if order["prefixes"] is not None:  # a prefix named by path is recorded as its shard's position
                order["prefixes"] = [self.dataset.shard_position(p) if isinstance(p, str) and "/" in p else p
                                     for p in order["prefixes"]]
            out["order"] = order
        if c.packing is not PackingStrategy.WINDOW:  # windows keep the definition (and fingerprint) they had
            spec = PackSpec(strategy=c.packing, seq_len=c.seq_len)  # type: ignore[arg-type]
            out["packing"] = {"strategy": c.packing.value, "group_tokens": spec.group_tokens}  # type: ignore[union-attr]
        return out

    def _dataset_fingerprints(self) -> dict[str, str]:
        return {SINGLE_SOURCE: self.dataset.fingerprint}

    def load_state_dict(self, state: dict[str, Any], **kwargs: Any) -> None:
        """Continue exactly where `state` was taken (see `StreamFacade.load_state_dict`); a Megatron-order state
        saved with another seq_len, seed or sample count is refused, whatever the overrides."""
        if self.config.order == "megatron":
            self._check_megatron_state(state)
        super().load_state_dict(state, **kwargs)

    def _check_megatron_state(self, state: Any) -> None:
        stream = state.get("stream") if isinstance(state, dict) else None
        saved = stream.get("definition") if isinstance(stream, dict) else None
        if not isinstance(saved, dict) or not isinstance(saved.get("order"), dict):
            return  # not a Megatron-order state: the generic checks name the difference
        now = self._stream_definition()
        for name, was, is_ in (("seq_len", saved.get("seq_len"), now["seq_len"]),
                               ("seed", saved.get("seed"), now["seed"]),
                               ("megatron.num_samples", saved["order"].get("num_samples"),
                                now["order"]["num_samples"])):
            if was != is_:
                raise ResumeError(f"stream.{name}", f"the state was saved on Megatron's order with {name} {was!r}, "
                                  f"this loader has {is_!r}: Megatron's indices (document, sample and shuffle "
                                  "index, and the blend) depend on it, so the same consumed-samples count would "
                                  "name other tokens; resume with the saved value, or start a new run")

    def resume_from_megatron(self, consumed_samples: int) -> None:
        """Continue a Megatron-LM run from its checkpoint's `consumed_train_samples` (order='megatron')."""
        if self.config.order != "megatron":
            raise ConfigError("resume_from_megatron applies to order='megatron' loaders")
        plan = self.engine.plan
        if isinstance(consumed_samples, bool) or not isinstance(consumed_samples, int) or consumed_samples < 0:
            raise ConfigError(f"consumed_samples must be a non-negative integer, got {consumed_samples!r}")
        batch = int(plan.batch_at_samples(np.array([consumed_samples], dtype=np.int64))[0])
        if plan.samples_before(batch) != consumed_samples:
            raise ConfigError(f"consumed_samples {consumed_samples} is not at a global batch boundary of this "
                              f"loader's batch_schedule (batch {batch} starts at {plan.samples_before(batch)}); "
                              "use Megatron's global batch size")
        self.load_state_dict(self.state_at(batch))

    def global_sample_ids(self, batch: int) -> np.ndarray:
        """Sample ids of the whole global batch `batch` (all ranks), in order."""
        return self.engine.plan.global_rows(batch).ids


class MixtureLoader(StreamFacade):
    """Iterate this rank's batches of a recipe; `state_dict()` / `load_state_dict()` resume exactly, in O(1)."""

    _kind = "recipe"

    def __init__(self, recipe: str | os.PathLike[str] | Mapping[str, Any] | Recipe,
                 config: MixtureConfig | None = None, **kwargs: Any) -> None:
        self.config: MixtureConfig = build_config(MixtureConfig, config, kwargs)
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

    def _windows_of(self) -> Any:
        """Each phase's packing at its seq_len; phases of one seq_len share their sources' rows, so they must
        agree on how the rows are cut."""
        packing: dict[int, PackingStrategy] = {}
        for i, p in enumerate(self.recipe.phases):
            seen = packing.setdefault(p.seq_len, p.packing)
            if seen is not p.packing:
                raise ConfigError(f"phases[{i}] ({p.name}): packing {p.packing.value!r} at seq_len {p.seq_len}, but "
                                  f"an earlier phase of that seq_len packs {seen.value!r}; phases of one seq_len "
                                  "share their rows, so give them the same packing")
        if all(s is PackingStrategy.WINDOW for s in packing.values()):
            if self.config.balance_ranks:
                raise ConfigError("balance_ranks=True deals packed rows by attention cost, but no phase of the "
                                  "recipe packs: set packing: best_fit (or first_fit) in the recipe or a phase")
            if self.config.packing_store:
                raise ConfigError("packing_store=True stores packed rows, but no phase of the recipe packs: set "
                                  "packing: best_fit (or first_fit) in the recipe or a phase")
            return Windows
        return windows_factory(packing, self.config.packing_cache_dir, self.config.packing_store)

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

    def _definition_skips(self) -> tuple[tuple[int, int], ...]:
        return self.recipe.skip

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
