"""The mapper keeps a bounded number of shards mapped: an epoch over many shards holds few descriptors."""

import os

import numpy as np
import pytest

from shardkit.engine import BatchFields
from shardkit.loader import Loader
from shardkit.writer import write_dataset

SEQ = 8


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    rng = np.random.default_rng(4)
    docs = [rng.integers(0, 5000, size=int(rng.integers(1, 30)), dtype=np.uint16) for _ in range(400)]
    path = tmp_path_factory.mktemp("lru") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=200, checksum_block_size=4096)
    return path


def _open_shard_files(path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += target.startswith(str(path)) and (target.endswith(".bin") or target.endswith(".idx"))
    return n


@pytest.mark.parametrize("shuffle", ["block", "full"])
def test_an_epoch_over_many_shards_keeps_few_mapped_and_the_same_batches(many_shards, shuffle):
    kw = dict(seq_len=SEQ, seed=3, batch_schedule=4, max_epochs=1, shuffle=shuffle, block_samples=16,
              fields=BatchFields(position_ids=True, cu_seqlens=True))
    first = Loader(many_shards, **kw, max_open_shards=1024)
    unbounded = [b["input_ids"].copy() for b in first]
    first.close()
    del first
    loader = Loader(many_shards, **kw, max_open_shards=4)
    assert loader.dataset.num_shards > 20
    peak = 0
    got = []
    for i, b in enumerate(loader):
        got.append(b["input_ids"].copy())
        if i % 5 == 0:
            peak = max(peak, _open_shard_files(many_shards))
    assert len(got) == len(unbounded) and all(np.array_equal(a, b) for a, b in zip(got, unbounded))
    assert loader.engine.mapper.held() <= 4
    assert peak <= 4 + 2, peak  # the budget, plus a shard the hint worker may hold for one madvise
