"""Shuffle modes, the block geometry the prefetcher uses, and ShuffleConfig validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.order import SampleOrder, ShuffleConfig, ShuffleMode


def _order(n, mode="block", bs=4, g=3, seed=1234):
    return SampleOrder(n, ShuffleConfig(mode=mode, block_samples=bs, group_blocks=g), seed)


def test_mode_parsing():
    assert ShuffleMode.parse("Block") is ShuffleMode.BLOCK
    assert ShuffleMode.parse(" none ") is ShuffleMode.NONE
    assert ShuffleMode.parse(ShuffleMode.FULL) is ShuffleMode.FULL
    with pytest.raises(ConfigError, match="none, block, full"):
        ShuffleMode.parse("sideways")
    assert ShuffleConfig(mode="full").mode is ShuffleMode.FULL


@pytest.mark.parametrize("field,value", [("block_samples", 0), ("group_blocks", -1), ("block_samples", 2.5),
                                         ("group_blocks", True)])
def test_config_validation(field, value):
    with pytest.raises(ConfigError, match=field):
        ShuffleConfig(**{field: value})


def test_default_geometry():
    c = ShuffleConfig.default("block", seq_len=2048, itemsize=2)
    assert (c.block_samples, c.group_blocks) == (8192, 8)  # 32 MiB of tokens, 8 blocks a group
    c = ShuffleConfig.default("block", 1000, 2)  # 16,777 samples fit in 32 MiB → rounded down to 2**14
    assert c.block_samples == 16384
    assert ShuffleConfig.default("full", 2048, 4, num_samples=100).block_samples == 100  # never above n
    assert ShuffleConfig.default("none", 2048, 2, num_samples=10).block_samples == 10
    assert ShuffleConfig.default("block", 10**9, 4).block_samples == 1
    assert ShuffleConfig.from_json(c.to_json()) == c
    with pytest.raises(ConfigError):
        ShuffleConfig.from_json({"mode": "block", "blocks": 3})


def test_geometry_and_tail():
    o = _order(50)  # 12 full blocks of 4 + a tail of 2; groups of 3 blocks
    assert (o.full_blocks, o.tail, o.num_blocks, o.num_groups) == (12, 2, 13, 4)
    assert (o.group_samples, o.last_group_samples, o.block) == (12, 14, 4)
    assert o.group_bounds(0) == (0, 12) and o.group_bounds(3) == (36, 50)
    assert o.group_of_position(np.array([0, 11, 12, 35, 36, 49])).tolist() == [0, 0, 1, 2, 3, 3]
    last = o.blocks_of_group(0, 3)
    assert len(last) == 4 and last[-1] == 12  # the tail block joins the last group
    starts, stops = o.block_bounds(np.array([0, 12]))
    assert starts.tolist() == [0, 48] and stops.tolist() == [4, 50]
    covered = sorted(np.concatenate([o.blocks_of_group(5, g) for g in range(o.num_groups)]).tolist())
    assert covered == list(range(13))


def test_none_is_the_identity_with_the_same_geometry():
    o = _order(50, "none")
    assert o.sample_ids(7, np.arange(50)).tolist() == list(range(50))
    assert o.blocks_of_group(7, 1).tolist() == [3, 4, 5]
    assert o.positions_of(3, np.arange(50)).tolist() == list(range(50))


def test_full_equals_block_with_a_single_group():
    n = 1001
    full = SampleOrder(n, ShuffleConfig(mode="full"), 9)
    assert (full.num_groups, full.num_blocks) == (1, 1)
    for bs, g in [(n, 1), (100, 11), (1, 5000), (2000, 1)]:
        block = _order(n, "block", bs, g, seed=9)
        assert block.num_groups == 1
        assert np.array_equal(block.sample_ids(4, np.arange(n)), full.sample_ids(4, np.arange(n)))


def test_sample_ids_inverse_shapes_and_scalars():
    o = _order(1000, "block", bs=7, g=5)
    pos = np.arange(1000).reshape(10, 100)
    ids = o.sample_ids(2, pos)
    assert ids.shape == (10, 100)
    assert np.array_equal(o.positions_of(2, ids), pos)
    assert o.sample_id(2, 17) == ids.reshape(-1)[17]
    assert o.sample_ids(2, np.array([], dtype=np.int64)).shape == (0,)


@pytest.mark.parametrize("mode,bs,g", [("block", 1000, 7), ("block", 8192, 8), ("full", 1, 1)])
def test_long_requests_are_processed_in_slices_with_the_same_result(mode, bs, g):
    o = _order(400_000, mode, bs, g)
    pos = np.arange(400_000)
    whole = o.sample_ids(1, pos)  # 7 slices of 65,536 positions
    parts = np.concatenate([o.sample_ids(1, pos[i:i + 50_000]) for i in range(0, 400_000, 50_000)])
    assert np.array_equal(whole, parts)
    assert np.array_equal(np.sort(whole), pos)
    assert np.array_equal(o.positions_of(1, whole), pos)


def test_epochs_and_seeds_change_the_order():
    a = _order(500, "block", 10, 4)
    e0, e1 = a.sample_ids(0, np.arange(500)), a.sample_ids(1, np.arange(500))
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, _order(500, "block", 10, 4, seed=1235).sample_ids(0, np.arange(500)))
    assert not np.array_equal(a.blocks_of_group(0, 0), a.blocks_of_group(1, 0))


def test_large_datasets_are_cheap():
    o = SampleOrder(10**12, ShuffleConfig(mode="block"), 3)  # 122M blocks: nothing is materialised
    pos = np.arange(10**12 - 1000, 10**12)
    ids = o.sample_ids(5, pos)
    assert np.array_equal(o.positions_of(5, ids), pos)
    assert len(np.unique(ids)) == 1000


def test_bad_arguments():
    o = _order(50)
    with pytest.raises(ConfigError, match="out of range"):
        o.sample_ids(0, np.array([50]))
    with pytest.raises(ConfigError, match="epoch"):
        o.sample_ids(-1, np.arange(3))
    with pytest.raises(ConfigError, match="group 4"):
        o.blocks_of_group(0, 4)
    with pytest.raises(ConfigError, match="block id"):
        o.block_bounds(np.array([13]))
    with pytest.raises(ConfigError, match="num_samples"):
        SampleOrder(0, ShuffleConfig(), 1)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 400), st.integers(0, 3), st.integers(0, 40))
def test_group_after_is_k_single_steps_across_epochs(n, epoch, k):
    """What the remote prefetch asks for k groups ahead is where delivery really is k groups later."""
    o = _order(n)
    g0 = (epoch * 7) % o.num_groups
    e, g = epoch, g0
    for _ in range(k):
        e, g = (e, g + 1) if g + 1 < o.num_groups else (e + 1, 0)
    assert o.group_after(epoch, g0, k) == (e, g)
