"""The fast path on small trained files: taken when exact (and then identical), refused with a reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from tokenizer_testutil import TEXT, TRAIN, add_tokens, edit_json, nfkc, split_pre_tokenizer, train_bytelevel
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers

from shardkit.errors import TokenizerError
from shardkit.tokenizers import (
    FastPathRefused,
    HFTokenizer,
    TiktokenTokenizer,
    compare,
    compile_tiktoken,
    load_tokenizer,
)

# these tests are about the tiktoken fast path and its fallbacks: `auto` as without fastokens
pytestmark = pytest.mark.usefixtures("without_fastokens")

EXTRA = ["unseen wörds 42 <|endoftext|> more", "", " ", "\r\n\r\n  x", "🙂" * 5, "<tool><tool>x</tool>"]


def _pair(path):
    fast, hf = load_tokenizer(str(path)), load_tokenizer(str(path), backend="hf")
    assert isinstance(fast, TiktokenTokenizer) and fast.spec.backend == "tiktoken"
    assert isinstance(hf, HFTokenizer) and hf.spec.backend == "hf"
    assert {**fast.spec.to_json(), "backend": "hf"} == hf.spec.to_json()
    return fast, hf


def test_tiny_bytelevel_bpe_takes_fast_path_and_matches(tiny_json):
    fast, hf = _pair(tiny_json)
    assert compare(fast, hf, TRAIN + EXTRA) is None
    vocab = hf._tok.get_vocab(with_added_tokens=True)
    assert fast.spec.eos_id == vocab["<|endoftext|>"] == 0 and fast.spec.vocab_size == max(vocab.values()) + 1
    ids, _ = fast.encode_batch(["naïve café 🙂"])
    assert fast.decode(ids) == hf.decode(ids) == "naïve café 🙂"


@settings(max_examples=60, deadline=None)
@given(TEXT)
def test_tiny_fast_path_equals_hf_on_any_text(tiny_json, text):
    fast, hf = _pair_cached(tiny_json)
    assert compare(fast, hf, [text]) is None


_CACHE: dict = {}


def _pair_cached(path):
    if path not in _CACHE:
        _CACHE[path] = _pair(path)
    return _CACHE[path]


@pytest.mark.parametrize("variant, reason", [
    (dict(prefix_space=True), "add_prefix_space"),
    (dict(normalizer=nfkc()), "normalizer 'NFKC'"),
    (dict(normalizer=normalizers.Lowercase()), "normalizer 'Lowercase'"),
])
def test_not_representable_falls_back_with_reason(tmp_path, variant, reason):
    path = train_bytelevel(tmp_path / "t.json", **variant)
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer) and tok.spec.backend == "hf"
    assert tok.fastpath_note.startswith("tiktoken fast path refused") and reason in tok.fastpath_note
    with pytest.raises(TokenizerError, match="not exact for this file"):
        load_tokenizer(str(path), backend="tiktoken")


@pytest.mark.parametrize("change, reason", [
    (dict(model_dropout=0.1), "dropout"),
    (dict(model_byte_fallback=True), "byte_fallback"),
    (dict(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer 'Whitespace'"),
    (dict(pre_tokenizer=split_pre_tokenizer(r"\d+|\s+|[^\s\d]+")), r"uses \\d"),
    (dict(pre_tokenizer=split_pre_tokenizer(r"\s+$|\S+|\s+")), "anchor"),
    (dict(pre_tokenizer=split_pre_tokenizer(r"\p{L}+")), "unmatched"),
    (dict(pre_tokenizer=None), "no pre-tokenizer"),
])
def test_json_edits_that_refuse(tmp_path, tiny_json, change, reason):
    path = edit_json(tiny_json, tmp_path / "e.json", **change)
    with pytest.raises(FastPathRefused, match=reason):
        compile_tiktoken(str(path))
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer) and tok.fastpath_note.startswith("tiktoken fast path refused")


def test_file_that_makes_tokenizers_panic_is_a_tokenizer_error(tmp_path, tiny_json):
    path = edit_json(tiny_json, tmp_path / "p.json", model_continuing_subword_prefix="##")
    with pytest.raises(FastPathRefused, match="continuing_subword_prefix"):
        compile_tiktoken(str(path))
    with pytest.raises(TokenizerError, match="p.json: not a loadable Hugging Face tokenizer.json"):
        load_tokenizer(str(path))


def test_merge_order_and_unreachable_tokens_are_refused(tmp_path, tiny_json):
    doc = json.loads(tiny_json.read_text())
    merges = doc["model"]["merges"]
    swapped = [merges[1], merges[0], *merges[2:]] if merges[0] != merges[1] else merges
    path = edit_json(tiny_json, tmp_path / "m.json", model_merges=swapped)
    with pytest.raises(FastPathRefused, match="do not rise with merge order"):
        compile_tiktoken(str(path))
    vocab = dict(doc["model"]["vocab"])
    vocab["ĠzzzzQ"] = max(vocab.values()) + 1  # a token no merge builds
    path = edit_json(tiny_json, tmp_path / "u.json", model_vocab=vocab)
    with pytest.raises(FastPathRefused, match="not what the merges make"):
        compile_tiktoken(str(path))
    # with ignore_merges, tokenizers looks whole pieces up as tiktoken does: exact again
    path = edit_json(tiny_json, tmp_path / "i.json", model_vocab=vocab, model_ignore_merges=True)
    fast, hf = _pair(path)
    assert compare(fast, hf, TRAIN + EXTRA + [" zzzzQ zzzzQzzzzQ"]) is None


def test_metaspace_sentencepiece_style_json_is_refused(tmp_path):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"],
                                                       show_progress=False))
    tok.save(str(tmp_path / "m.json"))
    with pytest.raises(FastPathRefused, match="Metaspace"):
        compile_tiktoken(str(tmp_path / "m.json"))
    t = load_tokenizer(str(tmp_path / "m.json"))
    assert isinstance(t, HFTokenizer) and "Metaspace" in t.fastpath_note
    assert (t.spec.eos_id, t.spec.bos_id) == (tok.token_to_id("</s>"), tok.token_to_id("<s>"))


def test_split_pretokenizer_is_exact(tmp_path, tiny_json):
    path = edit_json(tiny_json, tmp_path / "llama3-style.json", pre_tokenizer=split_pre_tokenizer())
    fast, hf = _pair(path)
    assert compare(fast, hf, TRAIN + EXTRA) is None


def test_special_token_text_is_ordinary_text_in_both_backends(tiny_json):
    fast, hf = _pair_cached(tiny_json)
    eos = fast.spec.eos_id
    for tok in (fast, hf):
        ids, _ = tok.encode_batch(["a<|endoftext|>b"])
        assert eos not in ids.tolist() and tok.decode(ids) == "a<|endoftext|>b"
    assert hf.decode([eos]) == fast.decode([eos]) == "<|endoftext|>"


def test_non_special_added_tokens_are_matched_like_tokenizers(tmp_path, tiny_json):
    path = add_tokens(tiny_json, tmp_path / "added.json", [AddedToken("<tool>", normalized=False),
                                                           AddedToken("</tool>", normalized=True),
                                                           AddedToken("jumps over", normalized=False),
                                                           AddedToken("fox jumps", normalized=True)])
    fast, hf = _pair(path)
    tool = hf._tok.token_to_id("<tool>")
    assert tool in fast.encode_batch(["x<tool>y"])[0].tolist()
    # raw-text tokens are cut first, then normalized ones: "jumps over" wins over the earlier "fox jumps"
    ids, _ = hf.encode_batch(["the fox jumps over"])
    assert hf._tok.token_to_id("jumps over") in ids.tolist()
    assert compare(fast, hf, TRAIN + EXTRA + ["<tool></tool><tool>", "the fox jumps</tool>", "fox jumps"]) is None


def test_added_token_options_without_equivalent_are_refused(tmp_path, tiny_json):
    path = add_tokens(tiny_json, tmp_path / "strip.json", [AddedToken("<tool>", lstrip=True)])
    with pytest.raises(FastPathRefused, match="lstrip"):
        compile_tiktoken(str(path))
    path = add_tokens(tiny_json, tmp_path / "clash.json", [AddedToken("endoftext", normalized=False)])
    with pytest.raises(FastPathRefused, match="overlaps the special token"):
        compile_tiktoken(str(path))


def test_nfc_normalizer_takes_fast_path_and_matches(tmp_path):
    path = train_bytelevel(tmp_path / "nfc.json", normalizer=normalizers.NFC())
    fast, hf = _pair(path)
    assert compare(fast, hf, TRAIN + EXTRA + ["e\u0301 cafe\u0301 A\u030a \u212b"]) is None
    path = add_tokens(path, tmp_path / "nfc-added.json", [AddedToken("<tool>", normalized=False),
                                                          AddedToken("é!", normalized=True)])
    fast, hf = _pair(path)
    assert compare(fast, hf, TRAIN + ["<tool>\u0338 e\u0301! é! <tool>e\u0301"]) is None


@settings(max_examples=60, deadline=None)
@given(TEXT)
def test_nfc_with_added_tokens_equals_hf_on_any_text(tmp_path_factory, text):
    key = "nfc-added"
    if key not in _CACHE:
        d = tmp_path_factory.mktemp("nfc")
        path = train_bytelevel(d / "nfc.json", normalizer=normalizers.NFC())
        path = add_tokens(path, d / "nfc-added.json", [AddedToken("<tool>", normalized=False),
                                                       AddedToken("e\u0301!", normalized=True)])
        _CACHE[key] = _pair(path)
    fast, hf = _CACHE[key]
    assert compare(fast, hf, [text, text + "<tool>" + text]) is None


def test_compiled_encoding_round_trips_through_files(tiny_json, tmp_path):
    """What pack's workers load instead of compiling the tokenizer.json again: the same ids, spec, plan."""
    from shardkit.tokenizers.tiktoken_backend import TiktokenTokenizer

    added = add_tokens(tiny_json, tmp_path / "added.json", [AddedToken("<tool>", normalized=False),
                                                            AddedToken("fox jumps", normalized=True)])
    nfc = edit_json(added, tmp_path / "nfc.json", normalizer={"type": "NFC"})
    texts = [TRAIN[0], "the <tool> fox jumps, café e\u0301 <|endoftext|>", ""]
    for path in (tiny_json, added, nfc):
        tok = load_tokenizer(str(path))
        assert isinstance(tok, TiktokenTokenizer)
        again = TiktokenTokenizer.load_compiled(tok.save_compiled(tmp_path / f"c-{path.stem}"))
        assert again.spec == tok.spec and (again._plan is None) == (tok._plan is None)
        a, b = tok.encode_batch(texts), again.encode_batch(texts)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert (tmp_path / f"c-{path.stem}" / "encoding.tiktoken").read_text().count("\n") > 256


