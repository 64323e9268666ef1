"""The pure index functions equal megatron-core's own (helpers_cpp and gpt_dataset), array for array."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.megatron import (
    IndexCache,
    blending_indices,
    cache_key,
    document_index,
    gpt_index,
    normalize_weights,
    plan_epochs,
    sample_index,
    samples_per_dataset,
    shuffle_index,
    split_matrix,
)

pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    helpers = pytest.importorskip("megatron.core.datasets.helpers")
    gpt = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    mcfg = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_config")
    mbuilder = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_builder")
    mutils = pytest.importorskip("megatron.core.datasets.utils")


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), min_size=1, max_size=40), seq_len=st.integers(2, 50),
       seed=st.integers(0, 2**32 - 1), extra=st.booleans(), drop=st.booleans(), samples=st.integers(1, 400),
       separate=st.booleans())
def test_indices_equal_megatron(lengths, seq_len, seed, extra, drop, samples, separate):
    sizes = np.asarray(lengths, dtype=np.int32)
    sizes[0] = max(int(sizes[0]), 2)  # Megatron needs more than one token per epoch
    docs = np.arange(sizes.size, dtype=np.int32)
    tokens = int(sizes.sum())
    plan = plan_epochs(tokens, samples, seq_len, extra)
    epochs = plan.num_epochs
    ours = document_index(docs, epochs, np.random.RandomState(seed), separate)
    theirs = gpt._build_document_index(docs, epochs, np.random.RandomState(seed), separate)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.dtype == theirs.dtype
    try:
        ref = helpers.build_sample_idx(sizes, theirs, seq_len, epochs, tokens, drop, extra)
    except AssertionError:  # megatron-core rejects it (a negative offset): so does shardkit, by name
        with pytest.raises(ConfigError, match="build_sample_idx rejects"):
            sample_index(sizes, ours, seq_len, epochs, tokens, drop, extra)
        return
    mine = sample_index(sizes, ours, seq_len, epochs, tokens, drop, extra)
    assert mine.dtype == ref.dtype
    np.testing.assert_array_equal(mine, ref)
    total = mine.shape[0] - 1
    first = min(total, plan.num_samples_sans_final_epoch) if plan.separate_final_epoch else total
    a = shuffle_index(first, total, np.random.RandomState(seed))
    b = gpt._build_shuffle_index(first, total, np.random.RandomState(seed))
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("tokens,samples,seq_len", [(1000, 5, 10), (1000, 199, 10), (1000, 170, 10),
                                                    (1000, 300, 10), (1001, 100, 10), (997, 1000, 7)])
def test_epoch_plan_matches_get_num_epochs(tokens, samples, seq_len):
    class Fake:
        num_samples = samples
        config = type("C", (), {"sequence_length": seq_len, "add_extra_token_to_sequence": True})

    want = gpt.GPTDataset._get_num_epochs(Fake, tokens)
    plan = plan_epochs(tokens, samples, seq_len, True)
    assert plan.num_epochs == want
    if want > 1:  # the threshold Megatron applies to the last epoch's share
        sans = ((want - 1) * tokens - 1) // seq_len
        assert plan.separate_final_epoch == (samples - sans < int(0.8 * ((tokens - 1) // seq_len)))


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=5), size=st.integers(0, 3000))
def test_blending_indices_equal_megatron(weights, size):
    w = normalize_weights(weights)
    assert w == mutils.normalize(weights)
    di, dsi = blending_indices(w, size)
    ref_di, ref_dsi = np.zeros(size, dtype=np.int16), np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(ref_di, ref_dsi, w, len(w), size, False)
    np.testing.assert_array_equal(di, ref_di)
    np.testing.assert_array_equal(dsi, ref_dsi)
    target = mbuilder._get_size_per_split_per_dataset(w, [size, 0, 0])
    surplus = mbuilder._get_size_per_split_per_dataset(w, [size, 0, 0], surplus=0.005)
    assert samples_per_dataset(w, size) == [t[0] for t in target]
    assert samples_per_dataset(w, size, 0.005) == [t[0] for t in surplus]


@pytest.mark.parametrize("split", ["969,30,1", "1", "98,2", "0.7, 0.2, 0.1", "1,1,1", "0,1,0", "8,0,2"])
def test_split_matrix_equals_megatron(split):
    vec = mcfg.parse_and_normalize_split(split)
    assert split_matrix(split) == mcfg.convert_split_vector_to_split_matrix(vec)


@pytest.mark.parametrize("bad", ["", "1,2,3,4", "0,0,0", "abc"])
def test_bad_split_named(bad):
    with pytest.raises(ConfigError, match="split"):
        split_matrix(bad)


def test_cache_reuses_verifies_and_rebuilds(tmp_path):
    cache = IndexCache(tmp_path / "c")
    calls = []

    def build():
        calls.append(1)
        return {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 2), dtype=np.int64)}

    first = cache.get({"x": 1}, build)
    again = cache.get({"x": 1}, build)
    assert len(calls) == 1
    np.testing.assert_array_equal(again["a"], first["a"])
    cache.get({"x": 2}, build)  # a different dependency: a different entry
    assert len(calls) == 2
    npy = tmp_path / "c" / f"{cache_key({'x': 1})}-a.npy"
    raw = bytearray(npy.read_bytes())
    raw[-1] ^= 0xFF  # a flipped byte: the digest no longer matches, so the entry is rebuilt
    npy.write_bytes(bytes(raw))
    fixed = cache.get({"x": 1}, build)
    assert len(calls) == 3
    np.testing.assert_array_equal(fixed["a"], np.arange(10))
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "c").iterdir())


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("extra,drop", [(True, True), (False, False), (True, False)])
def test_sample_index_in_small_chunks_equals_megatron(chunk, extra, drop):
    rng = np.random.default_rng(chunk)
    sizes = rng.integers(0, 90, size=300).astype(np.int32)
    sizes[0] = 5
    docs = np.arange(sizes.size, dtype=np.int32)
    tokens = int(sizes.sum())
    doc_idx = gpt._build_document_index(docs, 3, np.random.RandomState(1), False)
    want = helpers.build_sample_idx(sizes, doc_idx, 17, 3, tokens, drop, extra)
    saved, gpt_index._SAMPLE_CHUNK = gpt_index._SAMPLE_CHUNK, chunk
    try:
        got = sample_index(sizes, doc_idx, 17, 3, tokens, drop, extra)
    finally:
        gpt_index._SAMPLE_CHUNK = saved
    np.testing.assert_array_equal(got, want)
