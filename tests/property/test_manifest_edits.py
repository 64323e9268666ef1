"""Random edits of a manifest, fingerprint recomputed: the dataset loads identically or is refused.

Whatever an edit does (dtype, counts, sizes, order, flags, tokenizer fields, totals kept consistent or
not), the tokens `open_dataset(...).read_tokens` and `Dataset.doc` deliver are the shards' real contents
(each shard's `.bin` read in the dtype its own `.idx` header records, split by the `.idx` lengths), in
the order the manifest lists them — or opening/reading raises a ShardkitError. Never other tokens.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from shardkit.errors import ShardkitError
from shardkit.format import open_dataset
from shardkit.format.idx import read_index
from shardkit.format.manifest import compute_fingerprint
from shardkit.writer import write_dataset

DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "int64", "uint32", "float32"]
INT_FIELDS = ["docs", "tokens", "bin_bytes", "idx_bytes"]
VALUES = st.one_of(st.integers(-3, 3), st.sampled_from([0, 1, 2**16, 2**31, 2**62]))
ODD = st.sampled_from([None, True, False, 0, -1, 1, 258, 2**40, "yes", "", [], {}, 1.5])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("edits") / "ds"
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 256, size=int(rng.integers(1, 30)), dtype=np.uint16) for _ in range(30)]
    tok = {"kind": "bytes", "name": "bytes", "path": None, "vocab_size": 258, "eos_id": 256, "bos_id": 257,
           "sha256": None}
    write_dataset(path, docs, max_tokens_per_shard=150, checksum_block_size=64, tokenizer=tok)
    doc = json.loads((path / "manifest.json").read_bytes())
    real = {}
    for s in doc["shards"]:
        idx = read_index(path / f"{s['name']}.idx")
        flat = np.fromfile(path / f"{s['name']}.bin", dtype=idx.header.dtype)
        offsets = np.concatenate([[0], np.cumsum(idx.lengths, dtype=np.int64)])
        real[s["name"]] = (flat.astype(np.int64), [flat[a:b].astype(np.int64) for a, b in zip(offsets, offsets[1:])])
    return path, doc, real


def _apply(doc, edit):
    kind, *args = edit
    shards = doc["shards"]
    if kind == "int" and shards:
        i, key, delta = args
        s = shards[i % len(shards)]
        s[key] = delta if abs(delta) > 3 else s[key] + delta
    elif kind == "dtype":
        doc["dtype"] = args[0]
    elif kind == "dtype_consistent":  # the dangerous one: sizes and counts agree with the new dtype
        doc["dtype"] = args[0]
        itemsize = np.dtype(args[0]).itemsize
        for s in shards:
            s["tokens"] = s["bin_bytes"] // itemsize
            s["bin_bytes"] = s["tokens"] * itemsize
    elif kind == "swap" and shards:
        i, j = args[0] % len(shards), args[1] % len(shards)
        shards[i], shards[j] = shards[j], shards[i]
    elif kind == "swap_names" and len(shards) > 1:
        i, j = args[0] % len(shards), args[1] % len(shards)
        shards[i]["name"], shards[j]["name"] = shards[j]["name"], shards[i]["name"]
    elif kind == "drop" and shards:
        del shards[args[0] % len(shards)]
    elif kind == "field":
        path, value = args
        target = doc
        *parents, last = path.split(".")
        for p in parents:
            target = target.get(p) if isinstance(target, dict) else None
        if isinstance(target, dict):
            target[last] = value


EDIT = st.one_of(
    st.tuples(st.just("int"), st.integers(0, 5), st.sampled_from(INT_FIELDS), VALUES),
    st.tuples(st.just("dtype"), st.sampled_from(DTYPES)),
    st.tuples(st.just("dtype_consistent"), st.sampled_from(DTYPES)),
    st.tuples(st.just("swap"), st.integers(0, 5), st.integers(0, 5)),
    st.tuples(st.just("swap_names"), st.integers(0, 5), st.integers(0, 5)),
    st.tuples(st.just("drop"), st.integers(0, 5)),
    st.tuples(st.just("field"), st.sampled_from(["eos_appended", "bos_prepended", "tokenizer", "tokenizer.vocab_size",
                                                 "tokenizer.eos_id", "checksum.block_size", "format_version"]), ODD),
)


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(EDIT, min_size=1, max_size=4), fix_totals=st.booleans(), drop_tokenizer=st.booleans())
def test_edited_manifests_load_identically_or_are_refused(base, edits, fix_totals, drop_tokenizer):
    path, original, real = base
    doc = copy.deepcopy(original)
    if drop_tokenizer:  # as adopted data: nothing for the schema check to compare the dtype with
        doc["tokenizer"] = None
    for edit in edits:
        _apply(doc, edit)
    if fix_totals:
        ints = [s for s in doc["shards"] if all(isinstance(s.get(k), int) for k in ("docs", "tokens"))]
        doc["totals"].update(shards=len(doc["shards"]), docs=sum(s["docs"] for s in ints),
                             tokens=sum(s["tokens"] for s in ints))
    doc["fingerprint"] = compute_fingerprint(doc)
    (path / "manifest.json").write_text(json.dumps(doc, sort_keys=True))
    try:
        try:
            ds = open_dataset(path)
            tokens = ds.read_tokens(0, ds.num_tokens).astype(np.int64)
        except ShardkitError as e:
            event(f"refused: {type(e).__name__}")
            return
        names = [s.name for s in ds.shards]
        want = np.concatenate([real[n][0] for n in names]) if names else np.zeros(0, np.int64)
        assert np.array_equal(tokens, want), f"wrong tokens delivered after {edits}"
        try:  # the document path (the index) is checked on its own: a fresh dataset, nothing mapped yet
            ds = open_dataset(path)
            delivered_docs = [ds.doc(i).astype(np.int64) for i in range(ds.num_docs)]
        except ShardkitError as e:
            event(f"documents refused: {type(e).__name__}")
            return
        event("loaded")
        want_docs = [d for n in names for d in real[n][1]]
        assert len(delivered_docs) == len(want_docs)
        assert all(np.array_equal(a, b) for a, b in zip(delivered_docs, want_docs)), f"wrong documents after {edits}"
    finally:
        (path / "manifest.json").write_text(json.dumps(original, sort_keys=True))
