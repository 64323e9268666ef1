"""The loader's determinism contract on real (small) datasets: windows, exactly-once, ranks, resume."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine import BatchFields
from shardkit.errors import ConfigError, ResumeError
from shardkit.loader import Loader
from shardkit.order import Ramp
from shardkit.writer import write_dataset

SEQ = 16


class _Data(tuple):
    def __repr__(self) -> str:  # keep hypothesis failure reports short
        return f"dataset({self[0]})"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 60000, size=int(rng.integers(1, 70)), dtype=np.uint16) for _ in range(300)]
    path = tmp_path_factory.mktemp("loader") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=1500, checksum_block_size=4096)  # many shards
    return _Data((path, docs))


def _stream(loader, n=None):
    out = []
    if n == 0:
        return out
    for i, b in enumerate(loader):
        out.append((b["batch_index"], b["input_ids"].copy(), b["labels"].copy()))
        if n is not None and i + 1 == n:
            break
    return out


def test_windows_are_exact_slices_of_the_flat_stream(dataset):
    path, docs = dataset
    flat = np.concatenate(docs)
    loader = Loader(path, seq_len=SEQ, batch_schedule=4, max_epochs=1, shuffle="block", seed=3)
    assert loader.dataset.num_shards > 3
    for b in range(loader.num_batches()):
        ids = loader.global_sample_ids(b)
        item = next(iter(loader))
        for row, sid in enumerate(ids):
            window = flat[sid * SEQ: sid * SEQ + SEQ + 1]
            np.testing.assert_array_equal(item["input_ids"][row], window[:-1])
            np.testing.assert_array_equal(item["labels"][row], window[1:])


@pytest.mark.parametrize("shuffle", ["none", "block", "full"])
def test_every_sample_exactly_once_per_epoch(dataset, shuffle):
    path, _ = dataset
    loader = Loader(path, seq_len=SEQ, batch_schedule=1, max_epochs=2, shuffle=shuffle, seed=11)
    n = loader.num_samples
    ids = np.concatenate([loader.global_sample_ids(b) for b in range(loader.num_batches())])
    assert ids.size == 2 * n
    for e in range(2):
        assert np.array_equal(np.sort(ids[e * n:(e + 1) * n]), np.arange(n))
    if shuffle != "none":
        assert not np.array_equal(ids[:n], ids[n:])


@settings(max_examples=25, deadline=None)
@given(world=st.sampled_from([1, 2, 4]), resume_at=st.integers(0, 25), micro=st.sampled_from([None, 2]),
       seed=st.integers(0, 1000))
def test_global_stream_is_independent_of_world_size_micro_batches_and_resume(dataset, world, resume_at, micro, seed):
    path, _ = dataset
    kw = dict(seq_len=SEQ, seed=seed, batch_schedule=Ramp(start=8, increment=8, ramp_samples=60, final=16),
              max_epochs=1)
    reference = {b: (ids, lab) for b, ids, lab in _stream(Loader(path, **kw))}
    first = Loader(path, **kw)
    _stream(first, resume_at)
    state = json.loads(json.dumps(first.state_dict()))
    ranks = []
    for r in range(world):
        loader = Loader(path, **kw, rank=r, world_size=world, micro_batch_size=micro)
        loader.load_state_dict(state)
        ranks.append(_stream(loader))
    by_batch = {}
    for r in range(world):
        for b, ids, lab in ranks[r]:
            by_batch.setdefault(b, [[] for _ in range(world)])[r].append((ids, lab))
    assert sorted(by_batch) == [b for b in sorted(reference) if b >= resume_at]
    for b, per_rank in by_batch.items():
        got_i = np.concatenate([i for rows in per_rank for i, _ in rows])
        got_l = np.concatenate([lab for rows in per_rank for _, lab in rows])
        np.testing.assert_array_equal(got_i, reference[b][0])
        np.testing.assert_array_equal(got_l, reference[b][1])


def test_elastic_resume_4_then_2_then_3_ranks(dataset):
    path, _ = dataset
    kw = dict(seq_len=SEQ, seed=5, batch_schedule=12, max_epochs=1)
    reference = _stream(Loader(path, **kw))
    got = []
    state = Loader(path, **kw).state_dict()
    for world, steps in ((4, 3), (2, 4), (3, None)):
        loaders = [Loader(path, **kw, rank=r, world_size=world) for r in range(world)]
        for ld in loaders:
            ld.load_state_dict(state)
        streams = [_stream(ld, steps) for ld in loaders]
        for parts in zip(*streams):
            got.append((parts[0][0], np.concatenate([p[1] for p in parts])))
        state = loaders[0].state_dict()
    assert [b for b, _ in got] == [b for b, _, _ in reference]
    for (_, rows), (_, ref, _) in zip(got, reference):
        np.testing.assert_array_equal(rows, ref)


def test_a_mid_step_state_resumes_only_on_the_same_world_size_and_micro_batch_size(dataset):
    """Micro-batch k is the k-th slice of one rank's rows: on other ranks it names no position at all."""
    path, _ = dataset
    kw = dict(seq_len=SEQ, seed=5, batch_schedule=8, max_epochs=1)
    ld = Loader(path, **kw, micro_batch_size=2, rank=1, world_size=2)
    it = iter(ld)
    next(it)
    state = json.loads(json.dumps(ld.state_dict()))
    assert state["micro"] == 1
    for other in (dict(micro_batch_size=2, rank=0, world_size=1), dict(micro_batch_size=1, rank=1, world_size=2)):
        with pytest.raises(ResumeError, match="inside a step") as e:
            Loader(path, **kw, **other).load_state_dict(state)
        assert e.value.field == "micro"
    same = Loader(path, **kw, micro_batch_size=2, rank=1, world_size=2)
    same.load_state_dict(state)
    np.testing.assert_array_equal(next(iter(same))["input_ids"], next(it)["input_ids"])
    # at a step boundary (both micro-batches of step 0 delivered) every world size and micro-batch size is fine
    boundary = ld.state_dict()
    assert boundary["micro"] == 0
    Loader(path, **kw, micro_batch_size=1, rank=0, world_size=4).load_state_dict(boundary)


