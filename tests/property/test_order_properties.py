import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.order import (
    Constant,
    Permutation,
    Piecewise,
    Ramp,
    SampleOrder,
    ShuffleConfig,
    parse_schedule,
    rank_slice,
)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5000), key=st.integers(0, 2**64 - 1))
def test_permutation_is_a_bijection(n, key):
    p = Permutation(n, key)
    img = p(np.arange(n))
    assert np.array_equal(np.sort(img), np.arange(n))
    assert np.array_equal(p.inverse(img), np.arange(n))


@settings(max_examples=50, deadline=None)
@given(n=st.integers(2**32, 2**62), key=st.integers(0, 2**64 - 1), seed=st.integers(0, 2**31))
def test_permutation_inverse_on_huge_domains(n, key, seed):
    p = Permutation(n, key)
    x = np.random.default_rng(seed).integers(0, n, size=64)
    y = p(x)
    assert int(y.min()) >= 0 and int(y.max()) < n
    assert np.array_equal(p.inverse(y), x)


orders = st.builds(
    lambda n, mode, b, g, seed: (n, ShuffleConfig(mode=mode, block_samples=b, group_blocks=g), seed),
    st.integers(1, 3000), st.sampled_from(["none", "block", "full"]), st.integers(1, 200), st.integers(1, 12),
    st.integers(0, 2**40))


@settings(max_examples=150, deadline=None)
@given(orders, st.integers(0, 50))
def test_every_sample_exactly_once_per_epoch(spec, epoch):
    n, cfg, seed = spec
    ids = SampleOrder(n, cfg, seed).sample_ids(epoch, np.arange(n))
    assert np.array_equal(np.sort(ids), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(orders, st.integers(0, 50), st.data())
def test_random_access_equals_sequential(spec, epoch, data):
    n, cfg, seed = spec
    o = SampleOrder(n, cfg, seed)
    full = o.sample_ids(epoch, np.arange(n))
    pos = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=30)))
    assert np.array_equal(o.sample_ids(epoch, pos), full[pos])


@settings(max_examples=60, deadline=None)
@given(st.integers(200, 3000), st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**30))
def test_block_shuffle_locality_and_new_order_each_epoch(n, b, g, seed):
    o = SampleOrder(n, ShuffleConfig(mode="block", block_samples=b, group_blocks=g), seed)
    e0, e1 = o.sample_ids(0, np.arange(n)), o.sample_ids(1, np.arange(n))
    assert not np.array_equal(e0, e1)
    for group in range(o.num_groups):
        lo = group * o.group_samples
        hi = n if group == o.num_groups - 1 else lo + o.group_samples
        blocks = set(o.blocks_of_group(0, group).tolist())
        drawn = e0[lo:hi]
        in_blocks = np.isin(drawn // o.block, list(blocks))
        tail = drawn >= o.full_blocks * o.block
        assert np.all(in_blocks | tail)  # a group reads only its blocks (and the tail, in the last group)


def _brute(schedule_size, b):
    return sum(schedule_size(i) for i in range(b))


schedules = st.one_of(
    st.builds(Constant, st.integers(1, 64)),
    st.builds(lambda s, inc, k, r: Ramp(start=s, increment=inc, ramp_samples=r, final=s + k * inc),
              st.integers(1, 32), st.integers(1, 16), st.integers(0, 6), st.integers(1, 2000)),
    st.builds(lambda steps, sizes, final: Piecewise(pieces=tuple(zip(np.cumsum(steps).tolist(), sizes)),
                                                    final=final),
              st.lists(st.integers(1, 20), min_size=1, max_size=4), st.lists(st.integers(1, 30), min_size=4,
                                                                               max_size=4), st.integers(1, 30)),
    st.builds(lambda toks, sizes, final, L: Piecewise(pieces=tuple(zip(np.cumsum(toks).tolist(), sizes)),
                                                      final=final, unit="tokens", seq_len=L),
              st.lists(st.integers(1, 5000), min_size=1, max_size=3), st.lists(st.integers(1, 30), min_size=3,
                                                                                 max_size=3),
              st.integers(1, 30), st.integers(1, 64)),
)


@settings(max_examples=150, deadline=None)
@given(schedules)
def test_schedule_prefix_sums_and_inverse(s):
    S = 0
    for b in range(120):
        assert s.start(b) == S
        size = s.size(b)
        assert s.batch_at_sample(S) == b and s.batch_at_sample(S + size - 1) == b
        S += size
    assert parse_schedule(s.to_json()) == s


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 32), st.integers(1, 16), st.integers(1, 6), st.integers(1, 2000))
def test_ramp_matches_megatron_formula(start, inc, k, ramp):
    r = Ramp(start=start, increment=inc, ramp_samples=ramp, final=start + k * inc)
    S = 0
    for b in range(100):
        expected = min(start + k * inc, start + math.floor(S * k / ramp) * inc)
        assert r.size(b) == expected
        S += expected


def test_piecewise_tokens_boundary_rounds_to_batch():
    p = Piecewise(pieces=((1000, 4),), final=8, unit="tokens", seq_len=100)
    # batches of 4 samples = 400 tokens: batches 0,1,2 start below 1000 tokens, batch 3 starts at 1200
    assert [p.size(b) for b in range(5)] == [4, 4, 4, 8, 8]


@given(st.integers(0, 10**9), st.integers(1, 64), st.integers(1, 16))
def test_rank_slices_tile_the_batch(start, per, world):
    size = per * world
    slices = [rank_slice(start, size, r, world) for r in range(world)]
    assert slices[0][0] == start and slices[-1][1] == start + size
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))


def test_bad_arguments():
    with pytest.raises(ConfigError, match="divide"):
        rank_slice(0, 10, 0, 3)
    with pytest.raises(ConfigError):
        Ramp(start=4, increment=3, ramp_samples=10, final=12)
    with pytest.raises(ConfigError):
        Permutation(0, 1)
    with pytest.raises(ConfigError, match="shuffle"):
        ShuffleConfig(mode="sideways")
    with pytest.raises(ConfigError, match="unknown batch schedule"):
        parse_schedule({"linear": 3})
