"""Pack with a tokenizer.json: the fast path with its deferred self-check, and the fallback when it fails."""

import numpy as np
import pytest
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
def test_fast_path_packs_the_same_tokens_as_tokenizers(small_corpus, tmp_path, bpe, workers):
    corpus, _ = small_corpus
    fast = _pack(corpus, tmp_path / "fast", bpe, "auto", workers)
    ref = _pack(corpus, tmp_path / "ref", bpe, "hf", workers)
    assert fast.tokenizer_backend == "tiktoken" and fast.tokenizer_note is None
    assert ref.tokenizer_backend == "hf"
    assert fast.fingerprint == ref.fingerprint
    assert np.array_equal(_tokens(tmp_path / "fast"), _tokens(tmp_path / "ref"))


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
