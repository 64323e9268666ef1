"""The packing table cache: keyed by what it depends on, built once under a lock, verified, rebuilt if bad."""

import hashlib
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine.pack_table import (
    cached_table,
    document_spans,
    load_table,
    save_table,
    table_dir,
    write_table,
)
from shardkit.engine.packing import PackSpec, build_table, fill_rows, table_parts
from shardkit.errors import ConfigError, IntegrityError
from shardkit.format.dataset import open_dataset
from shardkit.writer import write_dataset


@pytest.fixture()
def dataset(tmp_path):
    rng = np.random.default_rng(3)
    parts = [rng.integers(1, 50000, size=int(rng.integers(1, 300)), dtype=np.uint16) for _ in range(400)]
    write_dataset(tmp_path / "ds", parts, max_tokens_per_shard=5000, checksum_block_size=4096)
    return open_dataset(tmp_path / "ds"), parts


def test_document_spans_are_the_documents_in_flat_order(dataset):
    ds, parts = dataset
    starts, lengths = document_spans(ds)
    flat = np.concatenate(parts)
    assert lengths.tolist() == [p.size for p in parts]
    assert all(np.array_equal(flat[s:s + n], p) for s, n, p in zip(starts.tolist(), lengths.tolist(), parts))


def test_cached_table_is_the_built_table_and_is_reused(dataset, tmp_path):
    ds, parts = dataset
    spec = PackSpec(strategy="best_fit", seq_len=128, group_tokens=4096)
    cache = tmp_path / "cache"
    t1 = cached_table(ds, spec, cache)
    ref = build_table(*document_spans(ds), spec)
    for name in ("row_ptr", "start", "length", "first"):
        assert np.array_equal(getattr(t1, name), getattr(ref, name))
    d = table_dir(cache, ds.fingerprint, spec)
    mtime = (d / "meta.json").stat().st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t2 = cached_table(ds, spec, cache)
    assert (d / "meta.json").stat().st_mtime_ns == mtime  # opened, not rebuilt
    assert np.array_equal(fill_rows(np.concatenate(parts), t2, np.arange(t2.num_rows)),
                          fill_rows(np.concatenate(parts), ref, np.arange(ref.num_rows)))
    # another seq_len or strategy is another table
    assert table_dir(cache, ds.fingerprint, PackSpec(strategy="best_fit", seq_len=64, group_tokens=4096)) != d
    assert table_dir(cache, ds.fingerprint, PackSpec(strategy="first_fit", seq_len=128, group_tokens=4096)) != d


def test_a_table_built_for_another_seq_len_or_dataset_is_refused(dataset, tmp_path):
    ds, _ = dataset
    spec = PackSpec(strategy="best_fit", seq_len=128, group_tokens=4096)
    cached_table(ds, spec, tmp_path / "c")
    d = table_dir(tmp_path / "c", ds.fingerprint, spec)
    with pytest.raises(ConfigError, match="built for seq_len 128, not 256"):
        load_table(d, ds.fingerprint, PackSpec(strategy="best_fit", seq_len=256, group_tokens=4096))
    with pytest.raises(ConfigError, match="built for dataset"):
        load_table(d, "0" * 64, spec)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "meta"])
