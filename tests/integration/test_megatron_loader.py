"""`Loader(order="megatron")` against the real megatron-core: each rank's micro-batches hold, token for token,
the samples megatron-core's BlendedDataset/GPTDataset gives Megatron-LM's sampler on that rank.

Data: real Wikipedia text tokenized with the real GPT-2 tokenizer by `shardkit pack` (shards as prefixes),
and Megatron data written by megatron-core's own `IndexedDatasetBuilder`, brought in with `shardkit adopt`.
"""

import json
import warnings

import numpy as np
import pytest
from support.megatron_samplers import megatron_pretraining_sampler
from support.paths import CORPUS, GPT2_JSON

from shardkit import Loader
from shardkit.adopt import adopt
from shardkit.errors import ConfigError, ResumeError
from shardkit.format import open_dataset
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.writer.shard_writer import ShardLimits

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mbuilder = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_builder")
    mgpt = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    mblended = pytest.importorskip("megatron.core.datasets.blended_dataset")
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")


class _Tokenizer:
    eod = 50256
    vocab_size = 50257
    unique_identifiers = {"class": "GPT2", "vocab_size": 50257}


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron-loader")
    text = (CORPUS / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    with open(root / "wiki.jsonl", "w", encoding="utf-8") as f:
        for para in text.splitlines():
            if para.strip():
                f.write(json.dumps({"text": para}) + "\n")
    pack(PackConfig(inputs=(str(root / "wiki.jsonl"),), output=str(root / "ds"), workers=1,
                    tokenize=TokenizeOptions(tokenizer=str(GPT2_JSON), backend="hf"),
                    limits=ShardLimits(max_tokens=40_000, checksum_block_size=4096)))
    return open_dataset(root / "ds")


def _megatron(paths, weights, size, cache, **flags):
    config = mgpt.GPTDatasetConfig(blend=(paths, weights), path_to_cache=str(cache), tokenizer=_Tokenizer(),
                                   reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                                   **flags)
    # BlendedDataset asks torch.distributed for its rank when it writes its cache: a real group of one, gone
    # before the loaders (which check their world_size against a live group) are made
    torch.distributed.init_process_group("gloo", init_method=f"file://{cache}.store", rank=0, world_size=1)
    try:
        return mbuilder.BlendedMegatronDatasetBuilder(mgpt.GPTDataset, [size, 0, 0], lambda: True, config).build()[0]
    finally:
        torch.distributed.destroy_process_group()


def _text(ds, i):
    if isinstance(ds, mblended.BlendedDataset):
        d, j = int(ds.dataset_index[i]), int(ds.dataset_sample_index[i])
        return ds.datasets[d]._query_document_sample_shuffle_indices(j)[0]
    return ds._query_document_sample_shuffle_indices(i)[0]


def _check_rank(loader, theirs, *, mbs, rank, world, consumed, steps):
    """The loader's next `steps` items on this rank equal Megatron's sampler's micro-batches, token for token:
    input_ids = Megatron's tokens (text[:-1]), labels = its labels (text[1:])."""
    want = megatron_pretraining_sampler(len(theirs), consumed, mbs, rank, world)
    it = iter(loader)
    for _ in range(steps):
        item, ids = next(it), next(want)
        text = np.stack([_text(theirs, i) for i in ids])
        np.testing.assert_array_equal(item["input_ids"], text[:, :-1])
        np.testing.assert_array_equal(item["labels"], text[:, 1:])
        assert float(item["loss_mask"].min()) == 1.0  # a full Megatron sample: every label is trained


@pytest.mark.parametrize("weights,seed,seq_len,size,world,mbs,gbs", [
    ([0.5, 0.3, 0.2], 9, 64, 3_000, 2, 2, 8),      # 2 micro-steps per global batch per rank
    ([1.0, 5.0], 1234, 100, 2_000, 3, 1, 6),
    (None, 17, 64, 4_000, 2, 2, 4),                 # `--data-path p1 p2 p3`: weighted by each prefix's samples
])
def test_loader_ranks_equal_megatron_sampler(wiki, tmp_path, weights, seed, seq_len, size, world, mbs, gbs):
    shards = [wiki.shards[i].name for i in range(len(weights or [0, 0, 0]))]
    theirs = _megatron([str(wiki.path / s) for s in shards], weights, size, tmp_path / "m", random_seed=seed,
                       sequence_length=seq_len, split="99,1,0")
    opts = {"num_samples": size, "prefixes": shards, "weights": weights, "split": "99,1,0",
            "path_to_cache": str(tmp_path / "s")}
    for rank in range(world):
        loader = Loader(wiki, seq_len=seq_len, seed=seed, batch_schedule=gbs, rank=rank, world_size=world,
                        micro_batch_size=mbs, order="megatron", megatron=opts)
        assert loader.num_samples == len(theirs)
        _check_rank(loader, theirs, mbs=mbs, rank=rank, world=world, consumed=0, steps=60)
        # a Megatron checkpoint's consumed_train_samples: continue from the next sample
        consumed = gbs * 150
        loader.resume_from_megatron(consumed)
        _check_rank(loader, theirs, mbs=mbs, rank=rank, world=world, consumed=consumed, steps=40)


def test_resume_on_another_world_size_and_refusals(wiki, tmp_path):
    weights, seed, seq_len, size = [0.6, 0.4], 5, 80, 1_500
    shards = [wiki.shards[3].name, wiki.shards[1].name]
    theirs = _megatron([str(wiki.path / s) for s in shards], weights, size, tmp_path / "m", random_seed=seed,
                       sequence_length=seq_len, split="1")
    opts = {"num_samples": size, "prefixes": shards, "weights": weights, "split": "1"}
    two = Loader(wiki, seq_len=seq_len, seed=seed, batch_schedule=8, rank=1, world_size=2, micro_batch_size=2,
                 order="megatron", megatron=opts)
    it = iter(two)
    for _ in range(2 * 7):  # 7 global batches (2 micro-batches each)
        next(it)
    state = two.state_dict()
    assert state["samples"] == 56
    four = Loader(wiki, seq_len=seq_len, seed=seed, batch_schedule=8, rank=2, world_size=4, micro_batch_size=1,
                  order="megatron", megatron=opts)
    four.load_state_dict(state)
    _check_rank(four, theirs, mbs=1, rank=2, world=4, consumed=56, steps=30)
    for change, field in (({"seq_len": 64}, "seq_len"), ({"seed": 6}, "seed"),
                          ({"megatron": {**opts, "num_samples": 1_600}}, "megatron.num_samples")):
        kw = {"seq_len": seq_len, "seed": seed, "megatron": opts, **change}
        other = Loader(wiki, batch_schedule=8, order="megatron", **kw)
        with pytest.raises(ResumeError, match=f"stream.{field}.*Megatron"):
            other.load_state_dict(state, allow_recipe_change=True)
    with pytest.raises(ConfigError, match="packing does not apply"):
        Loader(wiki, seq_len=64, order="megatron", megatron=opts, packing="best_fit")
    with pytest.raises(ConfigError, match="num_samples is required"):
        Loader(wiki, seq_len=64, order="megatron", megatron={"weights": weights})
    with pytest.raises(ConfigError, match="global batch boundary"):
        Loader(wiki, seq_len=64, batch_schedule=8, order="megatron", megatron=opts).resume_from_megatron(12)
    with pytest.raises(ConfigError, match="no shard named"):
        Loader(wiki, seq_len=64, order="megatron", megatron={**opts, "prefixes": ["nope", shards[0]]})


def _docs(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, size=int(rng.integers(5, 400))) for _ in range(n)]