def test_compiled_cache_hit_miss_damage_and_unwritable(tiny_json, tmp_path, monkeypatch):
    from shardkit.tokenizers import compiled_cache, fastpath

    monkeypatch.setenv("SHARDKIT_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = fastpath.compile_tiktoken
    monkeypatch.setattr(fastpath, "compile_tiktoken", lambda path: calls.append(path) or real(path))
    first = load_tokenizer(str(tiny_json))
    entries = list((tmp_path / "cache" / "fastpath").iterdir())
    assert len(calls) == 1 and len(entries) == 1 and entries[0].name.endswith(f"-v{compiled_cache.FORMAT}")
    second = load_tokenizer(str(tiny_json))  # from the cache: not compiled again
    assert len(calls) == 1 and second.spec == first.spec
    texts = [TRAIN[0], "x <|endoftext|> y"]
    assert np.array_equal(first.encode_batch(texts)[0], second.encode_batch(texts)[0])
    (entries[0] / "encoding.tiktoken").write_bytes(b"not base64 !!\n")  # damaged: compiled again, still right
    third = load_tokenizer(str(tiny_json))
    assert len(calls) == 2 and np.array_equal(first.encode_batch(texts)[0], third.encode_batch(texts)[0])
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", str(blocked / "sub"))  # cannot be created: ignored
    assert np.array_equal(load_tokenizer(str(tiny_json)).encode_batch(texts)[0], first.encode_batch(texts)[0])
