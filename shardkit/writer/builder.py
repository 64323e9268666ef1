"""Write a dataset from documents that are already token ids (no tokenizer, no journal).

For pre-tokenized data, tests and tools: the same writer and manifest as `pack`, so the result is a
regular dataset.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..format.manifest import Manifest
from .compress import CompressionConfig
from .shard_writer import ShardLimits, ShardWriter

__all__ = ["write_dataset"]


def write_dataset(
    directory: str | Path,
    docs: Iterable[np.ndarray],
    *,
    dtype: str = "uint16",
    tokenizer: dict[str, Any] | None = None,
    max_tokens_per_shard: int | None = None,
    max_bytes_per_shard: int | None = 1 << 30,
    checksum_block_size: int = 16 << 20,
    eos_appended: bool | None = None,
    compression: CompressionConfig | None = None,
) -> Manifest:
    """Write `docs` (each a 1-D integer array) as shards + manifest into an empty `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ConfigError(f"{out} is not empty")
    limits = ShardLimits(max_bytes=max_bytes_per_shard, max_tokens=max_tokens_per_shard,
                         checksum_block_size=checksum_block_size)
    writer = ShardWriter(out, dtype=np.dtype(dtype), limits=limits, compression=compression)
    entries = []
    for doc in docs:
        arr = np.asarray(doc)
        lengths = np.array([arr.size], dtype=np.int64)
        if writer.fitting_docs(lengths) == 0:
            entries.append(writer.close_shard())
        writer.write_docs(arr, lengths)
    last = writer.close_shard()
    if last is not None:
        entries.append(last)
    manifest = Manifest(dtype=np.dtype(dtype).name, tokenizer=tokenizer, shards=tuple(entries),
                        checksum_block_size=checksum_block_size, eos_appended=eos_appended,
                        bos_prepended=None, pack={"builder": "write_dataset"})
    manifest.save(out)
    return Manifest.load(out)
