"""A vocabulary past 65,536 ids: packed as 32-bit tokens by every backend, read back by the loader and by
megatron-core's IndexedDataset."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from support.dataset_bytes import assert_same_dataset
from support.paths import CORPUS, GPT2_JSON

from shardkit.format import open_dataset
from shardkit.loader import Loader
from shardkit.pack import PackConfig, pack
from shardkit.pack.config import TokenizeOptions

RESERVED = 16_000  # Llama-3 keeps 256 reserved specials; enough here to push the ids past 65,536


@pytest.fixture(scope="module")
def big_vocab_json(tmp_path_factory):
    """GPT-2's BPE with Llama-3-style specials above it: ids run to 66,257 (vocab 66,258)."""
    if not GPT2_JSON.exists():
        pytest.skip("real GPT-2 tokenizer.json not present (../shared/data)")
    doc = json.loads(GPT2_JSON.read_text(encoding="utf-8"))
    del doc["model"]["vocab"]["<|endoftext|>"]
    base = len(doc["model"]["vocab"])  # 50,256

    def added(i: int, content: str, special: bool) -> dict:
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": special}

    doc["added_tokens"] = ([added(base + k, f"<|reserved_{k}|>", True) for k in range(RESERVED)]
                           + [added(base + RESERVED, "<|end_of_text|>", True),
                              added(base + RESERVED + 1, "<|tool|>", False)])
    path = tmp_path_factory.mktemp("bigvocab") / "tokenizer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    paras = [p for p in CORPUS.joinpath("wikitext-2-raw", "wiki.test.raw").read_text(encoding="utf-8").split("\n")
             if p.strip()][:1500]
    with open(d / "a.jsonl", "w", encoding="utf-8") as f:
        for i, p in enumerate(paras):
            extra = [" <|tool|>call", " <|end_of_text|> as text", " <|reserved_7|>", ""][i % 4]
            f.write(json.dumps({"text": p + extra}) + "\n")
    return d


def _pack(corpus, out, tokenizer, backend, workers=1):
    return pack(PackConfig(inputs=(str(corpus),), output=str(out), workers=workers,
                           tokenize=TokenizeOptions(tokenizer=str(tokenizer), backend=backend)))


def test_every_backend_packs_identical_32_bit_tokens(big_vocab_json, corpus, tmp_path):
    ref = _pack(corpus, tmp_path / "hf", big_vocab_json, "hf")
    ds = open_dataset(tmp_path / "hf")
    assert ds.manifest.dtype == "int32" and ds.manifest.tokenizer["vocab_size"] == 50_256 + RESERVED + 2
    flat = np.concatenate([np.asarray(ds.doc(i)) for i in range(ds.num_docs)])
    eos, tool = 50_256 + RESERVED, 50_256 + RESERVED + 1
    assert ds.manifest.tokenizer["eos_id"] == eos
    assert int(np.count_nonzero(flat == eos)) == ds.num_docs  # only the appended EOS: the text one is text
    assert int(np.count_nonzero(flat == tool)) == 375  # the non-special added token, matched in text
    assert int(flat.max()) == tool and flat.min() >= 0
    for backend, runs in (("auto", "fastokens"), ("tiktoken", "tiktoken"), ("fastokens", "fastokens")):
        res = _pack(corpus, tmp_path / backend, big_vocab_json, backend, workers=2 if backend == "auto" else 1)
        assert res.tokenizer_backend == runs and res.tokenizer_note is None
        assert res.fingerprint == ref.fingerprint
        assert_same_dataset(tmp_path / backend, tmp_path / "hf")


def test_loader_and_megatron_read_the_32_bit_tokens(big_vocab_json, corpus, tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841 - megatron-core needs it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    _pack(corpus, tmp_path / "ds", big_vocab_json, "auto")
    ds = open_dataset(tmp_path / "ds")
    docs = [np.asarray(ds.doc(i)) for i in range(ds.num_docs)]
    flat = np.concatenate(docs)
    assert flat.dtype == np.int32 and int(flat.max()) > 65_535

    seq = 64
    loader = Loader(tmp_path / "ds", seq_len=seq, batch_schedule=4, max_epochs=1, shuffle="none", seed=0)
    seen = 0
    for b in range(min(loader.num_batches(), 40)):
        ids = loader.global_sample_ids(b)
        item = next(iter(loader))
        for row, sid in enumerate(ids):
            window = flat[sid * seq: sid * seq + seq + 1]
            np.testing.assert_array_equal(np.asarray(item["input_ids"][row]), window[:-1])
            seen += int(np.count_nonzero(window > 65_535))
    assert seen > 0  # ids past 16 bits went through the loader intact

    i = 0
    for shard in ds:
        mds = indexed_dataset.IndexedDataset(str(tmp_path / "ds" / shard.name))
        assert mds.index.dtype == np.int32 and len(mds) == shard.num_docs
        for j in range(shard.num_docs):
            np.testing.assert_array_equal(mds[j], docs[i])
            i += 1
    assert i == len(docs)
