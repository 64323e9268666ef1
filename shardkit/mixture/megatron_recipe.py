"""A recipe with `order: megatron`: one Megatron-LM blend (its `--data-path`), read through `Loader`.

A Megatron run has no phases: one blend of data prefixes with fixed weights, one `--seq-length`, one
global-batch schedule (constant or Megatron's ramp-up) and `--train-samples`. Such a recipe names it in
shardkit's recipe format, with sources as the prefixes' datasets:

```yaml
order: megatron
seed: 1234                                   # --seed
seq_len: 4096                                # --seq-length
batch: 1024                                  # --global-batch-size (or {ramp: {...}}: --rampup-batch-size)
megatron:
  num_samples: 10M                           # --train-samples
  data_path: [0.7, web, 0.3, code]           # --data-path with source names for the prefixes, in order
                                             # (names alone: Megatron's weightless blend)
  split: 969,30,1                            # --split (and split_name: train | valid | test,
                                             # drop_last_partial_validation_sequence: true | false)
  cache_dir: /scratch/megatron-index         # --data-cache-path (where this machine keeps the indices)
sources:
  web: {path: data/web, prefix: web_text_document}   # prefix: a shard of the dataset
  code: {path: data/code}                            # a dataset of one shard: that shard
```

The weights are kept as written (Megatron normalizes them in floating point; exact fractions would move
the blend's choices), and `data_path`'s order is the blend's dataset order. `cache_dir` and `skip` are
operational: not part of the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.skips import parse_skips
from ..errors import ConfigError, brief
from ..megatron.blend import DEFAULT_SURPLUS
from ..megatron.options import split_data_path
from ..order import BatchSchedule
from ..remote.fs import is_remote
from .recipe import FORMAT_VERSION, Recipe, _count, _int, _mapping, _positive, _read, _recipe, _schedule
from .sources import resolve_source

__all__ = ["MegatronRecipe", "MegatronSource", "read_recipe"]

_TOP = ("version", "order", "seed", "seq_len", "batch", "megatron", "sources", "skip")
_MEGATRON = ("num_samples", "data_path", "split", "split_name", "mid_level_dataset_surplus",
             "drop_last_partial_validation_sequence", "cache_dir")
_SOURCE = ("path", "prefix")
_ELSEWHERE = {"phases": "a Megatron run has one blend: give seq_len and batch at the top level and the weights "
                        "in megatron.data_path",
              "shuffle": "Megatron's own shuffle decides the order", "weights_by": "the weights are Megatron's",
              "packing": "Megatron's samples are fixed windows over its document order"}


@dataclass(frozen=True)
class MegatronSource:
    """A prefix: a shard (`prefix`, or the dataset's only shard) of the dataset at `path`."""

    name: str
    path: str
    prefix: str | None = None


@dataclass(frozen=True, kw_only=True)
class MegatronRecipe:
    """A validated `order: megatron` recipe (see the module docstring)."""

    seed: int
    seq_len: int
    batch: BatchSchedule
    num_samples: int
    # (weight as written, source name), in --data-path order; weights None: Megatron's weightless blend
    blend: tuple[tuple[float | None, str], ...]
    sources: tuple[MegatronSource, ...]
    split: str = "1,0,0"
    split_name: str = "train"
    mid_level_dataset_surplus: float = DEFAULT_SURPLUS
    drop_last_partial_validation_sequence: bool = True
    cache_dir: str | None = None
    skip: tuple[tuple[int, int], ...] = ()

    def source(self, name: str) -> MegatronSource:
        return next(s for s in self.sources if s.name == name)

    def to_json(self) -> dict[str, Any]:
        """The normalized recipe; `read_recipe(r.to_json())` gives `r` back (without cache_dir and skip)."""
        return {"version": FORMAT_VERSION, "order": "megatron", "seed": self.seed, "seq_len": self.seq_len,
                "batch": self.batch.to_json(),
                "megatron": {"num_samples": self.num_samples, "split": self.split, "split_name": self.split_name,
                             "mid_level_dataset_surplus": self.mid_level_dataset_surplus,
                             "drop_last_partial_validation_sequence": self.drop_last_partial_validation_sequence,
                             "data_path": [x for w, n in self.blend for x in ((w, n) if w is not None else (n,))]},
                "sources": {s.name: {"path": s.path, **({"prefix": s.prefix} if s.prefix else {})}
                            for s in self.sources}}

    def fingerprint(self) -> str:
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def loader_args(self, base_dir: Path) -> tuple[list[str], dict[str, Any]]:
        """(the datasets, `LoaderConfig` fields) of the `Loader` that streams this blend."""
        datasets: list[str] = []
        prefixes: list[str] = []
        for _, name in self.blend:
            s = self.source(name)
            where = resolve_source(s.path, base_dir)
            if is_remote(where):
                raise ConfigError(f"sources.{name}.path: {s.path!r} is remote; order: megatron reads local "
                                  "datasets (copy it locally first)")
            if where not in datasets:
                datasets.append(where)
            prefixes.append(f"{where}/{s.prefix}" if s.prefix else where)
        weights = [w for w, _ in self.blend] if len(self.blend) > 1 and self.blend[0][0] is not None else None
        megatron = {"num_samples": self.num_samples, "prefixes": prefixes, "weights": weights, "split": self.split,
                    "split_name": self.split_name, "mid_level_dataset_surplus": self.mid_level_dataset_surplus,
                    "drop_last_partial_validation_sequence": self.drop_last_partial_validation_sequence,
                    "path_to_cache": self.cache_dir}
        fields = {"seq_len": self.seq_len, "seed": self.seed, "batch_schedule": self.batch, "order": "megatron",
                  "megatron": megatron}
        return datasets, {**fields, "skip": self.skip} if self.skip else fields


def read_recipe(source: Any, *, strict: bool = False) -> Recipe | MegatronRecipe:
    """A mixture `Recipe`, or a `MegatronRecipe` when the recipe says `order: megatron`."""
    if isinstance(source, (Recipe, MegatronRecipe)):
        return source
    data = _read(Path(source)) if isinstance(source, (str, os.PathLike)) else source
    if isinstance(data, Mapping) and data.get("order", "shardkit") == "megatron":
        return _megatron_recipe(data, origin=str(source) if not isinstance(source, Mapping) else None)
    return _recipe(data, strict=strict, origin=str(source) if not isinstance(source, Mapping) else None)


def _megatron_recipe(data: Mapping[str, Any], origin: str | None) -> MegatronRecipe:
    for key, why in _ELSEWHERE.items():
        if key in data:
            raise ConfigError(f"{key}: does not apply with order: megatron ({why})")
    top = _mapping(data, origin or "recipe", _TOP, required=("seq_len", "batch", "megatron", "sources"), root=True)
    if "version" in top and top["version"] != FORMAT_VERSION:
        raise ConfigError(f"version: recipe format {brief(top['version'])} is not supported (this shardkit reads "
                          f"version {FORMAT_VERSION}); upgrade shardkit")
    seed = _int(top.get("seed", 0), "seed", minimum=0, maximum=2**32 - 1)
    seq_len = _positive(top["seq_len"], "seq_len")
    batch = _schedule(top["batch"], "batch", seq_len)
    sources = _sources(top["sources"])
    m = _mapping(top["megatron"], "megatron", _MEGATRON, required=("num_samples",))
    num_samples = _count(m["num_samples"], "megatron.num_samples")
    blend = _data_path(m.get("data_path"), {s.name for s in sources})
    unused = sorted({s.name for s in sources} - {n for _, n in blend})
    if unused:
        raise ConfigError(f"sources.{unused[0]}: not in megatron.data_path; add it with a weight or remove it")
    surplus = m.get("mid_level_dataset_surplus", DEFAULT_SURPLUS)
    if isinstance(surplus, bool) or not isinstance(surplus, (int, float)) or not math.isfinite(surplus) or surplus < 0:
        raise ConfigError(f"megatron.mid_level_dataset_surplus: expected a number ≥ 0, got {brief(surplus)}")
    keep = m.get("drop_last_partial_validation_sequence", True)
    if not isinstance(keep, bool):
        raise ConfigError(f"megatron.drop_last_partial_validation_sequence: expected true or false, got {brief(keep)}")
    text = {}
    for key, default in (("split", "1,0,0"), ("split_name", "train"), ("cache_dir", None)):
        value = m.get(key, default)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"megatron.{key}: expected a string, got {brief(value)}")
        text[key] = value
    return MegatronRecipe(seed=seed, seq_len=seq_len, batch=batch, num_samples=num_samples, blend=blend,
                          sources=sources, split=text["split"], split_name=text["split_name"],
                          mid_level_dataset_surplus=float(surplus), drop_last_partial_validation_sequence=keep,
                          cache_dir=text["cache_dir"],
                          skip=parse_skips(top.get("skip"), "skip"))


