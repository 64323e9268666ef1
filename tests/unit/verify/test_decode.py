import shutil

import numpy as np
import pytest
from support.paths import GPT2_JSON

from shardkit.tokenizers import load_tokenizer
from shardkit.verify import verify_dataset
from shardkit.verify.decode import load_dataset_tokenizer, sample_doc_ids
from shardkit.writer import write_dataset

pytestmark = pytest.mark.skipif(not GPT2_JSON.is_file(), reason="shared GPT-2 tokenizer.json not present")
TEXTS = ["Hello world, this is shardkit.", "Ünïcödé ✓ text\nwith lines", "def f(x):\n    return x * 2"]


@pytest.fixture(scope="module")
def gpt2_ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2")
    tok_file = root / "tokenizer.json"
    shutil.copy(GPT2_JSON, tok_file)
    tok = load_tokenizer(f"hf:{tok_file}", backend="hf")
    spec = {k: v for k, v in tok.spec.to_json().items() if k != "backend"}
    flat, lengths = tok.encode_batch(TEXTS)
    ends = np.cumsum(lengths)
    docs = [np.append(flat[e - n:e], spec["eos_id"]) for e, n in zip(ends, lengths)]
    write_dataset(root / "ds", docs, tokenizer=spec, eos_appended=True, checksum_block_size=256)
    return root / "ds", tok_file, spec


def test_deep_decodes_a_sample_through_the_given_tokenizer(gpt2_ds):
    ds, tok_file, _ = gpt2_ds
    r = verify_dataset(ds, mode="deep", decode_sample=3, tokenizer=f"hf:{tok_file}")
    assert r.ok, r.to_json()
    assert [s["text"] for s in r.samples] == [t + "<|endoftext|>" for t in TEXTS]
    assert all(s["replacement_chars"] == 0 for s in r.samples)


def test_the_recorded_path_outside_the_dataset_is_not_opened_but_named(gpt2_ds):
    ds, tok_file, _ = gpt2_ds
    r = verify_dataset(ds, mode="quick", decode_sample=3)
    assert r.ok and not r.samples
    assert any("outside the dataset" in n and f"--tokenizer {tok_file}" in n for n in r.notes), r.notes


def test_a_copy_inside_the_dataset_is_used(gpt2_ds, tmp_path):
    ds, tok_file, _ = gpt2_ds
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    shutil.copy(tok_file, copy / "tokenizer.json")
    r = verify_dataset(copy, mode="quick", decode_sample=3)
    assert [s["text"] for s in r.samples] == [t + "<|endoftext|>" for t in TEXTS]


def test_missing_or_changed_tokenizer_file_is_a_note(gpt2_ds, tmp_path):
    ds, tok_file, spec = gpt2_ds
    tok, notes = load_dataset_tokenizer({**spec, "path": str(tmp_path / "gone.json")}, tmp_path / "nowhere")
    assert tok is None and "outside the dataset" in notes[0]
    tok, notes = load_dataset_tokenizer({**spec, "sha256": "0" * 64}, ds, tokenizer=f"hf:{tok_file}")
    assert tok is not None and "differs from the one used to pack" in notes[0]
    tok, notes = load_dataset_tokenizer({"kind": "mystery", "path": "x"}, ds)
    assert tok is None and "cannot be loaded" in notes[0]


def test_sample_ids_spread_and_deterministic():
    assert sample_doc_ids(10, 3) == [0, 4, 9]
    assert sample_doc_ids(3, 10) == [0, 1, 2]
    assert sample_doc_ids(0, 5) == [] and sample_doc_ids(5, 0) == []