def test_a_damaged_table_is_detected_and_rebuilt_never_used(dataset, tmp_path, damage):
    ds, _ = dataset
    spec = PackSpec(strategy="first_fit", seq_len=100, group_tokens=4096)
    good = cached_table(ds, spec, tmp_path / "c")
    good_length, good_ptr = np.array(good.length), np.array(good.row_ptr)  # copies: the table is memory-mapped
    d = table_dir(tmp_path / "c", ds.fingerprint, spec)
    target = d / "length.npy"
    if damage == "flip":
        raw = bytearray(target.read_bytes())
        raw[-3] ^= 0x01
        target.write_bytes(bytes(raw))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-8])
    elif damage == "delete":
        target.unlink()
    else:
        meta = json.loads((d / "meta.json").read_text())
        meta["seq_len"] = 99  # stale: claims another seq_len
        (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises((IntegrityError, ConfigError)):
        load_table(d, ds.fingerprint, spec)
    with pytest.warns(RuntimeWarning, match="not used, building it again"):
        again = cached_table(ds, spec, tmp_path / "c")
    assert np.array_equal(again.length, good_length) and np.array_equal(again.row_ptr, good_ptr)
    load_table(d, ds.fingerprint, spec)  # intact again


def test_a_table_recording_sha256_digests_is_still_verified_and_used(dataset, tmp_path):
    """Tables written before the digests became xxh3-128 record sha256: such a table opens without a rebuild
    when intact, and a flipped bit in it is still found."""
    ds, _ = dataset
    spec = PackSpec(strategy="best_fit", seq_len=100, group_tokens=4096)
    cached_table(ds, spec, tmp_path / "c")
    d = table_dir(tmp_path / "c", ds.fingerprint, spec)
    meta = json.loads((d / "meta.json").read_text())
    for name, rec in meta["arrays"].items():
        assert set(rec) == {"xxh3_128", "size"}
        meta["arrays"][name] = {"sha256": hashlib.sha256((d / f"{name}.npy").read_bytes()).hexdigest(),
                                "size": rec["size"]}
    (d / "meta.json").write_text(json.dumps(meta))
    mtime = (d / "meta.json").stat().st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached_table(ds, spec, tmp_path / "c")
    assert (d / "meta.json").stat().st_mtime_ns == mtime  # opened, not rebuilt
    raw = bytearray((d / "start.npy").read_bytes())
    raw[200] ^= 0x04
    (d / "start.npy").write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="does not match its checksum"):
        load_table(d, ds.fingerprint, spec)


def test_concurrent_processes_build_once(dataset, tmp_path):
    ds, _ = dataset
    cache = tmp_path / "c"
    code = ("import sys; from shardkit.format.dataset import open_dataset; "
            "from shardkit.engine.pack_table import cached_table; from shardkit.engine.packing import PackSpec; "
            "t = cached_table(open_dataset(sys.argv[1]), PackSpec(strategy='best_fit', seq_len=64, "
            "group_tokens=4096), sys.argv[2]); print(t.num_rows, int(t.length.sum()))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(ds.path), str(cache)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o for o, _ in outs}) == 1 and not any(e.strip() for _, e in outs)  # no rebuild warnings
    entries = sorted(os.listdir(cache))
    assert [e for e in entries if not e.endswith(".lock")] == [table_dir(cache, ds.fingerprint, PackSpec(
        strategy="best_fit", seq_len=64, group_tokens=4096)).name]  # one table, no leftover temporaries


@pytest.mark.parametrize("strategy", ["best_fit", "first_fit"])
@pytest.mark.parametrize("group_tokens", [600, 4096, 1 << 20])
def test_the_table_written_a_shard_at_a_time_is_byte_for_byte_the_table_built_in_memory(dataset, tmp_path, strategy,
                                                                                     group_tokens):
    """`write_table` (a shard's documents at a time, groups crossing shard boundaries) writes the same bytes
    as `save_table` of `build_table` over every document at once (the same sha256), and records the same
    statistics."""
    ds, _ = dataset
    assert ds.num_shards > 10
    spec = PackSpec(strategy=strategy, seq_len=128, group_tokens=group_tokens)
    streamed, whole = tmp_path / "streamed", tmp_path / "whole"
    write_table(streamed, ds, spec)
    table = build_table(*document_spans(ds), spec)
    save_table(whole, table, ds.fingerprint, spec)
    for name in ("row_ptr", "start", "length", "first"):
        assert (streamed / f"{name}.npy").read_bytes() == (whole / f"{name}.npy").read_bytes(), name
    a, b = json.loads((streamed / "meta.json").read_text()), json.loads((whole / "meta.json").read_text())
    assert a == b and a["stats"] == table.stats()
    assert load_table(streamed, ds.fingerprint, spec).stats() == table.stats()


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=0, max_size=120), cuts=st.lists(st.integers(0, 120)),
       seq_len=st.integers(1, 12), group=st.integers(0, 3), strategy=st.sampled_from(["best_fit", "first_fit"]))
