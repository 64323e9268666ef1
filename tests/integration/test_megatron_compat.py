"""Our shards read by megatron-core's IndexedDataset, and Megatron-written data adopted by shardkit."""

import warnings

import numpy as np
import pytest

from shardkit.adopt import adopt
from shardkit.errors import ConfigError, ManifestError
from shardkit.format import open_dataset
from shardkit.writer import write_dataset

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")


def _docs(n, vocab, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(1, 300))) for _ in range(n)]


@pytest.mark.parametrize("dtype,vocab", [("uint16", 50257), ("int32", 262144)])
def test_megatron_reads_our_shards(tmp_path, dtype, vocab):
    docs = [d.astype(dtype) for d in _docs(120, vocab)]
    write_dataset(tmp_path / "ds", docs, dtype=dtype, max_tokens_per_shard=4000, checksum_block_size=4096)
    ds = open_dataset(tmp_path / "ds")
    i = 0
    for shard in ds:
        mds = indexed_dataset.IndexedDataset(str(tmp_path / "ds" / shard.name))
        assert len(mds) == shard.num_docs
        assert mds.index.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(mds.document_indices, np.arange(shard.num_docs + 1))
        for j in range(shard.num_docs):
            np.testing.assert_array_equal(mds[j], docs[i])
            i += 1
    assert i == len(docs)


def _megatron_write(prefix, docs, dtype, sentences_per_doc=1):
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for d in docs:
        for part in np.array_split(d, sentences_per_doc):
            builder.add_item(torch.from_numpy(part.astype(np.int64)))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")


def test_adopt_megatron_written_data_without_copying(tmp_path):
    src = tmp_path / "megatron"
    src.mkdir()
    docs_a, docs_b = _docs(40, 50000, 1), _docs(25, 50000, 2)
    _megatron_write(src / "web_text_document", docs_a, np.uint16)
    _megatron_write(src / "code_text_document", docs_b, np.uint16, sentences_per_doc=2)
    r = adopt([src / "web_text_document", src / "code_text_document"], tmp_path / "ds", checksum_block_size=4096)
    assert r.linked == 4 and r.in_place == 0
    bin_src, bin_dst = src / "web_text_document.bin", tmp_path / "ds" / "web_text_document.bin"
    assert bin_src.stat().st_ino == bin_dst.stat().st_ino  # hard link: no token copied
    ds = open_dataset(tmp_path / "ds")
    assert ds.num_docs == 40 + 50  # sequences: the code shard has two per document
    assert ds.manifest.stats["megatron_documents"] == 65
    for i, d in enumerate(docs_a):
        np.testing.assert_array_equal(ds.doc(i), d)
    flat_b = np.concatenate([np.asarray(ds.doc(40 + k)) for k in range(50)])
    np.testing.assert_array_equal(flat_b, np.concatenate(docs_b))


def test_adopt_in_place_and_errors(tmp_path):
    _megatron_write(tmp_path / "a", _docs(5, 1000), np.uint16)
    r = adopt([tmp_path / "a"], tmp_path)
    assert r.in_place == 2 and r.linked == 0
    with pytest.raises(ConfigError, match="already holds"):
        adopt([tmp_path / "a"], tmp_path)
    with pytest.raises(ManifestError, match="missing"):
        adopt([tmp_path / "nope"], tmp_path / "x")
    _megatron_write(tmp_path / "b", _docs(5, 100000), np.int32)
    with pytest.raises(ConfigError, match="dtype"):
        adopt([tmp_path / "a", tmp_path / "b"], tmp_path / "y")
