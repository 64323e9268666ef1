"""Rank slices, micro-batches and the round-robin worker rule."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.order import item_sequence, micro_batches, rank_slice, worker_batches, worker_of_batch


def test_rank_slices_tile_the_global_batch_in_rank_order():
    assert [rank_slice(100, 12, r, 4) for r in range(4)] == [(100, 103), (103, 106), (106, 109), (109, 112)]
    assert rank_slice(0, 7, 0, 1) == (0, 7)


def test_rank_slice_errors_name_the_numbers():
    with pytest.raises(ConfigError, match=r"10 samples .* world_size 3"):
        rank_slice(0, 10, 0, 3)
    with pytest.raises(ConfigError, match="rank 4"):
        rank_slice(0, 8, 4, 4)
    with pytest.raises(ConfigError):
        rank_slice(0, 8, -1, 4)
    with pytest.raises(ConfigError):
        rank_slice(0, 8, 0, 0)
    with pytest.raises(ConfigError):
        rank_slice(-1, 8, 0, 2)


def test_micro_batches():
    assert micro_batches(32, 4) == 8 and micro_batches(5, 5) == 1
    with pytest.raises(ConfigError, match=r"30 rows .* micro_batch_size 4"):
        micro_batches(30, 4)
    with pytest.raises(ConfigError):
        micro_batches(8, 0)


def _dataloader_order(per_worker: list[list[int]]) -> list[int]:
    """torch DataLoader's in-order dispatch: requests go to workers cyclically, skipping exhausted ones."""
    iters = [iter(w) for w in per_worker]
    alive = [True] * len(iters)
    out: list[int] = []
    for w in itertools.cycle(range(len(iters))):
        if not any(alive):
            return out
        if alive[w]:
            try:
                out.append(next(iters[w]))
            except StopIteration:
                alive[w] = False


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("first,stop", [(0, 17), (6, 23), (9, 10), (4, 4)])
def test_round_robin_workers_deliver_the_rank_order(workers, first, stop):
    shares = [list(worker_batches(workers, w, first=first, stop=stop)) for w in range(workers)]
    assert _dataloader_order(shares) == list(range(first, stop))
    for w, share in enumerate(shares):
        assert all(worker_of_batch(b, workers, first=first) == w for b in share)


def test_endless_worker_stream_and_errors():
    assert list(itertools.islice(worker_batches(3, 1, first=10), 4)) == [11, 14, 17, 20]
    with pytest.raises(ConfigError, match="worker_id 3"):
        worker_batches(3, 3)
    with pytest.raises(ConfigError, match="num_workers"):
        worker_batches(0, 0)
    with pytest.raises(ConfigError, match="resume point"):
        worker_of_batch(2, 4, first=5)


def test_real_torch_dataloader_matches_the_rule():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class Items(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            w, n = (info.id, info.num_workers) if info else (0, 1)
            for b in worker_batches(n, w, first=3, stop=14):
                yield torch.tensor(b)

    for workers in (0, 2):
        got = [int(x) for x in DataLoader(Items(), batch_size=None, num_workers=workers)]
        assert got == list(range(3, 14)), workers


@given(workers=st.integers(1, 5), run=st.integers(1, 4), first=st.integers(0, 50), n=st.integers(1, 200))
def test_item_sequence_runs_cover_every_index_once_in_worker_order(workers, run, first, n):
    seqs = [item_sequence(first + w * run, run * workers, run, 0, n) for w in range(workers)]
    everything = np.concatenate(seqs)
    assert len(set(everything.tolist())) == everything.size  # no index twice
    # taking `run` items from each worker in turn gives the plain sequence first, first + 1, …
    whole = (n // run) * run
    merged = np.stack([s[:whole].reshape(-1, run) for s in seqs], axis=1).reshape(-1)
    assert np.array_equal(merged, first + np.arange(merged.size))
    with pytest.raises(ConfigError, match="overlap"):
        item_sequence(0, 2, 3, 0, 1)
