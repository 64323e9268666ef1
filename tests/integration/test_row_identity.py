"""`fields.row_identity`: every row says its source, the document holding its first token, and the offset —
checked against the dataset's own documents, against `explain`, and through DataLoader worker processes."""

import itertools

import numpy as np
import pytest
from support.mixtures import make_sources

from shardkit.engine.explain import explain
from shardkit.loader import Loader, MixtureLoader

SEQ = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    make_sources(root)
    return root


def _recipe():
    return {"seed": 2, "seq_len": SEQ, "sources": {n: {"path": n} for n in ("web", "code", "math")},
            "phases": [{"name": "a", "tokens": 3000, "batch": 8, "mix": {"web": 0.5, "code": 0.25, "math": 0.25}},
                       {"name": "b", "tokens": 3000, "batch": 4, "seq_len": 2 * SEQ, "mix": {"math": 1.0}}]}


def _check(item, datasets, names):
    tokens = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
    for i in range(tokens.shape[0]):
        ds = datasets[names[int(item["source_id"][i])]]
        doc = np.asarray(ds.doc(int(item["doc_id"][i])))
        off = int(item["token_offset"][i])
        assert 0 <= off < doc.size
        head = doc[off:off + tokens.shape[1]]
        np.testing.assert_array_equal(head, tokens[i, :head.size])  # the row starts inside that document, there


def test_row_identity_mixture_matches_documents_and_explain(data):
    loader = MixtureLoader(_recipe(), base_dir=data, readahead=False, world_size=2, rank=1,
                           fields=["row_identity", "position_ids"])
    names = loader.engine.plan.names
    datasets = {n: loader.engine.plan.sources[n].dataset for n in names}
    n = 0
    for item in loader:
        _check(item, datasets, names)
        np.testing.assert_array_equal(item["source_id"], item["source"])
        rows = explain(loader, item["batch_index"], 1, decode=False).rows
        assert [(r.docs[0].doc, r.docs[0].start) for r in rows] == \
            list(zip(item["doc_id"].tolist(), item["token_offset"].tolist()))
        n += 1
    assert n > 20


def test_row_identity_is_opt_in(data):
    item = next(iter(Loader(data / "web", seq_len=SEQ, batch_schedule=4, readahead=False)))
    assert "doc_id" not in item and "source_id" not in item


def test_row_identity_through_dataloader_workers(data):
    torch = pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader
    kw = dict(seq_len=SEQ, batch_schedule=4, seed=4, readahead=False, fields=["row_identity"])
    plain = Loader(data / "code", **kw)
    want = [(b["doc_id"].copy(), b["token_offset"].copy()) for b in itertools.islice(plain, 30)]
    dl = ShardkitDataLoader(Loader(data / "code", **kw), num_workers=2, group=2)
    got = [(b["doc_id"], b["token_offset"]) for b in itertools.islice(iter(dl), 30)]
    for (d0, o0), (d1, o1) in zip(want, got):
        assert torch.equal(torch.as_tensor(d0), torch.as_tensor(d1))
        assert torch.equal(torch.as_tensor(o0), torch.as_tensor(o1))
    _check(next(iter(Loader(data / "code", **kw))), {"data": plain.dataset}, ("data",))


def test_packed_rows_carry_identity_per_segment(data, tmp_path):
    """A packed row holds several documents: one identity entry per piece, matching the delivered tokens,
    the segments of cu_seqlens, and explain's pieces — in a two-source recipe with best-fit packing."""
    recipe = {"seed": 4, "seq_len": SEQ, "sources": {n: {"path": n} for n in ("web", "math")},
              "phases": [{"name": "a", "tokens": 4000, "batch": 4, "packing": "best_fit",
                          "mix": {"web": 0.5, "math": 0.5}}]}
    loader = MixtureLoader(recipe, base_dir=data, fields=["row_identity"], packing_cache_dir=tmp_path / "pk",
                           readahead=False)
    names = loader.engine.plan.names
    datasets = {n: loader.engine.plan.sources[n].dataset for n in names}
    for item in itertools.islice(loader, 12):
        tokens = np.concatenate([item["input_ids"], item["labels"][:, -1:]], axis=1)
        rows, slots, lengths = item["segment_row"], item["segment_slot"], item["segment_length"]
        assert rows.size == item["doc_id"].size == item["source_id"].size == item["token_offset"].size
        expl = explain(loader, item["batch_index"], 0, decode=False).rows
        assert rows.size == sum(len(r.docs) for r in expl)
        k = 0
        for i, row in enumerate(expl):
            for p in row.docs:
                assert (rows[k], slots[k], lengths[k]) == (i, p.at, p.stop - p.start)
                assert (names[item["source_id"][k]], item["doc_id"][k], item["token_offset"][k]) == \
                    (row.source, p.doc, p.start)
                doc = np.asarray(datasets[row.source].doc(p.doc))
                np.testing.assert_array_equal(tokens[i, p.at:p.at + lengths[k]], doc[p.start:p.stop])
                k += 1
