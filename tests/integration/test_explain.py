"""`explain` and `document_steps` against what the loader delivers: ranks, world sizes, mixtures, phases,
micro-batches, resumes. The row a loader hands out must be exactly the documents explain names."""

import itertools

import numpy as np
import pytest
from support.mixtures import SEQ, make_sources, three_phase_recipe

from shardkit.engine.explain import document_steps, explain
from shardkit.errors import ConfigError
from shardkit.loader import Loader, MixtureLoader
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    make_sources(root)
    return root


def _tokens_of(row, datasets):
    """The row rebuilt from the documents explain names, read through the dataset's own document API."""
    ds = datasets[row.source]
    parts, at = [], 0
    for p in row.docs:
        assert p.at == at  # pieces tile the row, in order
        parts.append(np.asarray(ds.doc(p.doc))[p.start:p.stop])
        at += p.stop - p.start
    return np.concatenate(parts)


def _check_items(loader, items, datasets, rank):
    for item in items:
        b, k = item["batch_index"], item["micro_index"]
        got = explain(loader, b, rank, micro=k if loader.placement.micro_batch_size else None, decode=False)
        tokens = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
        assert len(got.rows) == tokens.shape[0]
        for i, row in enumerate(got.rows):
            assert (row.rank, row.micro, row.row) == (rank, k, i)
            np.testing.assert_array_equal(_tokens_of(row, datasets), tokens[i])
            if "source" in item:
                assert loader.plan.sources[int(item["source"][i])] == row.source
            for p in row.docs:  # the inverse finds this row among the document's sightings
                seen = document_steps(loader, p.doc, source=row.source, epoch=row.epoch)
                assert any(s.step == b and s.global_row == row.global_row and (s.start, s.stop) == (p.start, p.stop)
                           for s in seen), (b, row, seen)


@pytest.mark.parametrize("world,micro", [(1, None), (2, None), (4, 1), (2, 2)])
def test_explain_equals_delivered_mixture(data, world, micro):
    rng = np.random.default_rng(world * 10 + (micro or 0))
    datasets = None
    for rank in sorted({0, world - 1}):
        loader = MixtureLoader(three_phase_recipe(), base_dir=data, readahead=False, rank=rank, world_size=world,
                               micro_batch_size=micro)
        datasets = datasets or {n: loader.engine.plan.sources[n].dataset for n in loader.engine.plan.names}
        n = loader.num_batches()
        steps = sorted(set(rng.integers(0, n, size=6).tolist()) | {0, n - 1})
        for s in steps:  # start the loader at the step (an exact resume) and compare its first items
            loader.load_state_dict(loader.state_at(s))
            share = loader.engine.plan.batch_size(s) // world
            per_batch = share // (micro or share)
            items = [dict(x) for x in itertools.islice(loader, per_batch)]
            _check_items(loader, items, datasets, rank)


