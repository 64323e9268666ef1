"""Shared tokenizers: the real GPT-2 file (skipped when ../shared is absent) and a tiny trained BPE."""

from __future__ import annotations

import pytest
from support.paths import GPT2_JSON
from tokenizer_testutil import train_bytelevel

from shardkit.tokenizers import fastokens_backend, load_tokenizer


@pytest.fixture(scope="session")
def gpt2_path():
    if not GPT2_JSON.exists():
        pytest.skip("real GPT-2 tokenizer.json not present (../shared/data)")
    return GPT2_JSON


@pytest.fixture(scope="session")
def gpt2_pair(gpt2_path):
    """(tiktoken fast path, tokenizers) for the GPT-2 file, loaded once."""
    return load_tokenizer(str(gpt2_path), backend="tiktoken"), load_tokenizer(str(gpt2_path), backend="hf")


@pytest.fixture(scope="session")
def tiny_json(tmp_path_factory):
    return train_bytelevel(tmp_path_factory.mktemp("tiny") / "tiny.json")


@pytest.fixture(scope="module")
def without_fastokens():
    """`auto` as on a platform without a fastokens wheel: for tests of the tiktoken fast path's choices."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fastokens_backend, "fastokens", None)
        yield
