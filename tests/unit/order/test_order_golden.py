"""Golden orders pinned for a seed. A change here changes every user's sample stream: change only deliberately
(and say so in the changelog — resumed runs would silently see different data)."""

import json
import os
import subprocess
import sys

import numpy as np

from shardkit.order import Permutation, SampleOrder, ShuffleConfig, derive_key

GOLDEN = {  # SampleOrder(50, block_samples=4, group_blocks=3, seed=1234): epoch 0 positions 0..19, epoch 1 0..4
    "none": ([*range(20)], [0, 1, 2, 3, 4]),
    "block": ([19, 18, 45, 2, 1, 44, 16, 0, 17, 3, 47, 46, 37, 12, 13, 15, 14, 8, 10, 9], [11, 7, 37, 39, 9]),
    "full": ([18, 37, 27, 6, 46, 0, 16, 44, 25, 47, 12, 5, 2, 42, 7, 38, 4, 31, 17, 32], [4, 8, 19, 44, 32]),
}
GOLDEN_BLOCKS = [[4, 11, 0], [9, 2, 3], [7, 10, 5], [6, 1, 8, 12]]  # epoch 0, groups 0..3 (12 = the tail)


def _orders() -> dict[str, list[list[int]]]:
    out = {}
    for mode in GOLDEN:
        o = SampleOrder(50, ShuffleConfig(mode=mode, block_samples=4, group_blocks=3), 1234)
        out[mode] = [o.sample_ids(0, np.arange(20)).tolist(), o.sample_ids(1, np.arange(5)).tolist()]
    return out


def test_golden_sample_orders():
    assert _orders() == {m: [list(a), list(b)] for m, (a, b) in GOLDEN.items()}
    o = SampleOrder(50, ShuffleConfig(mode="block", block_samples=4, group_blocks=3), 1234)
    assert [o.blocks_of_group(0, g).tolist() for g in range(4)] == GOLDEN_BLOCKS


def test_golden_permutation_and_keys():
    assert derive_key(1234, 5) == 9564375436626474488
    assert Permutation(10, derive_key(7))(np.arange(10)).tolist() == [6, 8, 5, 0, 1, 4, 3, 9, 2, 7]
    big = Permutation(2**40 + 3, derive_key(7))
    assert big(np.array([0, 1, 2**40 + 2])).tolist() == [823065719150, 820393446955, 775712911107]


def test_same_order_in_a_fresh_process():
    code = ("import json, numpy as np; from shardkit.order import SampleOrder, ShuffleConfig;"
            "o = SampleOrder(10**9, ShuffleConfig(mode='block'), 77);"
            "print(json.dumps(o.sample_ids(3, np.arange(5 * 10**8, 5 * 10**8 + 64)).tolist()))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    here = SampleOrder(10**9, ShuffleConfig(mode="block"), 77).sample_ids(3, np.arange(5 * 10**8, 5 * 10**8 + 64))
    assert json.loads(out.stdout) == here.tolist()
