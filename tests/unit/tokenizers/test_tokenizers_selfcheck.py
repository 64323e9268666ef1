"""The start-up decision: fast path only when it agrees with `tokenizers` on the input sample."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizer_testutil import train_bytelevel

from shardkit.errors import TokenizerError
from shardkit.tokenizers import (
    BytesTokenizer,
    HFTokenizer,
    TiktokenTokenizer,
    compare,
    compare_backends,
    load_tokenizer,
    load_tokenizer_checked,
)

# these tests are about the tiktoken fast path and its fallbacks: `auto` as without fastokens
pytestmark = pytest.mark.usefixtures("without_fastokens")


class _OffByOne:
    """A tokenizer that agrees with `inner` except that it bumps one id of text 1."""

    def __init__(self, inner):
        self.inner, self.spec = inner, inner.spec

    def encode_batch(self, texts):
        ids, lengths = self.inner.encode_batch(texts)
        ids = ids.copy()
        ids[lengths[0] + 2] += 1
        return ids, lengths

    def decode(self, ids):
        return self.inner.decode(ids)


def test_compare_reports_first_difference(tiny_json):
    hf = load_tokenizer(str(tiny_json), backend="hf")
    diff = compare(_OffByOne(hf), hf, ["first text", "the second text here"])
    assert (diff.text_index, diff.position) == (1, 2) and diff.ids[0] == diff.reference_ids[0] + 1
    assert str(diff).startswith("text 1, token 2: [")
    assert compare(hf, hf, ["same", ""]) is None


def test_compare_backends_flags_a_disagreeing_fast_path(tiny_json):
    fast = load_tokenizer(str(tiny_json))
    result = compare_backends(str(tiny_json), ["first text", "the second text here"], fast=_OffByOne(fast))
    assert not result.ok and result.difference.text_index == 1 and "disagrees" in result.describe()


def test_checked_falls_back_on_disagreement(tiny_json, monkeypatch):
    import shardkit.tokenizers.spec as spec_mod

    real = spec_mod.compare_backends
    monkeypatch.setattr(spec_mod, "compare_backends",
                        lambda path, texts, fast: real(path, texts, fast=_OffByOne(fast)))
    tok, note = load_tokenizer_checked(str(tiny_json), ["some text", "more text here"])
    assert isinstance(tok, HFTokenizer) and tok.spec.backend == "hf"
    assert "disagrees with tokenizers at text 1" in note and note.endswith("using tokenizers")
    assert tok.fastpath_note == note
    with pytest.raises(TokenizerError, match="disagrees.*use backend 'auto' or 'hf'"):
        load_tokenizer_checked(str(tiny_json), ["some text", "more text here"], backend="tiktoken")


def test_checked_decisions(tiny_json, tmp_path):
    tok, note = load_tokenizer_checked(str(tiny_json), ["Hello <|endoftext|> world"])
    assert isinstance(tok, TiktokenTokenizer) and note is None
    tok, note = load_tokenizer_checked(str(tiny_json), [], backend="hf")
    assert isinstance(tok, HFTokenizer) and note is None
    refused = train_bytelevel(tmp_path / "p.json", prefix_space=True)
    tok, note = load_tokenizer_checked(str(refused), ["x"])
    assert isinstance(tok, HFTokenizer) and "add_prefix_space" in note
    tok, note = load_tokenizer_checked("bytes", ["x"])
    assert isinstance(tok, BytesTokenizer) and note is None


def test_compare_backends_on_a_refused_file(tmp_path):
    refused = train_bytelevel(tmp_path / "p.json", prefix_space=True)
    result = compare_backends(str(refused), ["x y"])
    assert not result.ok and "add_prefix_space" in result.refused and result.tokens > 0


def test_empty_batches(tiny_json):
    for tok in (load_tokenizer(str(tiny_json)), load_tokenizer(str(tiny_json), backend="hf"), BytesTokenizer()):
        ids, lengths = tok.encode_batch([])
        assert ids.dtype == np.uint32 and ids.size == 0 and lengths.dtype == np.int64 and lengths.size == 0
