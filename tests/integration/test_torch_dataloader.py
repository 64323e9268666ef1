"""ShardkitDataLoader: the same item sequence as the Loader for any worker count, group size and fields;
exact resume with another worker count; shared memory cleaned up."""

import json
import os

import numpy as np
import pytest
from support.mixtures import make_sources

from shardkit.engine import BatchFields
from shardkit.errors import ConfigError
from shardkit.loader import Loader, MixtureLoader
from shardkit.order import Ramp
from shardkit.writer import write_dataset

torch = pytest.importorskip("torch")
from shardkit.adapters import torch_loader  # noqa: E402
from shardkit.torch import ShardkitDataLoader  # noqa: E402

SEQ = 16


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=int(rng.integers(1, 60)), dtype=np.uint16) for _ in range(250)]
    p = tmp_path_factory.mktemp("tdl") / "ds"
    write_dataset(p, docs, max_tokens_per_shard=1200, checksum_block_size=4096)
    return p


def _items(iterable, n=None):
    out = []
    for i, item in enumerate(iterable):
        out.append({k: (v.numpy().copy() if hasattr(v, "numpy") else v) for k, v in item.items()})
        if n is not None and i + 1 == n:
            break
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k], err_msg=k)
            else:
                assert x[k] == y[k], k


def _shm_names():
    """multiprocessing.shared_memory segments (psm_*): torch's and other processes' semaphores are not ours."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if n.startswith("psm_")}


CASES = [
    dict(batch_schedule=4),
    dict(batch_schedule=Ramp(start=2, increment=2, ramp_samples=40, final=8), micro_batch_size=2),
    dict(batch_schedule=6, world_size=3, rank=1,
         fields=BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True, mask_doc_boundary=True)),
    dict(batch_schedule=4, fields=BatchFields(tokens_only=True)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("workers,group", [(0, None), (1, 3), (2, None), (3, 2)])
def test_same_items_as_the_loader(path, case, workers, group, monkeypatch):
    kw = dict(seq_len=SEQ, seed=5, max_epochs=1, **CASES[case])
    ref = _items(Loader(path, **kw))
    created = []  # the segments this loader makes (other processes on the machine make their own)

    class Recorded(torch_loader.shared_memory.SharedMemory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if kwargs.get("create"):
                created.append(self.name.lstrip("/"))

    monkeypatch.setattr(torch_loader.shared_memory, "SharedMemory", Recorded)
    got = _items(ShardkitDataLoader(Loader(path, **kw), num_workers=workers, group=group))
    _same(got, ref)
    assert len(created) == (1 if workers else 0)
    assert not set(created) & _shm_names()  # the segment is unlinked when the iteration ends


def test_token_dtype_and_resume_with_another_worker_count(path):
    kw = dict(seq_len=SEQ, seed=9, batch_schedule=4, max_epochs=2)
    ref = _items(Loader(path, **kw))
    dl = ShardkitDataLoader(Loader(path, **kw), num_workers=2, token_dtype=torch.long, group=3)
    it = iter(dl)
    first = [next(it) for _ in range(7)]
    assert first[0]["input_ids"].dtype == torch.long
    state = json.loads(json.dumps(dl.state_dict()))
    del it  # abandon mid-stream: workers stop, the segment goes
    for workers in (0, 1, 3):
        again = ShardkitDataLoader(Loader(path, **kw), num_workers=workers)
        again.load_state_dict(state)
        rest = _items(again)
        _same(rest, ref[7:])
    _same([{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in x.items()} for x in first],
          [{k: (v.astype(np.int64) if isinstance(v, np.ndarray) else v) for k, v in x.items()} for x in ref[:7]])


def test_a_second_loop_continues_where_the_first_stopped(path):
    kw = dict(seq_len=SEQ, seed=2, batch_schedule=4, max_epochs=1)
    ref = _items(Loader(path, **kw))
    dl = ShardkitDataLoader(Loader(path, **kw), num_workers=2, group=2)
    head = _items(dl, 5)
    assert dl.step == 5
    _same(head + _items(dl), ref)


def test_forbidden_arguments(path):
    ld = Loader(path, seq_len=SEQ, batch_schedule=4)
    with pytest.raises(ConfigError, match="batch_size"):
        ShardkitDataLoader(ld, batch_size=2)
    with pytest.raises(ConfigError, match="num_workers"):
        ShardkitDataLoader(ld, num_workers=-1)
    with pytest.raises(ConfigError, match="group"):
        ShardkitDataLoader(ld, group=0)


def _session_processes(sid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.getsid(int(pid)) == sid:
                    out.append(int(pid))
            except OSError:
                pass
    return out


@pytest.mark.parametrize("batch,group", [(4, "2"), (1, "None")])
def test_a_sigkilled_trainer_leaves_no_worker_and_no_shared_memory_behind(path, batch, group):
    """The segment belongs to the main process; if it is killed, its workers exit within seconds (they
    notice while waiting for a slot) and the resource tracker unlinks the segment. Batch 1 with the default
    group size ships thousands of items per group: their metadata must not travel through the queue (a full
    pipe would block a worker's feeder thread for good, holding the segment)."""
    import signal
    import subprocess
    import sys
    import time

    code = f"""
import sys, time
from shardkit.loader import Loader
from shardkit.torch import ShardkitDataLoader
dl = ShardkitDataLoader(Loader({str(path)!r}, seq_len={SEQ}, batch_schedule={batch}), num_workers=2, group={group})
for i, item in enumerate(dl):
    if i == 3:
        print("running", flush=True)
    time.sleep(0.01)
"""
    before = _shm_names()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        created = _shm_names() - before
        assert created, "the loader should have a shared-memory segment while it runs"
        assert len(_session_processes(proc.pid)) >= 3  # the trainer and its two workers (and the tracker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while (created & _shm_names() or _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _session_processes(proc.pid), "worker processes outlived the trainer"
        assert not created & _shm_names(), f"left behind: {sorted(created & _shm_names())}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _session_processes(proc.pid):
            os.kill(pid, 9)


# -- a MixtureLoader: items change shape at phase boundaries (seq_len, batch size) ------------------------------

MIX_SEQ = 8


def _recipe():
    return {
        "seed": 3, "seq_len": MIX_SEQ,
        "phases": [
            {"name": "short", "tokens": 600, "mix": {"web": 0.6, "code": 0.4},
             "batch": {"ramp": {"start": 2, "increment": 2, "over_samples": 20, "final": 6}}},
            {"name": "long", "tokens": 900, "batch": 4, "seq_len": 3 * MIX_SEQ,
             "mix": {"web": 0.25, "code": 0.25, "math": 0.5}},
        ],
        "sources": {"web": {"path": "web"}, "code": {"path": "code"}, "math": {"path": "math"}},
    }


@pytest.fixture(scope="module")
def mix_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tdl-mix")
    make_sources(root)
    return root


def _mixture(root, **kw):
    return MixtureLoader(_recipe(), base_dir=root, readahead=False, **kw)


MIX_CASES = [
    dict(),
    dict(micro_batch_size=2),
    dict(world_size=2, rank=1, fields=BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True)),
]


