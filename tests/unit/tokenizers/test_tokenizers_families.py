"""Tokenizer families real runs use, each exact against its reference library on the real corpus and the
adversarial documents: Qwen-style regex BPE (tokenizer.json), SentencePiece-BPE-style tokenizer.json
(byte fallback, `▁`, Prepend/Replace normalizers or a Metaspace pre-tokenizer), and SentencePiece `.model`
files. The files are trained here on ../shared/data text (under a second each): nothing is downloaded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.paths import CORPUS
from tokenizer_testutil import ADVERSARIAL, split_pre_tokenizer
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from shardkit.errors import TokenizerError
from shardkit.tokenizers import (
    FastPathRefused,
    HFTokenizer,
    compare,
    compile_tiktoken,
    load_tokenizer,
    load_tokenizer_checked,
)

SHAKESPEARE = CORPUS / "tinyshakespeare" / "input.txt"
WIKI = CORPUS / "wikitext-2-raw" / "wiki.test.raw"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _real_docs() -> list[str]:
    wiki = WIKI.read_text(encoding="utf-8")
    book = (CORPUS / "gutenberg" / "1342-0.txt").read_text(encoding="utf-8-sig")
    return [*wiki.split("\r\n \r\n")[:800], *book.replace("\r\n", "\n").split("\n\n")[:1500]]


@pytest.fixture(scope="module")
def real_docs():
    return _real_docs()


def _check_all_backends(path, docs, expect):
    """`auto` picks `expect` and equals `tokenizers` on `docs` and the adversarial documents."""
    hf = load_tokenizer(str(path), backend="hf")
    auto = load_tokenizer(str(path))
    assert auto.spec.backend == expect, auto.fastpath_note
    texts = docs + ADVERSARIAL
    ref = hf.encode_batch(texts)
    others = [b for b in ("tiktoken",) if b != expect and _exact_statically(path)]
    for tok in (auto, *(load_tokenizer(str(path), backend=b) for b in others)):
        ids, lengths = tok.encode_batch(texts)
        assert np.array_equal(lengths, ref[1]) and np.array_equal(ids, ref[0]), tok.spec.backend
    return auto, hf


def _exact_statically(path) -> bool:
    try:
        compile_tiktoken(str(path))
    except FastPathRefused:
        return False
    return True


# ---- Qwen-style: NFC, a Split regex with single digits, ByteLevel, chat specials, a non-special tool token

def test_qwen_style_tokenizer_json(tmp_path, gpt2_path, real_docs):
    doc = json.loads(gpt2_path.read_text(encoding="utf-8"))
    n = len(doc["model"]["vocab"])
    extra = [("<|im_start|>", True), ("<|im_end|>", True), ("<tool_call>", False)]
    doc["added_tokens"] += [{"id": n + k, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": s} for k, (c, s) in enumerate(extra)]
    doc["normalizer"] = {"type": "NFC"}
    doc["pre_tokenizer"] = split_pre_tokenizer(QWEN2_PATTERN)
    path = tmp_path / "qwen-style.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    chat = ["<|im_start|>user\nHi 12345<|im_end|>", "<tool_call>{\"x\": 1}</tool_call>", "e\u0301 Å Å ﬁ"]
    auto, hf = _check_all_backends(path, real_docs + chat, "fastokens")  # and the tiktoken fast path
    assert len(auto.encode_batch(["12345"])[0]) == 5  # this regex cuts digits one by one
    assert n + 2 in auto.encode_batch(["a <tool_call> b"])[0].tolist()  # non-special: matched in text
    assert n not in auto.encode_batch(["<|im_start|>"])[0].tolist()  # special: text


# ---- SentencePiece-BPE-style tokenizer.json (Llama-2 / Mistral): byte fallback, ▁, no byte-level alphabet

def _sp_bpe_json(path, *, metaspace: bool):
    """A byte-fallback BPE trained on Shakespeare, saved as Llama-2's tokenizer.json lays it out: specials,
    then the 256 <0xXX> byte tokens, then the learned pieces."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if metaspace:  # Mistral/Gemma-era layout: Metaspace pre-tokenizer instead of Prepend/Replace normalizers
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  max_token_length=16)
    tok.train_from_iterator(SHAKESPEARE.read_text().split("\n\n")[:4000], trainer)
    tok.save(str(path))
    doc = json.loads(path.read_text(encoding="utf-8"))
    learned = [t for t, _ in sorted(doc["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in
               ("<unk>", "<s>", "</s>")]
    order = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *learned]
    doc["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for t in doc["added_tokens"]:
        t["id"] = doc["model"]["vocab"][t["content"]]
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_sentencepiece_bpe_style_json_with_normalizers(tmp_path, real_docs):
    path = _sp_bpe_json(tmp_path / "llama2-style.json", metaspace=False)
    with pytest.raises(FastPathRefused, match="normalizer 'Sequence'|byte_fallback"):
        compile_tiktoken(str(path))
    # fastokens 0.3.5 maps special-token text to the special id in such files ("</s>" in a document
    # becomes EOS) despite split_special_tokens: the load-time probe catches it, so auto uses tokenizers
    auto, hf = _check_all_backends(path, real_docs, "hf")
    assert auto.fastpath_note.startswith("fastokens backend disagrees with tokenizers at text 14, token 1: [0] ")
    fk = load_tokenizer(str(path), backend="fastokens")
    assert fk.encode_batch(["a </s> b"])[0].tolist().count(2) == 1  # the forged EOS
    assert hf.encode_batch(["a </s> b"])[0].tolist().count(2) == 0
    assert compare(fk, hf, real_docs) is None  # everything else agrees: the difference is that narrow
    with pytest.raises(TokenizerError, match="fastokens backend disagrees"):
        load_tokenizer_checked(str(path), real_docs[:50], backend="fastokens")
    ids = auto.encode_batch(["☃ snow"])[0].tolist()
    vocab = hf._tok.get_vocab()
    assert [vocab["<0xE2>"], vocab["<0x98>"], vocab["<0x83>"]] == ids[1:4]  # byte fallback, never <unk>
    assert 0 not in auto.encode_batch(ADVERSARIAL)[0].tolist()
    assert (auto.spec.eos_id, auto.spec.bos_id) == (2, 1)


def test_sentencepiece_bpe_style_json_with_metaspace(tmp_path, real_docs):
    path = _sp_bpe_json(tmp_path / "mistral-style.json", metaspace=True)
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer)  # fastokens 0.3.5 has no Metaspace; tiktoken no byte fallback
    assert "unsupported pre-tokenizer type: Metaspace" in tok.fastpath_note
    _check_all_backends(path, real_docs, "hf")


# ---- SentencePiece .model files through the sentencepiece package

spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def sp_bpe_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("spm")
    spm.SentencePieceTrainer.train(input=str(SHAKESPEARE), model_prefix=str(d / "bpe"), vocab_size=1000,
                                   model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False,  # as Llama-2 ships it
                                   minloglevel=2, num_threads=1, input_sentence_size=20000)
    return d / "bpe.model"


def test_sentencepiece_model_matches_the_library(sp_bpe_model, real_docs):
    tok = load_tokenizer(str(sp_bpe_model))
    assert tok.spec.kind == tok.spec.backend == "sentencepiece"
    sp = spm.SentencePieceProcessor(model_file=str(sp_bpe_model))
    docs = real_docs + [SHAKESPEARE.read_text()] + ADVERSARIAL
    ids, lengths = tok.encode_batch(docs)
    ref = sp.encode(docs, out_type=int)  # the library itself: no BOS/EOS, control-symbol text is text
    assert lengths.tolist() == [len(r) for r in ref]
    assert np.array_equal(ids, np.fromiter((i for r in ref for i in r), dtype=np.uint32))
    assert sp.unk_id() not in ids.tolist()  # byte fallback covers emoji, CJK, control characters
    for text in ADVERSARIAL:  # identity normalization, whitespace kept: decoding gives the text back
        one, _ = tok.encode_batch([text])
        assert tok.decode(one) == text, text[:40]
    assert tok.spec.eos_id not in tok.encode_batch(["</s> <s>"])[0].tolist()
