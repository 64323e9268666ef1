"""The fast path on the real GPT-2 tokenizer.json: identical ids to `tokenizers` on real and random text."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import CORPUS
from tokenizer_testutil import TEXT, edit_json, split_pre_tokenizer, tiktoken_style_merges

from shardkit.tokenizers import (
    FastokensTokenizer,
    FastPathRefused,
    HFTokenizer,
    TiktokenTokenizer,
    compare,
    compare_backends,
    compile_tiktoken,
    load_tokenizer,
)
from shardkit.tokenizers.selfcheck import probe_texts

SHAKESPEARE = CORPUS / "tinyshakespeare" / "input.txt"
WIKI = CORPUS / "wikitext-2-raw" / "wiki.test.raw"


def test_known_ids(gpt2_pair):
    fast, hf = gpt2_pair
    assert isinstance(fast, TiktokenTokenizer) and fast.fastpath_note is None
    assert fast.spec.vocab_size == 50257 and fast.spec.eos_id == 50256 and fast.spec.bos_id is None
    assert fast.spec.sha256 == "e88dafdf79f2026eaffb161c36a8b914b5fa586a620d108b9fecc117f74dbdd7"
    for tok in gpt2_pair:
        assert tok.encode_batch(["Hello world", " Hello world"])[0].tolist() == [15496, 995, 18435, 995]
        # the special token's text is text: never id 50256
        assert tok.encode_batch(["Hello world<|endoftext|>"])[0].tolist() == [15496, 995, 27, 91, 437, 1659, 5239, 91, 29]
        assert tok.decode([15496, 995, 50256]) == "Hello world<|endoftext|>"


def test_tinyshakespeare_count_and_ids(gpt2_pair):
    fast, hf = gpt2_pair
    text = SHAKESPEARE.read_text(encoding="utf-8")
    a, la = fast.encode_batch([text])
    b, lb = hf.encode_batch([text])
    assert a.size == 338_025 and la.tolist() == [338_025] and np.array_equal(a, b) and np.array_equal(la, lb)


def test_wikitext_and_gutenberg_match(gpt2_pair):
    fast, hf = gpt2_pair
    wiki = WIKI.read_text(encoding="utf-8").split("\n = ")  # CRLF text, @-@ markers, many articles
    books = [p.read_text(encoding="utf-8-sig")[:150_000] for p in sorted((CORPUS / "gutenberg").glob("*-0.txt"))[:3]]
    assert compare(fast, hf, wiki + books) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4))
def test_fast_path_equals_hf_on_any_text(gpt2_pair, texts):
    fast, hf = gpt2_pair
    assert compare(fast, hf, ["".join(texts), *texts]) is None


def test_llama3_style_split_pretokenizer_is_exact(tmp_path, gpt2_path):
    path = edit_json(gpt2_path, tmp_path / "llama3-style.json", pre_tokenizer=split_pre_tokenizer())
    hf = load_tokenizer(str(path), backend="hf")
    text = SHAKESPEARE.read_text(encoding="utf-8")[:200_000]
    for backend, kind in (("tiktoken", TiktokenTokenizer), ("fastokens", FastokensTokenizer)):
        fast = load_tokenizer(str(path), backend=backend)
        assert isinstance(fast, kind)
        assert compare(fast, hf, [text, "Numbers 1234567 and CAPS'S\r\n\r\n  end", "🙂👍🏽 e\u0301\u00a0x"]) is None
        # the regex really is different from GPT-2's: digits are cut in threes
        assert len(fast.encode_batch(["1234567"])[0]) == 3


def test_tiktoken_converted_style_file_is_exact(tmp_path, gpt2_path, gpt2_pair):
    """Llama-3-style: merges listing every split of each token, ignore_merges=true, Split regex."""
    doc = json.loads(gpt2_path.read_text(encoding="utf-8"))
    vocab = {t: i for t, i in doc["model"]["vocab"].items() if t != "<|endoftext|>"}
    path = edit_json(gpt2_path, tmp_path / "converted.json", model_merges=tiktoken_style_merges(vocab),
                     model_ignore_merges=True, pre_tokenizer=split_pre_tokenizer())
    hf = load_tokenizer(str(path), backend="hf")
    runs = [c * n for c in " =-.a\n" for n in range(1, 40)]
    text = SHAKESPEARE.read_text(encoding="utf-8")[:200_000]
    for backend, kind in (("tiktoken", TiktokenTokenizer), ("fastokens", FastokensTokenizer)):
        fast = load_tokenizer(str(path), backend=backend)
        assert isinstance(fast, kind)
        assert compare(fast, hf, [text, *runs]) is None
    # the same merges without ignore_merges: tie-breaking could differ, so refused
    strict = edit_json(path, tmp_path / "strict.json", model_ignore_merges=False)
    with pytest.raises(FastPathRefused, match="break rank ties differently"):
        compile_tiktoken(str(strict))


def test_compare_backends_reports_ok(gpt2_path):
    result = compare_backends(str(gpt2_path), ["Hello world", "<|endoftext|> inside a document"])
    probes = probe_texts(HFTokenizer(str(gpt2_path)))
    assert "a<|endoftext|>b <|endoftext|><|endoftext|>" in probes
    assert result.ok and result.texts == 2 + len(probes) and "tiktoken fast path matches tokenizers" in result.describe()


def test_tiktoken_ranks_file_matches_fast_path(tmp_path, gpt2_pair):
    fast, _ = gpt2_pair
    enc = fast.encoding
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for tok, rank in sorted(enc._mergeable_ranks.items(),
                                                                                key=lambda kv: kv[1])]
    (tmp_path / "r50k_base.tiktoken").write_text("\n".join(lines) + "\n")
    (tmp_path / "mine.tiktoken").write_text("\n".join(lines) + "\n")
    by_name = load_tokenizer(f"tiktoken:{tmp_path / 'r50k_base.tiktoken'}")
    explicit = load_tokenizer(f"tiktoken:{tmp_path / 'mine.tiktoken'}?pattern=gpt2&eos=<|endoftext|>")
    for t in (by_name, explicit):
        assert t.spec.kind == "tiktoken" and t.spec.backend == "tiktoken"
        assert t.spec.eos_id == 50256 and t.spec.vocab_size == 50257
        text = SHAKESPEARE.read_text(encoding="utf-8")[:100_000]
        assert compare(t, fast, [text, "Hello world<|endoftext|> again", "🙂 e\u0301"]) is None
        assert t.decode([15496, 995, 50256]) == "Hello world<|endoftext|>"
