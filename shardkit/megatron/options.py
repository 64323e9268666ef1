"""`order="megatron"` options of a loader: which prefixes, weights and sample count make the order."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigError
from ..format.dataset import Dataset
from .blend import DEFAULT_SURPLUS, normalize_weights
from .order import BlendOrder, GPTOrder, MegatronConfig, MegatronPrefix, build_order
from .split import Split, split_matrix

__all__ = ["MEGATRON_CORE_VERSION", "MegatronOptions", "split_data_path"]

MEGATRON_CORE_VERSION = "0.16.1"  # the megatron-core whose order this reproduces (tested against it)


def split_data_path(words: Sequence[Any]) -> tuple[list[float] | None, list[Any]]:
    """(weights, prefixes) of a `--data-path` as Megatron reads it: WEIGHT PREFIX pairs when the count is even
    and every other word is a number; otherwise every word a prefix (weights None: the weightless blend,
    each prefix weighted by its own sample count). A lone list that starts with a number is refused."""
    weights = [_number(w) for w in words[0::2]]
    if len(words) % 2 == 0 and all(w is not None for w in weights):
        return weights, list(words[1::2])  # type: ignore[return-value]
    if words and _number(words[0]) is not None:
        raise ConfigError(f"expected WEIGHT PREFIX pairs or prefixes alone, got {len(words)} items starting "
                          "with a number")
    return None, list(words)


def _number(word: Any) -> float | None:
    if isinstance(word, bool):
        return None
    try:
        return float(word)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, kw_only=True)
class MegatronOptions:
    """What a Megatron-LM run's data arguments say, besides `--seq-length` and `--seed` (the loader's).

    `num_samples` is the size the builder was given for the split (`--train-samples`, or `--train-iters` ×
    global batch size); `prefixes` the shards of the dataset in `--data-path` order (names, positions or
    `DATASET_DIR/SHARD` paths; None: every shard); `weights` their `--data-path` weights (None: one prefix,
    or Megatron's weightless blend `--data-path p1 p2`, weighted by each prefix's own sample count)."""

    num_samples: int
    prefixes: tuple[str | int, ...] | None = None
    weights: tuple[float, ...] | None = None
    split: str = "1,0,0"
    split_name: str = "train"
    mid_level_dataset_surplus: float = DEFAULT_SURPLUS
    # the valid split's last partial sample: dropped (Megatron's default), or kept, padded with token 0 and
    # loss_mask 0 as GPTDataset's item pads it
    drop_last_partial_validation_sequence: bool = True
    path_to_cache: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ConfigError(f"megatron.num_samples must be a positive integer (Megatron's --train-samples), "
                              f"got {self.num_samples!r}")
        if self.prefixes is not None:
            if isinstance(self.prefixes, (str, int)) or not all(isinstance(p, (str, int)) for p in self.prefixes):
                raise ConfigError(f"megatron.prefixes must be a list of shard names or positions, got {self.prefixes!r}")
            object.__setattr__(self, "prefixes", tuple(self.prefixes))
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
            normalize_weights(self.weights)
        if not isinstance(self.drop_last_partial_validation_sequence, bool):
            raise ConfigError(f"megatron.drop_last_partial_validation_sequence must be True or False, got "
                              f"{self.drop_last_partial_validation_sequence!r}")
        if self.split_name not in Split.__members__:
            raise ConfigError(f"megatron.split_name must be one of train, valid, test, got {self.split_name!r}")
        split_matrix(self.split)

    @classmethod
    def parse(cls, value: Any) -> MegatronOptions:
        if isinstance(value, MegatronOptions):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"megatron must be a MegatronOptions or a dict of its fields, got {value!r}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ConfigError(f"megatron: unknown option {unknown[0]!r} (options: {', '.join(sorted(names))})")
        if "num_samples" not in value:
            raise ConfigError("megatron.num_samples is required: the split's sample count Megatron's builder was "
                              "given (--train-samples, or --train-iters x global batch size)")
        return cls(**value)

    def to_json(self) -> dict[str, Any]:
        """What the order depends on (the cache directory does not change it)."""
        return {"num_samples": self.num_samples, "prefixes": None if self.prefixes is None else list(self.prefixes),
                "weights": None if self.weights is None else list(self.weights), "split": self.split,
                "split_name": self.split_name, "mid_level_dataset_surplus": self.mid_level_dataset_surplus,
                "megatron_core": MEGATRON_CORE_VERSION,
                # (recorded only when not Megatron's default, so the definitions of default runs stay as they were)
                **({} if self.drop_last_partial_validation_sequence else {"drop_last_partial_validation_sequence": False})}

    def build(self, dataset: Dataset, seq_len: int, seed: int) -> GPTOrder | BlendOrder:
        """The order over `dataset`'s shards; its samples are seq_len + 1 tokens (add_extra_token_to_sequence)."""
        if seed >= 2**32:
            raise ConfigError(f"order='megatron' uses the loader's seed as Megatron's --seed, a numpy RandomState "
                              f"seed below 2**32; got {seed}")
        names: Sequence[str | int] = self.prefixes if self.prefixes is not None else range(dataset.num_shards)
        prefixes = [MegatronPrefix(dataset, p) for p in names]
        for p in prefixes:
            p.position  # noqa: B018 - a missing shard is named here, at construction
        config = MegatronConfig(sequence_length=seq_len, random_seed=seed, split=self.split,
                                mid_level_dataset_surplus=self.mid_level_dataset_surplus,
                                drop_last_partial_validation_sequence=self.drop_last_partial_validation_sequence,
                                path_to_cache=self.path_to_cache)
        return build_order(prefixes, self.weights if len(prefixes) > 1 else None, self.num_samples,
                           Split[self.split_name], config)
