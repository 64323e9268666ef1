"""Rank and world size from torch.distributed (when initialised) or the usual launcher variables.

The loader's rank and world size are its *data-parallel* coordinates: rank r of W reads the r-th W-th of
every global batch. Where they come from, first match wins:

1. values passed explicitly (`Loader(..., rank=, world_size=)`) — needed under tensor/pipeline/context
   parallelism, where the data-parallel group is smaller than the world;
2. `torch.distributed`, if it is imported and its default process group is initialised;
3. `RANK` / `WORLD_SIZE` (torchrun, `torch.distributed.launch`, accelerate, DeepSpeed);
4. `SLURM_PROCID` / `SLURM_STEP_NUM_TASKS` (else `SLURM_NTASKS`), only inside an `srun` step
   (`SLURM_STEP_ID` is set): a batch script or an `salloc` shell is one process, even though Slurm
   exports `SLURM_PROCID=0` and the job's task count there;
5. rank 0 of 1.

Malformed values are a `ConfigError` naming the variable (never a silent fallback to rank 0 of 1, which
would make every process read the same data): a non-integer, `RANK` without `WORLD_SIZE`, a rank outside
the world, `LOCAL_RANK` ≥ `LOCAL_WORLD_SIZE`, or `LOCAL_RANK` > 0 with no global rank anywhere (a
launcher that set the per-node rank only).

Explicit values against an initialised process group (`resolve_rank_world`):
* half a pair (only `rank` or only `world_size`) takes the other half from detection, and must agree
  with it: `rank=3` alone in a process that torch.distributed calls rank 5 is refused (pass both);
* a full pair is trusted — a data-parallel group is usually smaller than the world — except for the two
  combinations that cannot be a data-parallel split of this process group and are, in practice, bugs:
  more data ranks than processes (`world_size` > the group's size), and the group's own size with another
  rank (typically `LOCAL_RANK` passed as the rank: every node would read the same slice). Both raise. To
  look at another rank's rows from inside a process group, use `world_size=1` (the whole global batch)
  and slice it. Environment variables are never cross-checked against an explicit pair: tools such as
  `shardkit stream --rank r --world-size W` legitimately run inside `srun` steps and torchrun jobs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["detect_rank_world", "resolve_rank_world", "detect_source"]

_TORCH = "torch.distributed"  # looked up in sys.modules only: importing torch is the caller's choice


def detect_rank_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, world size) from torch.distributed, the launcher's variables, or (0, 1); see the module doc."""
    rank, world, _ = detect_source(environ)
    return rank, world


