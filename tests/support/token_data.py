"""Random uint16 token datasets of a given size, for tests that need real bytes on disk (reads, caches)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardkit.writer import write_dataset


def random_dataset(path: Path, tokens: int, *, shard_bytes: int, seed: int = 0) -> Path:
    """About `tokens` uint16 tokens (GPT-2-sized ids) in documents of 500–3,000 tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(500, 3000, size=tokens // 500 + 1)
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), tokens)) + 1]
    write_dataset(path, (rng.integers(0, 50_000, size=int(n), dtype=np.uint16) for n in sizes),
                  max_bytes_per_shard=shard_bytes)
    return path
