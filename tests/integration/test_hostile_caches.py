"""Derived caches cannot change what a dataset delivers: a damaged or poisoned decompression-cache entry is
never served, and `verify --deep` never blames an intact dataset for one."""

from __future__ import annotations

import numpy as np
import pytest

from shardkit.format import open_dataset
from shardkit.format.compressed import DecompressCache
from shardkit.verify import verify_dataset
from shardkit.writer import Codec, CompressionConfig, write_dataset


def _docs(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 250, size=int(rng.integers(3, 40)), dtype=np.uint16) for _ in range(n)]


@pytest.fixture()
def packed(tmp_path):
    path = tmp_path / "ds"
    write_dataset(path, _docs(), max_tokens_per_shard=200, checksum_block_size=64,
                  compression=CompressionConfig(codec=Codec.ZSTD, frame_size=64))
    return path, np.concatenate(_docs()).astype(np.int64), tmp_path / "cache"


def _entries(cache):
    return sorted(p for p in cache.rglob("*.bin"))


def _flip(path, at=5):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x5A
    path.write_bytes(bytes(raw))


def test_a_flipped_byte_in_a_cache_entry_is_never_served(packed):
    ds, want, cache = packed
    d = open_dataset(ds, cache_dir=cache)
    assert np.array_equal(d.read_tokens(0, d.num_tokens), want)  # fills the cache
    entries = _entries(cache)
    assert entries
    for e in entries:
        _flip(e)
    d = open_dataset(ds, cache_dir=cache)  # a new process's view: nothing verified yet
    assert np.array_equal(d.read_tokens(0, d.num_tokens), want)
    r = verify_dataset(ds, mode="full", cache_dir=cache)
    assert r.ok, r.to_json()


def test_a_poisoned_entry_planted_before_first_use_is_rebuilt(packed):
    ds, want, cache = packed
    d = open_dataset(ds, cache_dir=cache)
    for shard in d.shards:  # plant a same-size entry of other tokens where the cache will look
        path = DecompressCache(cache, fingerprint=d.fingerprint).path_for(shard.entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x07" * shard.entry.bin_bytes)
    report = verify_dataset(ds, mode="deep", cache_dir=cache)
    assert report.ok, report.to_json()  # the intact dataset is not blamed for the cache
    assert np.array_equal(d.read_tokens(0, d.num_tokens), want)


def test_cache_entries_are_keyed_by_the_dataset_fingerprint(packed, tmp_path):
    ds, _, cache = packed
    d = open_dataset(ds, cache_dir=cache)
    d.read_tokens(0, d.num_tokens)
    assert {p.parent.name for p in _entries(cache)} == {d.fingerprint[:32]}
