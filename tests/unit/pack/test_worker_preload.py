"""A pack worker loads the fastokens encoder while the parent still chooses the backend; only a setup
naming exactly that backend and tokenizer uses it, anything else loads what it names."""

import numpy as np
import pytest
from support.paths import GPT2_JSON

from shardkit.pack import worker
from shardkit.tokenizers import load_tokenizer


@pytest.fixture(autouse=True)
def _fresh_worker_state(monkeypatch):
    monkeypatch.setattr(worker, "_STATE", None)
    monkeypatch.setattr(worker, "_PRELOADED", None)


def _setup(backend, tokenizer=str(GPT2_JSON)):
    return worker.WorkerSetup(tokenizer=tokenizer, backend=backend, dtype="uint16", eos_id=50256, bos_id=None,
                              vocab_size=50257)


def test_the_preloaded_encoder_serves_a_fastokens_setup():
    worker.preload_worker(str(GPT2_JSON), "auto")
    preloaded = worker._PRELOADED[1]
    assert preloaded.spec.backend == "fastokens"
    worker.init_worker(_setup("fastokens"))
    assert worker._STATE[0] is preloaded  # not loaded a second time
    texts = ["Hello world, it's 2026.", "<|endoftext|> as text", "x" * 5000]
    ids, lengths = worker.encode_chunk(texts)
    fresh = load_tokenizer(str(GPT2_JSON), backend="hf", threads=1)
    ref_ids, ref_lengths = fresh.encode_batch(texts)
    assert np.array_equal(lengths - 1, ref_lengths)  # (+ EOS)
    assert np.array_equal(np.delete(ids, np.cumsum(lengths) - 1), ref_ids)


def test_another_backend_is_loaded_and_the_guess_dropped():
    worker.preload_worker(str(GPT2_JSON), "auto")
    guess = worker._PRELOADED[1]
    worker.init_worker(_setup("hf"))  # the parent's self-check fell back to tokenizers
    assert worker._STATE[0] is not guess and worker._STATE[0].spec.backend == "hf"
    assert worker._PRELOADED is None


def test_a_setup_for_another_tokenizer_never_gets_the_guess(tmp_path):
    other = tmp_path / "tokenizer.json"
    other.write_bytes(GPT2_JSON.read_bytes())
    worker.preload_worker(str(GPT2_JSON), "auto")
    guess = worker._PRELOADED[1]
    worker.init_worker(_setup("fastokens", tokenizer=str(other)))
    assert worker._STATE[0] is not guess and worker._STATE[0].spec.path == str(other)


@pytest.mark.parametrize(("spec", "backend"), [("bytes", "auto"), (str(GPT2_JSON), "hf"),
                                               (str(GPT2_JSON), "tiktoken"), ("/no/such/tokenizer.json", "auto")])
def test_nothing_is_preloaded_where_fastokens_would_not_run(spec, backend):
    worker.preload_worker(spec, backend)  # never raises: the first task reports a bad tokenizer itself
    assert worker._PRELOADED is None
