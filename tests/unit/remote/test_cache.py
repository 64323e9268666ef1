"""The block cache on its own (a `file://` URL exercises the same code as S3): equality with local reads,
crash leftovers, damaged entries, pins, and the byte accounting against st_blocks."""

from __future__ import annotations

import fcntl
import os

import numpy as np
import pytest

from shardkit.loader import Loader
from shardkit.remote.blocks import ABSENT, PRESENT, RESERVED
from shardkit.remote.cache import allocated_bytes, ofd_lock
from shardkit.remote.dataset import open_remote_dataset
from shardkit.writer import write_dataset

BLOCK = 16 << 10


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    rng = np.random.default_rng(11)
    docs = [rng.integers(0, 60000, size=int(rng.integers(20, 2000)), dtype=np.uint16) for _ in range(400)]
    path = tmp_path_factory.mktemp("remote-unit") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=90_000, checksum_block_size=BLOCK)
    return path


def _open(local, cache, limit=8 << 20, **kw):
    return open_remote_dataset(f"file://{local}", cache_dir=cache, cache_limit=limit, **kw)


def _batches(data, shuffle="block", n=60, start=0):
    ld = Loader(data, seq_len=127, batch_schedule=8, shuffle=shuffle, seed=5, block_samples=32, group_blocks=2)
    if start:
        ld.load_state_dict(ld.state_at(start))
    out = []
    for b in ld:
        out.append(b["input_ids"].copy())
        if len(out) == n:
            break
    return out


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("shuffle", ["block", "full", "none"])
def test_remote_reads_equal_local_reads(local, tmp_path, shuffle):
    with _open(local, tmp_path / "c") as ds:
        assert _same(_batches(ds, shuffle), _batches(local, shuffle))
        assert _same(_batches(ds, shuffle, start=40), _batches(local, shuffle, start=40))
        assert ds.stats()["blocks_downloaded"] > 0


def _present(ds):
    return np.flatnonzero(ds.cache.state == PRESENT)


def test_a_damaged_entry_is_refetched_never_served(local, tmp_path):
    cache = tmp_path / "c"
    with _open(local, cache) as ds:
        want = _batches(ds, "none", n=200)
        present = _present(ds)
        assert present.size >= 3
        g_flip, g_hole = int(present[0]), int(present[1])
        s, lo, hi = ds.cache.blocks.byte_range(g_flip)
        path = ds.cache.dir / ds.manifest.shards[s].bin_name
        s2, lo2, hi2 = ds.cache.blocks.byte_range(g_hole)
        path2 = ds.cache.dir / ds.manifest.shards[s2].bin_name
    with open(path, "r+b") as f:  # one flipped byte in a PRESENT block
        f.seek(lo + 100)
        b = f.read(1)
        f.seek(lo + 100)
        f.write(bytes([b[0] ^ 0x40]))
    with open(path2, "r+b") as f:  # a PRESENT block whose bytes are zeros (as a lost write would leave)
        f.seek(lo2)
        f.write(bytes(hi2 - lo2))
    with _open(local, cache) as ds:
        assert ds.cache.state[g_flip] == PRESENT
        assert _same(_batches(ds, "none", n=200), want)
        assert ds.stats()["corrupt_refetched"] >= 2


