"""How a loader reads, and where its rank sits: validated at construction, one object per concern.

*What* to stream is the plan's (a recipe, or one dataset with its seq_len, seed, shuffle, schedule and
budget); these two say how this process takes part. Every value is type- and range-checked with a
`ConfigError` naming it, and every batch size of every stage and phase is checked against the world size
and micro-batch size before the first batch (`check_divisible`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..distributed_env import detect_source, resolve_rank_world
from ..errors import ConfigError
from ..order._checks import positive_int
from ..units import parse_bytes
from .fields import BatchFields
from .mapper import check_budget
from .verify_read import CorruptPolicy

__all__ = ["Placement", "ReadOptions", "check_divisible", "check_flag", "check_optional_positive"]

RELEASE_MODES = ("evict", "unmap")


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return value


def check_optional_positive(name: str, value: Any) -> int | None:
    """None, or a positive integer (bools and floats refused, as everywhere in the order modules)."""
    return None if value is None else positive_int(name, value)


@dataclass(frozen=True)
class Placement:
    """This process's data-parallel coordinates, and where the world size came from (for messages)."""

    rank: int
    world_size: int
    micro_batch_size: int | None
    origin: str  # "passed", "torch.distributed", "RANK/WORLD_SIZE", "SLURM_PROCID/...", "default"

    @classmethod
    def resolve(cls, rank: Any, world_size: Any, micro_batch_size: Any) -> Placement:
        for name, v in (("rank", rank), ("world_size", world_size)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ConfigError(f"{name} must be an integer or None (detected), got {v!r}")
        m = check_optional_positive("micro_batch_size", micro_batch_size)
        r, w = resolve_rank_world(rank, world_size)
        origin = "passed" if world_size is not None else detect_source()[2]
        return cls(rank=r, world_size=w, micro_batch_size=m, origin=origin)

    def describe(self) -> str:
        """`world_size 4 (from RANK/WORLD_SIZE)`: where a divisibility error's world size came from."""
        where = {"passed": "passed to the loader", "default": "the default: no launcher detected"}.get(
            self.origin, f"from {self.origin}")
        return f"world_size {self.world_size} ({where})"


def check_divisible(sizes: Iterable[tuple[str, int]], placement: Placement) -> None:
    """Every (where, global batch size) divides over the ranks, and each rank's share over micro-batches."""
    w, m = placement.world_size, placement.micro_batch_size
    for where, size in sizes:
        if size % w:
            raise ConfigError(f"{where}: a global batch of {size} samples is not divisible by "
                              f"{placement.describe()}; use batch sizes that are multiples of {w}")
        if m and (size // w) % m:
            raise ConfigError(f"{where}: {size} samples over {placement.describe()} are {size // w} per rank, "
                              f"not a multiple of micro_batch_size {m}")


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How this process reads: batch fields, page-cache hints, mapping budget, remote cache."""

    fields: BatchFields = field(default_factory=BatchFields)
    readahead: bool = True  # local page-cache hints (remote prefetch is the remote cache's: lookahead_groups)
    release: str = "evict"  # finished groups: "evict" from the page cache, or "unmap" only
    max_open_shards: int | None = None  # mappings held at once (one descriptor each); None: ulimit -n / 4
    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | str | None = None
    storage_options: dict[str, Any] | None = None
    balance_ranks: bool = False  # packed rows: deal each global batch's rows to ranks by Σ len² (engine/balance.py)
    verify_on_read: bool = False  # hash each local checksum block on its first read (engine/verify_read.py)
    on_corrupt: CorruptPolicy | str = "raise"  # a block that fails: "raise", "refetch" or "skip" (replace rows)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", BatchFields.parse(self.fields))
        check_flag("verify_on_read", self.verify_on_read)
        object.__setattr__(self, "on_corrupt", CorruptPolicy.parse(self.on_corrupt))
        check_flag("readahead", self.readahead)
        check_flag("balance_ranks", self.balance_ranks)
        if self.release not in RELEASE_MODES:
            raise ConfigError(f"release must be 'evict' or 'unmap', got {self.release!r}")
        check_budget(self.max_open_shards)
        if self.cache_limit is not None:
            limit = parse_bytes(self.cache_limit) if isinstance(self.cache_limit, str) else self.cache_limit
            if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
                raise ConfigError(f"cache_limit must be a positive size in bytes or like '20GiB', got "
                                  f"{self.cache_limit!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise ConfigError(f"cache_dir must be a path or None, got {self.cache_dir!r}")
        if self.storage_options is not None and not isinstance(self.storage_options, dict):
            raise ConfigError(f"storage_options must be a dict or None, got {self.storage_options!r}")
