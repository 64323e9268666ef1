"""SkipMap: live item indices ↔ item indices of the unskipped stream, against a brute-force enumeration."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine.skips import SkipMap, parse_skips


@st.composite
def cases(draw):
    end = draw(st.integers(1, 60))
    per = draw(st.lists(st.integers(1, 4), min_size=end, max_size=end))  # items per batch (micro-batches)
    starts = np.concatenate([[0], np.cumsum(per)]).tolist()
    ranges = draw(st.lists(st.tuples(st.integers(0, end + 5), st.integers(0, 10)), max_size=6))
    return end, starts, parse_skips([[a, a + n] for a, n in ranges])


@settings(max_examples=300, deadline=None)
@given(cases())
def test_skip_map_matches_enumeration(case):
    end, starts, skips = case
    m = SkipMap(skips, lambda b: starts[b], end)
    delivered = [u for b in range(end) if not any(a <= b <= z for a, z in skips)
                 for u in range(starts[b], starts[b + 1])]
    live = np.arange(len(delivered), dtype=np.int64)
    assert m.to_actual(live).tolist() == delivered
    for b in range(end + 1):  # a batch's first item: its live index, or the next delivered item's
        nxt = next((i for i, u in enumerate(delivered) if u >= starts[b]), len(delivered))
        assert m.to_live(starts[b]) == nxt


def test_parse_merges_and_sorts():
    assert parse_skips([[10, 12], [3, 4], [5, 5], [11, 20]]) == ((3, 5), (10, 20))
    assert parse_skips(None) == () and parse_skips([]) == ()
