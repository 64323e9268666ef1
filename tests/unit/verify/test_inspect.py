import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verify_testutil import build_dataset, texts

from shardkit.errors import ConfigError
from shardkit.inspect import LengthAccumulator, inspect_dataset, plot_summary, show_document

lengths_st = st.lists(st.one_of(st.integers(0, 3000), st.integers((1 << 20) - 3, (1 << 20) + 3),
                                st.integers(0, 2**31 - 1)), min_size=1, max_size=200)


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, cuts=st.lists(st.integers(0, 200), max_size=4))
def test_percentiles_are_exact_nearest_rank(lengths, cuts):
    arr = np.array(lengths, dtype=np.int32)
    acc = LengthAccumulator()
    prev = 0
    for c in sorted(min(c, arr.size) for c in cuts) + [arr.size]:  # fed shard by shard
        acc.add(arr[prev:c])
        prev = c
    s = acc.stats()
    ref = arr.astype(np.int64)
    for q, got in ((50, s.p50), (90, s.p90), (99, s.p99)):
        assert got == int(np.percentile(ref, q, method="inverted_cdf"))
    assert (s.min, s.max, s.count) == (int(ref.min()), int(ref.max()), ref.size)
    assert s.mean == pytest.approx(ref.mean())
    nonempty = ref[ref > 0]
    assert acc.empty == int((ref == 0).sum())
    expected = np.bincount(np.floor(np.log2(nonempty)).astype(int), minlength=40) if nonempty.size else np.zeros(40)
    assert acc.histogram.tolist() == expected.tolist()


def test_empty_accumulator():
    assert LengthAccumulator().stats().count == 0


@pytest.fixture()
def ds(tmp_path):
    build_dataset(tmp_path / "ds", n_docs=25, shard_tokens=150)
    return tmp_path / "ds"


def test_summary_matches_the_manifest(ds):
    s = inspect_dataset(ds)
    from shardkit.format import open_dataset
    m = open_dataset(ds).manifest
    assert (s.docs, s.tokens, s.shards, s.dtype) == (25, m.num_tokens, len(m.shards), "uint16")
    assert s.histogram == m.stats["doc_length_histogram"]["counts"]
    assert sum(s.tokens_per_shard) == s.tokens and s.bin_bytes == 2 * s.tokens
    assert s.disk_bytes > s.bin_bytes
    assert s.sources == [{"name": "corpus/*.txt", "docs": 25, "tokens": s.tokens, "skipped": 0, "share": 1.0}]
    assert s.tokenizer["kind"] == "bytes" and s.eos_appended is True


def test_show_document(ds):
    v = show_document(ds, 11)
    assert v.text == texts(25)[11] + "<|endoftext|>" and v.doc_id == "doc-11"
    assert v.tokens[-1] == 256 and v.total_tokens == v.tokens.size
    short = show_document(ds, 11, max_tokens=2, decode=False)
    assert short.tokens.size == 2 and short.text is None and short.total_tokens == v.total_tokens
    with pytest.raises(ConfigError, match="out of range"):
        show_document(ds, 25)


def test_plot(ds, tmp_path):
    pytest.importorskip("matplotlib")
    plot_summary(inspect_dataset(ds), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_malformed_statistics_do_not_break_inspect(ds):
    from verify_testutil import resign

    def edit(doc):
        doc["stats"]["sources"] = {"a": {"tokens": "many"}, "b": 7}
        doc["stats"]["skipped"] = {"count": None}
    resign(ds, edit)
    s = inspect_dataset(ds)
    assert [(x["name"], x["tokens"]) for x in s.sources] == [("a", 0), ("b", 0)] and s.skipped == 0
