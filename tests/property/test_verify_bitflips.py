"""Every mutation of every file of a dataset is reported by verify, located to the right shard.

One dataset is built per test; each example mutates one file (flip a bit, truncate, append, delete,
rename), verifies, and restores the pristine bytes. `--quick` must see everything but an in-place
flip inside a `.bin` (only content checks can), and must see that one as OK (it never reads a .bin).
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit.verify.verify_testutil import build_dataset, flip_bit, restore, snapshot, truncate

from shardkit.verify import Check, Verdict, verify_dataset

BLOCK = 64
OPS = ["flip", "truncate", "append", "delete", "rename"]


@pytest.fixture(scope="module")
def pristine_ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("bitflips") / "ds"
    m = build_dataset(d, n_docs=24, shard_tokens=300, block_size=BLOCK)
    assert len(m.shards) >= 3
    files = snapshot(d)
    assert any(n.endswith(".ids.jsonl") for n in files)
    assert verify_dataset(d, mode="deep", jobs=1).ok
    return d, files


def _shard_of(name: str) -> str | None:
    return None if name == "manifest.json" else name.split(".", 1)[0]


def _position(data, size):
    """Any byte, with the edges (first, last, around block boundaries) drawn often."""
    edges = sorted({0, size - 1, *(min(b, size - 1) for b in (BLOCK - 1, BLOCK, size // 2))})
    return data.draw(st.one_of(st.sampled_from(edges), st.integers(0, size - 1)), label="position")


def _mutate(d, name, raw, op, data, bit, extra, suffix):
    path = d / name
    size = len(raw)
    if op == "flip":
        offset = _position(data, size)
        flip_bit(path, offset, bit)
        return offset
    if op == "truncate":
        truncate(path, _position(data, size))  # size - 1 drops only a trailing newline from JSON files
    elif op == "append":
        with open(path, "ab") as f:
            f.write(extra)
    elif op == "delete":
        path.unlink()
    else:
        os.rename(path, d / (name + suffix))
    return None


def _assert_located(report, name, shard):
    assert report.verdict is Verdict.CORRUPT, (name, report.to_json())
    assert report.problems
    assert {p.shard for p in report.problems} == {shard}, [str(p) for p in report.problems]
    if shard is None:
        assert all(p.file == "manifest.json" for p in report.problems)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), op=st.sampled_from(OPS), bit=st.integers(0, 7),
       extra=st.one_of(st.sampled_from([b"\n", b" ", b"\0", b"\n\n", b"{}"]), st.binary(min_size=1, max_size=40)),
       suffix=st.sampled_from([".moved", "~", ".bak"]))
def test_every_mutation_is_reported_and_located(pristine_ds, data, op, bit, extra, suffix):
    d, files = pristine_ds
    name = data.draw(st.sampled_from(sorted(files)), label="file")
    shard = _shard_of(name)
    try:
        offset = _mutate(d, name, files[name], op, data, bit, extra, suffix)
        full = verify_dataset(d, mode="full", jobs=data.draw(st.sampled_from([1, 1, 1, 2]), label="jobs"))
        _assert_located(full, name, shard)
        if op == "flip" and name.endswith(".bin"):
            hits = [p for p in full.problems if p.check is Check.CHECKSUM]
            assert len(hits) == 1 and hits[0].file == name
            start = offset // BLOCK * BLOCK
            assert hits[0].byte_range == (start, min(start + BLOCK, len(files[name])))
            quick = verify_dataset(d, mode="quick", jobs=1)
            assert quick.ok, quick.to_json()  # quick never reads a .bin
            deep = verify_dataset(d, mode="deep", jobs=1)
            _assert_located(deep, name, shard)
        else:
            _assert_located(verify_dataset(d, mode="quick", jobs=1), name, shard)
        if op in ("truncate", "append") and name != "manifest.json" and not name.endswith(".sum.json"):
            assert any(p.check is Check.SIZE and p.file == name for p in full.problems)
        if op in ("delete", "rename"):
            assert any(p.check in (Check.MISSING, Check.DATASET) and p.file == name for p in full.problems)
    finally:
        restore(d, files)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bit=st.integers(0, 7))
def test_every_bit_of_small_files_is_covered_by_quick(pristine_ds, data, bit):
    """Index, sidecars, ids and manifest are small: quick (no .bin read) must catch a flip anywhere in them."""
    d, files = pristine_ds
    name = data.draw(st.sampled_from(sorted(n for n in files if not n.endswith(".bin"))), label="file")
    offset = data.draw(st.integers(0, len(files[name]) - 1), label="offset")
    try:
        flip_bit(d / name, offset, bit)
        _assert_located(verify_dataset(d, mode="quick", jobs=1), name, _shard_of(name))
    finally:
        restore(d, files)
