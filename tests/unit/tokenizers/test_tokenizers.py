import base64
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import CORPUS, GPT2_JSON

from shardkit.errors import TokenizerError
from shardkit.tokenizers import (
    BytesTokenizer,
    FastPathRefused,
    HFTokenizer,
    TiktokenTokenizer,
    compare,
    compile_tiktoken,
    load_tokenizer,
    load_tokenizer_checked,
)

tokenizers = pytest.importorskip("tokenizers")
needs_gpt2 = pytest.mark.skipif(not GPT2_JSON.exists(), reason="real GPT-2 tokenizer not present (../shared)")

TRAIN = ["The quick brown fox jumps over the lazy dog.", "Hello world, hello tokenizer!", "1234 5678 and 90",
         "  spaces   and\ttabs\r\nand newlines", "naïve café 🙂 日本語"] * 20


def _train_bytelevel(tmp_path, *, prefix_space=False, normalizer=None, name="tok.json"):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    if normalizer:
        tok.normalizer = normalizers.NFKC()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN, trainer)
    path = tmp_path / name
    tok.save(str(path))
    return path


def test_bytes_tokenizer_round_trip():
    t = BytesTokenizer()
    ids, lengths = t.encode_batch(["héllo", "", "ok"])
    assert lengths.tolist() == [6, 0, 2] and ids.dtype == np.uint32 and int(ids.max()) < 256
    assert t.decode(ids[:6].tolist() + [256]) == "héllo<|endoftext|>"
    assert t.spec.vocab_size == 259 and t.spec.eos_id == 256 and t.spec.bos_id == 257


def test_tiny_bytelevel_bpe_takes_fast_path_and_matches(tmp_path):
    path = _train_bytelevel(tmp_path)
    fast = load_tokenizer(str(path))
    assert isinstance(fast, TiktokenTokenizer) and fast.spec.backend == "tiktoken"
    hf = load_tokenizer(str(path), backend="hf")
    assert compare(fast, hf, TRAIN + ["unseen wörds 42 <|endoftext|> more"]) is None


@pytest.mark.parametrize("variant", ["prefix_space", "normalizer"])
def test_not_exactly_representable_falls_back_with_reason(tmp_path, variant):
    path = _train_bytelevel(tmp_path, **{variant: True})
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer)
    assert "fast path refused" in tok.fastpath_note
    with pytest.raises(TokenizerError, match="not exact"):
        load_tokenizer(str(path), backend="tiktoken")


def test_metaspace_sentencepiece_style_json_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "</s>"]))
    tok.save(str(tmp_path / "m.json"))
    with pytest.raises(FastPathRefused):
        compile_tiktoken(str(tmp_path / "m.json"))
    t = load_tokenizer(str(tmp_path / "m.json"))
    assert isinstance(t, HFTokenizer) and t.spec.eos_id == tok.token_to_id("</s>")


def test_selfcheck_falls_back_when_backends_disagree(tmp_path, monkeypatch):
    path = _train_bytelevel(tmp_path)
    import shardkit.tokenizers.spec as spec_mod
    monkeypatch.setattr(spec_mod, "compare", lambda a, b, texts: "text 0, token 3: [1] vs [2]")
    tok, note = load_tokenizer_checked(str(path), ["some text"])
    assert isinstance(tok, HFTokenizer) and "disagreed" in note


def test_bad_files_give_clear_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(TokenizerError, match="bad.json"):
        load_tokenizer(str(tmp_path / "bad.json"))
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(str(tmp_path / "missing.json"), backend="hf")
    with pytest.raises(TokenizerError, match="unknown tokenizer spec"):
        load_tokenizer("gpt2")


@needs_gpt2
def test_gpt2_fast_path_known_counts():
    fast, hf = load_tokenizer(str(GPT2_JSON)), load_tokenizer(str(GPT2_JSON), backend="hf")
    assert isinstance(fast, TiktokenTokenizer)
    assert fast.encode_batch(["Hello world"])[0].tolist() == [15496, 995]
    assert fast.encode_batch(["Hello world<|endoftext|>"])[0].tolist() == [15496, 995, 50256]
    text = (CORPUS / "tinyshakespeare" / "input.txt").read_text()
    a, _ = fast.encode_batch([text])
    b, _ = hf.encode_batch([text])
    assert a.size == 338_025 and np.array_equal(a, b)
    wiki = (CORPUS / "wikitext-2-raw" / "wiki.test.raw").read_text()
    assert compare(fast, hf, wiki.split("\n = ")[:40]) is None


@needs_gpt2
@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
                | st.sampled_from(["  \r\n\t ", "1234567", "🙂🙂 x", "e\u0301", "'s 're", "<|endoftext|>a"]),
                min_size=1, max_size=8))
def test_gpt2_fast_path_equals_hf_on_any_text(texts):
    fast, hf = _gpt2_pair()
    assert compare(fast, hf, ["".join(texts)] + list(texts)) is None


_PAIR = []


def _gpt2_pair():
    if not _PAIR:
        _PAIR.extend([load_tokenizer(str(GPT2_JSON)), load_tokenizer(str(GPT2_JSON), backend="hf")])
    return _PAIR


@needs_gpt2
def test_llama3_style_split_pretokenizer_is_exact(tmp_path):
    doc = json.loads(GPT2_JSON.read_text())
    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    path = tmp_path / "llama3-style.json"
    path.write_text(json.dumps(doc))
    fast, hf = load_tokenizer(str(path)), load_tokenizer(str(path), backend="hf")
    assert isinstance(fast, TiktokenTokenizer)
    text = (CORPUS / "tinyshakespeare" / "input.txt").read_text()[:200_000]
    assert compare(fast, hf, [text, "Numbers 1234567 and CAPS\r\n\r\n  end"]) is None


@needs_gpt2
def test_tiktoken_ranks_file_matches_fast_path(tmp_path):
    enc = load_tokenizer(str(GPT2_JSON)).encoding
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for tok, rank in enc._mergeable_ranks.items()]
    (tmp_path / "gpt2.tiktoken").write_text("\n".join(lines) + "\n")
    t = load_tokenizer(f"tiktoken:{tmp_path / 'gpt2.tiktoken'}?pattern=gpt2")
    assert t.spec.kind == "tiktoken" and t.spec.eos_id == 50256 and t.spec.vocab_size == 50257
    assert compare(t, load_tokenizer(str(GPT2_JSON)), ["Hello world<|endoftext|> again"]) is None


def test_tiktoken_ranks_file_errors(tmp_path):
    (tmp_path / "x.tiktoken").write_text("not base64!! x\n")
    with pytest.raises(TokenizerError, match="x.tiktoken:1"):
        load_tokenizer(f"tiktoken:{tmp_path / 'x.tiktoken'}")


def test_sentencepiece_model(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    (tmp_path / "train.txt").write_text("\n".join(TRAIN * 5))
    spm.SentencePieceTrainer.train(input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=120, model_type="bpe", minloglevel=2)
    t = load_tokenizer(str(tmp_path / "sp.model"))
    ids, lengths = t.encode_batch(["Hello world", "the lazy dog"])
    assert lengths.size == 2 and int(ids.max()) < t.spec.vocab_size
    assert t.decode(ids[: lengths[0]]) == "Hello world"
    assert t.spec.eos_id == 2 and t.spec.bos_id == 1
    (tmp_path / "bad.model").write_bytes(b"garbage")
    with pytest.raises(TokenizerError, match="bad.model"):
        load_tokenizer(str(tmp_path / "bad.model"))