def test_crash_leftovers_are_cleared_and_not_served(local, tmp_path):
    cache = tmp_path / "c"
    with _open(local, cache) as ds:
        want = _batches(ds, "none", n=100)
        present = _present(ds)
        g_torn, g_orphan = int(present[0]), int(present[1])
        cd = ds.cache
        # a writer killed mid-download: RESERVED with half its bytes written, its download lock gone
        s, lo, hi = cd.blocks.byte_range(g_torn)
        cd.state[g_torn] = RESERVED
        os.pwrite(cd.data_fd(s), b"\x07" * ((hi - lo) // 2), lo)
        # a damaged state byte: ABSENT although the bytes are there (their space must not go uncounted)
        cd.state[g_orphan] = ABSENT
        # a block being written by a live process (another open file description holds its download lock)
        g_live = int(present[2])
        cd.state[g_live] = RESERVED
        other = os.open(cd.dir / "locks", os.O_RDWR)
        assert ofd_lock(other, fcntl.F_WRLCK, 2 * g_live + 1, wait=False)
    try:
        with _open(local, cache) as ds:
            st = ds.cache.state
            assert st[g_torn] == ABSENT and st[g_orphan] == ABSENT  # recovered on open
            assert st[g_live] == RESERVED  # left to its owner
            s, lo, hi = ds.cache.blocks.byte_range(g_orphan)
            fd = ds.cache.data_fd(s)
            assert os.lseek(fd, lo, os.SEEK_HOLE) == lo  # punched out
            os.close(other)  # the "live" owner dies now
            other = -1
            assert _same(_batches(ds, "none", n=100), want)
    finally:
        if other >= 0:
            os.close(other)


def test_a_pinned_block_is_never_evicted(local, tmp_path):
    with _open(local, tmp_path / "c") as ds:
        _batches(ds, "none", n=20)
        g = int(_present(ds)[0])
        other = os.open(ds.cache.dir / "locks", os.O_RDWR)  # another process's reader
        try:
            assert ofd_lock(other, fcntl.F_RDLCK, 2 * g, wait=False)
            with ds.cache.root.locked():
                assert not ds.cache.try_evict(g)
            assert ds.cache.state[g] == PRESENT
            ofd_lock(other, fcntl.F_UNLCK, 2 * g, wait=False)
            while (ds.fetcher.refs > 0).any():  # this process lets go too
                ds.fetcher.unpin(np.flatnonzero(ds.fetcher.refs > 0))
            with ds.cache.root.locked():
                assert ds.cache.try_evict(g)
            assert ds.cache.state[g] == ABSENT
        finally:
            os.close(other)


def test_accounting_bounds_real_allocation_under_a_small_limit(local, tmp_path):
    cache = tmp_path / "c"
    limit = 40 * (BLOCK + 12288) + (64 << 10)
    with _open(local, cache, limit=limit) as ds:
        # about two epochs: the second reads again what the first had to evict
        want = _batches(local, "block", n=800)
        assert _same(_batches(ds, "block", n=800), want)
        stats = ds.stats()
        assert stats["blocks_downloaded"] * BLOCK > limit  # it had to evict
        assert allocated_bytes(cache) <= stats["cache_used"] <= limit


def test_a_read_larger_than_the_cache_is_a_clear_error(local, tmp_path):
    from shardkit.remote.cache import CacheError

    with _open(local, tmp_path / "c", limit=6 * BLOCK) as ds, pytest.raises(CacheError, match="raise cache_limit"):
        _batches(ds, "full", n=50)


def test_dataloader_workers_share_the_cache_and_deliver_the_loader_stream(local, tmp_path):
    torch = pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader

    kw = dict(seq_len=127, batch_schedule=8, shuffle="block", seed=5, block_samples=32, group_blocks=2, max_epochs=1)
    want = [b["input_ids"].copy() for b in Loader(local, **kw)]
    with _open(local, tmp_path / "c") as ds:
        _batches(ds, "block", n=3)  # the parent holds pins and ready blocks when the workers fork
        got = [b["input_ids"] for b in ShardkitDataLoader(Loader(ds, **kw), num_workers=2, group=2)]
        got = [g.numpy() if isinstance(g, torch.Tensor) else g for g in got]
        assert _same(got, want)
        blocks = ds.cache.blocks.num_blocks
        assert int((ds.cache.state == PRESENT).sum()) == blocks  # the workers filled the shared cache


def test_windows_longer_than_a_cache_block_and_empty_shards(tmp_path):
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 60000, size=int(rng.integers(500, 5000)), dtype=np.uint16) for _ in range(60)]
    path = tmp_path / "ds"
    write_dataset(path, docs, max_tokens_per_shard=40_000, checksum_block_size=4096)  # 2048 tokens per block
    kw = dict(seq_len=3000, batch_schedule=4, seed=1, max_epochs=1)  # a window spans 2-3 cache blocks
    for shuffle in ("block", "full"):
        want = [b["input_ids"].copy() for b in Loader(path, shuffle=shuffle, **kw)]
        with _open(path, tmp_path / f"c-{shuffle}") as ds:
            assert _same([b["input_ids"].copy() for b in Loader(ds, shuffle=shuffle, **kw)], want)


def test_memory_url_through_the_loader(local, tmp_path):
    import fsspec

    mem = fsspec.filesystem("memory")
    for f in local.iterdir():
        mem.pipe_file(f"/unit-remote-ds/{f.name}", f.read_bytes())
    ld = Loader("memory://unit-remote-ds", seq_len=127, batch_schedule=8, seed=5, cache_dir=tmp_path / "c",
                cache_limit="8MiB")
    assert ld.dataset.url == "memory://unit-remote-ds"
    assert _same(_batches(ld.dataset, "block"), _batches(local, "block"))
    ld.dataset.close()
    mem.rm("/unit-remote-ds", recursive=True)
