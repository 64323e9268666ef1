"""Concurrency of the remote block cache: 8 processes stream one S3 dataset through one cache directory.

The same 8 worker processes (imported once, each taking jobs on stdin) stream a dataset served by a moto S3
server, 4 with one seed and 4 with others, all starting at the same moment: on a cache that holds the data
every block crosses the network once in all; on a cache smaller than the data, sized by the documented rule
(two shuffle groups per distinct reader position), its allocated size sampled from this process never
exceeds the limit; with one of them SIGKILLed mid-stream, the other 7 finish and a fresh process reads the
whole epoch from what is left. Every process's batches must equal the local loader's for its seed (sha256
of every batch's input_ids), and every block the cache marks PRESENT must hold the source's bytes.

The small cache found a bug (about one run in five): a download thread that needed a shard's checksum
sidecar while other readers' pins filled the cache failed at once ("no room for 12,288 bytes of metadata")
instead of waiting for room like a block; `test_a_download_that_needs_a_sidecar_...` reproduces it
deterministically with two processes, the tests after it the same on the reader's thread and a race of a
failed prefetch with a read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("s3fs", reason="remote tests need the test extra: pip install -e '.[test]'")
pytest.importorskip("moto.server", reason="remote tests need moto[server] (the test extra)")

from support.faulty_proxy import Action, FaultyProxy, Rule  # noqa: E402
from support.remote_cache import cache_state, set_aws_test_env, verify_present  # noqa: E402
from support.s3server import MotoServer, s3_storage_options  # noqa: E402

from shardkit.loader import Loader  # noqa: E402
from shardkit.remote.blocks import RESERVED, charge_of  # noqa: E402
from shardkit.remote.cache import CacheError, allocated_bytes, ofd_lock  # noqa: E402
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset  # noqa: E402
from shardkit.remote.prefetch import GROUP, PinSet  # noqa: E402
from shardkit.remote.retry import RetryPolicy  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402

BLOCK = 16 << 10
STREAM = {"seq_len": 127, "batch_schedule": 8, "block_samples": 32, "group_blocks": 2, "shuffle": "block",
          "max_epochs": 1}
SEEDS = [0, 0, 0, 0, 1, 2, 3, 4]
NO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}, "skip_instance_cache": True}
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120

# one job per stdin line: open the dataset, stream one epoch, answer with every batch's digest and the stats
WORKER = r"""
import hashlib, json, sys, traceback
from shardkit.loader import Loader
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset
from shardkit.remote.retry import RetryPolicy
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    a = json.loads(line)
    ds = None
    try:
        if a["entry"] == "loader":  # the URL straight to the Loader, as a user writes it
            ld = Loader(a["url"], cache_dir=a["cache"], cache_limit=a["limit"], storage_options=a["so"],
                        seed=a["seed"], **a["stream"])
            ds = ld.dataset
        else:
            ds = open_remote_dataset(a["url"], RemoteConfig(
                cache_dir=a["cache"], cache_limit=a["limit"], storage_options=a["so"], stall_timeout=60,
                retry=RetryPolicy(initial_delay=0.01, max_delay=0.05)))
            ld = Loader(ds, seed=a["seed"], **a["stream"])
        digests = []
        for i, b in enumerate(ld):
            digests.append(hashlib.sha256(b["input_ids"].tobytes()).hexdigest())
            if i == a["mark"]:
                print(json.dumps({"mark": i}), flush=True)
        stats = ds.stats()
        ds.close()  # before answering: the test then looks at a cache nobody is writing to
        ds = None
        print(json.dumps({"digests": digests, "stats": stats}), flush=True)
    except BaseException:
        print(json.dumps({"error": traceback.format_exc()}), flush=True)
    finally:
        if ds is not None:  # its pins go too: a failed process must not hold the others up
            ds.close()
