"""The fastokens backend: identical ids to `tokenizers` on the real corpus and adversarial text, taken by
`auto` only after its checks, and every disagreement falling back to the next exact backend."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from support.paths import CORPUS
from tokenizer_testutil import ADVERSARIAL, TEXT, TRAIN, add_tokens, nfkc, train_bytelevel
from tokenizers import AddedToken, normalizers

from shardkit.errors import TokenizerError
from shardkit.tokenizers import (
    FastokensTokenizer,
    HFTokenizer,
    TiktokenTokenizer,
    compare,
    load_tokenizer,
    load_tokenizer_checked,
)
from shardkit.tokenizers import spec as spec_mod


def _paragraph_docs() -> list[str]:
    """Every text file of ../shared/data as paragraph documents, some whole files, and HumanEval."""
    docs: list[str] = []
    files = sorted((CORPUS / "gutenberg").glob("*.txt")) + [CORPUS / "tinyshakespeare" / "input.txt",
                                                           CORPUS / "wikitext-2-raw" / "wiki.test.raw"]
    for f in files:
        raw = f.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("cp1252")  # three Gutenberg books are Windows-1252 (see the data README)
        if f.parent.name != "gutenberg" or f.name == "141.txt":  # whole: the short files and a cp1252 book
            docs.append(text)
        docs += text.replace("\r\n", "\n").split("\n\n")
    with gzip.open(CORPUS / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            docs += [rec["prompt"] + rec["canonical_solution"], rec["test"]]
    return docs


@pytest.fixture(scope="module")
def gpt2_fastokens(gpt2_path):
    return load_tokenizer(str(gpt2_path), backend="fastokens"), load_tokenizer(str(gpt2_path), backend="hf")


def test_auto_takes_fastokens_for_gpt2_with_the_same_spec(gpt2_path):
    fast = load_tokenizer(str(gpt2_path))
    hf = HFTokenizer(str(gpt2_path))
    assert isinstance(fast, FastokensTokenizer) and fast.fastpath_note is None
    assert fast.spec.backend == "fastokens" and {**fast.spec.to_json(), "backend": "hf"} == hf.spec.to_json()
    ids, lengths = fast.encode_batch(["Hello world", " Hello world", "Hello world<|endoftext|>"])
    assert ids.dtype == np.uint32 and lengths.dtype == np.int64
    # the known GPT-2 ids (../shared/data/README.md); special-token text is text, not id 50256
    assert ids[:4].tolist() == [15496, 995, 18435, 995] and 50256 not in ids.tolist()
    assert ids[4:].tolist() == hf.encode_batch(["Hello world<|endoftext|>"])[0].tolist()
    assert lengths.tolist()[:2] == [2, 2] and fast.decode(ids[:2]) == "Hello world"


@pytest.mark.slow
def test_gpt2_whole_corpus_is_identical(gpt2_fastokens):
    fast, hf = gpt2_fastokens
    docs = _paragraph_docs()
    assert len(docs) > 100_000
    ids, lengths = fast.encode_batch(docs)
    ref_ids, ref_lengths = hf.encode_batch(docs)
    assert np.array_equal(lengths, ref_lengths) and np.array_equal(ids, ref_ids)
    assert ids.size > 8_000_000


def test_gpt2_adversarial_cases_are_identical(gpt2_fastokens):
    fast, hf = gpt2_fastokens
    assert compare(fast, hf, ADVERSARIAL) is None
    for text in ADVERSARIAL:  # alone too: batch position must not matter
        assert compare(fast, hf, [text]) is None, text[:40]
    ids, lengths = fast.encode_batch(["", "<|endoftext|>", ""])
    assert lengths.tolist()[0] == lengths.tolist()[2] == 0 and 50256 not in ids.tolist()


@settings(max_examples=150, deadline=None)
@given(TEXT)
def test_gpt2_any_text_is_identical(gpt2_fastokens, text):
    fast, hf = gpt2_fastokens
    assert compare(fast, hf, [text, text + text]) is None


@pytest.mark.parametrize("variant", [
    dict(), dict(prefix_space=True), dict(normalizer=normalizers.NFC()), dict(normalizer=normalizers.Lowercase()),
    dict(specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>")),
])
def test_trained_files_fastokens_equals_tokenizers(tmp_path, variant):
    path = train_bytelevel(tmp_path / "t.json", **variant)
    fast, hf = load_tokenizer(str(path), backend="fastokens"), load_tokenizer(str(path), backend="hf")
    assert compare(fast, hf, TRAIN + ADVERSARIAL[:7] + ["<|im_start|>user hi<|im_end|>", "ÅNGSTRÖM ǅ ﬁ"]) is None
    assert isinstance(load_tokenizer(str(path)), FastokensTokenizer)  # and auto takes it


def test_an_unsupported_normalizer_falls_back_to_tokenizers(tmp_path):
    path = train_bytelevel(tmp_path / "k.json", normalizer=nfkc())
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer)
    assert tok.fastpath_note == ("fastokens cannot load k.json (normalizer error: unsupported normalizer type: "
                                 "NFKC); tiktoken fast path refused: normalizer 'NFKC' has no exact tiktoken "
                                 "equivalent")


def test_non_special_added_tokens_keep_their_meaning(tmp_path, tiny_json):
    path = add_tokens(tiny_json, tmp_path / "a.json", [AddedToken("<tool>", special=False, normalized=False)])
    fast, hf = load_tokenizer(str(path), backend="fastokens"), load_tokenizer(str(path), backend="hf")
    texts = ["call <tool>now</tool>", "<tool><tool>", "<|endoftext|><tool>"]
    assert compare(fast, hf, texts) is None
    tool = hf._tok.token_to_id("<tool>")
    assert tool in fast.encode_batch(["<tool>"])[0].tolist()


def test_bad_text_is_a_tokenizer_error(gpt2_fastokens):
    fast, _ = gpt2_fastokens
    with pytest.raises(TokenizerError, match="text 1 of the batch has an unpaired surrogate at character 1"):
        fast.encode_batch(["fine", "a\ud800b"])


class Mismatching(FastokensTokenizer):
    """A real fastokens backend that gets one id of every non-empty text wrong: the deliberate bug."""

    def encode_batch(self, texts):
        ids, lengths = super().encode_batch(texts)
        ids = ids.copy()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]
        ids[starts] = (ids[starts] + 1) % self.spec.vocab_size
        return ids, lengths


def test_a_mismatching_backend_fails_the_probe_at_load(tiny_json, monkeypatch):
    monkeypatch.setattr(spec_mod, "FastokensTokenizer", Mismatching)
    tok = load_tokenizer(str(tiny_json))
    assert isinstance(tok, TiktokenTokenizer)
    assert tok.fastpath_note.startswith("fastokens backend disagrees with tokenizers at text 0, token 0")
    # asked for by name it loads (the pack's self-check then refuses it)
    assert isinstance(load_tokenizer(str(tiny_json), backend="fastokens"), Mismatching)


def test_self_check_fails_over_to_tiktoken_then_tokenizers(tiny_json, tmp_path):
    samples = ["real input text", "more of it, with <|endoftext|> inside"]
    bad = Mismatching(str(tiny_json))
    tok, note = spec_mod.self_check(bad, samples)
    assert isinstance(tok, TiktokenTokenizer) and tok.fastpath_note == note
    assert note == ("fastokens backend disagrees with tokenizers at text 0, token 0: "
                    f"{bad.encode_batch([samples[0]])[0][:4].tolist()} instead of "
                    f"{HFTokenizer(str(tiny_json)).encode_batch([samples[0]])[0][:4].tolist()}; "
                    "using the tiktoken fast path")
    # a file the tiktoken fast path refuses: straight to tokenizers
    refused = train_bytelevel(tmp_path / "p.json", prefix_space=True)
    tok, note = spec_mod.self_check(Mismatching(str(refused)), samples)
    assert isinstance(tok, HFTokenizer) and "add_prefix_space" in note and note.endswith("using tokenizers")
    with pytest.raises(TokenizerError, match="fastokens backend disagrees.*use backend 'auto' or 'hf'"):
        spec_mod.self_check(bad, samples, backend="fastokens")


def test_checked_keeps_a_passing_fastokens(tiny_json):
    tok, note = load_tokenizer_checked(str(tiny_json), ["Hello <|endoftext|> world", "x" * 5000])
    assert isinstance(tok, FastokensTokenizer) and note is None


def test_without_fastokens_auto_takes_tiktoken_silently(tiny_json, monkeypatch):
    from shardkit.tokenizers import fastokens_backend

    monkeypatch.setattr(fastokens_backend, "fastokens", None)
    tok = load_tokenizer(str(tiny_json))
    assert isinstance(tok, TiktokenTokenizer) and tok.fastpath_note is None
    with pytest.raises(TokenizerError, match="fastokens backend cannot be used: fastokens is not installed"):
        load_tokenizer(str(tiny_json), backend="fastokens")


def test_a_file_fastokens_cannot_load_falls_back_with_the_reason(tmp_path, tiny_json):
    doc = json.loads(tiny_json.read_text(encoding="utf-8"))
    doc["pre_tokenizer"] = {"type": "Whitespace"}  # fastokens 0.3.5 has no Whitespace (nor Metaspace)
    path = tmp_path / "ws.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer)
    assert tok.fastpath_note.startswith("fastokens cannot load ws.json (")
    assert "unsupported pre-tokenizer type: Whitespace" in tok.fastpath_note
    assert "; tiktoken fast path refused: pre-tokenizer 'Whitespace'" in tok.fastpath_note
    with pytest.raises(TokenizerError, match="ws.json: the fastokens backend cannot be used: fastokens cannot load"):
        load_tokenizer(str(path), backend="fastokens")
