"""The remote block cache on a small file system that fills up: a clear error, nothing torn ever served,
and the same configuration streams again once there is room.

The cache_dir is a real tmpfs of 1 MiB (or a bigger one mostly taken by a filler file) under a
cache_limit of 64 MiB, far more than the file system has, so the cache's own eviction never runs and the
writes themselves hit ENOSPC. The dataset (about 4 MiB of 16 KiB blocks) is served by a moto S3 server.
There is no CLI case: `shardkit stream` takes a local dataset directory only (no remote URL, no cache
options), so no command streams through the block cache.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from faults_support import can_mount, resize_tmpfs, tmpfs

pytest.importorskip("s3fs", reason="remote tests need the test extra: pip install -e '.[test]'")
pytest.importorskip("moto.server", reason="remote tests need moto[server] (the test extra)")

from support.remote_cache import set_aws_test_env  # noqa: E402
from support.s3server import MotoServer  # noqa: E402

from shardkit.errors import ShardkitError  # noqa: E402
from shardkit.loader import Loader  # noqa: E402
from shardkit.remote.blocks import ABSENT, PRESENT, charge_of  # noqa: E402
from shardkit.remote.cache import CacheError  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402

MOUNT = can_mount()
pytestmark = [
    pytest.mark.skipif(MOUNT is not None, reason=str(MOUNT)),
    # a download thread's exception must reach the reader, never die as an unhandled thread exception
    pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning"),
]

BLOCK = 16 << 10
LIMIT = 64 << 20  # far above every file system below: eviction never makes room
STREAM = {"seq_len": 127, "batch_schedule": 8, "seed": 9, "block_samples": 32, "group_blocks": 2,
          "shuffle": "block", "max_epochs": 1}
NO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}, "skip_instance_cache": True}


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[tuple[Path, str, dict]]:
    """A dataset of about 4 MiB (8 shards of 16 KiB blocks), locally and uploaded: (path, url, options)."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=int(rng.integers(200, 8000)), dtype=np.uint16) for _ in range(500)]
    local = tmp_path_factory.mktemp("cache-full") / "ds"
    write_dataset(local, docs, max_tokens_per_shard=300_000, checksum_block_size=BLOCK)
    env = pytest.MonkeyPatch()
    set_aws_test_env(env)
    server = MotoServer.start(log_dir=str(tmp_path_factory.mktemp("moto")))
    try:
        bucket = server.create_bucket()
        client = server.client()
        for f in sorted(local.iterdir()):
            client.put_object(Bucket=bucket, Key=f"ds/{f.name}", Body=f.read_bytes())
        yield local, f"s3://{bucket}/ds", server.storage_options(**NO_RETRIES)
    finally:
        server.stop()
        env.undo()


@pytest.fixture(scope="module")
def epoch(remote) -> list[np.ndarray]:
    """The local loader's whole epoch: what every remote stream must equal, batch for batch."""
    return [b["input_ids"].copy() for b in Loader(remote[0], **STREAM)]


def _loader(remote, cache: Path, limit: int = LIMIT) -> Loader:
    return Loader(remote[1], cache_dir=cache, cache_limit=limit, storage_options=remote[2], **STREAM)


def _stream_until_error(remote, cache: Path, epoch) -> tuple[Loader | None, int, ShardkitError]:
    """Stream until the cache fails; every batch delivered before the error must be the local one."""
    loader, n = None, 0
    with pytest.raises(ShardkitError) as err:
        loader = _loader(remote, cache)
        for batch in loader:
            assert np.array_equal(batch["input_ids"], epoch[n]), f"batch {n} differs from the local stream"
            n += 1
    assert n < len(epoch)
    return loader, n, err.value


def _assert_full_error(e: BaseException, cache: Path) -> str:
    """One CacheError that names the cache, says the file system is full and what to do."""
    assert isinstance(e, CacheError), f"{type(e).__name__}: {e}"
    msg = str(e)
    assert "\n" not in msg and str(cache) in msg, msg
    assert "no space left on device" in msg.lower() and "file system is full" in msg, msg
    assert "free space on that file system" in msg and "then run again" in msg, msg
    return msg


