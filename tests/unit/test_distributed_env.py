"""Rank/world detection: torch.distributed first, then torchrun's and srun's variables, strict on bad values."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from shardkit import distributed_env
from shardkit.distributed_env import detect_rank_world, detect_source, resolve_rank_world
from shardkit.errors import ConfigError

_FAKE = "shardkit-tests.fake-torch-distributed"  # never touch the real module: re-importing torch aborts

_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
         "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_LOCALID")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No launcher variables and no initialised process group unless a test sets them."""
    for v in _VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(distributed_env, "_TORCH", _FAKE)  # where the module looks for torch.distributed
    return monkeypatch


def fake_group(monkeypatch, rank: int, world: int, *, initialized: bool = True) -> None:
    stub = types.ModuleType(_FAKE)
    stub.is_available = lambda: True
    stub.is_initialized = lambda: initialized
    stub.get_rank = lambda: rank
    stub.get_world_size = lambda: world
    monkeypatch.setitem(sys.modules, _FAKE, stub)


# -- sources and precedence --------------------------------------------------------------------------------
def test_default_is_rank_0_of_1():
    assert detect_source({}) == (0, 1, "default")
    assert detect_rank_world() == (0, 1)


def test_torchrun_variables():
    assert detect_source({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}) == \
        (5, 8, "RANK/WORLD_SIZE")
    assert detect_rank_world({"RANK": " 3 ", "WORLD_SIZE": "4"}) == (3, 4)  # surrounding blanks are fine