def test_explain_equals_delivered_single_dataset_across_epochs(data):
    loader = Loader(data / "web", seq_len=SEQ, batch_schedule=6, seed=3, shuffle="full", readahead=False,
                    rank=1, world_size=3, max_epochs=3)
    datasets = {"data": loader.dataset}
    n = loader.num_batches()
    for s in [0, 1, n // 3, n // 2 + 1, n - 1]:
        loader.load_state_dict(loader.state_at(s))
        _check_items(loader, [next(iter(loader))], datasets, 1)


def test_document_steps_covers_every_window_of_the_document(data):
    loader = Loader(data / "math", seq_len=SEQ, batch_schedule=4, seed=1, readahead=False, max_epochs=1)
    ds = loader.dataset
    seen_by_doc: dict[int, set] = {}
    for item in loader:  # every row of one epoch, on one rank: which documents each step shows
        for row in explain(loader, item["batch_index"], 0, decode=False).rows:
            for p in row.docs:
                seen_by_doc.setdefault(p.doc, set()).add(item["batch_index"])
    for doc in range(ds.num_docs):
        assert {s.step for s in document_steps(loader, doc)} == seen_by_doc.get(doc, set())


def test_explain_decodes_with_the_dataset_tokenizer(tmp_path):
    ds_dir = tmp_path / "bytes"
    text = ["hello provenance world, " * 4, "second document here. " * 5]
    write_dataset(ds_dir, [np.frombuffer(t.encode(), np.uint8).astype(np.uint16) for t in text],
                  tokenizer={"kind": "bytes", "path": None})
    loader = Loader(ds_dir, seq_len=8, batch_schedule=2, shuffle="none", readahead=False)
    got = explain(loader, 0, 0, 0, preview_tokens=9)
    assert got.rows[0].preview == text[0][:9]
    assert got.rows[0].docs[0].doc == 0 and got.rows[0].docs[0].start == 0


def test_explain_is_the_same_at_far_steps(data):
    """O(1): an endless stream explains step 10**8 without walking to it, and agrees with a fresh resume."""
    loader = Loader(data / "code", seq_len=SEQ, batch_schedule=8, seed=5, readahead=False, world_size=2, rank=1)
    far = 10 ** 8
    got = explain(loader, far, 1, decode=False)
    loader.load_state_dict(loader.state_at(far))
    item = next(iter(loader))
    tokens = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
    for i, row in enumerate(got.rows):
        np.testing.assert_array_equal(_tokens_of(row, {"data": loader.dataset}), tokens[i])
        assert row.epoch > 0


def test_explain_bad_arguments_are_clear(data):
    loader = MixtureLoader(three_phase_recipe(), base_dir=data, readahead=False, world_size=2, rank=0)
    with pytest.raises(ConfigError, match="past the end"):
        explain(loader, loader.num_batches())
    with pytest.raises(ConfigError, match="rank 2 is out of range"):
        explain(loader, 0, 2)
    with pytest.raises(ConfigError, match="row needs rank"):
        explain(loader, 0, row=1)
    with pytest.raises(ConfigError, match="source is required"):
        document_steps(loader, 0)
    with pytest.raises(ConfigError, match="doc 10000 is out of range"):
        document_steps(loader, 10000, source="math")


@pytest.mark.parametrize("world", [1, 2])
def test_explain_follows_packed_rows_and_their_documents(tmp_path, world):
    """A packed row is document pieces back to back, then padding: explain names each piece, the pieces
    rebuild exactly what the loader delivered, and the inverse finds the row among the document's steps."""
    rng = np.random.default_rng(world)
    ds_dir = tmp_path / "ds"
    write_dataset(ds_dir, (rng.integers(1, 100, size=int(n), dtype=np.uint16) for n in rng.integers(5, 90, size=300)))
    for rank in range(world):
        loader = Loader(ds_dir, seq_len=32, batch_schedule=4, seed=0, packing="best_fit", max_epochs=1,
                        packing_cache_dir=tmp_path / "pk", readahead=False, rank=rank, world_size=world)
        datasets = {"data": loader.dataset}
        items = list(loader)
        for item in items[:: max(1, len(items) // 12)]:
            b = item["batch_index"]
            got = explain(loader, b, rank, decode=False)
            tokens = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
            for i, row in enumerate(got.rows):
                used = _tokens_of(row, datasets)
                np.testing.assert_array_equal(used, tokens[i, :used.size])
                assert not tokens[i, used.size:].any()  # the rest is padding
                assert row.token_start == loader.dataset.token_offsets[0] + sum(
                    s.num_tokens for s in loader.dataset.shards[:[x.name for x in loader.dataset.shards]
                                                               .index(row.shard)]) + row.shard_token
                for p in row.docs:
                    seen = document_steps(loader, p.doc)
                    assert any(s.step == b and s.global_row == row.global_row and (s.start, s.stop) ==
                               (p.start, p.stop) for s in seen), (b, row, seen)


def test_document_steps_of_packed_rows_covers_every_piece_once_per_epoch(tmp_path):
    rng = np.random.default_rng(7)
    ds_dir = tmp_path / "ds"
    write_dataset(ds_dir, (rng.integers(1, 100, size=int(n), dtype=np.uint16) for n in rng.integers(5, 120, size=200)))
    loader = Loader(ds_dir, seq_len=32, batch_schedule=4, seed=2, packing="first_fit", max_epochs=1,
                    packing_cache_dir=tmp_path / "pk", readahead=False)
    seen_by_doc: dict[int, list] = {}
    delivered = 0
    for item in loader:
        rows = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
        delivered += int(np.count_nonzero(rows))  # document tokens are 1…99: zeros are padding
        for row in explain(loader, item["batch_index"], 0, decode=False).rows:
            for p in row.docs:
                seen_by_doc.setdefault(p.doc, []).append((item["batch_index"], p.start, p.stop))
    total = 0
    for doc in range(loader.dataset.num_docs):
        got = sorted((s.step, s.start, s.stop) for s in document_steps(loader, doc))
        assert got == sorted(seen_by_doc.get(doc, []))
        assert len({(a, z) for _, a, z in got}) == len(got)  # each piece of the document once in the epoch
        total += sum(z - a for _, a, z in got)
    assert total == delivered > 0
