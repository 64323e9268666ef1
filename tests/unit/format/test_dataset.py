import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format import open_dataset
from shardkit.writer import write_dataset


def _docs(seed, n):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60000, size=int(rng.integers(1, 90)), dtype=np.uint16) for _ in range(n)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60), shard_tokens=st.integers(1, 400),
       ranges=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=5))
def test_docs_and_flat_stream_round_trip(tmp_path_factory, seed, n, shard_tokens, ranges):
    docs = _docs(seed, n)
    d = tmp_path_factory.mktemp("ds")
    write_dataset(d / "ds", docs, max_tokens_per_shard=shard_tokens, checksum_block_size=4096)
    ds = open_dataset(d / "ds")
    assert ds.num_docs == n
    flat = np.concatenate(docs)
    assert ds.num_tokens == flat.size
    for i, doc in enumerate(docs):
        got = ds.doc(i)
        np.testing.assert_array_equal(got, doc)
        assert not got.flags.writeable  # a view into the read-only map
    for a, b in ranges:
        lo, hi = sorted((int(a * flat.size), int(b * flat.size)))
        np.testing.assert_array_equal(ds.read_tokens(lo, hi), flat[lo:hi])
    for shard in ds:  # shards never split a document; every one is within the limit unless a single doc
        assert shard.num_tokens <= shard_tokens or shard.num_docs == 1


def test_open_checks_sizes_and_presence(tmp_path):
    write_dataset(tmp_path / "ds", _docs(1, 30), max_tokens_per_shard=300, checksum_block_size=4096)
    ds = tmp_path / "ds"
    with open(ds / "shard-00001.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(ManifestError, match="size"):
        open_dataset(ds)
    os.truncate(ds / "shard-00001.bin", os.path.getsize(ds / "shard-00001.bin") - 2)
    open_dataset(ds)
    (ds / "shard-00002.idx").unlink()
    with pytest.raises(ManifestError, match="missing"):
        open_dataset(ds)


def test_symlink_out_of_dataset_is_refused(tmp_path):
    write_dataset(tmp_path / "ds", _docs(2, 5), checksum_block_size=4096)
    ds = tmp_path / "ds"
    outside = tmp_path / "outside.bin"
    os.replace(ds / "shard-00000.bin", outside)
    os.symlink(outside, ds / "shard-00000.bin")
    with pytest.raises(ManifestError, match="missing"):
        open_dataset(ds)


def test_index_inconsistent_with_manifest_detected_on_use(tmp_path):
    write_dataset(tmp_path / "a", _docs(3, 10), checksum_block_size=4096)
    write_dataset(tmp_path / "b", _docs(4, 10), checksum_block_size=4096)
    a, b = tmp_path / "a", tmp_path / "b"
    if os.path.getsize(a / "shard-00000.idx") == os.path.getsize(b / "shard-00000.idx"):
        os.replace(b / "shard-00000.idx", a / "shard-00000.idx")
        ds = open_dataset(a)
        with pytest.raises(ManifestError):
            for i in range(ds.num_docs):
                ds.doc(i)
