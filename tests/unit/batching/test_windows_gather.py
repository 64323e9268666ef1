"""WindowSource.gather: windows from several shards in one copy equal the flat stream's slices, in order."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.batching import windows
from shardkit.batching.windows import WindowSource
from shardkit.format import open_dataset
from shardkit.loader import Loader
from shardkit.writer import write_dataset


@pytest.fixture(scope="module", params=["uint16", "int32"])
def layout(request, tmp_path_factory):
    """Shards of very different sizes, some shorter than a window (so windows cross two or more shards)."""
    rng = np.random.default_rng(11)
    high = 60000 if request.param == "uint16" else 200_000
    docs = [rng.integers(0, high, size=int(rng.integers(1, 40))).astype(request.param) for _ in range(250)]
    path = tmp_path_factory.mktemp(f"gather-{request.param}") / "ds"
    write_dataset(path, docs, dtype=request.param, max_tokens_per_shard=97)
    return path, np.concatenate(docs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), seq_len=st.sampled_from([1, 5, 16, 63, 150]), bound=st.sampled_from([2, 3, 128]))
def test_gather_equals_the_flat_stream_for_any_rows_and_mapping_bound(layout, monkeypatch, data, seq_len, bound):
    path, flat = layout
    monkeypatch.setattr(windows, "MAPPED_SHARDS", bound)
    source = WindowSource(open_dataset(path), seq_len)
    for _ in range(3):  # several slabs through one source: the spanning view is reused or rebuilt
        ids = np.array(data.draw(st.lists(st.integers(0, source.num_samples - 1), min_size=1, max_size=40)))
        shard, local = source.locate(ids)
        got = source.gather(shard, local)
        want = np.stack([flat[i * seq_len:i * seq_len + seq_len + 1] for i in ids.tolist()])
        assert got.dtype == flat.dtype
        np.testing.assert_array_equal(got, want)
        # fill_located is the same copy into a caller's buffer
        out = np.zeros_like(want)
        source.fill_located(shard, local, out)
        np.testing.assert_array_equal(out, want)


def test_a_multi_shard_slab_is_one_copy_not_a_view_of_the_mappings(layout):
    path, flat = layout
    source = WindowSource(open_dataset(path), 16)
    ids = np.arange(0, source.num_samples, 7)
    shard, local = source.locate(ids)
    assert len(set(shard.tolist())) > 3
    got = source.gather(shard, local)
    assert got.flags.owndata and got.flags.writeable
    got[:] = 0  # the caller owns it: the dataset is untouched
    np.testing.assert_array_equal(source.gather(shard, local)[0], flat[:17])


def test_loader_batches_mixing_many_shards_equal_the_flat_stream(layout):
    """Block shuffle over many small shards: every slab mixes shards, every batch is exact."""
    path, flat = layout
    loader = Loader(path, seq_len=8, batch_schedule=32, seed=5, shuffle="block", block_samples=4, max_epochs=2)
    assert loader.dataset.num_shards > 20
    for batch in loader:
        ids = loader.global_sample_ids(batch["batch_index"])
        want = np.stack([flat[i * 8:i * 8 + 9] for i in ids.tolist()])
        np.testing.assert_array_equal(batch["input_ids"], want[:, :-1])
        np.testing.assert_array_equal(batch["labels"], want[:, 1:])


def test_one_read_spans_at_most_two_shuffle_groups(layout, monkeypatch):
    """Short rows put many groups into a slab's bytes; a slab still ends with its group, so a read (what a
    remote cache must hold at once) is bounded by the two-groups rule, not by the slab size."""
    path, _ = layout
    loader = Loader(path, seq_len=4, batch_schedule=8, seed=2, shuffle="block", block_samples=4, group_blocks=2,
                    max_epochs=1)
    source, seq = loader.source, 4
    reads = []

    def record(shard, local):
        starts = loader.dataset.token_offsets[shard] + local
        reads.append(np.unique(starts // seq // loader.order.block).size)

    gather, gather_rows = source.gather, source.gather_rows
    monkeypatch.setattr(source, "gather", lambda shard, local, inside=None: (
        record(shard, local), gather(shard, local, inside))[1])

    def rows(s, view_rows):
        record(np.full(view_rows.size, s), source._rows_view(s)[1] + view_rows * seq)
        return gather_rows(s, view_rows)

    monkeypatch.setattr(source, "gather_rows", rows)
    assert sum(b["input_ids"].shape[0] for b in loader) == loader.num_batches() * 8
    assert len(reads) > 10 and max(reads) <= 2 * 2, reads