def test_table_parts_over_any_runs_of_documents_are_the_whole_table(lengths, cuts, seq_len, group, strategy):
    """Documents given in runs cut anywhere (inside a pack group, empty runs, empty documents) give, part by
    part, exactly the table of all of them; parts end only where a pack group ends."""
    spec = PackSpec(strategy=strategy, seq_len=seq_len, group_tokens=(seq_len + 1) * (1 + 3 * group))
    n = np.asarray(lengths, dtype=np.int64)
    s = np.cumsum(n) - n
    bounds = sorted({0, len(lengths), *[c for c in cuts if c <= len(lengths)]})
    runs = [(s[a:z], n[a:z]) for a, z in zip(bounds[:-1], bounds[1:])]
    parts = list(table_parts(runs, spec))
    whole = build_table(s, n, spec)
    sizes = np.concatenate([p.sizes for p in parts]) if parts else np.zeros(0, np.int64)
    assert np.array_equal(np.concatenate([[0], np.cumsum(sizes)]), whole.row_ptr)
    for name in ("start", "length", "first"):
        got = np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0)
        assert np.array_equal(got, getattr(whole, name)), name
    assert sum(p.split for p in parts) == whole.stats()["documents_split"]
    groups = [set((p.start[p.first] // spec.group_tokens).tolist()) for p in parts]
    assert all(not (g & h) for i, g in enumerate(groups) for h in groups[i + 1:])  # no group in two parts


def _peak_bytes(build, *args) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        build(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _save_whole(directory, ds, spec):
    save_table(directory, build_table(*document_spans(ds), spec), ds.fingerprint, spec)


def test_writing_a_table_holds_a_shards_documents_not_the_datasets(tmp_path, monkeypatch):
    """Datasets of 40,000 and 160,000 documents in shards of about 6,000, pack groups of about 1,000: the
    in-memory build's peak grows with the dataset (about 100 bytes per document), `write_table`'s does not
    (a shard's and a group's worth; traced by tracemalloc: numpy's buffers and Python's objects), and both
    write the same table. The files' hashing reads 4 MiB at a time, more than these small files hold, so
    it is measured with a read buffer of 64 KiB."""
    monkeypatch.setattr("shardkit.format.checksums._READ_CHUNK", 64 << 10)
    spec = PackSpec(strategy="best_fit", seq_len=256, group_tokens=20_000)
    peaks = {}
    for n in (40_000, 160_000):
        rng = np.random.default_rng(5)
        sizes = rng.integers(1, 40, n)
        flat = rng.integers(1, 50000, int(sizes.sum()), dtype=np.uint16)
        write_dataset(tmp_path / f"ds{n}", np.split(flat, np.cumsum(sizes)[:-1]), max_tokens_per_shard=120_000)
        ds = open_dataset(tmp_path / f"ds{n}")
        peaks[n] = (_peak_bytes(write_table, tmp_path / f"a{n}", ds, spec),
                    _peak_bytes(_save_whole, tmp_path / f"b{n}", ds, spec))
        assert (tmp_path / f"a{n}" / "start.npy").read_bytes() == (tmp_path / f"b{n}" / "start.npy").read_bytes()
    (small_streamed, small_whole), (big_streamed, big_whole) = peaks[40_000], peaks[160_000]
    assert big_whole - small_whole > 60 * 120_000, peaks  # ≥ 60 bytes per added document
    assert big_streamed - small_streamed < 200_000, peaks  # flat: the same shards and groups
