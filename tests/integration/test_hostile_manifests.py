"""Manifests edited with the fingerprint recomputed: refused, never read as wrong tokens.

The fingerprint is a plain hash anyone can recompute, so each case here re-signs the manifest after the
edit: what must catch the lie is the cross-check of the manifest against the shard files' own headers
(at mapping) and the schema check of every field (at open and in `verify`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.cli import shardkit_cmd

from shardkit.errors import ManifestError
from shardkit.format import open_dataset
from shardkit.format.manifest import compute_fingerprint
from shardkit.loader import Loader
from shardkit.verify import verify_dataset
from shardkit.writer import write_dataset


def _docs(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 250, size=int(rng.integers(3, 40)), dtype=np.uint16) for _ in range(n)]


@pytest.fixture()
def ds(tmp_path):
    path = tmp_path / "ds"
    tok = {"kind": "bytes", "name": "bytes", "path": None, "vocab_size": 258, "eos_id": 256, "bos_id": 257,
           "sha256": None}
    write_dataset(path, _docs(), max_tokens_per_shard=200, checksum_block_size=64, tokenizer=tok)
    return path


def _edit(ds: Path, change) -> None:
    doc = json.loads((ds / "manifest.json").read_bytes())
    change(doc)
    doc["fingerprint"] = compute_fingerprint(doc)
    (ds / "manifest.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _to_int16(doc):
    doc["dtype"] = "int16"


def _to_uint8(doc):
    doc["dtype"] = "uint8"
    doc["tokenizer"] = None  # as adopted data has: no vocab_size for the schema check to hold against uint8
    for s in doc["shards"]:
        s["tokens"] = s["bin_bytes"]
    doc["totals"]["tokens"] = sum(s["tokens"] for s in doc["shards"])


@pytest.mark.parametrize("change", [_to_int16, _to_uint8], ids=["int16", "uint8-tokens=bytes"])
def test_an_edited_dtype_is_refused_by_every_token_path(ds, change):
    _edit(ds, change)
    dataset = open_dataset(ds)  # opening stays cheap: no shard is read until it is mapped
    with pytest.raises(ManifestError, match="index records token dtype uint16"):
        dataset.read_tokens(0, 4)
    with pytest.raises(ManifestError, match="index records token dtype uint16"):
        next(iter(Loader(ds, seq_len=8, batch_schedule=2, readahead=False)))
    assert not verify_dataset(ds, mode="quick").ok


def test_stream_cli_refuses_an_edited_dtype_in_one_line(ds):
    _edit(ds, _to_int16)
    r = subprocess.run([*shardkit_cmd(), "stream", str(ds), "--seq-len", "8", "--batch", "2", "--steps", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "index records token dtype uint16" in r.stderr


def test_an_edited_document_count_is_refused_at_mapping(ds):
    def change(doc):
        doc["shards"][0]["docs"] += 1
        doc["totals"]["docs"] += 1
    _edit(ds, change)
    with pytest.raises(ManifestError, match="the index holds"):
        open_dataset(ds).read_tokens(0, 4)


def test_a_shard_replaced_by_a_symlink_after_open_is_refused(ds, tmp_path):
    dataset = open_dataset(ds)
    outside = tmp_path / "outside.bin"
    outside.write_bytes((ds / "shard-00000.bin").read_bytes())  # even the right bytes
    (ds / "shard-00000.bin").unlink()
    (ds / "shard-00000.bin").symlink_to(outside)
    with pytest.raises(ManifestError, match="symlink pointing outside the dataset"):
        dataset.read_tokens(0, 4)


def test_a_shard_replaced_by_a_fifo_after_open_is_refused_without_blocking(ds):
    dataset = open_dataset(ds)
    (ds / "shard-00000.bin").unlink()
    os.mkfifo(ds / "shard-00000.bin")
    with pytest.raises(ManifestError, match="not a regular file"):
        dataset.read_tokens(0, 4)


BAD_FIELDS = [
    ("tokenizer.vocab_size", lambda d: d["tokenizer"].update(vocab_size=-1)),
    ("tokenizer.vocab_size", lambda d: d["tokenizer"].update(vocab_size="big")),
    ("tokenizer.vocab_size", lambda d: d["tokenizer"].update(vocab_size=True)),
    ("tokenizer.vocab_size", lambda d: d["tokenizer"].update(vocab_size=70_000)),  # past uint16
    ("tokenizer.eos_id", lambda d: d["tokenizer"].update(eos_id=258)),
    ("tokenizer.bos_id", lambda d: d["tokenizer"].update(bos_id="1")),
    ("tokenizer.path", lambda d: d["tokenizer"].update(path=7)),
    ("tokenizer.sha256", lambda d: d["tokenizer"].update(sha256="nope")),
    ("eos_appended", lambda d: d.update(eos_appended="yes")),
    ("bos_prepended", lambda d: d.update(bos_prepended=1)),
    ("checksum.block_size", lambda d: d["checksum"].update(block_size=True)),
    ("checksum.block_size", lambda d: d["checksum"].update(block_size=2**62)),
    ("checksum.block_size", lambda d: d["checksum"].update(block_size=0)),
    ("checksum.algorithm", lambda d: d["checksum"].update(algorithm="md5")),
    ("checksum", lambda d: d.update(checksum=[])),
    ("pack", lambda d: d.update(pack="x")),
    ("stats", lambda d: d.update(stats=[1])),
    ("totals.bytes", lambda d: d["totals"].update(bytes=-5)),
]


@pytest.mark.parametrize("field,change", BAD_FIELDS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_FIELDS)])
def test_every_manifest_field_is_schema_checked_at_open_and_by_verify(ds, field, change):
    _edit(ds, change)
    with pytest.raises(ManifestError, match=f"manifest field {field} must be"):
        open_dataset(ds)
    for mode in ("quick", "deep"):
        report = verify_dataset(ds, mode=mode)
        assert not report.ok, report.to_json()
        assert any(f"manifest field {field}" in p.detail for p in report.problems), report.to_json()


def test_verify_cli_says_which_field_is_wrong(ds):
    _edit(ds, lambda d: d["tokenizer"].update(vocab_size="big"))
    r = subprocess.run([*shardkit_cmd(), "verify", str(ds)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "tokenizer.vocab_size" in r.stdout + r.stderr


@pytest.mark.parametrize("target", ["/etc/passwd", "fifo"])
def test_show_and_verify_never_open_a_tokenizer_path_outside_the_dataset(ds, tmp_path, target):
    if target == "fifo":  # opening it would block forever: the timeout turns that into a failure
        target = str(tmp_path / "tokenizer.json")
        os.mkfifo(target)
    _edit(ds, lambda d: d["tokenizer"].update(kind="hf", path=target, sha256=None))
    for args in (["show", str(ds), "0"], ["verify", "--quick", "--decode-sample", "2", str(ds)]):
        r = subprocess.run([*shardkit_cmd(), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "outside the dataset" in r.stdout and f"--tokenizer {target}" in r.stdout
        assert "root:" not in r.stdout + r.stderr