"""


class Worker:
    """One worker process; its stdout lines arrive on a queue (read by a thread, so waits can time out)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put("")

    def send(self, job: dict) -> None:
        self.proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def get(self, key: str, timeout: float = TIMEOUT) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"worker {self.proc.pid}: no answer in {timeout} s (a hang?)\n"
                                 f"{self.log.read_text()[-3000:]}") from None
        assert line, f"worker {self.proc.pid} died ({self.proc.poll()}):\n{self.log.read_text()[-3000:]}"
        msg = json.loads(line)
        assert "error" not in msg, f"worker {self.proc.pid} failed:\n{msg['error']}"
        assert key in msg, msg
        return msg

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[dict]:
    """A dataset of ~2.5 MB (~160 blocks of 16 KiB), locally and on S3 (directly and through a proxy)."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=int(rng.integers(20, 2000)), dtype=np.uint16) for _ in range(1200)]
    base = tmp_path_factory.mktemp("cache-concurrency")
    local = base / "ds"
    write_dataset(local, docs, max_tokens_per_shard=70_000, checksum_block_size=BLOCK)
    env = pytest.MonkeyPatch()
    set_aws_test_env(env)
    server = MotoServer.start(log_dir=str(base))
    proxy = FaultyProxy.start(server.port)
    try:
        bucket = server.create_bucket()
        client = server.client()
        for f in sorted(local.iterdir()):
            client.put_object(Bucket=bucket, Key=f"ds/{f.name}", Body=f.read_bytes())
        bins = sorted(local.glob("*.bin"))
        yield {"local": local, "url": f"s3://{bucket}/ds", "proxy": proxy, "base": base,
               "direct": s3_storage_options(server.endpoint_url, **NO_RETRIES),
               "proxied": s3_storage_options(proxy.endpoint_url, **NO_RETRIES),
               "bytes": sum(f.stat().st_size for f in bins),
               "blocks": sum(-(-f.stat().st_size // BLOCK) for f in bins)}
    finally:
        proxy.stop()
        server.stop()
        env.undo()


@pytest.fixture(scope="module")
def expected(remote) -> dict[int, list[str]]:
    """The local loader's batch digests for every seed: what each remote stream must equal."""
    return {s: [hashlib.sha256(b["input_ids"].tobytes()).hexdigest() for b in Loader(remote["local"], seed=s,
                                                                                     **STREAM)]
            for s in set(SEEDS)}