@pytest.mark.parametrize("case", range(len(MIX_CASES)))
@pytest.mark.parametrize("workers,group", [(0, None), (2, None), (3, 2), (2, 5)])
def test_mixture_items_equal_the_mixture_loader_across_phases(mix_root, case, workers, group):
    ref = _items(_mixture(mix_root, **MIX_CASES[case]))
    assert {it["phase_name"] for it in ref} == {"short", "long"}  # the run crosses the seq_len change
    assert len({it["input_ids"].shape for it in ref}) > 1
    got = _items(ShardkitDataLoader(_mixture(mix_root, **MIX_CASES[case]), num_workers=workers, group=group))
    _same(got, ref)


@pytest.mark.parametrize("workers_before,workers_after", [(2, 3), (3, 0)])
def test_mixture_resume_through_the_dataloader(mix_root, workers_before, workers_after):
    ref = _items(_mixture(mix_root))
    dl = ShardkitDataLoader(_mixture(mix_root), num_workers=workers_before, group=2)
    cut = len(ref) // 2 + 1  # inside the second phase's neighbourhood, not on a group boundary
    head = _items(dl, cut)
    state = json.loads(json.dumps(dl.state_dict()))
    again = ShardkitDataLoader(_mixture(mix_root), num_workers=workers_after)
    again.load_state_dict(state)
    _same(head + _items(again), ref)
