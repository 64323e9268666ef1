"""Golden orders: pinned for a seed. A change here changes every user's sample stream — only deliberately."""

import numpy as np

from shardkit.order import Permutation, SampleOrder, ShuffleConfig, derive_key


def test_golden_orders():
    got = {m: SampleOrder(50, ShuffleConfig(mode=m, block_samples=4, group_blocks=3), 1234)
           .sample_ids(0, np.arange(20)).tolist() for m in ("none", "block", "full")}
    assert got["none"] == list(range(20))
    assert got["block"] == [47, 0, 39, 3, 45, 2, 38, 44, 37, 46, 1, 36, 19, 5, 18, 16, 7, 33, 34, 17]
    assert got["full"] == [23, 4, 24, 13, 49, 34, 43, 3, 48, 40, 42, 1, 16, 46, 39, 44, 2, 31, 27, 20]
    assert Permutation(10, derive_key(7))(np.arange(10)).tolist() == [5, 7, 4, 0, 6, 2, 8, 9, 3, 1]
    assert derive_key(1234, 5) == 9564375436626474488
