"""Batches as Megatron-LM's `MegatronPretrainingRandomSampler` draws them (`--dataloader-type cyclic`).

That sampler (Megatron-LM's `megatron/training/datasets/data_samplers.py`; megatron-core does not ship it)
reorders the dataset's samples per epoch with `torch.randperm` seeded by the epoch number. With
`data_sharding` (Megatron-LM's default) each rank owns a bucket of `(total // (mbs·W))·mbs` consecutive
sample ids and draws its micro-batches from a permutation of its bucket; without it the whole range is
permuted and rank `r` takes every W-th id from the current position. The permutation is torch's own, so
this needs torch (an optional dependency). The position is the consumed-samples counter, as in Megatron;
unlike `MegatronBatches` a resume on another data-parallel size does not give the same samples (the
buckets and the striding depend on it), which is Megatron's behaviour too.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError, MissingDependencyError, ResumeError
from .order import BlendOrder, GPTOrder

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

__all__ = ["MegatronRandomBatches"]

STATE_VERSION = 1


class MegatronRandomBatches:
    """This rank's micro-batches (`tokens`: int64 [mbs, seq_len + 1]) as MegatronPretrainingRandomSampler gives them."""

    def __init__(self, order: GPTOrder | BlendOrder, *, micro_batch_size: int, rank: int = 0, world_size: int = 1,
                 consumed_samples: int = 0, data_sharding: bool = True) -> None:
        if torch is None:
            raise MissingDependencyError("torch", "torch", "Megatron's random sampler (torch.randperm)")
        if micro_batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"need micro_batch_size >= 1 and 0 <= rank < world_size, got {micro_batch_size}, "
                              f"{rank}, {world_size}")
        self.order, self.mbs, self.rank, self.world = order, micro_batch_size, rank, world_size
        self.data_sharding = data_sharding
        self.total = len(order)
        self.step = micro_batch_size * world_size
        if self.total < self.step:
            raise ConfigError(f"the order holds {self.total} samples, fewer than one step of {self.step}")
        self.consumed = consumed_samples

    def sample_ids(self) -> Iterator[np.ndarray]:
        """This rank's sample ids for the rest of the current epoch (one pass of the sampler's `__iter__`)."""
        active = self.total - self.total % self.step
        epoch, current = divmod(self.consumed, active)
        if current % self.step:
            raise ResumeError("consumed_samples", f"{self.consumed} is not a multiple of micro_batch_size x "
                              f"world_size = {self.step} within its epoch")
        g = torch.Generator()
        g.manual_seed(epoch)
        if self.data_sharding:
            bucket = (self.total // self.step) * self.mbs
            perm = torch.randperm(bucket, generator=g).numpy()
            ids = self.rank * bucket + perm[current // self.world:]
        else:
            full = (self.total // self.mbs) * self.mbs
            perm = torch.randperm(full, generator=g).numpy()
            ids = perm[current:][self.rank::self.world]
        for a in range(0, ids.size - self.mbs + 1, self.mbs):  # an incomplete last micro-batch is dropped
            yield ids[a:a + self.mbs].astype(np.int64)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """One epoch from the current position; Megatron-LM cycles it (`cyclic_iter`), so iterate again."""
        for ids in self.sample_ids():
            tokens = np.stack([self.order.sample(int(i)) for i in ids])
            self.consumed += self.step
            yield {"tokens": tokens, "sample_ids": ids}

    def state_dict(self) -> dict[str, object]:
        c = self.order.config
        return {"version": STATE_VERSION, "kind": "megatron-random", "consumed_samples": self.consumed,
                "sequence_length": c.sequence_length, "random_seed": c.random_seed, "num_samples": self.total,
                "data_sharding": self.data_sharding, "world_size": self.world}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Continue from a saved position (or `{"consumed_samples": n}` from a Megatron checkpoint)."""
        c = self.order.config
        for name, now in (("sequence_length", c.sequence_length), ("random_seed", c.random_seed),
                          ("num_samples", self.total), ("data_sharding", self.data_sharding)):
            if name in state and state[name] != now:
                raise ResumeError(name, f"the state was saved with {state[name]!r}, this sampler has {now!r}")
        consumed = state.get("consumed_samples")
        if not isinstance(consumed, int) or consumed < 0:
            raise ResumeError("consumed_samples", f"expected a non-negative integer, got {consumed!r}")
        self.consumed = consumed
