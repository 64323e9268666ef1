"""Cache-block geometry and the accounting/eviction rules (pure functions), including a property test."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.remote.blocks import (
    ABSENT,
    FS_BLOCK,
    PRESENT,
    RESERVED,
    BlockMap,
    charge_of,
    eviction_order,
    make_room,
    used_bytes,
)


def _brute(bm: BlockMap, lo: int, hi: int) -> set[int]:
    """Block ids of global tokens [lo, hi), token by token."""
    out = set()
    for t in range(lo, hi):
        s = int(np.searchsorted(bm.token_offsets, t, side="right")) - 1
        out.add(int(bm.base[s]) + (t - int(bm.token_offsets[s])) * bm.itemsize // bm.block_size)
    return out


def test_geometry_matches_a_token_by_token_walk():
    bm = BlockMap.build([100, 0, 64, 6, 250], block_size=16, itemsize=2)  # an empty shard, short last blocks
    assert bm.base.tolist() == [0, 7, 7, 11, 12, 28]
    assert bm.block_lengths().tolist()[:8] == [16, 16, 16, 16, 16, 16, 4, 16]
    assert bm.byte_range(6) == (0, 96, 100)
    assert bm.byte_range(11) == (3, 0, 6)
    total = int(bm.token_offsets[-1])
    rng = np.random.default_rng(0)
    for width in (1, 3, 9, 40):
        lo = rng.integers(0, total - width, size=30)
        got = bm.token_ranges(lo, lo + width)
        assert set(got.tolist()) == set().union(*(_brute(bm, int(a), int(a) + width) for a in lo))
        ordered = bm.token_ranges(lo, lo + width, ordered=True)
        assert sorted(ordered.tolist()) == got.tolist()
        first_use = []
        for a in lo:
            for g in sorted(_brute(bm, int(a), int(a) + width)):
                if g not in first_use:
                    first_use.append(g)
        assert ordered.tolist() == first_use


def test_rows_cross_into_the_next_shard():
    bm = BlockMap.build([64, 64], block_size=32, itemsize=2)  # 32 tokens per shard, 16 per block
    assert bm.rows(0, np.array([30]), 5).tolist() == [1, 2]  # tokens 30..34: end of shard 0, start of shard 1


def test_charges_bound_the_allocation():
    assert charge_of(1) == 3 * FS_BLOCK
    assert charge_of(FS_BLOCK) == 3 * FS_BLOCK
    assert charge_of(16 << 20) == (16 << 20) + 2 * FS_BLOCK


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_accounting_never_exceeds_the_limit_and_never_evicts_a_pinned_block(data):
    """A random run of reserve / commit / abort / pin / unpin against the cache rules."""
    n = data.draw(st.integers(1, 24), label="blocks")
    charge = np.asarray(data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), dtype=np.int64) * FS_BLOCK
    limit = int(data.draw(st.integers(1, 60))) * FS_BLOCK
    state = np.zeros(n, dtype=np.uint8)
    stamp = np.zeros(n, dtype=np.int64)
    pinned = np.zeros(n, dtype=bool)
    evicted: list[int] = []

    def try_evict(b: int) -> bool:
        if pinned[b]:
            return False
        state[b] = ABSENT
        evicted.append(b)
        return True

    for clock in range(1, data.draw(st.integers(1, 60), label="steps") + 1):
        op = data.draw(st.sampled_from(["reserve", "commit", "abort", "pin", "unpin"]))
        g = data.draw(st.integers(0, n - 1))
        if op == "reserve" and state[g] == ABSENT:
            evicted.clear()

            before = used_bytes(state, charge)
            cands = [(int(charge[b]), lambda b=b: try_evict(b)) for b in eviction_order(state, stamp).tolist()]
            after = make_room(int(charge[g]), before, limit, cands)
            assert after == used_bytes(state, charge) or after is None
            if after is not None:
                state[g] = RESERVED
            assert not pinned[evicted].any()
            # least recently used first: nothing evicted is newer than a PRESENT block left unpinned
            kept = [b for b in range(n) if state[b] == PRESENT and not pinned[b]]
            if evicted and kept:
                assert max(stamp[evicted]) <= min(stamp[kept])
        elif op == "commit" and state[g] == RESERVED:
            state[g], stamp[g] = PRESENT, clock
        elif op == "abort" and state[g] == RESERVED:
            state[g] = ABSENT
        elif op == "pin":
            pinned[g] = True
        elif op == "unpin":
            pinned[g] = False
        assert used_bytes(state, charge) <= limit


def test_make_room_refuses_what_cannot_fit():
    assert make_room(10, 0, 5, []) is None
    assert make_room(4, 3, 5, [(3, lambda: False)]) is None
    assert make_room(4, 3, 5, [(3, lambda: True)]) == 0
