"""The row store across real processes: DataLoader workers started with spawn read it (each maps and
verifies it on its own), and processes building the same store at once build it once."""

import os
import subprocess
import sys

import numpy as np
import pytest

from shardkit.engine.packing import PackSpec
from shardkit.engine.row_store import store_dir
from shardkit.format.dataset import open_dataset
from shardkit.loader import Loader
from shardkit.writer import write_dataset

SEQ = 32


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    rng = np.random.default_rng(5)
    docs = [rng.integers(1, 60000, size=int(rng.integers(1, 90)), dtype=np.uint16) for _ in range(600)]
    p = tmp_path_factory.mktemp("rsp") / "ds"
    write_dataset(p, docs, max_tokens_per_shard=5000, checksum_block_size=4096)
    return p


def test_spawned_dataloader_workers_read_the_store(path, tmp_path):
    torch = pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader
    kw = dict(seq_len=SEQ, batch_schedule=4, seed=2, packing="best_fit", packing_cache_dir=tmp_path / "c")
    want = [b for _, b in zip(range(40), Loader(path, **kw))]
    dl = ShardkitDataLoader(Loader(path, packing_store=True, **kw), num_workers=2, group=2,
                            multiprocessing_context="spawn")
    got = [b for _, b in zip(range(40), dl)]
    assert len(got) == 40
    for a, b in zip(want, got):
        assert sorted(a) == sorted(b)
        for k, v in a.items():
            if isinstance(v, np.ndarray):
                assert isinstance(b[k], torch.Tensor), k
                np.testing.assert_array_equal(v, b[k].numpy(), err_msg=k)
            else:
                assert v == b[k], k
    assert store_dir(tmp_path / "c", open_dataset(path).fingerprint, PackSpec(strategy="best_fit", seq_len=SEQ)).exists()


@pytest.mark.parametrize("workers,group", [(1, 1), (3, 2)])
def test_forked_workers_from_the_store_equal_gathered_rows_in_process(path, tmp_path, workers, group):
    pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader
    kw = dict(seq_len=SEQ, batch_schedule=6, seed=9, packing="first_fit", packing_cache_dir=tmp_path / "c",
              rank=1, world_size=2, fields={"loss_mask": True, "mask_doc_boundary": True})
    gathered = Loader(path, **kw)
    gathered.load_state_dict(gathered.state_at(7))
    stored = Loader(path, packing_store=True, **kw)
    stored.load_state_dict(stored.state_at(7))
    want = [b for _, b in zip(range(30), gathered)]
    got = [b for _, b in zip(range(30), ShardkitDataLoader(stored, num_workers=workers, group=group))]
    assert len(got) == 30
    for a, b in zip(want, got):
        for k, v in a.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(v, b[k].numpy(), err_msg=k)
            else:
                assert v == b[k], k


def test_concurrent_processes_build_the_store_once(path, tmp_path):
    cache = tmp_path / "c"
    code = ("import os, sys; from shardkit.loader import Loader; "
            "ld = Loader(sys.argv[1], seq_len=32, batch_schedule=4, seed=2, packing='best_fit', "
            "packing_cache_dir=sys.argv[2], packing_store=True); b = next(iter(ld)); "
            "st = ld.engine.plan.streams[(0, 32)].windows.store; "
            "print(os.stat(st.directory).st_ino, int(b['input_ids'].sum()))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(cache)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o for o, _ in outs}) == 1 and not any(e.strip() for _, e in outs)  # one store, no warnings
    spec = PackSpec(strategy="best_fit", seq_len=SEQ)
    fp = open_dataset(path).fingerprint
    dirs = sorted(e for e in os.listdir(cache) if not e.endswith(".lock"))
    assert dirs == sorted([store_dir(cache, fp, spec).name, store_dir(cache, fp, spec).name[:-len(".rows")]])


def test_building_a_store_of_many_shards_under_a_small_descriptor_limit(tmp_path):
    """The build maps a block's shards only: 400 shards under RLIMIT_NOFILE 64."""
    rng = np.random.default_rng(8)
    docs = [rng.integers(1, 60000, size=int(rng.integers(20, 60)), dtype=np.uint16) for _ in range(2000)]
    write_dataset(tmp_path / "ds", docs, max_tokens_per_shard=200)
    assert open_dataset(tmp_path / "ds").num_shards >= 400
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
            "from shardkit.format.dataset import open_dataset; from shardkit.engine.packing import PackSpec; "
            "from shardkit.engine.pack_table import cached_table; from shardkit.engine.row_store import cached_store; "
            "ds = open_dataset(sys.argv[1]); spec = PackSpec(strategy='best_fit', seq_len=32, group_tokens=4096); "
            "st = cached_store(ds, cached_table(ds, spec, sys.argv[2]), spec, sys.argv[2]); print(st.rows)")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ds"), str(tmp_path / "c")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) > 0
