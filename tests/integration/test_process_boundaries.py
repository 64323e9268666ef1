"""Loaders across real process boundaries: every multiprocessing start method × every torch adapter × both
loaders give the in-process items, resume exactly mid-epoch, and restoring before or after wrapping is the
same. The loader crosses to DataLoader workers pickled (configuration and position) and reopens its files
there; under fork it is copied with its open mappings and must behave the same."""

import multiprocessing as mp
import pickle

import numpy as np
import pytest
from support.mixtures import make_sources

from shardkit.engine import BatchFields
from shardkit.errors import ResumeError
from shardkit.loader import Loader, MixtureLoader
from shardkit.order import Ramp

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from shardkit.torch import ShardkitDataLoader, ShardkitIterableDataset  # noqa: E402

SEQ = 16
METHODS = [m for m in ("fork", "spawn", "forkserver") if m in mp.get_all_start_methods()]
TAKE, CUT = 12, 5  # items compared; the state is taken after CUT of them


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("pb")
    make_sources(root)
    return root


def _make(kind, root):
    if kind == "megatron-blend":  # Megatron's order over prefixes of three datasets, sliced by its sampler
        return Loader([root / "web", root / "code", root / "math"], seq_len=SEQ, seed=3, batch_schedule=8,
                      micro_batch_size=2, order="megatron",
                      megatron={"num_samples": 400, "weights": [0.5, 0.3, 0.2],
                                "prefixes": [str(root / n / "shard-00001") for n in ("web", "code", "math")],
                                "path_to_cache": str(root / "megatron-cache")})
    if kind == "packed":  # whole documents best-fit into rows, with their document fields
        return Loader(root / "web", seq_len=SEQ, seed=3, batch_schedule=8, micro_batch_size=2, packing="best_fit",
                      packing_cache_dir=root / "packing-cache", fields=BatchFields(row_identity=True))
    if kind == "packed-varlen":  # rows from the row store carrying only their boundaries (a varlen trainer)
        return Loader(root / "web", seq_len=SEQ, seed=3, batch_schedule=8, micro_batch_size=2, packing="best_fit",
                      packing_cache_dir=root / "packing-cache", packing_store=True, fields=["cu_seqlens"])
    if kind == "verify-on-read":
        return Loader(root / "code", seq_len=SEQ, seed=3, batch_schedule=8, micro_batch_size=4,
                      verify_on_read=True)
    if kind == "loader":
        return Loader(root / "web", seq_len=SEQ, seed=3, batch_schedule=Ramp(start=4, increment=4, ramp_samples=40,
                                                                           final=8),
                      micro_batch_size=2, fields=BatchFields(position_ids=True))
    recipe = {"seed": 5, "seq_len": SEQ, "phases": [
        {"name": "a", "tokens": 2000, "batch": 4, "mix": {"web": 0.5, "code": 0.5}},
        {"name": "b", "tokens": 40_000, "batch": 8, "seq_len": 2 * SEQ, "mix": {"web": 0.25, "code": 0.25,
                                                                                "math": 0.5}}],
        "sources": {n: {"path": str(root / n)} for n in ("web", "code", "math")}}
    return MixtureLoader(recipe, base_dir=root)


def _np(item):
    return {k: (v.numpy().copy() if hasattr(v, "numpy") else v) for k, v in item.items()}


def _take(iterable, n):
    out = []
    for item in iterable:
        out.append(_np(item))
        if len(out) == n:
            break
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x["batch_index"] == y["batch_index"] and x["micro_index"] == y["micro_index"]
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])
        np.testing.assert_array_equal(x["labels"], y["labels"])
        for name in ("loss_mask", "position_ids", "cu_seqlens", "doc_id", "segment_length"):
            assert (name in x) == (name in y)
            if name in x:
                np.testing.assert_array_equal(x[name], y[name])


def _wrap(adapter, loader, method):
    if adapter == "dataset":
        return DataLoader(ShardkitIterableDataset(loader), batch_size=None, num_workers=2,
                          multiprocessing_context=method)
    if adapter == "shardkit":
        return ShardkitDataLoader(loader, num_workers=2, multiprocessing_context=method, group=2)
    return StatefulDataLoader(ShardkitIterableDataset(loader), batch_size=None, num_workers=2,
                              multiprocessing_context=method)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["loader", "mixture"])
