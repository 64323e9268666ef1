"""How a global batch is split: contiguous rank slices, fixed-size micro-batches, round-robin workers.

Ranks take contiguous slices so that ranks 0..W−1 together read [S(b), S(b) + B(b)) in order: the global
stream is one sequence whatever W is, and resuming on another world size that divides the batch is exact.

Workers: worker w of a rank's `num_workers` handles the rank's items (batches, or micro-batches) whose index,
counted from the resume point, is ≡ w (mod num_workers). A torch DataLoader over an IterableDataset (with the
default `in_order=True`) sends its fetch requests to workers cyclically, 0, 1, …, num_workers−1, 0, …,
skipping exhausted ones, and returns results in request order; so it yields worker 0's first item, worker
1's first, …, then every worker's second — items first, first+1, first+2, … in order, for any worker
count, including at the end of a finite stream (the low-numbered workers hold the one extra item).
This needs one DataLoader item per shardkit item (`batch_size=None`) and `in_order=True`.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import numpy as np

from ..errors import ConfigError
from ._checks import nonneg_int, positive_int

__all__ = ["rank_slice", "micro_batches", "worker_batches", "worker_of_batch", "item_sequence"]


def rank_slice(batch_start: int, batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Global sample positions [start, stop) of `rank`'s contiguous share of a global batch."""
    start = nonneg_int("batch start", batch_start)
    size = positive_int("batch size", batch_size)
    world = positive_int("world_size", world_size)
    r = nonneg_int("rank", rank)
    if r >= world:
        raise ConfigError(f"rank {r} is not in [0, world_size={world})")
    if size % world:
        raise ConfigError(f"a global batch of {size} samples does not divide over world_size {world}: "
                          f"choose a batch size that is a multiple of {world}")
    per = size // world
    return start + r * per, start + (r + 1) * per


def micro_batches(rank_size: int, micro_batch_size: int) -> int:
    """How many micro-batches of `micro_batch_size` rows make up a rank's `rank_size` rows."""
    rows = positive_int("rows per rank", rank_size)
    micro = positive_int("micro_batch_size", micro_batch_size)
    if rows % micro:
        raise ConfigError(f"{rows} rows per rank are not a multiple of micro_batch_size {micro}")
    return rows // micro


def _workers(num_workers: int, worker_id: int) -> tuple[int, int]:
    n = positive_int("num_workers (use 1 for DataLoader num_workers=0)", num_workers)
    w = nonneg_int("worker_id", worker_id)
    if w >= n:
        raise ConfigError(f"worker_id {w} is not in [0, num_workers={n})")
    return n, w


def worker_batches(num_workers: int, worker_id: int, *, first: int = 0, stop: int | None = None) -> Iterator[int]:
    """The item indices worker `worker_id` produces: first + worker_id, then every `num_workers`-th.

    `first` is the resume point (the rank's next item); `stop` (exclusive) ends a finite stream.
    """
    n, w = _workers(num_workers, worker_id)
    begin = nonneg_int("first", first) + w
    if stop is None:
        return count(begin, n)
    return iter(range(begin, nonneg_int("stop", stop), n))


def worker_of_batch(batch: int, num_workers: int, *, first: int = 0) -> int:
    """Which worker produces item `batch` when the rank resumed at item `first`."""
    n = positive_int("num_workers", num_workers)
    b, f = nonneg_int("batch", batch), nonneg_int("first", first)
    if b < f:
        raise ConfigError(f"item {b} comes before the resume point {f}")
    return (b - f) % n


def item_sequence(first: int, stride: int, run: int, t0: int, k: int) -> np.ndarray:
    """Items t0 … t0+k−1 of a worker's index sequence: runs of `run` consecutive indices, `stride` apart.

    run=1 is every `stride`-th index from `first` (one item per DataLoader item); run=g with stride=g·k is
    worker w's groups of g when k workers ship g items at a time (first = start + w·g).
    """
    if stride < 1 or not 1 <= run <= stride:
        raise ConfigError(f"stride {stride} and run {run}: runs must not overlap (1 ≤ run ≤ stride)")
    t = t0 + np.arange(k, dtype=np.int64)
    return first + (t // run) * stride + t % run if run > 1 else first + t * stride
