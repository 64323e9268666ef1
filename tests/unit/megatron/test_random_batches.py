"""`MegatronRandomBatches` draws the ids Megatron-LM's MegatronPretrainingRandomSampler draws (a transcription
of it, tests/support/megatron_samplers.py: Megatron-LM's samplers are not part of megatron-core)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.megatron_samplers import megatron_pretraining_random_sampler

from shardkit.errors import ResumeError
from shardkit.format import open_dataset
from shardkit.megatron import MegatronConfig, Split, build_order, prefixes_of
from shardkit.writer import write_dataset

torch = pytest.importorskip("torch")
from shardkit.megatron.random_batches import MegatronRandomBatches  # noqa: E402


class _Order:
    """An order of `n` samples: the sampler only asks its length and config (ids are what is compared)."""

    def __init__(self, n):
        self.n = n
        self.config = MegatronConfig(sequence_length=8, random_seed=1)

    def __len__(self):
        return self.n


@settings(max_examples=60, deadline=None)
@given(total=st.integers(8, 3000), mbs=st.integers(1, 6), world=st.integers(1, 4), sharding=st.booleans(),
       data=st.data())
def test_ids_equal_the_random_sampler(total, mbs, world, sharding, data):
    step = mbs * world
    if total < step:
        return
    rank = data.draw(st.integers(0, world - 1))
    active = total - total % step
    consumed = data.draw(st.integers(0, 3 * active // step)) * step  # any step, in the first three epochs
    ours = MegatronRandomBatches(_Order(total), micro_batch_size=mbs, rank=rank, world_size=world,
                                 consumed_samples=consumed, data_sharding=sharding)
    want = list(megatron_pretraining_random_sampler(total, consumed, mbs, rank, world, sharding))
    got = list(ours.sample_ids())
    assert [g.tolist() for g in got] == [w for w, _ in want]


def test_tokens_state_and_epochs(tmp_path):
    rng = np.random.default_rng(0)
    write_dataset(tmp_path / "ds", [rng.integers(0, 900, size=int(rng.integers(3, 80)), dtype=np.uint16)
                                    for _ in range(200)], max_tokens_per_shard=3000, checksum_block_size=4096)
    ds = open_dataset(tmp_path / "ds")
    order = build_order(prefixes_of(ds)[:2], [0.5, 0.5], 300, Split.train,
                        MegatronConfig(sequence_length=16, random_seed=3))
    it = MegatronRandomBatches(order, micro_batch_size=4, rank=1, world_size=2)
    first = [b for _, b in zip(range(5), it)]
    for b in first:
        for row, i in zip(b["tokens"], b["sample_ids"]):
            np.testing.assert_array_equal(row, order.sample(int(i)))
    state = it.state_dict()
    assert state["consumed_samples"] == 5 * 8
    again = MegatronRandomBatches(order, micro_batch_size=4, rank=1, world_size=2)
    again.load_state_dict(state)
    np.testing.assert_array_equal(next(iter(again))["sample_ids"], next(iter(it))["sample_ids"])
    # the next epoch is another permutation (seeded by the epoch number), as Megatron-LM's cyclic iterator
    active = len(order) - len(order) % 8
    nxt = MegatronRandomBatches(order, micro_batch_size=4, rank=1, world_size=2, consumed_samples=active)
    assert next(iter(nxt))["sample_ids"].tolist() != first[0]["sample_ids"].tolist()
    with pytest.raises(ResumeError, match="data_sharding"):
        MegatronRandomBatches(order, micro_batch_size=4, data_sharding=False).load_state_dict(state)
    with pytest.raises(ResumeError, match="multiple"):
        next(iter(MegatronRandomBatches(order, micro_batch_size=4, world_size=2, consumed_samples=12)))