@pytest.fixture(scope="module")
def pool(remote) -> Iterator[list[Worker]]:
    """The 8 worker processes, imported and waiting (a killed one is replaced by the test that kills it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [Worker(env, remote["base"] / f"worker{i}.log") for i in range(len(SEEDS))]
    for w in workers:
        w.get("ready")
    yield workers
    for w in workers:
        w.stop()


def _run(pool: list[Worker], remote: dict, cache: Path, limit: int, so: dict, *, mix: bool = False,
         mark: int = -1, skip: int | None = None) -> list[dict | None]:
    """Start the same job (its seed aside) on every worker at once; None for the one in `skip`."""
    for i, (w, seed) in enumerate(zip(pool, SEEDS)):
        w.send({"url": remote["url"], "cache": str(cache), "limit": limit, "so": so, "seed": seed,
                "stream": STREAM, "mark": mark if i == skip else -1,
                "entry": "loader" if mix and i % 2 else "open"})
    return [None if i == skip else w for i, w in enumerate(pool)]


def _check(results: list[dict | None], expected: dict[int, list[str]]) -> int:
    """Every process's batches equal the local loader's for its seed; returns how many were compared."""
    n = 0
    for i, (r, seed) in enumerate(zip(results, SEEDS)):
        if r is None:
            continue
        got, want = r["digests"], expected[seed]
        assert len(got) == len(want), f"process {i} (seed {seed}): {len(got)} batches, the local loader {len(want)}"
        bad = [k for k, (a, b) in enumerate(zip(got, want)) if a != b]
        assert not bad, f"process {i} (seed {seed}): batches {bad[:10]} differ from the local loader's"
        n += len(got)
    return n


def _limit(remote: dict) -> int:
    """The documented floor for 8 readers: two shuffle groups per distinct reader position, a group being
    `group_blocks` shuffle blocks of 8 KB that touch at most 2 cache blocks each (3 or more only at a shard
    boundary or in the tail group, rare: the floor a reader really pins is one read), plus the metadata."""
    per_group = STREAM["group_blocks"] * 2
    meta = sum(int(charge_of(f.stat().st_size)) for f in remote["local"].iterdir() if f.suffix != ".bin")
    return len(SEEDS) * 2 * per_group * int(charge_of(BLOCK)) + meta + int(charge_of(17 * remote["blocks"] + 64))


def _verify_present(ds_dir: Path) -> int:
    return verify_present(ds_dir, BLOCK)


def test_eight_processes_share_one_cache_and_download_every_block_once(pool, remote, expected, tmp_path):
    proxy = remote["proxy"]
    proxy.clear()
    # slow range reads (20 ms each) keep several processes after the same blocks at the same time
    proxy.add(Rule(Action.DELAY, method="GET", path=r"\.bin(\?|$)", times=None, delay=0.02))
    cache = tmp_path / "cache"
    started = time.monotonic()
    workers = _run(pool, remote, cache, 64 << 20, remote["proxied"], mix=True)
    results = [w.get("digests") for w in workers if w is not None]
    took = time.monotonic() - started
    compared = _check(results, expected)
    gets = proxy.count(method="GET", path=r"\.bin(\?|$)")
    downloaded = sum(r["stats"]["blocks_downloaded"] for r in results)
    nbytes = sum(r["stats"]["bytes_downloaded"] for r in results)
    verified = sum(r["stats"]["blocks_verified"] for r in results)
    proxy.clear()
    print(f"\n8 processes x 1 cache ({took:.1f} s): {compared} batches compared; {gets} .bin GETs, "
          f"{downloaded} blocks / {nbytes:,} bytes downloaded in all, for {remote['blocks']} blocks / "
          f"{remote['bytes']:,} bytes of data; {verified} cached blocks verified by the other processes")
    assert gets == downloaded == remote["blocks"], "a block was downloaded more than once"
    assert nbytes == remote["bytes"]
    assert verified >= (len(SEEDS) - 1) * remote["blocks"]  # the others checked every block they did not fetch
    assert _verify_present(next(p for p in cache.iterdir() if p.is_dir())) == remote["blocks"]


def _state(ds_dir: Path) -> np.ndarray:
    return cache_state(ds_dir)


def _reserved(ds_dir: Path) -> tuple[int, int]:
    """RESERVED blocks, and how many of them nobody live is downloading (their download lock is free while
    they stay RESERVED: every transition out of RESERVED happens under that lock, so they are a dead
    process's)."""
    state = _state(ds_dir)
    ids = np.flatnonzero(state == RESERVED).tolist()
    fd = os.open(ds_dir / "locks", os.O_RDWR)
    stale = 0
    try:
        for g in ids:
            if ofd_lock(fd, fcntl.F_WRLCK, 2 * g + 1, wait=False):
                stale += int(_state(ds_dir)[g] == RESERVED)
                ofd_lock(fd, fcntl.F_UNLCK, 2 * g + 1, wait=False)
    finally:
        os.close(fd)
    return len(ids), stale


def _charged(cache: Path) -> int:
    """What the cache's own accounting charges (every dataset's metadata and non-ABSENT blocks), read from
    the state files under the cache's accounting lock (a consistent snapshot): the number the limit is
    enforced on, an upper bound of what is allocated."""
    try:
        lock = os.open(cache / ".lock", os.O_RDWR)
    except FileNotFoundError:
        return 0
    total = 0
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        for d in cache.iterdir():
            if not (d / "state").is_file():
                continue
            raw = (d / "state").read_bytes()
            n = int.from_bytes(raw[16:24], "little")
            state = np.frombuffer(raw, dtype=np.uint8, count=n, offset=64)
            charge = np.frombuffer(raw, dtype=np.int64, count=n, offset=64 + (n + 7) // 8 * 8 + 8 * n)
            total += int.from_bytes(raw[32:40], "little") + int(charge[state != 0].sum())
    finally:
        os.close(lock)  # drops the flock
    return total


def _sampling(cache: Path) -> tuple[list[int], threading.Event, threading.Thread]:
    """A thread of this process sampling every 2 ms the cache's allocated size (st_blocks) and its charge:
    [peak allocated, peak charged, samples]."""
    peak, stop = [0, 0, 0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], allocated_bytes(cache))
            peak[1] = max(peak[1], _charged(cache))
            peak[2] += 1
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    return peak, stop, t


def test_eight_processes_on_a_cache_smaller_than_the_data_stay_correct_and_bounded(pool, remote, expected,
                                                                                  tmp_path):
    cache, limit = tmp_path / "cache", _limit(remote)
    data_charge = remote["blocks"] * int(charge_of(BLOCK))
    assert limit < remote["bytes"] < data_charge, (limit, remote["bytes"])  # the data cannot all stay
    peak, stop, sampler = _sampling(cache)
    started = time.monotonic()
    try:
        workers = _run(pool, remote, cache, limit, remote["direct"])
        results = [w.get("digests") for w in workers if w is not None]
    finally:
        stop.set()
        sampler.join()
    took = time.monotonic() - started
    compared = _check(results, expected)
    nbytes = sum(r["stats"]["bytes_downloaded"] for r in results)
    dropped = sum(r["stats"]["window_pins_dropped"] for r in results)
    print(f"\n8 processes x 1 small cache ({took:.1f} s): {compared} batches compared; peak allocated "
          f"{peak[0]:,} bytes of limit {limit:,} ({peak[0] / limit:.3f}x; charged by the accounting "
          f"{peak[1] / limit:.3f}x; {peak[2]} samples; data {remote['bytes']:,} bytes); {nbytes:,} bytes "
          f"downloaded in all ({nbytes / remote['bytes']:.1f}x the data), {dropped} prefetch pins given up for room")
    assert 0 < peak[0] <= limit and peak[1] <= limit
    assert nbytes > remote["bytes"]  # evicted blocks were fetched again: the cache really was too small
    ds_dir = next(p for p in cache.iterdir() if p.is_dir())
    assert not (_state(ds_dir) == RESERVED).any(), "a finished run left a RESERVED entry"
    assert _verify_present(ds_dir) > 0


def test_a_process_killed_mid_stream_leaves_the_others_and_the_cache_correct(pool, remote, expected, tmp_path):
    proxy = remote["proxy"]
    proxy.clear()
    proxy.add(Rule(Action.DELAY, method="GET", path=r"\.bin(\?|$)", times=None, delay=0.01))
    cache, limit, victim = tmp_path / "cache", _limit(remote), 5
    peak, stop, sampler = _sampling(cache)
    try:
        workers = _run(pool, remote, cache, limit, remote["proxied"], mark=len(expected[SEEDS[victim]]) // 3,
                       skip=victim)
        pool[victim].get("mark")  # a third into its epoch, with downloads in flight (every GET takes 10 ms)
        ds_dir = next(p for p in cache.iterdir() if p.is_dir())
        pool[victim].proc.send_signal(signal.SIGKILL)
        pool[victim].proc.wait()
        reserved, stale = _reserved(ds_dir)
        results = [w.get("digests") if w is not None else None for w in workers]
    finally:
        stop.set()
        sampler.join()
        proxy.clear()
        pool[victim].stop()
        pool[victim] = Worker({**os.environ, "PYTHONPATH": str(ROOT)}, remote["base"] / f"worker{victim}b.log")
    compared = _check(results, expected)
    # a fresh process afterwards: the whole epoch from the same cache (the dead process's entries cleared)
    pool[victim].get("ready")
    pool[victim].send({"url": remote["url"], "cache": str(cache), "limit": limit, "so": remote["direct"],
                       "seed": SEEDS[victim], "stream": STREAM, "mark": -1, "entry": "open"})
    fresh = pool[victim].get("digests")
    compared += _check([fresh if i == victim else None for i in range(len(SEEDS))], expected)
    assert not (_state(ds_dir) == RESERVED).any(), "the dead process's entries were not cleared"
    present = _verify_present(ds_dir)
    print(f"\n8 processes, process {victim} SIGKILLed a third into its epoch ({reserved} blocks RESERVED just "
          f"after, {stale} of them the dead process's): 7 + 1 fresh processes, {compared} batches compared; {present} PRESENT blocks match the "
          f"source; peak allocated {peak[0]:,} of limit {limit:,} (charged {peak[1]:,})")
    assert present > 0
    assert 0 < peak[0] <= limit


HOLDER = r"""
import json, sys
import numpy as np
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset
from shardkit.remote.prefetch import GROUP, PinSet
a = json.loads(sys.argv[1])
ds = open_remote_dataset(a["url"], RemoteConfig(cache_dir=a["cache"], cache_limit=16 << 20, storage_options=a["so"]))
gids = np.arange(a["n"], dtype=np.int64)  # the first blocks of shard 0, pinned (and fetched) as a prefetch
pins = PinSet(ds.fetcher, GROUP)
pins.set(gids)
while not ds.fetcher.ready[gids].all():
    ds.fetcher.ensure(gids, PinSet(ds.fetcher, None))
print(json.dumps({"used": ds.stats()["cache_used"]}), flush=True)
sys.stdin.readline()
ds.close()
"""


@contextlib.contextmanager
def _holder(remote: dict, cache: Path) -> Iterator[tuple[int, Callable[[], None]]]:
    """Another process pinning 6 blocks of shard 0 (sidecar 0 fetched, shard 1's not): yields the cache's
    charge then, and `release()`, which makes it close the dataset (and exit)."""
    arg = json.dumps({"url": remote["url"], "cache": str(cache), "so": remote["direct"], "n": 6})
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, arg], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    done = threading.Lock()

    def release() -> None:
        with done:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.stdin.write("\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                proc.communicate(timeout=30)

    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, proc.stderr.read()  # type: ignore[union-attr]
        yield json.loads(line)["used"], release
    finally:
        release()


def _open(remote: dict, cache: Path, limit: int):
    return open_remote_dataset(remote["url"], RemoteConfig(
        cache_dir=cache, cache_limit=limit, storage_options=remote["direct"], stall_timeout=30,
        retry=RetryPolicy(initial_delay=0.01, max_delay=0.05)))


def _call(fn: Callable[..., object], *args: object) -> BaseException | None:
    try:
        fn(*args)
    except BaseException as e:
        return e
    return None


def test_a_download_that_needs_a_sidecar_while_other_processes_pin_the_cache_waits_for_room(remote, tmp_path):
    """Another process pins blocks of shard 0 until only one block's room is left; this one reads a block of
    shard 1, whose checksum sidecar is not cached yet. Downloading the block needs room for the block and
    its sidecar: it waits for the other process to move on, as for a block that found the cache full (it
    was a CacheError "no room for 12,288 bytes of metadata" at once, in the 8-process run above too)."""
    cache = tmp_path / "cache"
    with _holder(remote, cache) as (used, release):
        ds = _open(remote, cache, used + int(charge_of(BLOCK)) + 4096)  # room for one block, not block + sidecar
        g = int(ds.cache.blocks.base[1])
        got: list[BaseException | None] = []
        reader = threading.Thread(target=lambda: got.append(_call(ds.fetcher.ensure, np.array([g]),
                                                                  PinSet(ds.fetcher, None))))
        reader.start()
        reader.join(1.0)
        assert not got or got[0] is None, f"the read failed while the cache was full: {got[0]!r}"
        waited = reader.is_alive()
        release()
        reader.join(30)
    assert got == [None], f"the read failed: {got!r}"
    s, lo, hi = ds.cache.blocks.byte_range(g)
    name = ds.manifest.shards[s].bin_name
    assert os.pread(ds.cache.data_fd(s), hi - lo, lo) == (remote["local"] / name).read_bytes()[lo:hi]
    print(f"\nthe read of shard 1 {'waited for' if waited else 'did not need to wait for'} the other process's pins")
    assert waited
    ds.close()


def test_a_prefetch_that_failed_before_a_read_asked_is_fetched_again_not_raised(remote, tmp_path):
    """A prefetch that began before a read asked for its block and failed after it (its write hit a disk that
    was full until just then) is not that read's verdict: the read fetches the block again. It was the read's
    error now and then in the full-disk test (test_cache_full_disk.py), whose read starts right after the
    disk is freed. An attempt begun after the read asked is its verdict: raised, not retried again."""
    ds = _open(remote, tmp_path / "cache", 64 << 20)
    f = ds.fetcher
    real, begun, go, calls = f._download, threading.Event(), threading.Event(), []

    def download(gid: int) -> bytes:  # the real download, except that the first one is held, then fails
        calls.append(gid)
        if len(calls) == 1:
            begun.set()
            go.wait(30)
            raise CacheError("the cache's file system is full (an attempt begun before the read asked)")
        if gid == bad:
            raise CacheError("the cache's file system is full (the read's own attempt)")
        return real(gid)

    f._download = download
    g, bad = int(ds.cache.blocks.base[1]) + 1, int(ds.cache.blocks.base[2])
    prefetch = PinSet(f, GROUP)
    prefetch.set(np.array([g]))
    assert begun.wait(30)
    got: list[BaseException | None] = []
    reader = threading.Thread(target=lambda: got.append(_call(f.ensure, np.array([g]), PinSet(f, None))))
    reader.start()
    deadline = time.monotonic() + 30
    while f.metrics["waits"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the read is waiting for the block, which the held prefetch is fetching
    go.set()
    reader.join(30)
    assert got == [None], f"the read failed with the earlier attempt's error: {got!r}"
    assert calls == [g, g]
    s, lo, hi = ds.cache.blocks.byte_range(g)
    assert os.pread(ds.cache.data_fd(s), hi - lo, lo) == (
        remote["local"] / ds.manifest.shards[s].bin_name).read_bytes()[lo:hi]
    with pytest.raises(CacheError, match="the read's own attempt"):
        f.ensure(np.array([bad]), PinSet(f, None))
    assert calls == [g, g, bad]
    ds.close()


def test_a_shard_index_needed_while_other_processes_pin_the_cache_waits_for_room(remote, tmp_path):
    """The same on the reader's own thread: a shard's index (fetched whole when the loader first needs a
    shard's documents: fields with document boundaries) while the cache has no room for it for a second. It
    waits (Fetcher.with_room, outside the shard's metadata lock that download threads need); it was a
    CacheError "no room for ... bytes of metadata" at once."""
    cache = tmp_path / "cache"
    with _holder(remote, cache) as (used, release):
        ds = _open(remote, cache, used + 4096)  # no room for shard 1's sidecar or index until the holder goes
        timer = threading.Timer(1.0, release)
        started = time.monotonic()
        timer.start()
        try:
            lengths = ds.shards[1].index.lengths
        finally:
            timer.join()
        waited = time.monotonic() - started
    assert int(lengths.sum()) == ds.manifest.shards[1].num_tokens
    assert waited >= 0.9, f"the index was written after {waited:.2f} s, before the other process let go"
    ds.close()


def test_a_shard_index_that_can_never_fit_beside_the_metadata_is_a_clear_error_at_once(remote, tmp_path):
    """Waiting cannot help where the metadata files alone leave no room: the error says so at once, with the
    cache_limit that would do."""
    cache = tmp_path / "cache"
    ds = _open(remote, cache, 64 << 20)
    meta = ds.cache.meta_bytes
    ds.close()
    ds = _open(remote, cache, meta + 4096)  # the sidecar of shard 1 alone is 12 KiB
    started = time.monotonic()
    with pytest.raises(CacheError, match=r"does not fit in cache_limit .* raise cache_limit to at least"):
        ds.shards[1].index.lengths  # noqa: B018
    assert time.monotonic() - started < 5
    ds.close()
