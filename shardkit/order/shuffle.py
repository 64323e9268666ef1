"""The epoch order of samples: none, block (page-cache friendly) or full, as one mechanism.

Block shuffle: the samples are cut into F full blocks of `block_samples` consecutive samples plus a tail
(num_samples mod block_samples). Each epoch permutes the block order; consecutive runs of `group_blocks`
permuted blocks form a group; inside a group, samples are drawn by a per-(epoch, group) permutation over
the group's samples. The tail joins the last group, so position → group stays O(1). A reader's working
set is one group (group_blocks × block bytes), each byte is read about once per epoch, and within a block
reads are sequential enough for readahead.

The extremes of the same mechanism: `full` is block_samples = 1 with one group (a single global
permutation); `none` is the identity (block order and in-group order both unpermuted).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ..errors import ConfigError
from .permutation import Permutation, derive_key

__all__ = ["ShuffleMode", "ShuffleConfig", "SampleOrder", "BLOCK_BYTES", "GROUP_BLOCKS"]

BLOCK_BYTES = 32 << 20
GROUP_BLOCKS = 8
_MIN_BLOCKS = 16  # tiny datasets still shuffle across at least this many blocks
_TAG_BLOCKS, _TAG_GROUP, _TAG_FULL = 1, 2, 3


class ShuffleMode(Enum):
    NONE = "none"
    BLOCK = "block"
    FULL = "full"

    @classmethod
    def parse(cls, value: ShuffleMode | str) -> ShuffleMode:
        if isinstance(value, ShuffleMode):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ConfigError(f"shuffle must be one of none, block, full; got {value!r}") from None


@dataclass(frozen=True, kw_only=True)
class ShuffleConfig:
    mode: ShuffleMode = ShuffleMode.BLOCK
    block_samples: int = 1
    group_blocks: int = GROUP_BLOCKS

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", ShuffleMode.parse(self.mode))
        for name in ("block_samples", "group_blocks"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")

    @classmethod
    def default(cls, mode: ShuffleMode | str, *, seq_len: int, itemsize: int, num_samples: int) -> ShuffleConfig:
        """Blocks of ~32 MiB of tokens, groups of 8 blocks; smaller blocks for datasets under 16 blocks."""
        block = max(1, BLOCK_BYTES // max(1, seq_len * itemsize))
        block = max(1, min(block, num_samples // _MIN_BLOCKS))
        return cls(mode=ShuffleMode.parse(mode), block_samples=block, group_blocks=GROUP_BLOCKS)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "block_samples": self.block_samples, "group_blocks": self.group_blocks}


class SampleOrder:
    """positions of an epoch → sample ids; a bijection of [0, num_samples) for every epoch."""

    def __init__(self, num_samples: int, config: ShuffleConfig, seed: int) -> None:
        if num_samples < 1:
            raise ConfigError("a sample order needs at least one sample")
        self.n = num_samples
        self.config = config
        self.seed = seed
        self.mode = config.mode
        b = config.block_samples if self.mode is ShuffleMode.BLOCK else 1
        self.block = min(b, num_samples)
        self.full_blocks = num_samples // self.block
        self.tail = num_samples - self.full_blocks * self.block
        k = config.group_blocks if self.mode is ShuffleMode.BLOCK else max(1, self.full_blocks)
        self.group_blocks = k
        self.num_groups = max(1, -(-self.full_blocks // k))
        self.group_samples = k * self.block

    def _block_perm(self, epoch: int) -> Permutation:
        return Permutation(self.full_blocks, derive_key(self.seed, _TAG_BLOCKS, epoch))

    def blocks_in_group(self, group: np.ndarray) -> np.ndarray:
        return np.minimum(self.group_blocks, self.full_blocks - group * self.group_blocks)

    def group_of_position(self, positions: np.ndarray) -> np.ndarray:
        return np.minimum(np.asarray(positions, dtype=np.int64) // self.group_samples, self.num_groups - 1)

    def blocks_of_group(self, epoch: int, group: int) -> np.ndarray:
        """Block ids (block j covers samples [j·block, (j+1)·block)) read by `group` of `epoch`."""
        count = int(self.blocks_in_group(np.int64(group)))
        slots = group * self.group_blocks + np.arange(count, dtype=np.int64)
        return slots if self.mode is ShuffleMode.NONE else self._block_perm(epoch)(slots)

    def sample_ids(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        k = np.asarray(positions, dtype=np.int64)
        if k.size and (int(k.min()) < 0 or int(k.max()) >= self.n):
            raise IndexError(f"positions outside [0, {self.n})")
        if self.mode is ShuffleMode.NONE:
            return k.copy()
        if self.mode is ShuffleMode.FULL:
            return Permutation(self.n, derive_key(self.seed, _TAG_FULL, epoch))(k)
        groups = self.group_of_position(k)
        q = np.empty_like(k)
        for g in np.unique(groups).tolist():
            m = groups == g
            count = int(self.blocks_in_group(np.int64(g))) * self.block
            if g == self.num_groups - 1:
                count += self.tail
            perm = Permutation(count, derive_key(self.seed, _TAG_GROUP, epoch, g))
            q[m] = perm(k[m] - g * self.group_samples)
        slot = q // self.block
        in_group = self.blocks_in_group(groups)
        is_tail = slot >= in_group
        out = np.empty_like(k)
        if self.full_blocks:
            body = ~is_tail
            block_ids = self._block_perm(epoch)(groups[body] * self.group_blocks + slot[body])
            out[body] = block_ids * self.block + q[body] % self.block
        out[is_tail] = self.full_blocks * self.block + (q[is_tail] - in_group[is_tail] * self.block)
        return out
