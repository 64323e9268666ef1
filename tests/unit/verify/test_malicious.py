"""Crafted manifests and indexes: a clear ManifestError on open or first use, a reported problem in verify.

Each case is consistent everywhere except the one lie it tells (sizes, sidecars and fingerprint are
re-signed), so it is the targeted check, not a checksum, that has to catch it.
"""

import json
import os
import struct

import numpy as np
import pytest
from verify_testutil import build_dataset, resign

from shardkit.errors import ManifestError
from shardkit.format import open_dataset
from shardkit.format.idx import HEADER_SIZE, INDEX_MAGIC, encode_index
from shardkit.format.manifest import compute_fingerprint
from shardkit.verify import Check, verify_dataset


@pytest.fixture()
def ds(tmp_path):
    build_dataset(tmp_path / "ds", n_docs=12, shard_tokens=200, block_size=64)
    return tmp_path / "ds"


def _edit_manifest(ds, fn):
    path = ds / "manifest.json"
    doc = json.loads(path.read_bytes())
    fn(doc)
    doc["fingerprint"] = compute_fingerprint(doc)
    path.write_bytes((json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _set(key, value, shard=0):
    return lambda d: d["shards"][shard].__setitem__(key, value)


MANIFEST_CASES = [
    ("traversal", _set("name", "../../etc/passwd"), "unsafe or invalid shard name"),
    ("absolute", _set("name", "/etc/passwd"), "unsafe or invalid shard name"),
    ("nul byte", _set("name", "shard\x00x"), "unsafe or invalid shard name"),
    ("huge count", _set("docs", 10**30), "non-negative integer"),
    ("negative count", _set("tokens", -4), "non-negative integer"),
    ("bool count", _set("docs", True), "non-negative integer"),
    ("bytes vs tokens", _set("bin_bytes", 3), "bin_bytes 3 != tokens"),
    ("duplicate", lambda d: d["shards"].append(dict(d["shards"][0])), "names a shard twice"),
    ("shards not a list", lambda d: d.__setitem__("shards", {"a": 1}), "must be a list"),
    ("float dtype", lambda d: d.__setitem__("dtype", "float32"), "not a token dtype"),
]


@pytest.mark.parametrize("edit,message", [c[1:] for c in MANIFEST_CASES], ids=[c[0] for c in MANIFEST_CASES])
def test_crafted_manifest(ds, edit, message):
    _edit_manifest(ds, edit)
    with pytest.raises(ManifestError, match=message):
        open_dataset(ds)
    r = verify_dataset(ds)
    [p] = r.problems
    assert p.check is Check.MANIFEST and message in p.detail and p.file == "manifest.json"


def test_oversized_manifest_is_refused_without_reading(ds):
    os.truncate(ds / "manifest.json", (1 << 30) + 1)  # sparse: costs nothing
    with pytest.raises(ManifestError, match="over the 1 GiB limit"):
        open_dataset(ds)
    [p] = verify_dataset(ds).problems
    assert "limit" in p.detail


def _idx(ds, shard=1):
    path = ds / f"shard-{shard:05d}.idx"
    return path, bytearray(path.read_bytes())


def _put(raw, offset, fmt, value):
    raw[offset:offset + struct.calcsize(fmt)] = struct.pack(fmt, value)


def _n(raw):
    return struct.unpack_from("<Q", raw, 18)[0]


INDEX_CASES = [
    ("huge header counts", lambda r: r.__setitem__(slice(0, HEADER_SIZE),
                                                   struct.pack("<9sQBQQ", INDEX_MAGIC, 1, 8, 10**18, 10**18)),
     "impossible"),
    ("negative length", lambda r: _put(r, HEADER_SIZE + 4, "<i", -7), "negative length"),
    ("overlapping pointer", lambda r: _put(r, HEADER_SIZE + 4 * _n(r) + 8, "<q", 2), "overlapping or gapped"),
    ("lengths past the .bin", lambda r: _put(r, HEADER_SIZE + 4 * (_n(r) - 1), "<i", 10**6), "sum to"),
    ("document indices backwards", lambda r: _put(r, HEADER_SIZE + 12 * _n(r) + 8, "<q", 5),
     "document indices"),
    ("dtype differs", lambda r: r.__setitem__(17, 4), "dtype int32 differs"),
    ("bad magic", lambda r: r.__setitem__(slice(0, 7), b"NOTMMID"), "magic"),
    ("version 2", lambda r: _put(r, 9, "<Q", 2), "version 2"),
]


@pytest.mark.parametrize("craft,message", [c[1:] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_crafted_index(ds, craft, message):
    path, raw = _idx(ds)
    craft(raw)
    path.write_bytes(bytes(raw))
    resign(ds)  # sizes and checksums now vouch for the crafted bytes
    dataset = open_dataset(ds)  # cheap checks on open pass: the lie is inside the index
    shard = dataset.shards[1]
    with pytest.raises(ManifestError, match=message):
        shard.doc(0)
    for mode in ("quick", "full", "deep"):
        r = verify_dataset(ds, mode=mode)
        assert [(p.check, p.shard) for p in r.problems] == [(Check.INDEX, "shard-00001")], r.to_json()
        assert message in r.problems[0].detail


def test_document_indices_must_be_one_per_sequence_for_packed_data(ds):
    """[0, 0, 2, …] is legal Megatron (a document of no sentences), so the reader accepts it; shardkit
    never writes it, and verify says so (adopted data, with stats.megatron_documents, is exempt)."""
    path, raw = _idx(ds)
    _put(raw, HEADER_SIZE + 12 * _n(raw) + 8, "<q", 0)
    path.write_bytes(bytes(raw))
    resign(ds)
    open_dataset(ds).shards[1].doc(0)
    [p] = verify_dataset(ds, mode="quick").problems
    assert (p.check, p.shard) == (Check.INDEX, "shard-00001") and "one sequence per document" in p.detail


def test_sequence_count_differs_from_manifest(ds):
    path, raw = _idx(ds)
    n = _n(raw)
    lengths = np.frombuffer(bytes(raw[HEADER_SIZE:HEADER_SIZE + 4 * n]), "<i4")
    path.write_bytes(encode_index(lengths[:-1], np.dtype("uint16")))  # a valid index of one fewer document
    resign(ds)
    with pytest.raises(ManifestError, match="sequences, manifest says"):
        open_dataset(ds).shards[1].doc(0)
    [p] = verify_dataset(ds, mode="quick").problems
    assert (p.check, p.shard) == (Check.INDEX, "shard-00001") and "the manifest records" in p.detail


def test_shard_file_linked_outside_is_refused(ds, tmp_path):
    outside = tmp_path / "secret.idx"
    os.replace(ds / "shard-00000.idx", outside)
    os.symlink(outside, ds / "shard-00000.idx")
    with pytest.raises(ManifestError, match="missing"):
        open_dataset(ds)
    [p] = verify_dataset(ds).problems
    assert p.check is Check.MISSING and "outside the dataset" in p.detail