@pytest.mark.parametrize("adapter", ["dataset", "shardkit", "stateful"])
@pytest.mark.parametrize("method", METHODS)
def test_workers_give_the_in_process_items_and_resume_exactly(root, kind, adapter, method):
    reference = _take(_make(kind, root), TAKE)
    # the whole sequence through real worker processes started with `method`
    _same(_take(_wrap(adapter, _make(kind, root), method), TAKE), reference)
    # a checkpoint after CUT items, then a fresh process-side pipeline resumed from it
    if adapter == "stateful":
        dl = _wrap(adapter, _make(kind, root), method)
        it = iter(dl)
        for _ in range(CUT):
            next(it)
        saved = dl.state_dict()
        del it
        resumed = _wrap(adapter, _make(kind, root), method)
        resumed.load_state_dict(saved)
        _same(_take(resumed, TAKE - CUT), reference[CUT:])
        return
    first = _make(kind, root)
    state = first.state_at(reference[CUT]["batch_index"], reference[CUT]["micro_index"])
    restored = _make(kind, root)
    restored.load_state_dict(state)  # restore, then wrap
    _same(_take(_wrap(adapter, restored, method), TAKE - CUT), reference[CUT:])
    wrapped_first = _make(kind, root)
    dl = _wrap(adapter, wrapped_first, method)
    wrapped_first.load_state_dict(state)  # wrap, then restore: the adapter holds no position of its own
    _same(_take(dl, TAKE - CUT), reference[CUT:])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["megatron-blend", "packed", "packed-varlen", "verify-on-read"])
@pytest.mark.parametrize("method", METHODS)
def test_megatron_blends_packed_rows_and_verify_on_read_cross_processes(root, kind, method):
    """The same through workers started with every method, restored before and after wrapping."""
    reference = _take(_make(kind, root), TAKE)
    _same(_take(_wrap("dataset", _make(kind, root), method), TAKE), reference)
    state = _make(kind, root).state_at(reference[CUT]["batch_index"], reference[CUT]["micro_index"])
    restored = _make(kind, root)
    restored.load_state_dict(state)
    _same(_take(_wrap("stateful", restored, method), TAKE - CUT), reference[CUT:])
    wrapped_first = _make(kind, root)
    dl = _wrap("shardkit", wrapped_first, method)
    wrapped_first.load_state_dict(state)
    _same(_take(dl, TAKE - CUT), reference[CUT:])


@pytest.mark.parametrize("kind", ["loader", "mixture"])
def test_a_loader_pickles_to_its_configuration_and_position(root, kind):
    loader = _make(kind, root)
    _take(loader, CUT)
    blob = pickle.dumps(loader)
    assert len(blob) < 20_000  # configuration and a JSON-able state, no arrays, no mappings
    again = pickle.loads(blob)
    assert again.step == loader.step and again.state_dict() == loader.state_dict()
    _same(_take(again, TAKE - CUT), _take(loader, TAKE - CUT))


def test_the_engine_itself_refuses_to_be_pickled(root):
    loader = _make("loader", root)
    with pytest.raises(TypeError, match="pickle the loader"):
        pickle.dumps(loader.engine)


def test_stateful_dataloader_resumed_with_another_worker_count_names_both(root):
    from shardkit.torch import StatefulDataLoader as Checked
    from shardkit.torch import check_stateful_state

    loader = _make("loader", root)
    dl = StatefulDataLoader(ShardkitIterableDataset(loader), batch_size=None, num_workers=2)
    it = iter(dl)
    for _ in range(CUT):
        next(it)
    saved = dl.state_dict()
    del it
    with pytest.raises(ResumeError, match="saved with 2 workers.*restored into 3"):
        check_stateful_state(saved, num_workers=3)
    check_stateful_state(saved, num_workers=2)
    three = Checked(ShardkitIterableDataset(_make("loader", root)), batch_size=None, num_workers=3)
    with pytest.raises(ResumeError, match="num_workers: .*saved with 2 workers"):
        three.load_state_dict(saved)
    two = Checked(ShardkitIterableDataset(_make("loader", root)), batch_size=None, num_workers=2)
    two.load_state_dict(saved)
    assert _take(two, 1)[0]["batch_index"] == _take(_make("loader", root), CUT + 1)[CUT]["batch_index"]
