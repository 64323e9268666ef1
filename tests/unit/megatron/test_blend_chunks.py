"""The lazily built blend equals the whole-array loop (the oracle) and megatron-core's helpers_cpp."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.megatron import blending_indices, normalize_weights
from shardkit.megatron.blend import blend_chunk
from shardkit.megatron.blend_lazy import BlendChunks
from shardkit.megatron.cache import IndexCache

_weights = st.one_of(
    st.lists(st.floats(0.01, 100.0), min_size=2, max_size=5),
    # near ties: equal weights, and weights a few ulps apart (the strict `>` decides)
    st.integers(2, 5).map(lambda k: [1.0] * k),
    st.tuples(st.floats(0.1, 10.0), st.integers(1, 4)).map(lambda t: [t[0], float(np.nextafter(t[0], 11.0)),
                                                                      t[0] / 3][:1 + t[1] % 3 + 1]),
)


@settings(max_examples=80, deadline=None)
@given(weights=_weights, size=st.integers(0, 2500), chunk=st.integers(1, 400), ids=st.data())
def test_chunks_equal_the_loop(weights, size, chunk, ids):
    w = normalize_weights(weights)
    want_d, want_j = blending_indices(w, size)
    lazy = BlendChunks(w, size, IndexCache(None), {"t": 1}, chunk=chunk, stride=chunk * 3)
    if size:  # random access first (builds from the nearest known counts), then everything
        picks = np.array(ids.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=30)), dtype=np.int64)
        d, j = lazy.locate(picks)
        np.testing.assert_array_equal(d, want_d[picks])
        np.testing.assert_array_equal(j, want_j[picks])
    d, j = lazy.whole()
    np.testing.assert_array_equal(d, want_d)
    np.testing.assert_array_equal(j, want_j)


@settings(max_examples=40, deadline=None)
@given(weights=_weights, start=st.integers(0, 3000), n=st.integers(0, 500))
def test_a_chunk_from_counts_continues_the_loop(weights, start, n):
    w = normalize_weights(weights)
    d, j = blending_indices(w, start + n)
    counts = np.bincount(d[:start], minlength=len(w)).tolist()
    cd, cj, after = blend_chunk(w, start, counts, n)
    np.testing.assert_array_equal(cd, d[start:])
    np.testing.assert_array_equal(cj, j[start:])
    assert after == np.bincount(d, minlength=len(w)).tolist()


def test_checkpoints_in_the_cache_spare_the_replay(tmp_path):
    w = normalize_weights([5, 3, 2])
    size = 1000
    want_d, want_j = blending_indices(w, size)
    first = BlendChunks(w, size, IndexCache(tmp_path), {"t": 2}, chunk=50, stride=200)
    first.locate(np.array([950]))
    assert first.built == 20  # chunks 0-19 (950 is in chunk 19)
    later = BlendChunks(w, size, IndexCache(tmp_path), {"t": 2}, chunk=50, stride=200)  # a new process
    d, j = later.locate(np.array([950, 951]))
    assert later.built == 4  # from the checkpoint at 800: chunks 16-19
    np.testing.assert_array_equal(d, want_d[950:952])
    np.testing.assert_array_equal(j, want_j[950:952])
    other = BlendChunks(w, size, IndexCache(tmp_path), {"t": 3}, chunk=50, stride=200)  # other inputs: no reuse
    other.locate(np.array([950]))
    assert other.built == 20


def test_room_is_checked_per_chunk():
    seen = []
    lazy = BlendChunks(normalize_weights([1, 1]), 100, IndexCache(None), {}, seen.append, chunk=10, stride=10)
    lazy.locate(np.array([25]))
    assert [c.tolist() for c in seen] == [[5, 5], [10, 10], [15, 15]]


def test_chunks_equal_helpers_cpp():
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        helpers = pytest.importorskip("megatron.core.datasets.helpers")
    rng = np.random.default_rng(7)
    for weights in ([0.7, 0.3], [1.0, 1.0, 1.0], list(rng.random(5)), [0.5, 0.5 - 1e-12, 1e-12]):
        w = normalize_weights(weights)
        size = 200_000
        ref_d, ref_j = np.zeros(size, dtype=np.int16), np.zeros(size, dtype=np.int64)
        helpers.build_blending_indices(ref_d, ref_j, w, len(w), size, False)
        d, j = BlendChunks(w, size, IndexCache(None), {}, chunk=30_000, stride=60_000).whole()
        np.testing.assert_array_equal(d, ref_d)
        np.testing.assert_array_equal(j, ref_j)
