"""The packing table cache: keyed by what it depends on, built once under a lock, verified, rebuilt if bad."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from shardkit.engine.pack_table import cached_table, document_spans, load_table, table_dir
from shardkit.engine.packing import PackSpec, build_table, fill_rows
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
