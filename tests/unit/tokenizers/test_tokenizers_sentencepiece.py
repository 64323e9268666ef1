"""SentencePiece models: a tiny one trained here (a fraction of a second)."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
from tokenizer_testutil import TRAIN

from shardkit.errors import MissingDependencyError, TokenizerError
from shardkit.tokenizers import load_tokenizer

spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("sp")
    (d / "train.txt").write_text("\n".join(TRAIN * 5), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(d / "train.txt"), model_prefix=str(d / "sp"), vocab_size=150,
                                   model_type="bpe", minloglevel=2, num_threads=1)
    return d / "sp.model"


def test_load_encode_decode(sp_model):
    for spec in (str(sp_model), f"sentencepiece:{sp_model}", f"spm:{sp_model}"):
        t = load_tokenizer(spec)
        assert t.spec.kind == t.spec.backend == "sentencepiece" and t.spec.vocab_size == 150
        assert (t.spec.eos_id, t.spec.bos_id) == (2, 1) and len(t.spec.sha256) == 64
    ids, lengths = t.encode_batch(["Hello world", "", "the lazy dog"])
    assert ids.dtype == np.uint32 and lengths.tolist()[1] == 0 and int(ids.max()) < 150
    assert t.decode(ids[: lengths[0]]) == "Hello world"
    assert 2 not in t.encode_batch(["a </s> b"])[0].tolist()  # control-symbol text is text


def test_overrides_and_errors(sp_model, tmp_path):
    t = load_tokenizer(str(sp_model), eos="<s>")
    assert t.spec.eos_id == 1
    with pytest.raises(TokenizerError, match="not a piece"):
        load_tokenizer(str(sp_model), eos="<nope>")
    (tmp_path / "bad.model").write_bytes(b"garbage")
    with pytest.raises(TokenizerError, match="bad.model: not a loadable SentencePiece model"):
        load_tokenizer(str(tmp_path / "bad.model"))
    with pytest.raises(TokenizerError, match="missing.model: SentencePiece model not found"):
        load_tokenizer(str(tmp_path / "missing.model"))


def test_missing_package_names_the_extra(sp_model, monkeypatch):
    real_import = builtins.__import__

    def no_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError("no sentencepiece")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sentencepiece)
    with pytest.raises(MissingDependencyError, match=r"pip install 'shardkit\[sentencepiece\]'"):
        load_tokenizer(str(sp_model))
