"""Pack with a tokenizer.json: the fast path with its deferred self-check, and the fallback when it fails."""

import numpy as np
import pytest
from support.dataset_bytes import assert_same_dataset
from unit.tokenizers.tokenizer_testutil import train_bytelevel

from shardkit.format import open_dataset
from shardkit.pack import PackConfig, pack
from shardkit.pack.config import TokenizeOptions


def _pack(inputs, out, tokenizer, backend, workers):
    return pack(PackConfig(inputs=(str(inputs),), output=str(out), workers=workers,
                           tokenize=TokenizeOptions(tokenizer=str(tokenizer), backend=backend)))


def _tokens(path):
    ds = open_dataset(path)
    return np.concatenate([ds.doc(i) for i in range(ds.num_docs)])


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return train_bytelevel(tmp_path_factory.mktemp("bpe") / "tok.json")


@pytest.mark.parametrize("workers", [1, 2])
def test_fast_backends_pack_the_same_bytes_as_tokenizers(small_corpus, tmp_path, bpe, workers):
    corpus, _ = small_corpus
    ref = _pack(corpus, tmp_path / "ref", bpe, "hf", workers)
    assert ref.tokenizer_backend == "hf"
    for backend, runs in (("auto", "fastokens"), ("fastokens", "fastokens"), ("tiktoken", "tiktoken")):
        fast = _pack(corpus, tmp_path / backend, bpe, backend, workers)
        assert fast.tokenizer_backend == runs and fast.tokenizer_note is None
        assert fast.manifest.created["tokenizer_backend"] == runs  # the summary, not the data:
        assert fast.fingerprint == ref.fingerprint
        assert_same_dataset(tmp_path / backend, tmp_path / "ref")
        assert np.array_equal(_tokens(tmp_path / backend), _tokens(tmp_path / "ref"))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_mismatching_fastokens_falls_over_before_anything_is_written(small_corpus, tmp_path, bpe, monkeypatch,
                                                                       workers):
    """A real fastokens backend with a deliberate bug, passing the load-time probe, caught on real input."""
    import shardkit.tokenizers.spec as spec_mod
    from shardkit.tokenizers import FastokensTokenizer

    class WrongOnDigits(FastokensTokenizer):  # wrong only on text the probes lack: "document 17: ..."
        def encode_batch(self, texts):
            ids, lengths = super().encode_batch(texts)
            if any(t.startswith("document ") for t in texts):
                ids = ids.copy()
                ids[0] = (ids[0] + 1) % self.spec.vocab_size
            return ids, lengths

    monkeypatch.setattr(spec_mod, "FastokensTokenizer", WrongOnDigits)
    corpus, _ = small_corpus
    res = _pack(corpus, tmp_path / "fb", bpe, "auto", workers)
    assert res.tokenizer_backend == "tiktoken"
    assert res.tokenizer_note.startswith("fastokens backend disagrees with tokenizers at text 0, token 0")
    assert res.tokenizer_note.endswith("using the tiktoken fast path")
    ref = _pack(corpus, tmp_path / "ref", bpe, "hf", 1)
    assert res.fingerprint == ref.fingerprint
    assert_same_dataset(tmp_path / "fb", tmp_path / "ref")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_self_check_falls_back_before_anything_is_written(small_corpus, tmp_path, bpe, monkeypatch,
                                                                     workers):
    import shardkit.tokenizers.spec as spec_mod
    from shardkit.tokenizers.selfcheck import Difference, SelfCheckResult

    corpus, _ = small_corpus
    monkeypatch.setattr(spec_mod, "compare_backends", lambda path, texts, fast: SelfCheckResult(
        texts=len(texts), tokens=1, difference=Difference(text_index=0, position=3, ids=(1,), reference_ids=(2,))))
    res = _pack(corpus, tmp_path / "fb", bpe, "auto", workers)
    assert res.tokenizer_backend == "hf" and "using tokenizers" in res.tokenizer_note
    assert res.manifest.created["tokenizer_backend"] == "hf"
    ref = _pack(corpus, tmp_path / "ref", bpe, "hf", 1)
    assert res.fingerprint == ref.fingerprint
    assert np.array_equal(_tokens(tmp_path / "fb"), _tokens(tmp_path / "ref"))
