"""Small multi-source datasets for the mixture loader's tests: each source has its own token range."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardkit.writer import write_dataset

SOURCES = {"code": 300, "math": 150, "web": 500}  # documents per source


def make_sources(root: Path, docs: dict[str, int] | None = None, *, shard_tokens: int = 1500) -> dict[str, np.ndarray]:
    """Write one dataset per source under `root/<name>` (many small shards); returns the flat token streams.

    Source i draws tokens from [1000·(i+1), 1000·(i+2)), so a row's tokens say which source it came from.
    """
    out = {}
    for i, (name, n) in enumerate(sorted((docs or SOURCES).items())):
        rng = np.random.default_rng(i + 11)
        lo = 1000 * (i + 1)
        parts = [rng.integers(lo, lo + 1000, size=int(rng.integers(1, 70)), dtype=np.uint16) for _ in range(n)]
        write_dataset(root / name, parts, max_tokens_per_shard=shard_tokens, checksum_block_size=4096)
        out[name] = np.concatenate(parts)
    return out


def window(flat: np.ndarray, sample_id: int, seq_len: int) -> np.ndarray:
    return flat[sample_id * seq_len: sample_id * seq_len + seq_len + 1]


SEQ = 16


def three_phase_recipe(**over: object) -> dict:
    """Three phases over web/code/math (`make_sources`): a ramp, a two-source mix, a seq_len change."""
    r: dict = {
        "seed": 7, "seq_len": SEQ,
        "phases": [
            {"name": "warmup", "tokens": 2000, "mix": {"web": 0.6, "code": 0.3, "math": 0.1},
             "batch": {"ramp": {"start": 4, "increment": 4, "over_samples": 40, "final": 8}}},
            {"name": "main", "tokens": 6000, "batch": 8, "mix": {"web": 0.5, "code": 0.5}},
            {"name": "long", "tokens": 6000, "batch": 4, "seq_len": 2 * SEQ,
             "mix": {"web": 0.25, "code": 0.25, "math": 0.5}},
        ],
        "sources": {"web": {"path": "web"}, "code": {"path": "code"}, "math": {"path": "math"}},
    }
    r.update(over)
    return r