def _megatron_write(prefix, docs, sentences_per_doc=1):
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for d in docs:
        for part in np.array_split(d, sentences_per_doc):
            builder.add_item(torch.from_numpy(part.astype(np.int64)))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")


@pytest.mark.parametrize("seed,seq_len,size", [(3, 128, 3_000), (77, 50, 12_000)])
def test_adopted_megatron_data_equals_megatron(tmp_path, seed, seq_len, size):
    """Data written by megatron-core's own builder, adopted (hard links): the loader's samples equal
    megatron-core's over the original prefixes, the first ones and a later stretch, across epochs."""
    src = tmp_path / "megatron"
    src.mkdir()
    _megatron_write(src / "web_text_document", _docs(300, 1))
    _megatron_write(src / "code_text_document", _docs(200, 2), sentences_per_doc=2)
    _megatron_write(src / "books_text_document", _docs(100, 3))
    names = ["web_text_document", "code_text_document", "books_text_document"]
    adopt([src / n for n in names], tmp_path / "ds", checksum_block_size=4096)
    ds = open_dataset(tmp_path / "ds")
    weights = [0.2, 0.5, 0.3]
    theirs = _megatron([str(src / n) for n in names], weights, size, tmp_path / "m", random_seed=seed,
                       sequence_length=seq_len, split="95,5,0")
    opts = {"num_samples": size, "prefixes": names, "weights": weights, "split": "95,5,0"}
    loader = Loader(ds, seq_len=seq_len, seed=seed, batch_schedule=16, micro_batch_size=16, order="megatron",
                    megatron=opts)
    _check_rank(loader, theirs, mbs=16, rank=0, world=1, consumed=0, steps=len(theirs) // 16 // 2)
    later = (len(theirs) // 16 - 40) * 16
    loader.resume_from_megatron(later)
    _check_rank(loader, theirs, mbs=16, rank=0, world=1, consumed=later, steps=40)


def test_blend_over_prefixes_of_several_datasets_equals_megatron(wiki, tmp_path):
    """Megatron's --data-path over three directories — two of Megatron-written data, each adopted on its own,
    and a shard of a shardkit-packed dataset — is one loader over the three datasets, prefixes named by
    path: every rank's micro-batches equal megatron-core's, from the start and after a resume."""
    prefixes = []
    for name, n, seed in (("web_text_document", 300, 4), ("code_text_document", 200, 5)):
        (tmp_path / name).mkdir()
        _megatron_write(tmp_path / name / name, _docs(n, seed))
        adopt([tmp_path / name / name], tmp_path / f"ds-{name}", checksum_block_size=4096)
        prefixes.append((str(tmp_path / name / name), str(tmp_path / f"ds-{name}" / name)))
    packed = wiki.shards[2].name
    prefixes.append((str(wiki.path / packed), str(wiki.path / packed)))
    weights, seed, seq_len, size, gbs = [0.5, 0.2, 0.3], 21, 72, 4_000, 8
    theirs = _megatron([m for m, _ in prefixes], weights, size, tmp_path / "m", random_seed=seed,
                       sequence_length=seq_len, split="98,2,0")
    data = [tmp_path / "ds-web_text_document", tmp_path / "ds-code_text_document", wiki.path]
    opts = {"num_samples": size, "prefixes": [p for _, p in prefixes], "weights": weights, "split": "98,2,0",
            "path_to_cache": str(tmp_path / "s")}
    for rank in range(2):
        loader = Loader(data, seq_len=seq_len, seed=seed, batch_schedule=gbs, rank=rank, world_size=2,
                        micro_batch_size=2, order="megatron", megatron=opts)
        assert loader.num_samples == len(theirs)
        _check_rank(loader, theirs, mbs=2, rank=rank, world=2, consumed=0, steps=50)
        consumed = gbs * 300
        loader.resume_from_megatron(consumed)
        _check_rank(loader, theirs, mbs=2, rank=rank, world=2, consumed=consumed, steps=30)


@pytest.mark.parametrize("seq_len", [61, 97])
def test_valid_split_keeping_the_partial_last_sample_equals_megatron(wiki, tmp_path, seq_len):
    """`drop_last_partial_validation_sequence=False` on the valid split: every sample, the padded last one
    included, equals megatron-core's item — pads as token 0 with loss_mask 0 (GPTDataset.__getitem__)."""
    path = str(wiki.path / wiki.shards[1].name)
    config = mgpt.GPTDatasetConfig(blend=([path], None), path_to_cache=str(tmp_path / "m"), tokenizer=_Tokenizer(),
                                   reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                                   random_seed=8, sequence_length=seq_len, split="80,20,0",
                                   drop_last_partial_validation_sequence=False)
    theirs = mbuilder.BlendedMegatronDatasetBuilder(mgpt.GPTDataset, [10, 300, 0], lambda: True, config).build()[1]
    texts = [_text(theirs, i) for i in range(len(theirs))]
    assert any((t < 0).any() for t in texts), "no padded sample: pick another seq_len"
    loader = Loader(wiki, seq_len=seq_len, seed=8, batch_schedule=1, order="megatron",
                    megatron={"num_samples": 300, "prefixes": [wiki.shards[1].name], "split": "80,20,0",
                              "split_name": "valid", "drop_last_partial_validation_sequence": False})
    assert loader.num_batches() == len(texts)
    for i, (item, text) in enumerate(zip(loader, texts, strict=True)):
        item_theirs = theirs[i] if (text < 0).any() else None
        np.testing.assert_array_equal(item["input_ids"][0], np.where(text[:-1] < 0, 0, text[:-1]))
        np.testing.assert_array_equal(item["labels"][0], np.where(text[1:] < 0, 0, text[1:]))
        np.testing.assert_array_equal(item["loss_mask"][0], (text[1:] >= 0).astype(np.float32))
        if item_theirs is not None:  # megatron-core's own item for the padded sample
            np.testing.assert_array_equal(item["input_ids"][0], item_theirs["tokens"].numpy())
            np.testing.assert_array_equal(item["loss_mask"][0], item_theirs["loss_mask"].numpy())
    dropped = Loader(wiki, seq_len=seq_len, seed=8, batch_schedule=1, order="megatron",
                     megatron={"num_samples": 300, "prefixes": [wiki.shards[1].name], "split": "80,20,0",
                               "split_name": "valid"})
    assert dropped.num_batches() == len(texts) - 1  # Megatron's default drops it
    assert "drop_last_partial_validation_sequence" in loader.stream_config()["order"]
    assert "drop_last_partial_validation_sequence" not in dropped.stream_config()["order"]
