"""Megatron's GPT/blend sample order over shardkit datasets: sample `i` as (document, offset, length) spans.

A Megatron data prefix is one `.bin/.idx` pair; in a shardkit dataset that is one shard, whose sequence
`j` is the dataset's global document `doc_offsets[shard] + j` (shardkit counts sequences as documents,
which is also what megatron-core's GPTDataset splits and samples). `MegatronPrefix` names such a shard;
`GPTOrder` is one prefix's `GPTDataset` for one split; `BlendOrder` is the `BlendedDataset` over several,
sized as `BlendedMegatronDatasetBuilder` sizes them. The index arrays Megatron precomputes are built on
first use and kept in an `IndexCache` keyed by what they depend on (the shard's content fingerprint, the
split's document range, seed, seq_len, sample count and flags).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset
from .blend import DEFAULT_SURPLUS, normalize_weights, samples_per_dataset
from .blend_lazy import BlendChunks
from .cache import IndexCache, cache_key
from .gpt_index import document_index, plan_epochs, sample_index, shuffle_index
from .open_maps import OPEN_MAPS
from .split import Split, split_documents, split_matrix

__all__ = ["MegatronConfig", "MegatronPrefix", "GPTOrder", "BlendOrder", "build_order", "prefixes_of", "PAD_TOKEN_ID"]

_CHECKED_INDEX: dict[str, tuple[int, int, int]] = {}  # .idx path → (inode, size, mtime) when it was checked

PAD_TOKEN_ID = -1  # megatron_dataset._PAD_TOKEN_ID: pads a partial last sample when the tokenizer has no pad


@dataclass(frozen=True, kw_only=True)
class MegatronConfig:
    """The GPTDatasetConfig fields that decide which tokens a sample holds (names as in megatron-core)."""

    sequence_length: int
    random_seed: int
    split: str = "1,0,0"
    add_extra_token_to_sequence: bool = True
    drop_last_partial_validation_sequence: bool = True
    mid_level_dataset_surplus: float = DEFAULT_SURPLUS
    pad_token_id: int = PAD_TOKEN_ID
    path_to_cache: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sequence_length, int) or self.sequence_length < 2:
            raise ConfigError(f"sequence_length must be an integer > 1, got {self.sequence_length!r}")
        if not isinstance(self.random_seed, int) or not 0 <= self.random_seed < 2**32:
            raise ConfigError(f"random_seed must be an integer in [0, 2**32) (numpy RandomState), got {self.random_seed!r}")
        if self.mid_level_dataset_surplus < 0:
            raise ConfigError(f"mid_level_dataset_surplus must be >= 0, got {self.mid_level_dataset_surplus}")
        split_matrix(self.split)  # raises on a malformed string


@dataclass(frozen=True)
class MegatronPrefix:
    """One Megatron data prefix: a shard of a shardkit dataset (by name or position)."""

    dataset: Dataset
    shard: str | int = 0

    @cached_property
    def position(self) -> int:
        if isinstance(self.shard, int):
            if not 0 <= self.shard < self.dataset.num_shards:
                raise ConfigError(f"{self.dataset.path}: no shard {self.shard} ({self.dataset.num_shards} shards)")
            return self.shard
        return self.dataset.shard_position(self.shard)

    @property
    def doc_base(self) -> int:
        """Global document number of this shard's sequence 0."""
        return int(self.dataset.doc_offsets[self.position])

    @property
    def num_sequences(self) -> int:
        return int(self.dataset.shards[self.position].entry.num_docs)

    def index_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence lengths, byte pointers) from the prefix's mapped `.idx`, held in `OPEN_MAPS` (within the
        descriptor budget) and checked against the manifest once per file identity."""
        shard = self.dataset.shards[self.position]
        path = str(shard.idx_path)

        def load() -> tuple[np.ndarray, np.ndarray]:
            st = os.stat(path)
            ident = (st.st_ino, st.st_size, st.st_mtime_ns)
            idx = shard.load_index(check=_CHECKED_INDEX.get(path) != ident)
            _CHECKED_INDEX[path] = ident
            return idx.lengths, idx.pointers
        return OPEN_MAPS.get(("idx", path), 1, load)  # type: ignore[no-any-return]

    @property
    def sequence_lengths(self) -> np.ndarray:
        return self.index_arrays()[0]

    @property
    def identity(self) -> dict[str, object]:
        owner, _ = self.dataset.part_of(self.position)  # a union's shard is keyed as in its own dataset
        entry = self.dataset.shards[self.position].entry
        return {"dataset": owner.fingerprint, "shard": entry.name, "sequences": int(entry.num_docs)}


def prefixes_of(dataset: Dataset) -> list[MegatronPrefix]:
    """Every shard of a dataset as its own prefix (how `adopt` maps a list of Megatron prefixes)."""
    return [MegatronPrefix(dataset, i) for i in range(dataset.num_shards)]


class GPTOrder:
    """megatron-core's GPTDataset for one prefix and split: its sample `i` as spans of shardkit documents."""

    def __init__(self, prefix: MegatronPrefix, split: Split, num_samples: int | None, config: MegatronConfig) -> None:
        bookend = split_matrix(config.split)[split.value]
        if bookend is None:
            raise ConfigError(f"split {config.split!r} gives the {split.name} split no documents")
        self.prefix, self.split, self.num_samples, self.config = prefix, split, num_samples, config
        self.documents = split_documents(prefix.num_sequences, bookend)
        self.cache = IndexCache(config.path_to_cache)
        self._arrays: dict[str, np.ndarray] | None = None  # without a cache directory: built once, kept
        self._key: str | None = None  # the cache key, computed once

    @property
    def drop_last_partial(self) -> bool:
        return self.split != Split.valid or self.config.drop_last_partial_validation_sequence

    def _depends_on(self) -> dict[str, object]:
        c = self.config
        return {"kind": "GPTDataset", "prefix": self.prefix.identity, "documents": list(self.documents),
                "num_samples": self.num_samples, "seq_len": c.sequence_length, "seed": c.random_seed,
                "add_extra_token": c.add_extra_token_to_sequence, "drop_last_partial": self.drop_last_partial}

    def _build(self) -> dict[str, np.ndarray]:
        c = self.config
        sizes = np.asarray(self.prefix.sequence_lengths)
        docs = np.arange(*self.documents, dtype=np.int32)
        tokens_per_epoch = int(np.sum(sizes[docs], dtype=np.int64))
        plan = plan_epochs(tokens_per_epoch, self.num_samples, c.sequence_length, c.add_extra_token_to_sequence)
        rng = np.random.RandomState(c.random_seed)
        doc_idx = document_index(docs, plan.num_epochs, rng, plan.separate_final_epoch)
        smp_idx = sample_index(sizes, doc_idx, c.sequence_length, plan.num_epochs, tokens_per_epoch,
                               self.drop_last_partial, c.add_extra_token_to_sequence)
        total = smp_idx.shape[0] - 1
        first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else total
        return {"document_index": doc_idx, "sample_index": smp_idx, "shuffle_index": shuffle_index(first, total, rng)}

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The three index arrays: kept in memory without a cache directory, else mapped from the cache and
        held in `OPEN_MAPS` (three descriptors), reopened when the budget let them go."""
        if self.cache.directory is None:
            if self._arrays is None:
                self._arrays = self.cache.get(self._depends_on(), self._build)
            return self._arrays
        if self._key is None:
            self._key = cache_key(self._depends_on())
        return OPEN_MAPS.get(("gpt", str(self.cache.directory), self._key), 3,  # type: ignore[no-any-return]
                             lambda: self.cache.get(self._depends_on(), self._build))

    def __len__(self) -> int:
        return int(self.arrays["sample_index"].shape[0]) - 1

    def spans(self, i: int) -> list[tuple[int, int, int]]:
        """(global document, offset, length) pieces of sample `i`, in order (Megatron's `_query_...`)."""
        a = self.arrays
        extra = int(self.config.add_extra_token_to_sequence)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for a Megatron order of {len(self)} samples")
        j = int(a["shuffle_index"][i])
        (b, b_off), (e, e_off) = a["sample_index"][j].tolist(), a["sample_index"][j + 1].tolist()
        doc_idx, sizes, base = a["document_index"], self.prefix.sequence_lengths, self.prefix.doc_base
        out = []
        for k in range(b, e + 1):
            doc = int(doc_idx[k])
            lo = b_off if k == b else 0
            hi = e_off + extra if k == e else int(sizes[doc])
            out.append((base + doc, lo, min(hi, int(sizes[doc])) - lo))
        return out

    def sample(self, i: int) -> np.ndarray:
        """Sample `i`'s `sequence_length + extra` token ids (int64, a partial last one padded), as Megatron's text."""
        return read_spans(self.prefix.dataset, self.spans(i), self.config)


def read_spans(dataset: Dataset, spans: Sequence[tuple[int, int, int]], config: MegatronConfig) -> np.ndarray:
    width = config.sequence_length + int(config.add_extra_token_to_sequence)
    out = np.full(width, config.pad_token_id, dtype=np.int64)
    pos = 0
    for doc, off, n in spans:
        if n > 0:
            out[pos:pos + n] = dataset.doc(doc)[off:off + n]
            pos += n
    if pos > width:
        raise AssertionError(f"a Megatron sample of {pos} tokens exceeds {width}")  # a broken index, not input
    return out


class BlendOrder:
    """megatron-core's BlendedDataset over prefixes with weights, sized by the builder for `size` samples."""

    def __init__(self, prefixes: Sequence[MegatronPrefix], weights: Sequence[float] | None, size: int,
                 split: Split, config: MegatronConfig) -> None:
        if len(prefixes) < 2:
            raise ConfigError("a blend needs two or more prefixes; use GPTOrder (build_order) for one")
        if weights is not None and len(weights) != len(prefixes):
            raise ConfigError(f"{len(prefixes)} prefixes but {len(weights)} weights: give one weight per prefix")
        self.config, self.split = config, split
        self.cache = IndexCache(config.path_to_cache)
        if weights is not None:
            w = normalize_weights(weights)
            target = samples_per_dataset(w, size)
            buffered = samples_per_dataset(w, size, config.mid_level_dataset_surplus)
            self.datasets = [GPTOrder(p, split, n, config) for p, n in zip(prefixes, buffered, strict=True)]
            self.weights = normalize_weights(w)  # BlendedDataset normalizes the builder's normalized weights again
            self.size = sum(target)
        else:
            self.datasets = [GPTOrder(p, split, None, config) for p in prefixes]
            lengths = [len(d) for d in self.datasets]
            self.weights = normalize_weights(lengths)
            self.size = min(size, sum(lengths))

    def _depends_on(self) -> dict[str, object]:
        return {"kind": "BlendedDataset", "weights": self.weights, "size": self.size}

    def _check_room(self, counts: np.ndarray) -> None:
        for k, (d, n) in enumerate(zip(self.datasets, counts.tolist(), strict=True)):
            if n and len(d) < n:
                raise ConfigError(f"the {self.split.name} blend asks {n} samples of prefix {k} "
                                  f"({d.prefix.identity['shard']}), which holds {len(d)}; raise "
                                  "mid_level_dataset_surplus (as Megatron would require)")

    @cached_property
    def chunks(self) -> BlendChunks:
        """The assignment built lazily up to the samples read (a complete cached one is used as it is)."""
        return BlendChunks(self.weights, self.size, self.cache, self._depends_on(), self._check_room)

    @cached_property
    def arrays(self) -> dict[str, np.ndarray]:
        """The whole assignment (megatron-core's two arrays), built once and kept in the index cache."""
        def build() -> dict[str, np.ndarray]:
            di, dsi = self.chunks.whole()
            return {"dataset_index": di, "dataset_sample_index": dsi}
        arrays = self.cache.get(self._depends_on(), build)
        self._check_room(np.bincount(arrays["dataset_index"], minlength=len(self.datasets)))
        return arrays

    def __len__(self) -> int:
        return self.size

    def locate_many(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, sample within it) of blended sample ids: from the whole assignment when it is at hand
        (built, or complete in the cache), else from the lazily built chunks."""
        ids = np.asarray(ids, dtype=np.int64)
        if "arrays" not in self.__dict__ and not self.__dict__.get("_peeked"):
            self.__dict__["_peeked"] = True  # looked for a complete cached assignment once
            found = self.cache.peek(self._depends_on())
            if found is not None:
                self.__dict__["arrays"] = found
        if "arrays" in self.__dict__:
            a = self.arrays
            return a["dataset_index"][ids].astype(np.int64), a["dataset_sample_index"][ids]
        return self.chunks.locate(ids)

    def locate(self, i: int) -> tuple[int, int]:
        """(dataset, sample within it) of blended sample `i`."""
        if not 0 <= i < self.size:
            raise IndexError(f"sample {i} out of range for a Megatron blend of {self.size} samples")
        d, j = self.locate_many(np.array([i], dtype=np.int64))
        return int(d[0]), int(j[0])

    def spans(self, i: int) -> list[tuple[int, int, int]]:
        d, j = self.locate(i)
        return self.datasets[d].spans(j)

    def sample(self, i: int) -> np.ndarray:
        d, j = self.locate(i)
        return self.datasets[d].sample(j)


def build_order(prefixes: Sequence[MegatronPrefix], weights: Sequence[float] | None, size: int | None,
                split: Split, config: MegatronConfig) -> GPTOrder | BlendOrder:
    """The order `BlendedMegatronDatasetBuilder` makes for a blend and split (one prefix: a plain GPTDataset)."""
    if len(prefixes) == 1 and weights is None:
        return GPTOrder(prefixes[0], split, size, config)
    if size is None:
        raise ConfigError("a blend of several prefixes needs a sample count (Megatron's split size)")
    return BlendOrder(prefixes, weights, size, split, config)
