"""Gather: windows from many shards in one copy equal the flat stream's slices, in order, for any budget."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.engine.gather import Gather, _Chunk
from shardkit.engine.mapper import Mapper
from shardkit.engine.plan import Rows
from shardkit.engine.windows import Windows
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


def _rows(windows: Windows, ids: np.ndarray) -> Rows:
    shard, local = windows.locate(ids)
    zeros = np.zeros_like(ids)
    return Rows(src=zeros, ids=ids, epochs=zeros, within=ids, gid=shard + windows.gid_base, local=local,
                inside=windows.inside(shard, local), streams={})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), seq_len=st.sampled_from([1, 5, 16, 63, 150]), budget=st.sampled_from([4, 5, 9, 128]))
def test_a_slab_equals_the_flat_stream_for_any_rows_and_mapping_budget(layout, data, seq_len, budget):
    path, flat = layout
    ds = open_dataset(path)
    mapper = Mapper([ds], budget)
    gather = Gather(mapper, ds.dtype, {})
    windows = Windows(ds, seq_len)
    for _ in range(3):  # several slabs through one mapper: mappings are reused, released, made again
        ids = np.array(data.draw(st.lists(st.integers(0, windows.num_samples - 1), min_size=1, max_size=60)))
        rows = _rows(windows, ids)
        got = gather.slab(rows, 0, ids.size, seq_len + 1)
        want = np.stack([flat[i * seq_len:i * seq_len + seq_len + 1] for i in ids.tolist()])
        assert got.dtype == flat.dtype
        np.testing.assert_array_equal(got, want)
        assert mapper.held() <= budget


def test_a_multi_shard_slab_is_one_owned_copy(layout):
    path, flat = layout
    ds = open_dataset(path)
    mapper = Mapper([ds], 64)
    windows = Windows(ds, 16)
    ids = np.arange(0, windows.num_samples, 7)
    rows = _rows(windows, ids)
    assert len(set(rows.gid.tolist())) > 3
    got = Gather(mapper, ds.dtype, {}).slab(rows, 0, ids.size, 17)
    assert got.flags.owndata and got.flags.writeable
    got[:] = 0  # the caller owns it: the dataset is untouched
    np.testing.assert_array_equal(Gather(mapper, ds.dtype, {}).slab(rows, 0, 1, 17)[0], flat[:17])


def test_a_slab_touching_more_shards_than_the_budget_is_copied_in_parts(layout):
    path, flat = layout
    ds = open_dataset(path)
    mapper = Mapper([ds], 4)
    windows = Windows(ds, 8)
    ids = np.random.default_rng(3).permutation(windows.num_samples)[:500]
    rows = _rows(windows, ids)
    assert len(set(rows.gid.tolist())) > 20
    got = Gather(mapper, ds.dtype, {}).slab(rows, 0, ids.size, 9)
    np.testing.assert_array_equal(got, np.stack([flat[i * 8:i * 8 + 9] for i in ids.tolist()]))
    assert mapper.held() <= 4


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
    gather = loader.engine.gather
    reads = []

    def record(rows, a, z):
        starts = loader.dataset.token_offsets[rows.gid[a:z]] + rows.local[a:z]
        reads.append(np.unique(starts // 4 // loader.order.block).size)

    slab, chunk_slab = gather.slab, _Chunk.slab
    monkeypatch.setattr(gather, "slab", lambda rows, a, z, width: (record(rows, a, z), slab(rows, a, z, width))[1])
    monkeypatch.setattr(_Chunk, "slab", lambda self, a, z: (record(self.rows, a, z), chunk_slab(self, a, z))[1])
    assert sum(b["input_ids"].shape[0] for b in loader) == loader.num_batches() * 8
    assert len(reads) > 10 and max(reads) <= 2 * 2, reads


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), seq_len=st.sampled_from([1, 5, 16, 63, 150]), budget=st.sampled_from([4, 9, 128, 1024]))
def test_a_prepared_chunk_equals_the_flat_stream_slab_by_slab(layout, data, seq_len, budget):
    """The chunk path (shards held for the chunk, rows indexed once) against the flat stream, crossing
    windows included; a chunk touching more than half the budget is left to the per-slab path."""
    path, flat = layout
    ds = open_dataset(path)
    mapper = Mapper([ds], budget)
    gather = Gather(mapper, ds.dtype, {})
    windows = Windows(ds, seq_len)
    ids = np.array(data.draw(st.lists(st.integers(0, windows.num_samples - 1), min_size=1, max_size=80)))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, ids.size - 1)), max_size=6))) - {ids.size})
    bounds = [0, *cuts, ids.size]
    rows = _rows(windows, ids)
    chunk = gather.chunk(rows, bounds, seq_len + 1)
    distinct = len(set(rows.gid.tolist()))
    assert (chunk is None) == (distinct > max(1, budget // 2 - 1))
    for a, z in zip(bounds[:-1], bounds[1:]):
        got = chunk.slab(a, z) if chunk is not None else gather.slab(rows, a, z, seq_len + 1)
        want = np.stack([flat[i * seq_len:i * seq_len + seq_len + 1] for i in ids[a:z].tolist()])
        np.testing.assert_array_equal(got, want)