def _assert_cache_sound(local: Path, cache: Path) -> int:
    """Reopened from disk: every block the state marks PRESENT holds exactly the source bytes, nothing is
    left half-written (RESERVED), and ABSENT blocks allocate nothing. Returns the PRESENT count."""
    dirs = [p for p in cache.iterdir() if p.is_dir()]
    if not dirs or not (dirs[0] / "state").exists():
        return 0
    ds_dir, = dirs
    raw = (ds_dir / "state").read_bytes()
    n = int.from_bytes(raw[16:24], "little")
    state = np.frombuffer(raw, dtype=np.uint8, count=n, offset=64)
    assert set(np.unique(state).tolist()) <= {ABSENT, PRESENT}, f"entries left mid-write: {np.bincount(state)}"
    meta = [f for f in ds_dir.iterdir() if f.name != "locks" and not f.name.endswith(".bin")]
    assert not [f.name for f in meta if f.name.endswith(".tmp")], "temp files left in the cache"
    charged = int.from_bytes(raw[32:40], "little")  # what the cache accounts for its metadata files
    assert charged == sum(int(charge_of(f.stat().st_size)) for f in meta), "a failed write left its charge"
    gid = present = 0
    for e in json.loads((ds_dir / "manifest.json").read_bytes())["shards"]:
        src = (local / f"{e['name']}.bin").read_bytes()
        with open(ds_dir / f"{e['name']}.bin", "rb") as f:
            got = f.read()
            for i in range(-(-e["bin_bytes"] // BLOCK)):
                lo, hi = i * BLOCK, min((i + 1) * BLOCK, e["bin_bytes"])
                if state[gid] == PRESENT:
                    assert got[lo:hi] == src[lo:hi], f"{e['name']} block {i} is PRESENT but holds other bytes"
                    present += 1
                else:  # a torn write is punched out, not left allocated under an ABSENT entry (blocks of
                    try:  # 16 KiB share no page)
                        data_at = os.lseek(f.fileno(), lo, os.SEEK_DATA)
                    except OSError:  # ENXIO: no data after lo
                        data_at = hi
                    assert data_at >= hi, f"{e['name']} block {i} is ABSENT but holds data at byte {data_at}"
                gid += 1
    return present


def _same(loader: Loader, want: list[np.ndarray], start: int = 0, n: int | None = None) -> None:
    """The loader delivers `want[start:]` (its first `n` batches, or to the end of the epoch)."""
    want = want[start:start + n] if n else want[start:]
    got = [b["input_ids"].copy() for _, b in zip(range(len(want)), loader)]
    assert len(got) == len(want)
    assert all(np.array_equal(x, y) for x, y in zip(got, want))


def _free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("free", ["remount", "filler"])
def test_a_full_cache_file_system_is_a_clear_error_and_streams_again_once_freed(remote, epoch, tmp_path, free):
    """remount: the failed dataset is closed, its cache checked, and a new loader opens it again;
    filler: the failed loader is left open (as a crashed trainer leaves it) and simply iterated again."""
    local = remote[0]
    size = "1m" if free == "remount" else "8m"
    with tmpfs(tmp_path / "fs", size) as fs:
        filler = fs / "filler"
        if free == "filler":  # leave 600 KiB of 8 MiB
            filler.write_bytes(b"\1" * ((8 << 20) - (600 << 10)))
        cache = fs / "cache"
        loader, n, err = _stream_until_error(remote, cache, epoch)
        assert loader is not None and n > 0, f"failed before the first batch: {err}"
        assert "lower cache_limit to at most" in _assert_full_error(err, cache)
        state = loader.state_dict()  # the checkpoint a trainer resumes from
        if free == "remount":
            loader.dataset.close()
            assert _assert_cache_sound(local, cache) > 0
            resize_tmpfs(fs, "16m")
        else:
            filler.unlink()
            deadline = time.monotonic() + 10  # tmpfs frees an unlinked file's pages when its last user is gone
            while _free_bytes(fs) < (4 << 20) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _free_bytes(fs) >= (4 << 20), f"{_free_bytes(fs):,} bytes free after the filler was removed"
            _same(loader, epoch, start=n)  # the failed read is retried, the rest of the epoch follows
            loader.dataset.close()
        again = _loader(remote, cache)  # the same configuration, the same cache_dir: from the start
        try:
            _same(again, epoch)
        finally:
            again.dataset.close()
        resumed = _loader(remote, cache)
        try:
            resumed.load_state_dict(state)
            _same(resumed, epoch, start=n)
        finally:
            resumed.dataset.close()
        blocks = sum(-(-f.stat().st_size // BLOCK) for f in local.glob("*.bin"))
        assert _assert_cache_sound(local, cache) == blocks  # all of it fits now, and all of it was read


def test_the_advice_works_a_lower_cache_limit_streams_on_the_still_full_file_system(remote, epoch, tmp_path):
    """What the error says to do: a cache_limit below the file system's size evicts instead of failing."""
    with tmpfs(tmp_path / "fs", "1m") as fs:
        cache = fs / "cache"
        loader, _, err = _stream_until_error(remote, cache, epoch)
        assert "lower cache_limit to at most" in _assert_full_error(err, cache)
        loader.dataset.close()
        lower = _loader(remote, cache, limit=768 << 10)
        try:
            _same(lower, epoch, n=300)
        finally:
            lower.dataset.close()
        _assert_cache_sound(remote[0], cache)


@pytest.mark.parametrize("room", [0, 8 << 10, 12 << 10],
                         ids=["no-room-for-the-manifest", "no-room-for-the-state", "no-room-for-a-sidecar"])
def test_a_cache_file_system_full_before_the_first_open(remote, epoch, tmp_path, room):
    """Full before anything is cached: opening the dataset itself fails with the same error, then works."""
    with tmpfs(tmp_path / "fs", "8m") as fs:
        filler = fs / "filler"
        filler.write_bytes(b"\1" * ((8 << 20) - room))
        cache = fs / "cache"
        loader, n, err = _stream_until_error(remote, cache, epoch)
        assert n == 0
        _assert_full_error(err, cache)
        if loader is not None:
            loader.dataset.close()
        _assert_cache_sound(remote[0], cache)
        assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")], "temp files left on a full disk"
        filler.unlink()
        again = _loader(remote, cache)
        try:
            _same(again, epoch, n=300)
        finally:
            again.dataset.close()
        _assert_cache_sound(remote[0], cache)
