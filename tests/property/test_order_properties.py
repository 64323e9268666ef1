"""Property tests of shardkit.order: bijection, exactly-once per epoch, locality, schedule arithmetic."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.order import (
    Constant,
    Permutation,
    Piecewise,
    Ramp,
    SampleOrder,
    ShuffleConfig,
    parse_schedule,
    rank_slice,
    worker_batches,
)

# -- permutations ---------------------------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 5000), key=st.integers(0, 2**64 - 1), rounds=st.integers(2, 8))
def test_permutation_is_a_bijection(n, key, rounds):
    p = Permutation(n, key, rounds)
    img = p(np.arange(n))
    assert np.array_equal(np.sort(img), np.arange(n))
    assert np.array_equal(p.inverse(img), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(5001, 2**62), key=st.integers(0, 2**64 - 1), seed=st.integers(0, 2**31))
def test_permutation_inverse_on_large_domains(n, key, seed):
    p = Permutation(n, key)
    x = np.random.default_rng(seed).integers(0, n, size=256)
    y = p(x)
    assert int(y.min()) >= 0 and int(y.max()) < n
    assert np.array_equal(p.inverse(y), x)
    assert np.array_equal(p(p.inverse(x)), x)


# -- sample orders ----------------------------------------------------------------------------------------------

orders = st.builds(
    lambda n, mode, b, g, seed: SampleOrder(n, ShuffleConfig(mode=mode, block_samples=b, group_blocks=g), seed),
    st.integers(1, 3000), st.sampled_from(["none", "block", "full"]), st.integers(1, 400), st.integers(1, 12),
    st.integers(0, 2**40))


@settings(max_examples=150, deadline=None)
@given(orders, st.integers(0, 1000))
def test_every_sample_exactly_once_per_epoch(order, epoch):
    n = order.num_samples
    ids = order.sample_ids(epoch, np.arange(n))
    assert np.array_equal(np.sort(ids), np.arange(n))
    assert np.array_equal(order.positions_of(epoch, ids), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(orders, st.integers(0, 50), st.data())
def test_random_access_equals_sequential(order, epoch, data):
    n = order.num_samples
    whole = order.sample_ids(epoch, np.arange(n))
    pos = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40)))
    assert np.array_equal(order.sample_ids(epoch, pos), whole[pos])
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    assert np.array_equal(order.sample_ids(epoch, np.arange(lo, hi)), whole[lo:hi])


@settings(max_examples=80, deadline=None)
@given(orders, st.integers(0, 50))
def test_groups_read_only_their_blocks(order, epoch):
    ids = order.sample_ids(epoch, np.arange(order.num_samples))
    seen = []
    for g in range(order.num_groups):
        lo, hi = order.group_bounds(g)
        starts, stops = order.block_bounds(order.blocks_of_group(epoch, g))
        allowed = np.zeros(order.num_samples, dtype=bool)
        for a, b in zip(starts.tolist(), stops.tolist()):
            allowed[a:b] = True
        assert allowed.sum() == hi - lo  # the group's blocks hold exactly as many samples as it draws …
        assert allowed[ids[lo:hi]].all()  # … and every draw comes from them
        seen.append(order.blocks_of_group(epoch, g))
        assert np.array_equal(order.group_of_position(np.arange(lo, hi)), np.full(hi - lo, g))
    assert sorted(np.concatenate(seen).tolist()) == list(range(order.num_blocks))


@settings(max_examples=60, deadline=None)
@given(st.integers(64, 3000), st.sampled_from(["block", "full"]), st.integers(1, 200), st.integers(1, 8),
       st.integers(0, 2**40), st.integers(0, 100))
def test_each_epoch_has_a_new_order(n, mode, b, g, seed, epoch):
    o = SampleOrder(n, ShuffleConfig(mode=mode, block_samples=b, group_blocks=g), seed)
    assert not np.array_equal(o.sample_ids(epoch, np.arange(n)), o.sample_ids(epoch + 1, np.arange(n)))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 3000), st.integers(0, 2**40), st.integers(0, 20))
def test_one_group_block_shuffle_is_the_full_shuffle(n, b, seed, epoch):
    g = n // min(b, n)  # as many blocks per group as there are full blocks: a single group
    block = SampleOrder(n, ShuffleConfig(mode="block", block_samples=b, group_blocks=g), seed)
    full = SampleOrder(n, ShuffleConfig(mode="full"), seed)
    assert block.num_groups == 1
    assert np.array_equal(block.sample_ids(epoch, np.arange(n)), full.sample_ids(epoch, np.arange(n)))


# -- schedules --------------------------------------------------------------------------------------------------


def _megatron_size(start, increment, ramp_samples, final, consumed):
    if consumed > ramp_samples:
        return final
    return start + int(consumed / (ramp_samples / ((final - start) // increment))) * increment


def _piecewise_size(pieces, final, consumed_steps, consumed_tokens, tokens):
    for until, size in pieces:
        if (consumed_tokens if tokens else consumed_steps) < until:
            return size
    return final


ramps = st.builds(lambda s, inc, k, r: Ramp(start=s, increment=inc, ramp_samples=r, final=s + k * inc),
                  st.integers(1, 32), st.integers(1, 16), st.integers(1, 12), st.integers(1, 3000))
step_pieces = st.builds(
    lambda gaps, sizes, final: Piecewise(pieces=tuple(zip(itertools.accumulate(gaps), sizes)), final=final),
    st.lists(st.integers(1, 20), min_size=0, max_size=4), st.lists(st.integers(1, 30), min_size=4, max_size=4),
    st.integers(1, 30))
token_pieces = st.builds(
    lambda gaps, sizes, final, seq: Piecewise(pieces=tuple(zip(itertools.accumulate(gaps), sizes)), final=final,
                                              unit="tokens", seq_len=seq),
    st.lists(st.integers(1, 5000), min_size=1, max_size=4), st.lists(st.integers(1, 30), min_size=4, max_size=4),
    st.integers(1, 30), st.integers(1, 64))
schedules = st.one_of(st.builds(Constant, st.integers(1, 64)), ramps, step_pieces, token_pieces)


def _brute_force(s, count):
    """Sizes from the definition, batch by batch (consumed samples decide the next size)."""
    sizes, consumed = [], 0
    for b in range(count):
        if isinstance(s, Constant):
            size = s.batch_size
        elif isinstance(s, Ramp):
            size = _megatron_size(s.start_size, s.increment, s.ramp_samples, s.final, consumed)
        else:
            tokens = s.unit.value == "tokens"
            size = _piecewise_size(s.pieces, s.final, b, consumed * (s.seq_len or 0), tokens)
        sizes.append(size)
        consumed += size
    return sizes


@settings(max_examples=150, deadline=None)
@given(schedules)
def test_schedule_agrees_with_the_definition(s):
    count = 150
    sizes = _brute_force(s, count)
    starts = [0, *itertools.accumulate(sizes)]
    b = np.arange(count)
    assert s.size(b).tolist() == sizes
    assert s.start(np.arange(count + 1)).tolist() == starts
    for i in range(count):
        assert s.start(i + 1) - s.start(i) == s.size(i)
        assert s.batch_at_sample(starts[i]) == i == s.batch_at_sample(starts[i] + sizes[i] - 1)
        assert s.batch_starting_at(starts[i]) == i
    inside = np.arange(starts[-1])
    assert np.array_equal(s.batch_at_sample(inside), np.repeat(b, sizes))
    assert parse_schedule(s.to_json()) == s


# -- ranks and workers ------------------------------------------------------------------------------------------


@given(st.integers(0, 10**12), st.integers(1, 64), st.integers(1, 16))
def test_rank_slices_tile_the_batch(start, per, world):
    slices = [rank_slice(start, per * world, r, world) for r in range(world)]
    assert slices[0][0] == start and slices[-1][1] == start + per * world
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))
    assert all(hi - lo == per for lo, hi in slices)


@given(st.integers(1, 9), st.integers(0, 50), st.integers(0, 60))
def test_workers_partition_the_items_from_any_resume_point(workers, first, extra):
    stop = first + extra
    shares = [list(worker_batches(workers, w, first=first, stop=stop)) for w in range(workers)]
    merged = sorted(itertools.chain.from_iterable(shares))
    assert merged == list(range(first, stop))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


# -- tabulated group permutations (a speed path that must not change the order) -----------------------------


def _direct(order: SampleOrder, epoch: int, positions: np.ndarray) -> np.ndarray:
    """The order evaluated in calls too small to use a group table."""
    from shardkit.order import shuffle

    step = shuffle._TABLE_MIN_POSITIONS - 1
    return np.concatenate([order.sample_ids(epoch, positions[i:i + step]) for i in range(0, positions.size, step)])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40_000), block=st.integers(1, 4096), group=st.integers(1, 9),
       mode=st.sampled_from(["block", "full"]), seed=st.integers(0, 2**63), epoch=st.integers(0, 5),
       start=st.integers(0, 40_000), count=st.integers(2048, 12_000))
def test_tabulated_group_order_equals_direct_evaluation(n, block, group, mode, seed, epoch, start, count):
    order = SampleOrder(n, ShuffleConfig(mode=mode, block_samples=block, group_blocks=group), seed)
    positions = (np.arange(count, dtype=np.int64) + start) % n
    positions = np.sort(positions)  # one ascending run (how the loader asks), possibly spanning groups
    assert np.array_equal(order.sample_ids(epoch, positions), _direct(order, epoch, positions))
    # a second epoch through the same object: tables are keyed by (epoch, group), never reused across epochs
    assert np.array_equal(order.sample_ids(epoch + 1, positions), _direct(order, epoch + 1, positions))


def test_groups_larger_than_the_table_limit_are_evaluated_directly(monkeypatch):
    from shardkit.order import shuffle

    order = SampleOrder(10_000, ShuffleConfig(mode="full"), 7)
    positions = np.arange(10_000, dtype=np.int64)
    tabulated = order.sample_ids(0, positions)
    assert order._tables  # the whole-dataset group was tabulated
    monkeypatch.setattr(shuffle, "_TABLE_MAX_SAMPLES", 1000)
    fresh = SampleOrder(10_000, ShuffleConfig(mode="full"), 7)
    assert np.array_equal(fresh.sample_ids(0, positions), tabulated)
    assert not fresh._tables
    assert len(order._tables) <= shuffle._TABLES_KEPT
