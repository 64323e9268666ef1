"""The bytes tokenizer, spec strings, TokenizerSpec JSON and load errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.errors import TokenizerError
from shardkit.tokenizers import BytesTokenizer, TokenizerSpec, load_tokenizer, parse_spec


def test_bytes_ids_are_utf8_bytes_and_specials_follow():
    t = load_tokenizer("bytes")
    ids, lengths = t.encode_batch(["héllo", "", "ok"])
    assert ids.dtype == np.uint32 and lengths.dtype == np.int64
    assert lengths.tolist() == [6, 0, 2] and ids.tolist() == list("héllo".encode()) + [111, 107]
    assert t.decode(ids[:6].tolist() + [256, 257, 258]) == "héllo<|endoftext|><|bos|><|pad|>"
    s = t.spec
    assert (s.kind, s.name, s.path, s.vocab_size, s.eos_id, s.bos_id, s.sha256, s.backend) == (
        "bytes", "bytes", None, 259, 256, 257, None, "bytes")


@given(st.lists(st.text(), max_size=5))
def test_bytes_round_trip(texts):
    t = BytesTokenizer()
    ids, lengths = t.encode_batch(texts)
    assert int(lengths.sum()) == ids.size
    assert t.decode(ids) == "".join(texts)


def test_bytes_decode_replaces_invalid_utf8_and_unknown_ids():
    t = BytesTokenizer()
    assert t.decode(np.array([0xC3], dtype=np.uint32)) == "\ufffd"
    assert t.decode([104, 999, 105]) == "h\ufffdi"


def test_unpaired_surrogate_is_a_tokenizer_error():
    with pytest.raises(TokenizerError, match="text 1 .*surrogate"):
        BytesTokenizer().encode_batch(["ok", "bad \ud800"])


def test_spec_json_round_trip_and_manifest_form():
    s = load_tokenizer("bytes").spec
    assert TokenizerSpec.from_json(s.to_json()) == s
    no_backend = {k: v for k, v in s.to_json().items() if k != "backend"}  # as the manifest stores it
    assert TokenizerSpec.from_json(no_backend) == s
    with pytest.raises(TokenizerError, match="lacks vocab_size"):
        TokenizerSpec.from_json({k: v for k, v in no_backend.items() if k != "vocab_size"})
    with pytest.raises(TokenizerError, match="eos_id"):
        TokenizerSpec(kind="bytes", name="b", path=None, vocab_size=10, eos_id=10, bos_id=None, sha256=None,
                      backend="bytes")


def test_parse_spec_forms(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tokenizer.json").write_text("{}")
    assert parse_spec("bytes") == ("bytes", "")
    assert parse_spec("x/tokenizer.json") == ("hf", "x/tokenizer.json")
    assert parse_spec("hf:weird.name") == ("hf", "weird.name")
    assert parse_spec(str(tmp_path / "model")) == ("hf", str(tmp_path / "model" / "tokenizer.json"))
    assert parse_spec("tiktoken:a.bin?pattern=gpt2") == ("tiktoken", "a.bin?pattern=gpt2")
    assert parse_spec("cl100k_base.tiktoken") == ("tiktoken", "cl100k_base.tiktoken")
    assert parse_spec("m.model") == ("sentencepiece", "m.model")
    assert parse_spec("spm:m.bin") == ("sentencepiece", "m.bin")


def test_load_errors_name_the_file_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    (tmp_path / "bad.json").write_text("{nope")
    for backend in ("auto", "hf"):
        with pytest.raises(TokenizerError, match="bad.json.*check the file"):
            load_tokenizer(str(tmp_path / "bad.json"), backend=backend)
        with pytest.raises(TokenizerError, match="missing.json: tokenizer file not found; give the path"):
            load_tokenizer(str(tmp_path / "missing.json"), backend=backend)
    with pytest.raises(TokenizerError, match="tokenizer 'gpt2' is not a file here.*never downloads"):
        load_tokenizer("gpt2")  # a hub name, not in the (empty) local cache
    with pytest.raises(TokenizerError, match="unknown tokenizer spec 'a/b/c'.*local file"):
        load_tokenizer("a/b/c")
    with pytest.raises(TokenizerError, match="backend must be one of"):
        load_tokenizer("bytes", backend="fast")
    with pytest.raises(TokenizerError, match="only applies to tokenizer.json"):
        load_tokenizer("bytes", backend="hf")
