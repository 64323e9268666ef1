"""Streaming a dataset from S3 (a moto server, optionally behind a fault-injecting proxy) through the cache.

The remote stream must equal the local stream batch for batch; the cache must stay under its limit (measured
in st_blocks from another thread), be shared by processes without duplicate downloads, survive a SIGKILL
mid-download, refetch damaged entries, retry transient faults and name URL and block in permanent ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support.faulty_proxy import Action, Rule
from support.remote_cache import verify_present

from shardkit.errors import IntegrityError, RemoteError
from shardkit.loader import Loader
from shardkit.remote.blocks import RESERVED
from shardkit.remote.cache import allocated_bytes
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset
from shardkit.remote.retry import RetryPolicy
from shardkit.writer import write_dataset

BLOCK = 16 << 10
NO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}, "skip_instance_cache": True}
FAST = RetryPolicy(max_attempts=6, initial_delay=0.01, max_delay=0.05, deadline=30)
STREAM = {"seq_len": 127, "batch_schedule": 8, "seed": 9, "block_samples": 32, "group_blocks": 2}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=int(rng.integers(20, 2000)), dtype=np.uint16) for _ in range(300)]
    path = tmp_path_factory.mktemp("remote-loader") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=70_000, checksum_block_size=BLOCK)
    return path


def _upload(endpoint, local: Path, prefix: str = "ds", damage: str | None = None) -> str:
    """Put the dataset under `prefix` (directly on the server); `damage` names a file to flip a byte in."""
    client = endpoint.server.client()
    for f in sorted(local.iterdir()):
        body = bytearray(f.read_bytes())
        if f.name == damage:
            body[len(body) // 2] ^= 0x10
        client.put_object(Bucket=endpoint.bucket, Key=f"{prefix}/{f.name}", Body=bytes(body))
    return endpoint.url(prefix)


def _open(endpoint, url, cache, limit=16 << 20, **kw):
    config = RemoteConfig(cache_dir=cache, cache_limit=limit, storage_options=endpoint.storage_options(**NO_RETRIES),
                          retry=FAST, **kw)
    return open_remote_dataset(url, config)


def _batches(data, shuffle="block", n=None, start=0, **kw):
    ld = Loader(data, shuffle=shuffle, **STREAM, **kw)
    if start:
        ld.load_state_dict(ld.state_at(start))
    out = []
    for b in ld:
        out.append(b["input_ids"].copy())
        if n is not None and len(out) == n:
            break
    return out


def _epoch(data, shuffle="block", **kw):
    """One whole epoch (the loader's budget) — every block of the dataset is read."""
    return _batches(data, shuffle, max_epochs=1, **kw)


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def _bin_gets(proxy) -> int:
    return proxy.count(method="GET", path=r"\.bin(\?|$)")


def _verify_present(ds_dir: Path) -> int:
    return verify_present(ds_dir, BLOCK)


@pytest.mark.parametrize("shuffle", ["block", "full"])
def test_remote_stream_equals_local_stream_across_resume(s3, local, tmp_path, shuffle):
    url = _upload(s3, local)
    limit = 48 * (BLOCK + 12288) if shuffle == "block" else 8 << 20  # block: smaller than the data, evicting
    with _open(s3, url, tmp_path / "cache", limit) as ds:
        assert _same(_batches(ds, shuffle, n=80), _batches(local, shuffle, n=80))
        assert _same(_batches(ds, shuffle, n=40, start=57), _batches(local, shuffle, n=40, start=57))
        assert ds.stats()["blocks_downloaded"] > 0
    # the URL straight to the Loader, as a user writes it
    ld = Loader(url, shuffle=shuffle, cache_dir=tmp_path / "cache", cache_limit=limit,
                storage_options=s3.storage_options(), **STREAM)
    assert np.array_equal(next(iter(ld))["input_ids"], _batches(local, shuffle, n=1)[0])
    ld.dataset.close()


@pytest.mark.parametrize("ahead", [0, 1, 3])
def test_prefetch_pins_exactly_the_groups_ahead(s3, local, tmp_path, ahead):
    """Entering a group pins (and queues) its blocks and those of the next `lookahead_groups` groups, in
    delivery order across the epoch end, and nothing else."""
    url = _upload(s3, local)
    with _open(s3, url, tmp_path / "cache", 64 << 20, lookahead_groups=ahead) as ds:
        ld = Loader(ds, shuffle="block", **STREAM)
        next(iter(ld))
        order, window = ld.order, next(iter(ld.engine.hints.values())).remote
        assert order.num_groups >= 2
        groups = [order.group_after(0, 0, k) for k in range(ahead + 1)]
        want = np.unique(window.gids_of(np.concatenate([order.blocks_of_group(*g) for g in groups])))
        assert order.num_groups > ahead + 1
        assert np.array_equal(window._window.gids, want)  # the group window's own pins
        assert set(want.tolist()) <= set(np.flatnonzero(ds.fetcher.refs > 0).tolist())


def test_cache_never_exceeds_its_limit_measured_in_st_blocks(s3, local, tmp_path):
    url = _upload(s3, local)
    cache = tmp_path / "cache"
    limit = 20 * (BLOCK + 12288)  # about half the data
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], allocated_bytes(cache))
            time.sleep(0.0005)  # ~1,000 samples a second, leaving the CPU to the loader

    sampler = threading.Thread(target=sample, daemon=True)
    with _open(s3, url, cache, limit) as ds:
        sampler.start()
        try:
            got = _batches(ds, "block", max_epochs=2)
        finally:
            stop.set()
            sampler.join()
        assert _same(got, _batches(local, "block", max_epochs=2))
        downloaded = ds.stats()["bytes_downloaded"]
    assert downloaded > sum(f.stat().st_size for f in local.glob("*.bin"))  # evicted blocks were fetched again
    assert 0 < peak[0] <= limit


_CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
from shardkit.loader import Loader
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset
from shardkit.remote.retry import RetryPolicy
a = json.loads(sys.argv[1])
go = Path(a["go"])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
cfg = RemoteConfig(cache_dir=a["cache"], cache_limit=a["limit"], storage_options=a["so"],
                   retry=RetryPolicy(initial_delay=0.01, max_delay=0.05))
ds = open_remote_dataset(a["url"], cfg)
h = hashlib.sha256()
for i, b in enumerate(Loader(ds, shuffle="block", max_epochs=1, **a["stream"])):
    h.update(b["input_ids"].tobytes())
    if i == 3:
        print("started", flush=True)
print(json.dumps({"digest": h.hexdigest(), "stats": ds.stats()}), flush=True)
"""


def _child(endpoint, url, cache, limit, go):
    arg = json.dumps({"url": url, "cache": str(cache), "limit": limit, "go": str(go), "stream": STREAM,
                      "so": endpoint.storage_options(**NO_RETRIES)})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", _CHILD, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)


def _digest(batches) -> str:
    h = hashlib.sha256()
    for b in batches:
        h.update(b.tobytes())
    return h.hexdigest()


def test_two_processes_share_one_cache_without_duplicate_downloads(faulty_s3, local, tmp_path):
    url = _upload(faulty_s3, local)
    cache, go = tmp_path / "cache", tmp_path / "go"
    # slow range reads (30 ms each) keep both processes downloading at the same time
    faulty_s3.proxy.add(Rule(Action.DELAY, method="GET", path=r"\.bin(\?|$)", times=None, delay=0.03))
    procs = [_child(faulty_s3, url, cache, 16 << 20, go) for _ in range(2)]
    for p in procs:  # both have imported everything and wait at the same line
        assert p.stdout.readline().strip() == "ready", p.stderr.read()[-3000:]
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert {r["digest"] for r in results} == {_digest(_epoch(local))}
    blocks = sum(-(-f.stat().st_size // BLOCK) for f in local.glob("*.bin"))
    assert sum(r["stats"]["blocks_downloaded"] for r in results) == blocks
    assert _bin_gets(faulty_s3.proxy) == blocks  # each block crossed the network once
    assert _verify_present(next(p for p in cache.iterdir() if p.is_dir())) == blocks  # no torn file


def test_two_processes_on_a_cache_smaller_than_the_data_stay_correct_and_bounded(s3, local, tmp_path):
    url = _upload(s3, local)
    cache, go = tmp_path / "cache", tmp_path / "go"
    limit = 24 * (BLOCK + 12288)
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], allocated_bytes(cache))
            time.sleep(0.0005)  # ~1,000 samples a second, leaving the CPU to the loader

    procs = [_child(s3, url, cache, limit, go) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()[-3000:]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    go.touch()
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        stop.set()
        sampler.join()
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert {json.loads(out.strip().splitlines()[-1])["digest"] for out, _ in outs} == {_digest(_epoch(local))}
    assert 0 < peak[0] <= limit


def test_sigkill_mid_download_leaves_no_entry_that_is_served(faulty_s3, local, tmp_path):
    url = _upload(faulty_s3, local)
    cache, go = tmp_path / "cache", tmp_path / "go"
    proxy = faulty_s3.proxy
    proxy.add(Rule(Action.DELAY, method="GET", path=r"\.bin(\?|$)", after=6, times=None, delay=60))
    go.touch()
    child = _child(faulty_s3, url, cache, 16 << 20, go)
    try:
        assert proxy.wait_for(lambda p: _bin_gets(p) >= 6, timeout=60), child.stderr.read() if child.poll() else ""
        time.sleep(0.5)  # downloads now hang in the proxy: blocks RESERVED, bytes not arrived
        ds_dir = next(p for p in cache.iterdir() if p.is_dir())
        state = np.fromfile(ds_dir / "state", dtype=np.uint8)[64:]
        assert (state == RESERVED).any()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    proxy.clear()
    with _open(faulty_s3, url, cache) as ds:
        assert not (ds.cache.state == RESERVED).any()  # the dead process's entries were cleared on open
        assert _same(_epoch(ds), _epoch(local))
    assert _verify_present(ds_dir) > 0


@pytest.mark.parametrize("policy", ["raise", "refetch", "skip"])
def test_a_corrupted_cache_entry_is_detected_and_refetched(faulty_s3, local, tmp_path, policy):
    """A damaged cache entry is a damaged copy: whatever on_corrupt says, it is downloaded again."""
    url = _upload(faulty_s3, local)
    cache = tmp_path / "cache"
    with _open(faulty_s3, url, cache) as ds:
        want = _epoch(ds)
        e = ds.manifest.shards[0]
        path = ds.cache.dir / e.bin_name
    with open(path, "r+b") as f:
        f.seek(BLOCK + 5)
        byte = f.read(1)
        f.seek(BLOCK + 5)
        f.write(bytes([byte[0] ^ 1]))
    faulty_s3.proxy.clear()
    with _open(faulty_s3, url, cache) as ds:
        assert _same(_epoch(ds, verify_on_read=True, on_corrupt=policy), want)
        assert ds.stats()["corrupt_refetched"] == 1
    assert _bin_gets(faulty_s3.proxy) == 1  # only the damaged block was downloaded again


def test_transient_faults_are_retried(faulty_s3, local, tmp_path):
    url = _upload(faulty_s3, local)
    proxy = faulty_s3.proxy
    bins = r"\.bin(\?|$)"
    proxy.add(Rule(Action.ERROR, method="GET", path=bins, status=500, after=1, times=3))
    proxy.add(Rule(Action.ERROR, method="GET", path=bins, status=503, after=5, times=2))
    proxy.add(Rule(Action.DROP, method="GET", path=bins, after=9, times=2))
    proxy.add(Rule(Action.TRUNCATE, method="GET", path=bins, after=14, times=1))
    with _open(faulty_s3, url, tmp_path / "cache") as ds:
        assert _same(_epoch(ds), _epoch(local))
    assert proxy.count(faulted=True) == 8


def test_access_denied_and_missing_objects_name_url_and_block(faulty_s3, local, tmp_path):
    url = _upload(faulty_s3, local)
    rule = faulty_s3.proxy.add(Rule(Action.ERROR, method="GET", path=r"shard-00001\.bin", status=403, times=None))
    with _open(faulty_s3, url, tmp_path / "c1") as ds, pytest.raises(RemoteError) as err:
        _epoch(ds)
    msg = str(err.value)
    assert f"{url}/shard-00001.bin" in msg and "cache block" in msg and "access denied" in msg
    assert not err.value.transient
    faulty_s3.proxy.remove(rule)
    faulty_s3.server.client().delete_object(Bucket=faulty_s3.bucket, Key="ds/shard-00002.bin")
    with _open(faulty_s3, url, tmp_path / "c2") as ds, pytest.raises(RemoteError) as err:
        _epoch(ds)
    assert err.value.not_found and f"{url}/shard-00002.bin" in str(err.value) and "cache block" in str(err.value)


@pytest.mark.parametrize("policy", ["raise", "refetch"])
def test_a_persistent_checksum_mismatch_is_an_integrity_error(faulty_s3, local, tmp_path, policy):
    url = _upload(faulty_s3, local, damage="shard-00001.bin")
    with _open(faulty_s3, url, tmp_path / "cache", mismatch_retries=3) as ds, pytest.raises(IntegrityError) as err:
        _epoch(ds, verify_on_read=True, on_corrupt=policy)
    e = err.value
    assert e.shard == f"{url}/shard-00001.bin" and e.byte_range is not None and "cache block" in str(e)
    assert "after 3 downloads" in str(e)
    assert faulty_s3.proxy.count(method="GET", path=r"shard-00001\.bin") >= 3


def test_skip_reads_around_a_damaged_remote_block_exactly_as_around_a_damaged_local_one(faulty_s3, local,
                                                                                         tmp_path):
    """on_corrupt='skip' on the S3 server's damaged object: the same rows replaced by the same reserve rows
    as a local copy with the same flipped byte, every batch kept whole, each replacement reported."""
    url = _upload(faulty_s3, local, damage="shard-00001.bin")
    damaged = tmp_path / "local-damaged"
    damaged.mkdir()
    for f in local.iterdir():
        body = bytearray(f.read_bytes())
        if f.name == "shard-00001.bin":
            body[len(body) // 2] ^= 0x10
        (damaged / f.name).write_bytes(bytes(body))
    clean = _epoch(local)
    local_loader = Loader(damaged, shuffle="block", max_epochs=1, verify_on_read=True, on_corrupt="skip", **STREAM)
    want = [b["input_ids"].copy() for b in local_loader]
    with _open(faulty_s3, url, tmp_path / "cache", mismatch_retries=2) as ds:
        remote_loader = Loader(ds, shuffle="block", max_epochs=1, on_corrupt="skip", **STREAM)
        got = [b["input_ids"].copy() for b in remote_loader]
    assert _same(got, want) and len(got) == len(clean)
    changed = sum(int((a != b).any(axis=1).sum()) for a, b in zip(clean, got))
    remote, here = remote_loader.metrics.to_json()["integrity"], local_loader.metrics.to_json()["integrity"]
    assert remote["rows_replaced"] == here["rows_replaced"] == changed > 0
    assert remote["corrupt_blocks"] == 1 and {(e["shard"], e["block"]) for e in remote["events"]} == \
        {(e["shard"], e["block"]) for e in here["events"]}


def test_a_mixture_of_a_remote_and_a_compressed_source_equals_the_local_mixture(s3, local, tmp_path, monkeypatch):
    """One engine for every loader: a recipe may name an s3:// source (through the block cache) and a
    zstd-compressed one (through the decompression cache); the batches are those of the plain local copies."""
    from shardkit.loader import MixtureLoader
    from shardkit.writer import Codec, CompressionConfig

    rng = np.random.default_rng(8)
    docs = [rng.integers(0, 60000, size=int(rng.integers(20, 900)), dtype=np.uint16) for _ in range(120)]
    write_dataset(tmp_path / "plain", docs, max_tokens_per_shard=20_000, checksum_block_size=BLOCK)
    write_dataset(tmp_path / "zst", docs, max_tokens_per_shard=20_000, checksum_block_size=BLOCK,
                  compression=CompressionConfig(codec=Codec.ZSTD, frame_size=4096))
    url = _upload(s3, local)
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", str(tmp_path / "decompressed"))

    def recipe(web, code):
        return {"seed": 2, "seq_len": 127, "phases": [{"name": "p", "tokens": 400_000, "batch": 8,
                                                       "mix": {"web": 0.6, "code": 0.4}}],
                "sources": {"web": {"path": web}, "code": {"path": code}}}

    def batches(loader):
        return [(b["source"].copy(), b["input_ids"].copy()) for b in loader]

    reference = batches(MixtureLoader(recipe(str(local), str(tmp_path / "plain"))))
    mixed = MixtureLoader(recipe(url, str(tmp_path / "zst")), cache_dir=tmp_path / "cache", cache_limit=64 << 20,
                          storage_options=s3.storage_options(**NO_RETRIES))
    got = batches(mixed)
    assert len(got) == len(reference) > 100
    for (s1, a), (s2, b) in zip(got, reference):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(a, b)
    mixed.close()
