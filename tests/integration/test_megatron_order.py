"""shardkit's Megatron order against the real megatron-core (CPU): the same tokens for every sample checked.

Real data: Wikipedia text and Shakespeare, tokenized with the real GPT-2 tokenizer by `shardkit pack`, in
several shards; Megatron reads each shard as one data prefix through `BlendedMegatronDatasetBuilder`.
"""

import json
import warnings

import numpy as np
import pytest
from support.paths import CORPUS, GPT2_JSON

from shardkit.errors import ConfigError, ResumeError
from shardkit.format import open_dataset
from shardkit.megatron import (
    MegatronBatches,
    MegatronConfig,
    MegatronPrefix,
    Split,
    build_order,
    plan_epochs,
    prefixes_of,
)
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.writer.shard_writer import ShardLimits

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mbuilder = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_builder")
    mgpt = pytest.importorskip("megatron.core.datasets.gpt_dataset")
    mblended = pytest.importorskip("megatron.core.datasets.blended_dataset")

EOD = 50256


class _Tokenizer:
    """What GPTDataset asks of a tokenizer: the end-of-document id and the vocabulary size."""

    eod = EOD
    vocab_size = 50257
    unique_identifiers = {"class": "GPT2", "vocab_size": 50257}  # part of Megatron's cache description


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """Two real corpora, packed with GPT-2 into shards of at most 40,000 tokens (documents: lines, paragraphs)."""
    root = tmp_path_factory.mktemp("megatron-order")
    src = root / "src"
    src.mkdir()
    wiki = (CORPUS / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    shake = (CORPUS / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    for name, paras in (("wiki", wiki.splitlines()), ("shake", shake[:300_000].split("\n\n"))):
        with open(src / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for para in paras:
                if para.strip():
                    f.write(json.dumps({"text": para}) + "\n")
    out = {}
    for name in ("wiki", "shake"):
        pack(PackConfig(inputs=(str(src / f"{name}.jsonl"),), output=str(root / name), workers=1,
                        tokenize=TokenizeOptions(tokenizer=str(GPT2_JSON), backend="hf"),
                        limits=ShardLimits(max_tokens=40_000, checksum_block_size=4096)))
        out[name] = open_dataset(root / name)
    return out


@pytest.fixture(scope="module", autouse=True)
def _one_rank_group(tmp_path_factory):
    """BlendedDataset asks torch.distributed for its rank when it writes its cache: a real group of one."""
    store = tmp_path_factory.mktemp("pg") / "store"
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def _megatron(prefixes, weights, sizes, tmp_path, **flags):
    config = mgpt.GPTDatasetConfig(
        blend=([str(p.dataset.path / p.dataset.shards[p.position].name) for p in prefixes], weights),
        path_to_cache=str(tmp_path / "megatron-cache"), tokenizer=_Tokenizer(),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, **flags)
    return mbuilder.BlendedMegatronDatasetBuilder(mgpt.GPTDataset, sizes, lambda: True, config).build()


def _their_text(ds, i):
    if isinstance(ds, mblended.BlendedDataset):
        d, j = int(ds.dataset_index[i]), int(ds.dataset_sample_index[i])
        return ds.datasets[d]._query_document_sample_shuffle_indices(j)[0]
    return ds._query_document_sample_shuffle_indices(i)[0]


def _assert_same(ours, theirs, stretch, seed):
    assert len(ours) == len(theirs)
    n = len(theirs)
    rng = np.random.default_rng(seed)
    later = int(rng.integers(0, max(1, n - stretch)))
    for i in [*range(min(stretch, n)), *range(later, min(n, later + stretch))]:
        np.testing.assert_array_equal(ours.sample(i), _their_text(theirs, i), err_msg=f"sample {i}")
    for i in (0, n - 1):  # the public item too: tokens/labels cut from the same text
        item = theirs[i]
        text = ours.sample(i)
        if ours.config.add_extra_token_to_sequence:
            labels = text[1:]
        else:  # Megatron rolls the text and pads the last label
            labels = np.roll(text, -1)
            labels[-1] = -1
        np.testing.assert_array_equal(item["labels"].numpy(), np.where(labels < 0, 0, labels))


def _config(tmp_path, **kw):
    return MegatronConfig(path_to_cache=tmp_path / "shardkit-cache", **kw)


@pytest.mark.parametrize("seed,seq_len,split,samples", [
    (1234, 128, "90,8,2", 500),          # less than one epoch
    (7, 64, "98,2,0", 3_000),            # 2 epochs, the last one shuffled with the rest
    (99, 100, "1", 2_150),               # 2 epochs, the final one shuffled apart (under 80 % of an epoch)
    (2**31, 33, "8,1,1", 12_000),        # many epochs; the first and a later 10,000 samples
])
def test_single_prefix_equals_gptdataset(packed, tmp_path, seed, seq_len, split, samples):
    prefix = prefixes_of(packed["wiki"])[2]  # not the first shard: the global document numbering is offset
    theirs = _megatron([prefix], None, [samples, 50, 10], tmp_path, random_seed=seed, sequence_length=seq_len,
                       split=split)
    for s in (Split.train, Split.valid, Split.test):
        if theirs[s.value] is None:
            continue
        size = [samples, 50, 10][s.value]
        ours = build_order([prefix], None, size, s, _config(tmp_path, random_seed=seed, sequence_length=seq_len,
                                                             split=split))
        _assert_same(ours, theirs[s.value], 10_000 if s == Split.train else 200, seed)


def test_separate_final_epoch_case_is_exercised(packed):
    prefix = prefixes_of(packed["wiki"])[2]
    tokens = int(prefix.sequence_lengths.sum())
    assert plan_epochs(tokens, 2_150, 100, True).separate_final_epoch
    assert not plan_epochs(tokens, 3_000, 64, True).separate_final_epoch


@pytest.mark.parametrize("extra,drop", [(False, True), (True, False), (False, False)])
def test_flags_equal_gptdataset(packed, tmp_path, extra, drop):
    prefix = MegatronPrefix(packed["shake"], packed["shake"].shards[1].name)
    flags = dict(random_seed=5, sequence_length=96, split="90,10,0", add_extra_token_to_sequence=extra,
                 drop_last_partial_validation_sequence=drop)
    theirs = _megatron([prefix], None, [1_000, 300, 0], tmp_path, **flags)
    for s, size in ((Split.train, 1_000), (Split.valid, 300)):
        ours = build_order([prefix], None, size, s, _config(tmp_path, **flags))
        _assert_same(ours, theirs[s.value], 2_000, 5)


@pytest.mark.parametrize("weights,seed,seq_len,size", [
    ([0.7, 0.3], 42, 128, 4_000),
    ([1.0, 5.0, 0.25], 3, 64, 12_000),
    ([2, 3, 5], 11, 50, 20_500),
    (None, 5, 64, 3_000),                # `--data-path p1 p2 p3`: weighted by the prefixes' own sample counts
])
def test_blend_equals_blendeddataset(packed, tmp_path, weights, seed, seq_len, size):
    wiki, shake = prefixes_of(packed["wiki"]), prefixes_of(packed["shake"])
    prefixes = [wiki[0], shake[0], wiki[3]][:len(weights or [0, 0, 0])]
    theirs = _megatron(prefixes, weights, [size, 20, 0], tmp_path, random_seed=seed, sequence_length=seq_len,
                       split="99,1,0")
    cfg = _config(tmp_path, random_seed=seed, sequence_length=seq_len, split="99,1,0")
    ours = build_order(prefixes, weights, size, Split.train, cfg)
    np.testing.assert_array_equal(ours.arrays["dataset_index"], theirs[0].dataset_index)
    np.testing.assert_array_equal(ours.arrays["dataset_sample_index"], theirs[0].dataset_sample_index)
    for d_ours, d_theirs in zip(ours.datasets, theirs[0].datasets, strict=True):
        assert d_ours.num_samples == d_theirs.num_samples
    _assert_same(ours, theirs[0], 10_000, seed)
    again = build_order(prefixes, weights, size, Split.train, cfg)  # from the cache: the same samples
    for i in (0, len(ours) // 2, len(ours) - 1):  # (a weightless blend holds at most `size`)
        np.testing.assert_array_equal(again.sample(i), ours.sample(i))


def test_refusals_are_named(packed, tmp_path):
    prefix = prefixes_of(packed["wiki"])[0]
    with pytest.raises(ConfigError, match="no documents"):
        build_order([prefix], None, 10, Split.test, _config(tmp_path, random_seed=1, sequence_length=8, split="1,0,0"))
    with pytest.raises(ConfigError, match="weights"):
        build_order([prefix, prefix], [1.0], 10, Split.train, _config(tmp_path, random_seed=1, sequence_length=8))
    with pytest.raises(ConfigError, match="no shard named"):
        MegatronPrefix(packed["wiki"], "nope").position  # noqa: B018
    with pytest.raises(ConfigError, match="sequence_length"):
        MegatronConfig(random_seed=1, sequence_length=1)


def test_rank_slices_and_resume_from_consumed_samples(packed, tmp_path):
    weights = [0.6, 0.4]
    prefixes = [prefixes_of(packed["wiki"])[1], prefixes_of(packed["shake"])[2]]
    theirs = _megatron(prefixes, weights, [1_000, 0, 0], tmp_path, random_seed=17, sequence_length=64, split="1")
    cfg = _config(tmp_path, random_seed=17, sequence_length=64, split="1")
    order = build_order(prefixes, weights, 1_000, Split.train, cfg)
    # two ranks of micro-batch 3: each global batch of 6 ids split [0, 3) / [3, 6), as Megatron's sampler
    ranks = [list(MegatronBatches(order, micro_batch_size=3, rank=r, world_size=2)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(order) // 6
    for b, (a, c) in enumerate(zip(*ranks, strict=True)):
        np.testing.assert_array_equal(np.concatenate([a["sample_ids"], c["sample_ids"]]), np.arange(6 * b, 6 * b + 6))
        for row, i in zip(a["tokens"], a["sample_ids"], strict=True):
            np.testing.assert_array_equal(row, _their_text(theirs[0], int(i)))
    # a Megatron checkpoint's counter (consumed_samples = 6 * 40) continues on one rank of micro-batch 6
    one = MegatronBatches(order, micro_batch_size=6)
    one.load_state_dict({"consumed_samples": 240})
    nxt = next(iter(one))
    np.testing.assert_array_equal(nxt["sample_ids"], np.arange(240, 246))
    np.testing.assert_array_equal(nxt["tokens"][:3], ranks[0][40]["tokens"])
    assert one.state_dict()["consumed_samples"] == 246
    other = build_order(prefixes, weights, 1_000, Split.train, _config(tmp_path, random_seed=17, sequence_length=32,
                                                                        split="1"))
    with pytest.raises(ResumeError, match="sequence_length.*seq_len"):
        MegatronBatches(other, micro_batch_size=6).load_state_dict(one.state_dict())
    with pytest.raises(ResumeError, match="multiple of the global batch"):
        MegatronBatches(order, micro_batch_size=4).load_state_dict({"consumed_samples": 246})
