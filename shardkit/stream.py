"""Run a loader without a trainer: throughput and a digest of exactly what was delivered.

The digest (xxh3-128 over every delivered token row, in order, with its batch index — and, for a
mixture, each row's source) is the user's determinism check: the same data, config and seed give the
same digest on any machine, world size split or worker count. Works for a `Loader` and a
`MixtureLoader` alike (a mixture's rows change length with the phase's seq_len).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from .loader import Loader, MixtureLoader

__all__ = ["StreamReport", "stream"]


@dataclass(frozen=True)
class StreamReport:
    batches: int
    samples: int
    tokens: int
    seconds: float
    digest: str
    first_batch: int
    last_batch: int
    metrics: dict[str, Any]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _items(loader: Loader | MixtureLoader, workers: int) -> Iterator[dict[str, Any]]:
    if workers <= 0:
        yield from loader
        return
    from .torch import ShardkitDataLoader  # optional dependency, only for --workers

    # groups of batches through shared memory: what a trainer should use
    items: Any = ShardkitDataLoader(loader, num_workers=workers)
    for item in items:
        yield {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in item.items()}


def stream(loader: Loader | MixtureLoader, *, steps: int | None = None, workers: int = 0,
           progress: Callable[[int, int, float], None] | None = None) -> StreamReport:
    """Deliver up to `steps` items (None: the loader's budget); hash and count them."""
    h = xxhash.xxh3_128()
    batches = samples = tokens = 0
    first = last = -1
    t0 = time.perf_counter()
    for item in _items(loader, workers):
        rows = item["tokens"] if "tokens" in item else item["input_ids"]
        labels_last = item["tokens"][:, -1:] if "tokens" in item else item["labels"][:, -1:]
        h.update(np.int64(item["batch_index"]).tobytes())
        h.update(np.ascontiguousarray(rows).tobytes())
        h.update(np.ascontiguousarray(labels_last).tobytes())
        if "source" in item:
            h.update(np.ascontiguousarray(item["source"], dtype=np.int64).tobytes())
        if first < 0:
            first = int(item["batch_index"])
        last = int(item["batch_index"])
        batches += 1
        samples += rows.shape[0]
        tokens += rows.shape[0] * (rows.shape[1] - 1 if "tokens" in item else rows.shape[1])
        if progress is not None and batches % 64 == 0:
            progress(batches, tokens, time.perf_counter() - t0)
        if steps is not None and batches >= steps:
            break
    return StreamReport(batches=batches, samples=samples, tokens=tokens, seconds=time.perf_counter() - t0,
                        digest=h.hexdigest(), first_batch=first, last_batch=last,
                        metrics=loader.metrics.to_json())
