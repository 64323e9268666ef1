"""Tiny tokenizer files trained in the test (a few ms each), and text strategies for equivalence tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

TRAIN = ["The quick brown fox jumps over the lazy dog.", "Hello world, hello tokenizer! It's 4:30 pm.",
         "1234 5678 and 90 — naïve café, Ærøskøbing", "  spaces   and\ttabs\r\nand newlines\n\n",
         "e\u0301 combining; 日本語のテキスト; 🙂🙂 emoji", "<|endoftext|> literal specials <tool>"] * 20

# Text that stresses every branch of the split regexes: whitespace runs, CRLF, digits, contractions,
# emoji with modifiers, combining marks, NBSP and other Unicode spaces, and special-token text.
PIECES = st.sampled_from([" ", "  ", "   ", "\t", "\n", "\r\n", "\r\n\r\n", " \n ", "\u00a0", "\u3000", "\u2028",
                          "0", "123", "4567890", "'s", "'LL", "’t", "e\u0301", "\u0301", "🙂", "👍🏽", "日本",
                          "<|endoftext|>", "<|endoftext", "<tool>", "Hello", " world", "ǅ", "ﬁ", "\x00"])
# adversarial documents: special-token text, empty documents, 1 MB without a space, 500k digits,
# emoji/CJK/ZWJ sequences, control characters, whitespace runs
ADVERSARIAL = [
    "<|endoftext|>", "text<|endoftext|>more <|endoftext|>", "<|endoftext", "|endoftext|>", "", "", " ",
    "a" * 1_000_000, "é" * 300_000, "9" * 500_000, "1" + "0" * 10_000,
    "👨\u200d👩\u200d👧\u200d👦👩🏽\u200d💻🏳️\u200d🌈 " * 200, "中文文本和日本語のテキスト、한국어 " * 300,
    "".join(map(chr, range(32))) + "\x7f\x85\u2028\u2029", "\r\n" * 5000, " " * 10_000 + "x", "\t \n" * 3000,
    "e\u0301" * 2000, "\ufeffBOM then text", "'s'S'll'LL'd 'tis ’tis", "x" * 70_000 + " y" * 10,
]

TEXT = st.lists(PIECES | st.text(st.characters(codec="utf-8"), max_size=12), max_size=12).map("".join)


def train_bytelevel(path: Path, *, prefix_space: bool = False, normalizer: Any = None,
                    specials: tuple[str, ...] = ("<|endoftext|>",), vocab_size: int = 500) -> Path:
    """A GPT-2-style byte-level BPE trained on TRAIN, saved to `path`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN, trainer)
    tok.save(str(path))
    return path


def add_tokens(path: Path, out: Path, tokens: list[AddedToken]) -> Path:
    tok = Tokenizer.from_file(str(path))
    tok.add_tokens(tokens)
    tok.save(str(out))
    return out


def edit_json(path: Path, out: Path, **changes: Any) -> Path:
    """Copy a tokenizer.json with top-level keys (or "model.KEY") replaced."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if key.startswith("model_"):
            doc["model"][key[len("model_"):]] = value
        else:
            doc[key] = value
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


def nfkc() -> Any:
    return normalizers.NFKC()


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def split_pre_tokenizer(pattern: str = LLAMA3_PATTERN) -> dict[str, Any]:
    """Llama-3 / Qwen-style: Split(regex, Isolated) then ByteLevel without its own regex."""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def tiktoken_style_merges(vocab: dict[str, int]) -> list[list[str]]:
    """Merges as converters from tiktoken ranks write them (Llama-3): every split of a token into two
    lower-ranked tokens, ordered by the result's rank, then by the parts' ranks."""
    merges = []
    for tok, rank in vocab.items():
        splits = sorted((vocab[tok[:k]], vocab[tok[k:]], tok[:k], tok[k:]) for k in range(1, len(tok))
                        if vocab.get(tok[:k], rank) < rank and vocab.get(tok[k:], rank) < rank)
        merges += [(rank, a, b) for _, _, a, b in splits]
    return [[a, b] for _, a, b in sorted(merges, key=lambda m: m[0])]
