"""The epoch order of samples — none, block (page-cache friendly) or full — as one mechanism.

The samples are cut into F full blocks of `block_samples` consecutive samples plus a tail block of
`num_samples mod block_samples`. Each epoch permutes the order of the full blocks; consecutive runs of
`group_blocks` permuted blocks form groups (the tail joins the last group, so position → group is one
division); inside a group, samples are drawn by a per-(epoch, group) permutation over the group's samples.
The reader's working set is one group, each byte is read about once per epoch, and reads inside a block
are clustered enough for readahead.

The two extremes of the same mechanism:
* `full`: a single group holding the whole stream (any block size). With one group the block order cannot
  change which samples the group holds, so it is skipped, and the order is the group's permutation alone —
  a `block` order whose one group covers the dataset is *identical* to the `full` order for the same seed.
* `none`: both permutations replaced by the identity (blocks in order, samples in order within each group),
  with the same block geometry, so prefetch hints work unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ..errors import ConfigError
from ._checks import as_int, index_array, nonneg_int, positive_int
from .permutation import MAX_SIZE, derive_key, extend_keys, permute, unpermute

__all__ = ["BLOCK_BYTES", "GROUP_BLOCKS", "ShuffleMode", "ShuffleConfig", "SampleOrder"]

BLOCK_BYTES = 32 << 20  # tens of MiB: long sequential reads, yet a group of 8 stays a few hundred MiB
GROUP_BLOCKS = 8
_DEFAULT_BLOCK_SAMPLES = BLOCK_BYTES // (2048 * 2)  # 32 MiB of 2048-token uint16 samples
_CHUNK = 1 << 16  # positions per vectorised pass
# A group's permutation is tabulated (computed once for all its samples, then looked up) when a call asks
# for at least _TABLE_MIN_POSITIONS of a group of at most _TABLE_MAX_SAMPLES: the table is bounded by the
# group geometry, never by the dataset, and it replaces ~6 Feistel rounds plus cycle walking per sample (whose
# straggler passes cost a fixed NumPy overhead per call) with one lookup. Small calls — a resume, a first
# batch — evaluate directly, so they never pay for a whole table.
_TABLE_MAX_SAMPLES = 1 << 20
_TABLE_MIN_POSITIONS = 2048
_TABLES_KEPT = 2  # a chunk of positions spans at most the current and the next group
_TAG_BLOCKS, _TAG_GROUP = 1, 2  # key domains: the per-epoch block order, the per-(epoch, group) sample order


class ShuffleMode(Enum):
    """How far apart consecutive samples may come from: nowhere (`none`), one group (`block`), anywhere (`full`)."""

    NONE = "none"
    BLOCK = "block"
    FULL = "full"

    @classmethod
    def parse(cls, value: ShuffleMode | str) -> ShuffleMode:
        """Accept the enum or its name ("none", "block", "full", any case) — recipes and CLIs pass strings."""
        if isinstance(value, ShuffleMode):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(f"shuffle must be one of none, block, full; got {value!r}") from None


@dataclass(frozen=True, kw_only=True)
class ShuffleConfig:
    """The shuffle geometry. `block_samples` and `group_blocks` also shape `none` (prefetch granularity)."""

    mode: ShuffleMode = ShuffleMode.BLOCK
    block_samples: int = _DEFAULT_BLOCK_SAMPLES
    group_blocks: int = GROUP_BLOCKS

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", ShuffleMode.parse(self.mode))
        object.__setattr__(self, "block_samples", positive_int("block_samples", self.block_samples))
        object.__setattr__(self, "group_blocks", positive_int("group_blocks", self.group_blocks))

    @classmethod
    def default(cls, mode: ShuffleMode | str, seq_len: int, itemsize: int, *, num_samples: int | None = None,
                block_bytes: int = BLOCK_BYTES, group_blocks: int = GROUP_BLOCKS) -> ShuffleConfig:
        """Blocks of at most `block_bytes` of tokens (a sample advances seq_len tokens), `group_blocks` per group.

        `block_samples` is rounded down to a power of two (so a block is ½–1 × `block_bytes`): a group of a
        power-of-two number of blocks is then exactly a power-of-two permutation domain — no cycle walking.
        A block never exceeds the dataset. Tiny datasets need no further clamp to shuffle: a dataset smaller
        than one group *is* one group, i.e. it gets a full shuffle (and fits in the working set anyway).
        """
        per_sample = positive_int("seq_len", seq_len) * positive_int("itemsize", itemsize)
        block = max(1, positive_int("block_bytes", block_bytes) // per_sample)
        block = 1 << (block.bit_length() - 1)
        if num_samples is not None:
            block = min(block, positive_int("num_samples", num_samples))
        return cls(mode=ShuffleMode.parse(mode), block_samples=block, group_blocks=group_blocks)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "block_samples": self.block_samples, "group_blocks": self.group_blocks}

    @classmethod
    def from_json(cls, obj: Any) -> ShuffleConfig:
        if not isinstance(obj, dict) or set(obj) - {"mode", "block_samples", "group_blocks"}:
            raise ConfigError(f"a shuffle config is {{mode, block_samples, group_blocks}}, got {obj!r}")
        return cls(**obj)


def _chunked(fn: Callable[[int, np.ndarray], np.ndarray], epoch: int, values: np.ndarray) -> np.ndarray:
    """Run `fn` over cache-sized slices: temporaries stay in L2 and are recycled instead of page-faulted in."""
    flat = values.reshape(-1)
    if flat.size <= _CHUNK:
        return fn(epoch, flat).reshape(values.shape)
    out = np.empty_like(flat)
    for lo in range(0, flat.size, _CHUNK):
        out[lo: lo + _CHUNK] = fn(epoch, flat[lo: lo + _CHUNK])
    return out.reshape(values.shape)


def _keys(base: int, groups: np.ndarray) -> int | np.ndarray:
    """Per-element group keys; computed once per distinct group when the groups span a short range."""
    lo, hi = int(groups.min()), int(groups.max())
    if lo == hi:
        return int(extend_keys(base, np.array([lo]))[0])
    if hi - lo < groups.size:
        return extend_keys(base, np.arange(lo, hi + 1, dtype=np.int64))[groups - lo]
    return extend_keys(base, groups)


class SampleOrder:
    """Positions of an epoch → sample ids: a bijection of [0, num_samples) for every epoch, O(1) per sample.

    Everything is a pure function of (num_samples, config, seed, epoch): nothing is stored but the geometry.
    """

    def __init__(self, num_samples: int, config: ShuffleConfig, seed: int) -> None:
        n = positive_int("num_samples", num_samples)
        if n > MAX_SIZE:
            raise ConfigError(f"num_samples = {n} is too large (at most 2**62)")
        self.num_samples = n
        self.config = config
        self.seed = as_int("seed", seed)
        self.mode = config.mode
        if self.mode is ShuffleMode.FULL:  # one block, one group: see the module docstring
            bs, gb = n, 1
        else:
            bs, gb = min(config.block_samples, n), config.group_blocks
        self.block_samples = bs
        self.group_blocks = gb
        self.full_blocks = n // bs  # ≥ 1, since bs ≤ n
        self.tail = n - self.full_blocks * bs  # samples of the partial block `full_blocks`, in the last group
        self.num_blocks = self.full_blocks + (1 if self.tail else 0)
        self.num_groups = -(-self.full_blocks // gb)
        self.group_samples = gb * bs  # every group but the last
        self.last_group_samples = n - (self.num_groups - 1) * self.group_samples
        self._tables: dict[tuple[int, int], np.ndarray] = {}  # (epoch, group) → permutation: _TABLE_MAX_SAMPLES

    @property
    def block(self) -> int:
        """Alias of `block_samples` (the name shardkit.loader uses)."""
        return self.block_samples

    # -- geometry, for the prefetcher -------------------------------------------------------------------------
    def group_of_position(self, positions: Any) -> np.ndarray:
        """The group each epoch position falls in (the same for every epoch)."""
        pos = index_array(positions, self.num_samples, "position")
        return np.minimum(pos // self.group_samples, self.num_groups - 1)

    def group_bounds(self, group: int) -> tuple[int, int]:
        """Epoch positions [start, stop) that draw from `group`."""
        g = self._check_group(group)
        start = g * self.group_samples
        return start, self.num_samples if g == self.num_groups - 1 else start + self.group_samples

    def group_after(self, epoch: int, group: int, k: int = 1) -> tuple[int, int]:
        """The (epoch, group) delivery reaches `k` groups after (epoch, group), across epoch ends."""
        at = group + k
        return epoch + at // self.num_groups, at % self.num_groups

    def blocks_of_group(self, epoch: int, group: int) -> np.ndarray:
        """Block ids read while the epoch is in `group` (the tail block `full_blocks` joins the last group)."""
        e, g = nonneg_int("epoch", epoch), self._check_group(group)
        slots = np.arange(g * self.group_blocks, min((g + 1) * self.group_blocks, self.full_blocks), dtype=np.int64)
        blocks = self._block_at_slot(e, slots)
        if g == self.num_groups - 1 and self.tail:
            blocks = np.append(blocks, np.int64(self.full_blocks))
        return blocks

    def block_bounds(self, blocks: Any) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids [start, stop) of each block: what to prefetch (sample i is tokens [i·L, i·L + L + 1))."""
        b = index_array(blocks, self.num_blocks, "block id")
        return b * self.block_samples, np.minimum((b + 1) * self.block_samples, self.num_samples)

    # -- the order --------------------------------------------------------------------------------------------
    def sample_ids(self, epoch: int, positions: Any) -> np.ndarray:
        """Sample id at each position of `epoch` (an int64 array shaped like `positions`)."""
        e = nonneg_int("epoch", epoch)
        pos = index_array(positions, self.num_samples, "position")
        if self.mode is ShuffleMode.NONE or pos.size == 0:
            return pos.copy()
        return _chunked(self._sample_ids, e, pos)

    def _sample_ids(self, epoch: int, pos: np.ndarray) -> np.ndarray:
        groups = np.minimum(pos // self.group_samples, self.num_groups - 1)
        local = groups * self.group_samples
        np.subtract(pos, local, out=local)
        local = self._in_group(epoch, groups, local, inverse=False)
        if self.num_groups == 1:
            return local
        slot = local // self.block_samples  # floor division by a scalar is fast; divmod and % are not
        offset = slot * self.block_samples
        np.subtract(local, offset, out=offset)
        groups *= self.group_blocks
        slot += groups
        out = self._block_at_slot(epoch, slot)
        out *= self.block_samples
        out += offset
        return out

    def sample_id(self, epoch: int, position: int) -> int:
        """`sample_ids` for one position."""
        return int(self.sample_ids(epoch, np.array([nonneg_int("position", position)]))[0])

    def positions_of(self, epoch: int, sample_ids: Any) -> np.ndarray:
        """Inverse of `sample_ids`: where in `epoch` each sample is drawn."""
        e = nonneg_int("epoch", epoch)
        ids = index_array(sample_ids, self.num_samples, "sample id")
        if self.mode is ShuffleMode.NONE or ids.size == 0:
            return ids.copy()
        return _chunked(self._positions_of, e, ids)

    def _positions_of(self, epoch: int, ids: np.ndarray) -> np.ndarray:
        if self.num_groups == 1:
            return self._in_group(epoch, np.zeros_like(ids), ids, inverse=True)
        block = ids // self.block_samples
        offset = ids - block * self.block_samples
        slot = self._block_at_slot(epoch, block, inverse=True)
        groups = np.minimum(slot // self.group_blocks, self.num_groups - 1)
        local = (slot - groups * self.group_blocks) * self.block_samples + offset
        return groups * self.group_samples + self._in_group(epoch, groups, local, inverse=True)

    # -- internals --------------------------------------------------------------------------------------------
    def _check_group(self, group: int) -> int:
        g = nonneg_int("group", group)
        if g >= self.num_groups:
            raise ConfigError(f"group {g} is out of range: this order has {self.num_groups} groups")
        return g

    def _in_group(self, epoch: int, groups: np.ndarray, local: np.ndarray, inverse: bool) -> np.ndarray:
        """Apply each element's (epoch, group) permutation; at most two domain sizes (regular, last group)."""
        step = unpermute if inverse else permute
        if not inverse and local.size >= _TABLE_MIN_POSITIONS:
            lo, hi = int(groups.min()), int(groups.max())
            if hi - lo < _TABLES_KEPT and max(self.group_samples, self.last_group_samples) <= _TABLE_MAX_SAMPLES:
                return self._tabulated(epoch, groups, local, lo, hi)
        keys = _keys(derive_key(self.seed, _TAG_GROUP, epoch), groups)
        last = self.num_groups - 1
        if int(groups.min()) == last:
            return step(local, self.last_group_samples, keys)
        if int(groups.max()) < last:
            return step(local, self.group_samples, keys)
        out = np.empty_like(local)
        for mask, size in ((groups < last, self.group_samples), (groups == last, self.last_group_samples)):
            out[mask] = step(local[mask], size, keys[mask] if isinstance(keys, np.ndarray) else keys)
        return out

    def _group_table(self, epoch: int, group: int) -> np.ndarray:
        """The whole (epoch, group) permutation as an array, kept for the last `_TABLES_KEPT` groups asked."""
        table = self._tables.get((epoch, group))
        if table is None:
            size = self.last_group_samples if group == self.num_groups - 1 else self.group_samples
            key = int(extend_keys(derive_key(self.seed, _TAG_GROUP, epoch), np.array([group]))[0])
            table = _chunked(lambda _, x: permute(x, size, key), epoch, np.arange(size, dtype=np.int64))
            if len(self._tables) >= _TABLES_KEPT:
                del self._tables[next(iter(self._tables))]
            self._tables[(epoch, group)] = table
        return table

    def _tabulated(self, epoch: int, groups: np.ndarray, local: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """`_in_group` by table lookup, for positions in groups lo..hi (at most two)."""
        if lo == hi:
            return self._group_table(epoch, lo)[local]
        out = np.empty_like(local)
        for g in range(lo, hi + 1):
            mask = groups == g
            out[mask] = self._group_table(epoch, g)[local[mask]]
        return out

    def _block_at_slot(self, epoch: int, slots: np.ndarray, inverse: bool = False) -> np.ndarray:
        """Block id at each slot of the epoch's block order (or, inverse, the slot of each block).

        The tail block (id = slot = `full_blocks`) never moves; with one group the order is the identity.
        """
        if self.mode is ShuffleMode.NONE or self.num_groups == 1 or slots.size == 0:
            return slots.copy()
        f = self.full_blocks
        step = unpermute if inverse else permute
        key = derive_key(self.seed, _TAG_BLOCKS, epoch)
        lo, hi = int(slots.min()), int(slots.max())
        if hi - lo < slots.size:  # a batch touches few blocks: permute each distinct slot once
            table = np.arange(lo, hi + 1, dtype=np.int64)
            body = table < f
            table[body] = step(table[body], f, key)
            return table[slots - lo]
        out = slots.copy()
        body = out < f
        out[body] = step(out[body], f, key)
        return out
