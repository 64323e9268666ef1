"""Rank and world size from torch.distributed (when initialised) or the usual launcher variables."""

from __future__ import annotations

import os
import sys

__all__ = ["detect_rank_world"]


def detect_rank_world() -> tuple[int, int]:
    """torch.distributed if it is imported and initialised, else RANK/WORLD_SIZE (torchrun, Slurm), else 0/1."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    for rank_var, world_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if rank_var in os.environ and world_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[world_var])
    return 0, 1
