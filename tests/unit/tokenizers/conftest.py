"""Shared tokenizers: the real GPT-2 file (skipped when ../shared is absent) and a tiny trained BPE."""

from __future__ import annotations

import pytest
from support.paths import GPT2_JSON
from tokenizer_testutil import train_bytelevel

from shardkit.tokenizers import load_tokenizer


@pytest.fixture(scope="session")
def gpt2_path():
    if not GPT2_JSON.exists():
        pytest.skip("real GPT-2 tokenizer.json not present (../shared/data)")
    return GPT2_JSON


@pytest.fixture(scope="session")
def gpt2_pair(gpt2_path):
    """(fast path, tokenizers) for the GPT-2 file, loaded once."""
    return load_tokenizer(str(gpt2_path)), load_tokenizer(str(gpt2_path), backend="hf")


@pytest.fixture(scope="session")
def tiny_json(tmp_path_factory):
    return train_bytelevel(tmp_path_factory.mktemp("tiny") / "tiny.json")