def resolve_rank_world(rank: Any = None, world_size: Any = None, *,
                       environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """The loader's (rank, world size): explicit values where given, detection for the rest, checked."""
    r = _explicit("rank", rank)
    w = _explicit("world_size", world_size)
    if w is not None and w < 1:
        raise ConfigError(f"world_size must be ≥ 1, got {w}")
    if r is not None and r < 0:
        raise ConfigError(f"rank must be ≥ 0, got {r}")
    if r is not None and w is not None:
        _check_against_process_group(r, w)
        return _in_range(r, w, "rank", "world_size")
    dr, dw, source = detect_source(environ)
    if r is None and w is None:
        return dr, dw
    if r is not None and source != "default" and r != dr:
        raise ConfigError(f"rank={r} was passed without world_size, but {source} says this process is rank "
                          f"{dr} of {dw}: pass world_size as well (e.g. the data-parallel group size), or "
                          "neither")
    if w is not None and source != "default" and w != dw:
        raise ConfigError(f"world_size={w} was passed without rank, but {source} says the world has {dw} "
                          f"processes (this one is rank {dr}): pass rank as well (e.g. the data-parallel "
                          "rank), or neither")
    return _in_range(dr if r is None else r, dw if w is None else w, "rank", "world_size")


def detect_source(environ: Mapping[str, str] | None = None) -> tuple[int, int, str]:
    """(rank, world size, where they came from): "torch.distributed", the variable names, or "default"."""
    env = os.environ if environ is None else environ
    group = _process_group()
    if group is not None:
        return group[0], group[1], "torch.distributed"
    _check_local(env)
    rank, world = _int_var(env, "RANK"), _int_var(env, "WORLD_SIZE")
    if rank is not None or world is not None:
        if rank is None or world is None:
            have, miss = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
            raise ConfigError(f"{have}={env[have]} is set but {miss} is not: a launcher sets both (torchrun "
                              f"does); set {miss}, unset {have}, or pass rank and world_size")
        _in_range(rank, world, "RANK", "WORLD_SIZE")
        return rank, world, "RANK/WORLD_SIZE"
    if _present(env, "SLURM_STEP_ID") or _present(env, "SLURM_STEPID"):
        rank = _int_var(env, "SLURM_PROCID")
        tasks_var = "SLURM_STEP_NUM_TASKS" if _present(env, "SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
        world = _int_var(env, tasks_var)
        if rank is not None and world is not None:
            _in_range(rank, world, "SLURM_PROCID", tasks_var)
            return rank, world, f"SLURM_PROCID/{tasks_var}"
    local, local_world = _int_var(env, "LOCAL_RANK"), _int_var(env, "LOCAL_WORLD_SIZE")
    if (local or 0) > 0 or (local_world or 1) > 1:
        said = ", ".join(f"{v}={env[v].strip()}" for v in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if _present(env, v))
        raise ConfigError(f"{said}: this is one of several processes on the node, but there is no global rank: "
                          "torch.distributed is not initialised and neither RANK/WORLD_SIZE nor an srun "
                          "step's SLURM_PROCID/SLURM_NTASKS are set. Initialise the process group before "
                          "creating the loader, or pass rank and world_size (the global rank, not LOCAL_RANK)")
    return 0, 1, "default"


# -- helpers ------------------------------------------------------------------------------------------------
def _process_group() -> tuple[int, int] | None:
    """(rank, world size) of torch.distributed's default group if it is initialised; never imports torch."""
    dist = sys.modules.get(_TORCH)
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except (AttributeError, RuntimeError, ValueError):  # a stub module, or a group being torn down
        return None


def _check_against_process_group(rank: int, world: int) -> None:
    group = _process_group()
    if group is None:
        return
    grank, gworld = group
    if world > gworld:
        raise ConfigError(f"world_size={world} but the torch.distributed process group has only {gworld} "
                          "processes: some data ranks would never be read. Pass the data-parallel group "
                          "size (at most the world size)")
    if world == gworld and rank != grank:
        raise ConfigError(f"rank={rank} of world_size={world}, but torch.distributed says this process is "
                          f"rank {grank} of the same {gworld}: two processes would read the same slice. "
                          "Pass dist.get_rank() (not LOCAL_RANK), or leave rank and world_size out; to see "
                          "another rank's rows, load the whole global batch with world_size=1 and slice it")


def _explicit(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ConfigError(f"{name} must be an integer or None, got {value!r}")
    return int(value.__index__())


def _present(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip() != ""


def _int_var(env: Mapping[str, str], name: str) -> int | None:
    """The variable as a non-negative int; None if unset or empty; ConfigError naming it otherwise."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    if not text.isdigit() or not text.isascii():
        raise ConfigError(f"environment variable {name}={raw!r} is not a non-negative integer; fix the "
                          "launcher's environment, unset it, or pass rank and world_size explicitly")
    return int(text)


def _in_range(rank: int, world: int, rank_name: str, world_name: str) -> tuple[int, int]:
    if world < 1:
        raise ConfigError(f"{world_name}={world}: a world has at least one process")
    if not 0 <= rank < world:
        raise ConfigError(f"{rank_name}={rank} is not in [0, {world_name}={world})")
    return rank, world


def _check_local(env: Mapping[str, str]) -> None:
    """LOCAL_RANK / LOCAL_WORLD_SIZE, when set, must be integers with LOCAL_RANK < LOCAL_WORLD_SIZE."""
    local, local_world = _int_var(env, "LOCAL_RANK"), _int_var(env, "LOCAL_WORLD_SIZE")
    if local_world is not None:
        if local_world < 1:
            raise ConfigError(f"LOCAL_WORLD_SIZE={local_world}: a node runs at least one process")
        if local is not None and local >= local_world:
            raise ConfigError(f"LOCAL_RANK={local} is not in [0, LOCAL_WORLD_SIZE={local_world})")
    world = _int_var(env, "WORLD_SIZE")
    if world is not None and local_world is not None and local_world > world:
        raise ConfigError(f"LOCAL_WORLD_SIZE={local_world} exceeds WORLD_SIZE={world}")