def test_srun_step_variables():
    env = {"SLURM_PROCID": "6", "SLURM_NTASKS": "16", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "6"}
    assert detect_source(env) == (6, 16, "SLURM_PROCID/SLURM_NTASKS")
    # the step's own task count wins over the job's (srun -n 4 inside a 16-task allocation)
    assert detect_source({**env, "SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4"}) == \
        (2, 4, "SLURM_PROCID/SLURM_STEP_NUM_TASKS")
    assert detect_source({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEPID": "3"})[:2] == (1, 2)


def test_slurm_batch_script_is_one_process():
    """sbatch exports SLURM_PROCID=0 and the job's SLURM_NTASKS in the batch script itself: without an srun
    step that is one process, and reading 1/N of the data would be silently wrong."""
    assert detect_source({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}) == (0, 1, "default")


def test_torchrun_variables_win_over_slurm():
    """torchrun started by srun once per node: SLURM_PROCID is the node, RANK the process."""
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "RANK": "9", "WORLD_SIZE": "16"}
    assert detect_source(env) == (9, 16, "RANK/WORLD_SIZE")


def test_initialised_process_group_wins(clean_env):
    fake_group(clean_env, 2, 4)
    assert detect_source({"RANK": "0", "WORLD_SIZE": "1"}) == (2, 4, "torch.distributed")


def test_uninitialised_process_group_is_ignored(clean_env):
    fake_group(clean_env, 2, 4, initialized=False)
    assert detect_source({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2, "RANK/WORLD_SIZE")


def test_reads_os_environ(clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    assert detect_rank_world() == (1, 2)


# -- bad values: ConfigError naming the variable --------------------------------------------------------------
@pytest.mark.parametrize(("env", "names"), [
    ({"RANK": "one", "WORLD_SIZE": "4"}, "RANK='one'"),
    ({"RANK": "1", "WORLD_SIZE": "4.0"}, "WORLD_SIZE='4.0'"),
    ({"RANK": "-1", "WORLD_SIZE": "4"}, "RANK='-1'"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, r"RANK=4 is not in \[0, WORLD_SIZE=4\)"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
    ({"RANK": "3"}, "RANK=3 is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "8"}, "WORLD_SIZE=8 is set but RANK is not"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=2 is not in"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "8"}, "LOCAL_WORLD_SIZE=8 exceeds WORLD_SIZE=4"),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, r"SLURM_PROCID=2 is not in \[0, SLURM_NTASKS=2\)"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "two", "SLURM_STEP_ID": "0"}, "SLURM_NTASKS='two'"),
    ({"LOCAL_RANK": "3"}, "LOCAL_RANK=3: this is one of several"),
    ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_RANK=0, LOCAL_WORLD_SIZE=4: this is one"),
])
def test_bad_environment_names_the_variable(env, names):
    with pytest.raises(ConfigError, match=names):
        detect_rank_world(env)


def test_empty_values_are_unset_and_local_rank_alone_is_fine():
    assert detect_rank_world({"RANK": "", "WORLD_SIZE": " "}) == (0, 1)
    assert detect_rank_world({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) == (0, 1)


# -- explicit values --------------------------------------------------------------------------------------
def test_explicit_pair_wins_over_environment():
    env = {"RANK": "3", "WORLD_SIZE": "4"}
    assert resolve_rank_world(1, 2, environ=env) == (1, 2)  # a data-parallel group smaller than the world
    assert resolve_rank_world(0, 4, environ=env) == (0, 4)  # tools compute other ranks' slices under torchrun
    assert resolve_rank_world(np.int64(1), np.int32(2), environ={}) == (1, 2)


def test_explicit_pair_is_not_spoiled_by_a_bad_environment():
    assert resolve_rank_world(0, 1, environ={"RANK": "garbage"}) == (0, 1)


@pytest.mark.parametrize(("rank", "world", "match"), [
    (2, 2, r"rank=2 is not in \[0, world_size=2\)"),
    (-1, 2, "rank must be ≥ 0"),
    (0, 0, "world_size must be ≥ 1"),
    (True, 2, "rank must be an integer"),
    (0, 2.0, "world_size must be an integer"),
    ("0", 2, "rank must be an integer"),
])
def test_explicit_values_are_checked(rank, world, match):
    with pytest.raises(ConfigError, match=match):
        resolve_rank_world(rank, world, environ={})


def test_half_pair_must_agree_with_detection():
    env = {"RANK": "3", "WORLD_SIZE": "4"}
    assert resolve_rank_world(3, None, environ=env) == (3, 4)
    assert resolve_rank_world(None, 4, environ=env) == (3, 4)
    with pytest.raises(ConfigError, match="rank=1 was passed without world_size, but RANK/WORLD_SIZE says"):
        resolve_rank_world(1, None, environ=env)
    with pytest.raises(ConfigError, match="world_size=2 was passed without rank"):
        resolve_rank_world(None, 2, environ=env)
    # nothing detected: the other half is the default, and the range check applies
    assert resolve_rank_world(None, 4, environ={}) == (0, 4)
    with pytest.raises(ConfigError, match=r"rank=1 is not in \[0, world_size=1\)"):
        resolve_rank_world(1, None, environ={})


def test_explicit_pair_against_an_initialised_process_group(clean_env):
    fake_group(clean_env, 5, 8)
    assert resolve_rank_world(1, 2) == (1, 2)  # data-parallel group of a 4-way model-parallel job
    assert resolve_rank_world(5, 8) == (5, 8)
    assert resolve_rank_world(0, 1) == (0, 1)  # the whole global batch, for tools
    with pytest.raises(ConfigError, match="world_size=16 but the torch.distributed process group has only 8"):
        resolve_rank_world(5, 16)
    with pytest.raises(ConfigError, match="not LOCAL_RANK"):
        resolve_rank_world(1, 8)  # LOCAL_RANK of the second node passed as the rank
    with pytest.raises(ConfigError, match="rank=1 was passed without world_size, but torch.distributed says"):
        resolve_rank_world(1, None)


def test_real_gloo_process_group(tmp_path, clean_env):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    clean_env.setattr(distributed_env, "_TORCH", "torch.distributed")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert detect_source({"RANK": "3", "WORLD_SIZE": "4"}) == (0, 1, "torch.distributed")
        with pytest.raises(ConfigError, match="has only 1 processes"):
            resolve_rank_world(0, 2)
    finally:
        dist.destroy_process_group()
    assert torch.distributed.is_initialized() is False
    assert detect_source({}) == (0, 1, "default")


# -- the loader uses it ----------------------------------------------------------------------------------
@pytest.fixture()
def tiny_dataset(tmp_path):
    from shardkit.writer import write_dataset

    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, size=50, dtype=np.uint16) for _ in range(40)]
    write_dataset(tmp_path / "ds", docs, max_tokens_per_shard=600, checksum_block_size=4096)
    return tmp_path / "ds"


def test_loader_reads_the_launcher_environment(tiny_dataset, clean_env):
    from shardkit import Loader

    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    loader = Loader(tiny_dataset, seq_len=8, batch_schedule=4, shuffle="none")
    assert (loader.rank, loader.world_size) == (1, 2)
    batch = next(iter(loader))
    whole = Loader(tiny_dataset, seq_len=8, batch_schedule=4, shuffle="none", rank=0, world_size=1)
    assert (batch["input_ids"] == next(iter(whole))["input_ids"][2:]).all()  # rank 1's half of the batch
    clean_env.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="WORLD_SIZE='two'"):
        Loader(tiny_dataset, seq_len=8, batch_schedule=4)
