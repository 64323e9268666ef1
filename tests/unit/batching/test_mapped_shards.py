"""WindowSource keeps a bounded number of shards mapped: an epoch over many shards holds few descriptors."""

import os

import numpy as np
import pytest

from shardkit.batching import BatchFields, windows
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
def test_an_epoch_over_many_shards_keeps_few_mapped_and_the_same_batches(many_shards, monkeypatch, shuffle):
    kw = dict(seq_len=SEQ, seed=3, batch_schedule=4, max_epochs=1, shuffle=shuffle, block_samples=16,
              fields=BatchFields(position_ids=True, cu_seqlens=True))
    first = Loader(many_shards, **kw)
    unbounded = [b["input_ids"].copy() for b in first]
    # its last hint thread holds the source (every shard mapped) until done: not this test's subject
    first.readahead.wait()
    del first
    monkeypatch.setattr(windows, "MAPPED_SHARDS", 3)
    loader = Loader(many_shards, **kw)
    assert loader.dataset.num_shards > 20
    peak = 0
    got = []
    for i, b in enumerate(loader):
        got.append(b["input_ids"].copy())
        if i % 5 == 0:
            peak = max(peak, _open_shard_files(many_shards))
    assert len(got) == len(unbounded) and all(np.array_equal(a, b) for a, b in zip(got, unbounded))
    mapped = sum("tokens" in s.__dict__ or "doc_offsets" in s.__dict__ for s in loader.dataset.shards)
    # 3 shards in use plus what the readahead hinted for the next group (a few shards of 200 tokens)
    assert mapped <= 3 + 8, mapped
    assert peak <= 2 * (3 + 8), peak
