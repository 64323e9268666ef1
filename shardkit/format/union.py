"""Several local datasets read as one: their shards back to back, numbered in the order the datasets are given.

Megatron-LM blends data prefixes that live in different directories (`--data-path 0.7 /data/web/web_text_document
0.3 /data/code/code_text_document`). In shardkit a prefix is a shard of a dataset, so a blend over prefixes of
several datasets reads from `DatasetUnion(web, code)`: one flat token stream and one document numbering over
all their shards, which is what the read engine and `shardkit.megatron` address. Nothing is copied and
nothing is checked twice: the shards are the datasets' own `Shard` objects, each still verified against its
own manifest, sidecars and cache.

A shard is named by its dataset's path and its name (`/data/web/web_text_document`, as Megatron names a
prefix), by its name alone when only one dataset has it, or by its position in the union.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .dataset import Dataset, _cumulative

__all__ = ["DatasetUnion"]


class DatasetUnion(Dataset):
    """The shards of `datasets` (local, one token dtype) as one dataset; `parts` keeps where each came from."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:  # noqa: D107 - no Dataset.__init__: no one manifest
        parts = list(datasets)
        if not parts:
            raise ConfigError("a union of datasets needs at least one dataset")
        for d in parts:
            if isinstance(d, DatasetUnion) or hasattr(d, "read_gate"):
                raise ConfigError(f"{d.path}: a union takes local datasets, each once (a remote dataset: copy it "
                                  "locally first)")
        paths = [str(Path(d.path).resolve()) for d in parts]
        dupes = sorted({p for p in paths if paths.count(p) > 1})
        if dupes:
            raise ConfigError(f"{dupes[0]} is given twice; a union names each dataset once (a blend may name "
                              "one shard several times instead)")
        dtypes = {d.dtype.name for d in parts}
        if len(dtypes) > 1:
            desc = ", ".join(f"{d.path}: {d.dtype.name}" for d in parts)
            raise ConfigError(f"the datasets store tokens as different dtypes ({desc}); one stream reads one "
                              "dtype: re-pack the smaller-vocabulary data with the same --dtype")
        self.parts = parts
        self.path = Path(parts[0].path)
        self.dtype = parts[0].dtype
        self.shards = [s for d in parts for s in d.shards]
        self.token_offsets = _cumulative([s.num_tokens for s in self.shards])
        self.doc_offsets = _cumulative([s.num_docs for s in self.shards])
        self._first_shard = _cumulative([d.num_shards for d in parts])

    @property
    def manifest(self) -> Any:
        raise ConfigError("a union of datasets has no single manifest; read each part's (`union.parts`)")

    @property
    def fingerprint(self) -> str:
        """A digest of the parts' fingerprints in order: changes when any part or the order changes."""
        h = hashlib.sha256("\n".join(d.fingerprint for d in self.parts).encode())
        return "union-" + h.hexdigest()[:32]

    @property
    def tokenizer(self) -> dict | None:
        return next((d.tokenizer for d in self.parts if d.tokenizer), None)

    @property
    def checksum_block_size(self) -> int:
        sizes = {d.checksum_block_size for d in self.parts}
        if len(sizes) > 1:
            raise ConfigError(f"the datasets were checksummed in blocks of different sizes ({sorted(sizes)} "
                              "bytes); verify_on_read needs one block size: verify them with `shardkit verify` "
                              "before the run instead")
        return sizes.pop()

    def part_of(self, position: int) -> tuple[Dataset, int]:
        p = int(np.searchsorted(self._first_shard, position, side="right")) - 1
        return self.parts[p], position - int(self._first_shard[p])

    def shard_position(self, name: str) -> int:
        """A shard by `DATASET_DIR/NAME` (Megatron's prefix path) or by a name only one dataset has."""
        if "/" in name:  # a dataset's own directory (one shard), or DATASET_DIR/NAME: that part resolves it
            path = Path(name.rstrip("/"))
            for i, d in enumerate(self.parts):
                if Path(d.path).resolve() in (path.resolve(), path.parent.resolve()):
                    return int(self._first_shard[i]) + d.shard_position(name)
            raise ConfigError(f"prefix {name!r}: {str(path.parent)!r} is not one of the datasets read "
                              f"({', '.join(str(d.path) for d in self.parts)}); add it to the loader's data")
        holders = [i for i, d in enumerate(self.parts) if any(s.name == name for s in d.shards)]
        if len(holders) > 1:
            raise ConfigError(f"prefix {name!r}: datasets {', '.join(str(self.parts[i].path) for i in holders)} "
                              f"all have a shard of that name; name it as DATASET_DIR/{name}")
        if not holders:
            raise ConfigError(f"prefix {name!r}: no dataset of {', '.join(str(d.path) for d in self.parts)} has a "
                              "shard of that name (`shardkit inspect DATASET` lists them)")
        i = holders[0]
        return int(self._first_shard[i]) + self.parts[i].shard_position(name)

    def __repr__(self) -> str:
        return (f"DatasetUnion({[str(d.path) for d in self.parts]!r}, shards={self.num_shards}, "
                f"docs={self.num_docs:,}, tokens={self.num_tokens:,}, dtype={self.dtype.name})")
