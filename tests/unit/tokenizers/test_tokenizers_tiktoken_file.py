"""tiktoken ranks files: options in the spec string, presets, errors."""

from __future__ import annotations

import base64

import pytest

from shardkit.errors import TokenizerError
from shardkit.tokenizers import load_tokenizer


def _ranks_file(path, extra=()):
    tokens = [bytes([b]) for b in range(256)] + [b"ab", b"abc", *extra]
    path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(tokens)))
    return path


def test_custom_pattern_and_specials(tmp_path):
    f = _ranks_file(tmp_path / "tiny.tiktoken")
    t = load_tokenizer(f"tiktoken:{f}?pattern=%5Cs%2B%7C%5CS%2B&special=<eos>:300,<bos>:301&eos=<eos>&bos=<bos>")
    assert (t.spec.vocab_size, t.spec.eos_id, t.spec.bos_id) == (302, 300, 301)
    ids, lengths = t.encode_batch(["abc ab", "<eos>"])
    assert ids[: lengths[0]].tolist() == [257, 32, 256] and 300 not in ids.tolist()  # special text is text
    assert t.decode([257, 300, 301]) == "abc<eos><bos>"
    # a raw regex may be given unencoded when it has no '&', '%' or '#'; '+' stays '+'
    t2 = load_tokenizer(f"tiktoken:{f}?pattern=\\s+|\\S+")
    assert t2.encode_batch(["abc ab"])[0].tolist() == [257, 32, 256] and t2.spec.eos_id is None


def test_pattern_needed_when_the_name_is_no_preset(tmp_path):
    f = _ranks_file(tmp_path / "tiny.tiktoken")
    with pytest.raises(TokenizerError, match=r"\?pattern=NAME"):
        load_tokenizer(f"tiktoken:{f}")
    with pytest.raises(TokenizerError, match="unknown option 'colour=red'"):
        load_tokenizer(f"tiktoken:{f}?colour=red")
    with pytest.raises(TokenizerError, match="collide with ranks"):
        load_tokenizer(f"tiktoken:{f}?pattern=gpt2&special=<x>:5")
    with pytest.raises(TokenizerError, match="eos token '<nope>' is not"):
        load_tokenizer(f"tiktoken:{f}?pattern=gpt2&special=<x>:400&eos=<nope>")


def test_bad_files(tmp_path):
    (tmp_path / "x.tiktoken").write_text("YWI= 0\nnot base64!! x\n")
    with pytest.raises(TokenizerError, match="x.tiktoken:2: expected 'BASE64TOKEN RANK'"):
        load_tokenizer(f"tiktoken:{tmp_path / 'x.tiktoken'}?pattern=gpt2")
    with pytest.raises(TokenizerError, match="ranks file not found"):
        load_tokenizer(f"tiktoken:{tmp_path / 'none.tiktoken'}?pattern=gpt2")
    (tmp_path / "e.tiktoken").write_text("\n")
    with pytest.raises(TokenizerError, match="empty"):
        load_tokenizer(f"tiktoken:{tmp_path / 'e.tiktoken'}?pattern=gpt2")
    f = _ranks_file(tmp_path / "t.tiktoken")
    with pytest.raises(TokenizerError, match="tiktoken rejected"):
        load_tokenizer(f"tiktoken:{f}?pattern=(unclosed")
    with pytest.raises(TokenizerError, match="only applies to tokenizer.json"):
        load_tokenizer(f"tiktoken:{f}?pattern=gpt2", backend="hf")
