"""`item_boundaries`: each item's cu_seqlens and max_seqlen from a slab's segment starts, by a slice per item
(few items) or one vectorised pass (many), both equal to the boundaries computed item by item."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine import packed_rows
from shardkit.engine.packed_rows import item_boundaries


def _slab(rng, rows, seq_len):
    """cu (slab coordinates, ending with rows·seq_len) and ptr of rows with random segment starts."""
    per_row = [np.concatenate([[0], np.sort(rng.choice(np.arange(1, seq_len), size=int(rng.integers(0, min(6, seq_len - 1) + 1)),
                                                      replace=False))]) for _ in range(rows)]
    counts = np.array([p.size for p in per_row])
    ptr = np.concatenate([[0], np.cumsum(counts)])
    cu = np.append(np.concatenate([p + r * seq_len for r, p in enumerate(per_row)]), rows * seq_len).astype(np.int32)
    return cu, ptr


def _expected(cu, ptr, bounds, seq_len):
    cus, longest = [], []
    for a, z in zip(bounds[:-1], bounds[1:]):
        starts = cu[ptr[a]:ptr[z]] - a * seq_len
        c = np.append(starts, (z - a) * seq_len).astype(np.int32)
        cus.append(c)
        longest.append(int(np.diff(c).max()))
    return cus, longest


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), rows=st.integers(1, 60), seq_len=st.integers(2, 40), m=st.integers(1, 12),
       i0=st.integers(0, 5), few=st.sampled_from([0, 1000]))
def test_both_ways_give_the_item_by_item_boundaries(seed, rows, seq_len, m, i0, few):
    rng = np.random.default_rng(seed)
    cu, ptr = _slab(rng, rows, seq_len)
    i0 = min(i0, rows - 1)
    bounds = np.append(np.arange(i0, rows, m, dtype=np.int64), rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(packed_rows, "_FEW_ITEMS", few)  # 0: always vectorised; 1000: always a slice per item
        cus, longest = item_boundaries(cu, ptr, bounds, seq_len)
    want_cus, want_longest = _expected(cu, ptr, bounds, seq_len)
    assert longest == want_longest
    assert len(cus) == len(want_cus)
    for got, want in zip(cus, want_cus):
        assert got.dtype == np.int32 and np.array_equal(got, want)
