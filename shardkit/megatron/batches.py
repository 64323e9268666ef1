"""Batches in Megatron's order, sliced per data-parallel rank as Megatron-LM's MegatronPretrainingSampler does.

The sampler walks global sample ids from `consumed_samples` in global batches of
`micro_batch_size * data_parallel_size`; rank `r` takes ids `[r * mbs, (r + 1) * mbs)` of each and a
trailing partial global batch is dropped. The position is the consumed-samples counter alone, so
continuing a Megatron run is `load_state_dict` (or `consumed_samples=`) with the counter of its checkpoint,
and the same counter resumes on another data-parallel size whose global batch still divides it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError, ResumeError
from .order import BlendOrder, GPTOrder

__all__ = ["MegatronBatches", "STATE_VERSION"]

STATE_VERSION = 1


class MegatronBatches:
    """This rank's micro-batches (`tokens`: int64 [mbs, seq_len + extra]) in the order of a Megatron dataset."""

    def __init__(self, order: GPTOrder | BlendOrder, *, micro_batch_size: int, rank: int = 0, world_size: int = 1,
                 consumed_samples: int = 0) -> None:
        if micro_batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"need micro_batch_size >= 1 and 0 <= rank < world_size, got {micro_batch_size}, "
                              f"{rank}, {world_size}")
        if not 0 <= consumed_samples <= len(order):
            raise ConfigError(f"consumed_samples {consumed_samples} is outside the {len(order)} samples of the order")
        self.order, self.mbs, self.rank, self.world = order, micro_batch_size, rank, world_size
        self.consumed = consumed_samples

    @property
    def global_batch(self) -> int:
        return self.mbs * self.world

    def sample_ids(self) -> Iterator[np.ndarray]:
        """This rank's global sample ids, micro-batch by micro-batch, from the current position."""
        total = len(self.order)
        start = self.consumed
        while start + self.global_batch <= total:  # MegatronPretrainingSampler with drop_last=True
            lo = start + self.rank * self.mbs
            yield np.arange(lo, lo + self.mbs, dtype=np.int64)
            start += self.global_batch

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for ids in self.sample_ids():
            tokens = np.stack([self.order.sample(int(i)) for i in ids])
            self.consumed += self.global_batch  # every rank advances the shared counter by a global batch
            yield {"tokens": tokens, "sample_ids": ids}

    def state_dict(self) -> dict[str, object]:
        c = self.order.config
        return {"version": STATE_VERSION, "kind": "megatron", "consumed_samples": self.consumed,
                "sequence_length": c.sequence_length, "random_seed": c.random_seed,
                "num_samples": len(self.order)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Continue from a saved position (or `{"consumed_samples": n}` taken from a Megatron checkpoint)."""
        if state.get("version", STATE_VERSION) != STATE_VERSION:
            raise ResumeError("version", f"state version {state.get('version')!r}, this shardkit reads {STATE_VERSION}")
        c = self.order.config
        for name, now in (("sequence_length", c.sequence_length), ("random_seed", c.random_seed),
                          ("num_samples", len(self.order))):
            if name in state and state[name] != now:
                why = (" Megatron's sample index is cut at multiples of seq_len, so the same counter names other "
                       "tokens at another length; start a new phase instead" if name == "sequence_length" else "")
                raise ResumeError(name, f"the state was saved with {state[name]!r}, this order has {now!r}.{why}")
        consumed = state.get("consumed_samples")
        if not isinstance(consumed, int) or not 0 <= consumed <= len(self.order):
            raise ResumeError("consumed_samples", f"expected an integer in [0, {len(self.order)}], got {consumed!r}")
        if consumed % self.global_batch:
            raise ResumeError("consumed_samples", f"{consumed} is not a multiple of the global batch "
                              f"{self.global_batch} (micro_batch_size x world_size)")
        self.consumed = consumed
