"""Packed rows through the loader: exactly once per epoch, rank slices, resume anywhere on any world size,
any worker count, and the same order as the pure planner's table under the sample order."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.mixtures import make_sources

from shardkit import Loader
from shardkit.engine.pack_table import document_spans, table_dir
from shardkit.engine.packed_fields import packed_fields
from shardkit.engine.packing import PackSpec, build_table, fill_rows
from shardkit.errors import ConfigError, ResumeError
from shardkit.format.dataset import open_dataset
from shardkit.writer import write_dataset

SEQ = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(7)
    # short documents, row-sized ones and long ones (split into several pieces), in small shards
    sizes = np.concatenate([rng.integers(1, 40, 300), rng.integers(SEQ - 5, SEQ + 3, 30), rng.integers(150, 400, 12)])
    rng.shuffle(sizes)
    parts = [rng.integers(1, 60000, size=int(n), dtype=np.uint16) for n in sizes]
    write_dataset(root / "ds", parts, max_tokens_per_shard=3000, checksum_block_size=4096)
    return root / "ds", parts, root / "cache"


def _loader(corpus, **kw):
    path, _, cache = corpus
    kw.setdefault("packing", "best_fit")
    kw.setdefault("batch_schedule", 8)
    return Loader(path, seq_len=SEQ, seed=5, packing_cache_dir=cache, block_samples=16, group_blocks=2, **kw)


def _doc_pairs(parts):
    return Counter((int(a), int(b)) for p in parts for a, b in zip(p[:-1].tolist(), p[1:].tolist()))


@pytest.mark.parametrize("strategy", ["first_fit", "best_fit"])
def test_every_pair_of_every_document_once_per_epoch(corpus, strategy):
    _, parts, _ = corpus
    got = Counter()
    loader = _loader(corpus, packing=strategy, batch_schedule=1, max_epochs=1,
                     fields={"loss_mask": True, "mask_doc_boundary": True})
    for b in loader:
        m = b["loss_mask"].astype(bool)
        got.update(zip(b["input_ids"][m].tolist(), b["labels"][m].tolist()))
    assert got == _doc_pairs(parts)


def test_ranks_together_deliver_each_row_of_the_epoch_once(corpus):
    ids = Counter()
    for rank in range(2):
        loader = _loader(corpus, rank=rank, world_size=2, max_epochs=1)
        for b in loader:
            ids.update(loader.global_sample_ids(b["batch_index"])[rank * 4:(rank + 1) * 4].tolist())
    rows = loader._stream.num_samples
    assert max(ids.values()) == 1 and rows - 8 < len(ids) <= rows  # only a last partial batch is dropped


@pytest.mark.parametrize("mask_doc_boundary", [False, True])
def test_rows_are_the_tables_rows_under_the_sample_order(corpus, mask_doc_boundary):
    """A whole epoch, batch by batch: the engine gathers and computes fields a slab of several batches at
    a time (pieces of several shards in one slab) and hands each batch its rows of them."""
    path, parts, cache = corpus
    fields = {"loss_mask": True, "mask_doc_boundary": mask_doc_boundary}
    loader = _loader(corpus, max_epochs=1, batch_schedule=4, fields=fields)
    table = build_table(*document_spans(open_dataset(path)), PackSpec(strategy="best_fit", seq_len=SEQ))
    flat = np.concatenate(parts)
    steps = 0
    for step, b in enumerate(loader):
        ids = loader.global_sample_ids(step)
        tokens = fill_rows(flat, table, ids)
        assert np.array_equal(b["input_ids"], tokens[:, :-1]) and np.array_equal(b["labels"], tokens[:, 1:])
        idx, counts, _, lengths = table.pieces(ids)
        want = packed_fields(lengths, counts, table.first[idx], SEQ, loader.config.fields.__class__(
            position_ids=True, cu_seqlens=True, loss_mask=True, mask_doc_boundary=mask_doc_boundary))
        for k in ("loss_mask", "position_ids", "cu_seqlens", "max_seqlen"):
            assert np.array_equal(b[k], want[k]), (step, k)
        steps += 1
    assert steps == table.num_rows // 4
    assert table_dir(cache, open_dataset(path).fingerprint, PackSpec(strategy="best_fit", seq_len=SEQ)).is_dir()


def _global(corpus, steps, **kw):
    out = []
    for b, _ in zip(_loader(corpus, **kw), range(steps)):
        out.append(b)
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w1=st.sampled_from([1, 2, 4, 8]), w2=st.sampled_from([1, 2, 4, 8]), step=st.integers(0, 60))
def test_rank_slices_compose_the_global_batch_and_resume_anywhere_on_another_world_size(corpus, w1, w2, step):
    ref = _global(corpus, step + 3)  # world size 1, from the start
    # resume on world size w2 at `step` from a state saved at world size w1
    saved = _loader(corpus, rank=0, world_size=w1).state_at(step)
    parts = []
    for r in range(w2):
        loader = _loader(corpus, rank=r, world_size=w2)
        loader.load_state_dict(saved)
        parts.append([b for b, _ in zip(loader, range(3))])
    for k in range(3):
        composed = np.concatenate([parts[r][k]["input_ids"] for r in range(w2)])
        assert np.array_equal(composed, ref[step + k]["input_ids"])
        assert all(parts[r][k]["batch_index"] == step + k for r in range(w2))


def test_same_items_for_any_worker_split(corpus):
    loader = _loader(corpus)
    serial = [item for _, (_, item) in zip(range(24), loader.iter_units(0))]
    for k in (2, 3):
        split = {}
        for w in range(k):
            for u, item in _loader(corpus).iter_units(w, stride=k, stop=24):
                split[u] = item
        assert sorted(split) == list(range(24))
        for u in range(24):
            for key in ("input_ids", "loss_mask", "cu_seqlens"):
                assert np.array_equal(split[u][key], serial[u][key])


def test_torch_dataloader_workers_deliver_the_loaders_items(corpus):
    torch = pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader

    serial = [b for b, _ in zip(_loader(corpus, max_epochs=1), range(20))]
    dl = ShardkitDataLoader(_loader(corpus, max_epochs=1), num_workers=2, token_dtype=torch.long)
    got = [b for b, _ in zip(dl, range(20))]
    for a, b in zip(serial, got):
        assert np.array_equal(a["input_ids"], b["input_ids"].numpy())
        assert np.array_equal(a["loss_mask"], np.asarray(b["loss_mask"]))
        assert np.array_equal(a["cu_seqlens"], np.asarray(b["cu_seqlens"]))


def test_window_is_the_default_and_its_state_is_unchanged(corpus):
    a = _loader(corpus, packing="window")
    b = Loader(corpus[0], seq_len=SEQ, seed=5, block_samples=16, group_blocks=2, batch_schedule=8)
    assert "packing" not in a.state_dict()["stream"]["definition"]
    assert a.state_dict() == b.state_dict()
    assert all(np.array_equal(x["input_ids"], y["input_ids"]) for (x, y, _) in zip(a, b, range(5)))


def test_a_state_of_another_packing_is_refused_by_name(corpus):
    saved = _loader(corpus, packing="first_fit").state_at(3)
    with pytest.raises(ResumeError, match="stream.packing.strategy"):
        _loader(corpus, packing="best_fit").load_state_dict(saved)
    with pytest.raises(ResumeError, match="stream.packing"):
        _loader(corpus, packing="window").load_state_dict(saved)


@pytest.mark.parametrize("bad, match", [("bestfit", "unknown strategy 'bestfit'"), (1, "packing must be one of")])
def test_unknown_strategy_is_a_config_error(corpus, bad, match):
    with pytest.raises(ConfigError, match=match):
        _loader(corpus, packing=bad)


# -- recipes: packing per phase ---------------------------------------------------------------------------------


def _recipe(root, **phase_b):
    return {"seed": 3, "packing": "best_fit", "sources": {n: {"path": str(root / n)} for n in ("code", "math", "web")},
            "phases": [{"name": "a", "tokens": 20000, "seq_len": 64, "batch": 8,
                        "mix": {"code": 0.5, "web": 0.3, "math": 0.2}},
                       {"name": "b", "tokens": 20000, "seq_len": 128, "batch": 8,
                        "mix": {"code": 0.25, "web": 0.5, "math": 0.25}, **phase_b}]}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    flats = make_sources(root)
    return root, flats


def test_recipe_phases_pack_at_their_seq_len_keep_proportions_and_resume_exactly(sources):
    root, flats = sources
    recipe = _recipe(root, packing="first_fit")
    ref = list(Loader.from_recipe(recipe, packing_cache_dir=root / "c"))
    counts = Counter((b["phase_name"], int(s)) for b in ref for s in b["source"].tolist())
    names = ("code", "math", "web")
    for phase, mix in (("a", {"code": 0.5, "web": 0.3, "math": 0.2}), ("b", {"code": 0.25, "web": 0.5, "math": 0.25})):
        total = sum(v for (p, _), v in counts.items() if p == phase)
        for j, n in enumerate(names):
            assert abs(counts[(phase, j)] / total - mix[n]) <= 0.02
    assert {b["input_ids"].shape[1] for b in ref if b["phase_name"] == "b"} == {128}
    # each row is a row of its source's table at the phase's seq_len and strategy
    b0 = next(b for b in ref if b["phase_name"] == "b")
    j = int(b0["source"][0])
    row = b0["input_ids"][0][b0["loss_mask"][0] > 0]
    assert np.isin(row, flats[names[j]]).all()
    # resume inside phase b on another world size
    step = next(i for i, b in enumerate(ref) if b["phase_name"] == "b") + 2
    saved = Loader.from_recipe(recipe, packing_cache_dir=root / "c").state_at(step)
    for r in range(2):
        loader = Loader.from_recipe(recipe, packing_cache_dir=root / "c", rank=r, world_size=2)
        loader.load_state_dict(saved)
        for k, b in zip(range(3), loader):
            assert np.array_equal(b["input_ids"], ref[step + k]["input_ids"][r * 4:(r + 1) * 4])
            assert np.array_equal(b["cu_seqlens"][-1], 4 * 128)


def test_recipe_items_are_the_same_whatever_slab_they_were_cut_from(sources):
    """Mixed sources in one slab: each item's fields, computed once per slab, equal the item resumed on its
    own (a slab of its rows alone)."""
    root, _ = sources
    recipe = _recipe(root)
    ref = list(Loader.from_recipe(recipe, packing_cache_dir=root / "c"))
    loader = Loader.from_recipe(recipe, packing_cache_dir=root / "c")
    for step in range(0, len(ref), 3):
        loader.load_state_dict(loader.state_at(step))
        got = next(iter(loader))
        for k in ("input_ids", "labels", "source", "loss_mask", "position_ids", "cu_seqlens", "max_seqlen"):
            assert np.array_equal(got[k], ref[step][k]), (step, k)
    assert len({int(s) for b in ref[:4] for s in b["source"].tolist()}) > 1


def test_recipe_packing_errors_name_the_phase(sources):
    root, _ = sources
    with pytest.raises(ConfigError, match=r"phases\[1\].packing: packing: unknown strategy 'bestfit'"):
        Loader.from_recipe(_recipe(root, packing="bestfit"))
    clash = _recipe(root, packing="first_fit")
    clash["phases"][1]["seq_len"] = 64
    with pytest.raises(ConfigError, match=r"phases\[1\] \(b\): packing 'first_fit' at seq_len 64"):
        Loader.from_recipe(clash, packing_cache_dir=root / "c")


def test_a_window_recipe_keeps_its_fingerprint(sources):
    root, _ = sources
    plain = _recipe(root)
    del plain["packing"]
    loader = Loader.from_recipe(plain)
    assert all("packing" not in p for p in loader.recipe.to_json()["phases"])


# -- balanced ranks -----------------------------------------------------------------------------------------------


def _rank_batches(corpus, world, steps, **kw):
    return [[b for b, _ in zip(_loader(corpus, rank=r, world_size=world, **kw), range(steps))] for r in range(world)]


def _sq_cost(batch):
    lens = np.diff(batch["cu_seqlens"]).astype(np.float64)  # padding segments too: attention computes them
    return float((lens ** 2).sum())


@pytest.mark.parametrize("world", [2, 4])
def test_balanced_ranks_keep_the_global_batch_and_even_out_attention_cost(corpus, world):
    steps = 12
    plain = _rank_batches(corpus, world, steps, batch_schedule=16)
    even = _rank_batches(corpus, world, steps, batch_schedule=16, balance_ranks=True)
    worst_plain = worst_even = 0.0
    for k in range(steps):
        a = np.concatenate([plain[r][k]["input_ids"] for r in range(world)])
        b = np.concatenate([even[r][k]["input_ids"] for r in range(world)])
        assert sorted(map(bytes, a)) == sorted(map(bytes, b))  # the same rows make up the global batch
        cp = np.array([_sq_cost(plain[r][k]) for r in range(world)])
        ce = np.array([_sq_cost(even[r][k]) for r in range(world)])
        worst_plain, worst_even = max(worst_plain, cp.max() / cp.mean()), max(worst_even, ce.max() / ce.mean())
    assert worst_even < worst_plain and worst_even <= 1.25


def test_balanced_ranks_resume_on_another_world_size(corpus):
    ref = _rank_batches(corpus, 4, 8, batch_schedule=16, balance_ranks=True)
    saved = _loader(corpus, rank=1, world_size=2, batch_schedule=16, balance_ranks=True).state_at(5)
    for r in range(4):
        loader = _loader(corpus, rank=r, world_size=4, batch_schedule=16, balance_ranks=True)
        loader.load_state_dict(saved)
        for k, b in zip(range(3), loader):
            assert np.array_equal(b["input_ids"], ref[r][5 + k]["input_ids"])


def test_balance_ranks_needs_packed_rows(corpus):
    with pytest.raises(ConfigError, match="balance_ranks=True deals packed rows"):
        _loader(corpus, packing="window", balance_ranks=True)