def _sources(value: Any) -> tuple[MegatronSource, ...]:
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"sources: expected a mapping of source name to {{path, prefix}}, got {brief(value)}")
    out = []
    for name in sorted(value, key=str):
        where = f"sources.{name}"
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ConfigError(f"{where}: a source name must be a non-empty string without spaces, got {name!r}")
        body = _mapping(value[name], where, _SOURCE, required=("path",))
        for key in body:
            if not isinstance(body[key], str) or not body[key].strip():
                raise ConfigError(f"{where}.{key}: expected a non-empty string, got {brief(body[key])}")
        if "/" in body.get("prefix", ""):
            raise ConfigError(f"{where}.prefix: a shard name of the dataset at path, got {body['prefix']!r}")
        out.append(MegatronSource(name=name, path=body["path"], prefix=body.get("prefix")))
    return tuple(out)


def _data_path(value: Any, names: set[str]) -> tuple[tuple[float | None, str], ...]:
    """Megatron's --data-path over source names: `[w1, name1, w2, name2, ...]`, or names alone (Megatron's
    weightless blend: each prefix weighted by its own sample count), as a list or one string; with one source
    data_path may be left out."""
    where = "megatron.data_path"
    if value is None:
        if len(names) != 1:
            raise ConfigError(f"{where}: missing; with {len(names)} sources give [WEIGHT, SOURCE, ...] in "
                              "Megatron's --data-path order")
        return ((None, next(iter(names))),)
    words = value.split() if isinstance(value, str) else value
    if not isinstance(words, list) or not words:
        raise ConfigError(f"{where}: expected [WEIGHT, SOURCE, WEIGHT, SOURCE, ...], got {brief(value)}")
    try:
        weights, names_used = split_data_path(words)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    step = 1 if weights is None else 2  # where each source name stands in the list
    out = []
    for i, name in enumerate(names_used):
        k = i * step + step - 1
        weight = None if weights is None else weights[i]
        if weight is not None and (not math.isfinite(weight) or weight <= 0):
            raise ConfigError(f"{where}[{k - 1}]: weight must be a positive number, got {brief(words[k - 1])}")
        if name not in names:
            raise ConfigError(f"{where}[{k}]: unknown source {brief(name)} (sources: {', '.join(sorted(names))})")
        out.append((weight, name))
    return tuple(out)