def test_position_ids_cu_seqlens_and_loss_mask_follow_documents(dataset):
    path, docs = dataset
    starts = set(np.cumsum([0] + [d.size for d in docs])[:-1].tolist())
    fields = BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True, mask_doc_boundary=True)
    loader = Loader(path, seq_len=SEQ, batch_schedule=4, max_epochs=1, fields=fields, seed=2)
    for b, item in zip(range(10), loader):
        ids = loader.global_sample_ids(b)
        bounds = [0]
        for row, sid in enumerate(ids):
            g0 = int(sid) * SEQ
            pos, mask = item["position_ids"][row], item["loss_mask"][row]
            for t in range(SEQ):
                doc_start = max(s for s in starts if s <= g0 + t) if any(s <= g0 + t for s in starts) else 0
                assert pos[t] == (g0 + t) - max(doc_start, g0) or (doc_start < g0 and pos[t] == t)
                assert mask[t] == (0.0 if (g0 + t + 1) in starts else 1.0)
            inner = [t for t in range(1, SEQ) if g0 + t in starts]
            base = bounds[-1]
            bounds += [base + t for t in inner + [SEQ]]
        np.testing.assert_array_equal(item["cu_seqlens"], bounds)


def test_state_dict_refusals(dataset, tmp_path):
    path, docs = dataset
    loader = Loader(path, seq_len=SEQ, batch_schedule=4)
    _stream(loader, 3)
    state = loader.state_dict()
    write_dataset(tmp_path / "other", docs[:200], checksum_block_size=4096)
    other = Loader(tmp_path / "other", seq_len=SEQ, batch_schedule=4)
    with pytest.raises(ResumeError, match="fingerprint"):
        other.load_state_dict(state)
    other.load_state_dict(state, allow_data_change=True)
    assert other.step == 3
    with pytest.raises(ResumeError, match="stream.seq_len"):
        Loader(path, seq_len=SEQ + 1, batch_schedule=4).load_state_dict(state)
    with pytest.raises(ResumeError, match="stream.seed"):
        Loader(path, seq_len=SEQ, batch_schedule=4, seed=9).load_state_dict(state)
    for bad in (None, [], {"format": "x"}, {**state, "version": 99}, {**state, "batch": -1},
                {**state, "batch": 2**70}, {**state, "batch": "3"}, {**state, "config": None},
                {**state, "samples": 5}):
        with pytest.raises(ResumeError):
            Loader(path, seq_len=SEQ, batch_schedule=4).load_state_dict(bad)


