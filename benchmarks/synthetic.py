"""Deterministic synthetic token datasets for the loader benchmarks (built once under bench-data/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from shardkit.writer import write_dataset

__all__ = ["token_dataset"]


def _docs(tokens: int, seed: int) -> Iterator[np.ndarray]:
    """`tokens` uint16 tokens (GPT-2-sized ids) in documents of 100–4,000 tokens."""
    rng = np.random.default_rng(seed)
    left = tokens
    while left > 0:
        sizes = rng.integers(100, 4000, size=4096)
        flat = rng.integers(0, 50257, size=int(sizes.sum()), dtype=np.uint16)
        for d in np.split(flat, np.cumsum(sizes)[:-1]):
            if left <= 0:
                return
            d = d[:left]
            left -= d.size
            yield d


def token_dataset(path: Path, tokens: int, *, seed: int, shard_bytes: int = 512 << 20) -> Path:
    """The dataset at `path`, written first if it is not there yet."""
    if not (path / "manifest.json").exists():
        print(f"building {path.name} ({tokens:,} tokens, once) …", flush=True)
        write_dataset(path, _docs(tokens, seed), max_bytes_per_shard=shard_bytes)
    return path
