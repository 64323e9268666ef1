"""How a global batch is split: contiguous rank slices, fixed-size micro-batches."""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["rank_slice", "micro_batches"]


def rank_slice(batch_start: int, batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Global sample positions [start, stop) of `rank`'s contiguous share of a batch.

    Contiguous shares keep the global stream one sequence: ranks 0..W-1 together read exactly
    [batch_start, batch_start + batch_size) in order, for any W dividing the batch.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not in [0, world_size={world_size})")
    if batch_size % world_size:
        raise ConfigError(f"global batch of {batch_size} samples does not divide over world_size {world_size}")
    per = batch_size // world_size
    return batch_start + rank * per, batch_start + (rank + 1) * per


def micro_batches(rank_size: int, micro_batch_size: int) -> int:
    if micro_batch_size < 1 or rank_size % micro_batch_size:
        raise ConfigError(f"{rank_size} rows per rank are not a multiple of micro_batch_size {micro_batch_size}")
    return rank_size // micro_batch_size