def test_resume_at_ten_million_is_immediate(dataset):
    path, _ = dataset
    loader = Loader(path, seq_len=SEQ, batch_schedule=Ramp(start=8, increment=8, ramp_samples=10**6, final=64))
    loader.load_state_dict(loader.state_at(10_000_000))
    item = next(iter(loader))
    assert item["batch_index"] == 10_000_000 and item["input_ids"].shape == (64, SEQ)


def test_bad_configuration_errors(dataset):
    path, _ = dataset
    with pytest.raises(ConfigError, match="seq_len"):
        Loader(path, seq_len=10**9)
    with pytest.raises(ConfigError, match="divisible"):
        Loader(path, seq_len=SEQ, batch_schedule=6, world_size=4, rank=0)
    with pytest.raises(ConfigError, match="rank"):
        Loader(path, seq_len=SEQ, batch_schedule=4, world_size=2, rank=2)


def test_torch_dataloader_workers_and_stateful_resume(dataset):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardkit.torch import ShardkitIterableDataset

    path, _ = dataset
    kw = dict(seq_len=SEQ, seed=4, batch_schedule=4, max_epochs=1)
    ref = [i for _, i, _ in _stream(Loader(path, **kw))]
    for workers in (0, 2):
        ds = ShardkitIterableDataset(Loader(path, **kw))
        got = [item["input_ids"].numpy() for item in DataLoader(ds, batch_size=None, num_workers=workers)]
        assert len(got) == len(ref) and all(np.array_equal(a, b) for a, b in zip(got, ref))
    ds = ShardkitIterableDataset(Loader(path, **kw), token_dtype=torch.long)
    items = iter(DataLoader(ds, batch_size=None, num_workers=2))
    for _ in range(5):
        last = next(items)
    assert last["input_ids"].dtype == torch.long
    resume = ShardkitIterableDataset(Loader(path, **kw))
    resume.load_loader_state(json.loads(json.dumps(ds.state_after(last))))
    rest = [item["input_ids"].numpy() for item in DataLoader(resume, batch_size=None, num_workers=1)]
    assert all(np.array_equal(a, b) for a, b in zip(rest, ref[5:])) and len(rest) == len(ref) - 5
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    dl = stateful.StatefulDataLoader(ShardkitIterableDataset(Loader(path, **kw)), batch_size=None, num_workers=2)
    it = iter(dl)
    for _ in range(7):
        next(it)
    snap = dl.state_dict()
    dl2 = stateful.StatefulDataLoader(ShardkitIterableDataset(Loader(path, **kw)), batch_size=None, num_workers=2)
    dl2.load_state_dict(snap)
    rest = [item["input_ids"].numpy() for item in dl2]
    assert len(rest) == len(ref) - 7 and all(np.array_equal(a, b) for a, b in zip(rest, ref[7:]))


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_stateful_dataloader_checkpoint_before_every_worker_has_yielded(dataset, workers):
    """A snapshot taken in the first steps (some workers not started) must still resume exactly."""
    pytest.importorskip("torch")
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from shardkit.torch import ShardkitIterableDataset

    path, _ = dataset
    kw = dict(seq_len=SEQ, seed=1, batch_schedule=4, max_epochs=1)

    def make():
        return stateful.StatefulDataLoader(ShardkitIterableDataset(Loader(path, **kw)), batch_size=None,
                                           num_workers=workers)

    for consumed in range(4):
        dl = make()
        it = iter(dl)
        for _ in range(consumed):
            next(it)
        snap = json.loads(json.dumps(dl.state_dict()))
        del it
        dl2 = make()
        dl2.load_state_dict(snap)
        got = [int(b["batch_index"]) for _, b in zip(range(6), dl2)]
        assert got == list(range(consumed, consumed + 6)), (workers, consumed)


@pytest.mark.parametrize("workers", [0, 2])
def test_reiterating_a_dataloader_restarts_from_the_start_point_for_any_worker_count(dataset, workers):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardkit.torch import ShardkitIterableDataset

    path, _ = dataset
    dl = DataLoader(ShardkitIterableDataset(Loader(path, seq_len=SEQ, batch_schedule=4, max_epochs=1)),
                    batch_size=None, num_workers=workers)
    first = [int(b["batch_index"]) for _, b in zip(range(3), dl)]
    again = [int(b["batch_index"]) for _, b in zip(range(3), dl)]
    assert first == again == [0, 1, 2]
