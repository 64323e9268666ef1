import json

import numpy as np
import pytest

from shardkit.errors import ManifestError
from shardkit.format import MANIFEST_NAME, Manifest, check_shard_name, open_dataset
from shardkit.writer import write_dataset


@pytest.fixture()
def ds_dir(tmp_path):
    write_dataset(tmp_path / "ds", [np.arange(n, dtype=np.uint16) for n in range(1, 40)],
                  max_tokens_per_shard=200, checksum_block_size=4096)
    return tmp_path / "ds"


def _edit(ds_dir, fn, refresh_fingerprint=True):
    path = ds_dir / MANIFEST_NAME
    doc = json.loads(path.read_text())
    fn(doc)
    if refresh_fingerprint:
        from shardkit.format.manifest import compute_fingerprint
        doc["fingerprint"] = compute_fingerprint(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", "a\\b", "..", ".hidden", "", "x" * 300, 7, None])
def test_unsafe_shard_names_rejected(name):
    with pytest.raises(ManifestError, match="shard name"):
        check_shard_name(name, "m")


def test_traversal_in_manifest_rejected_on_open(ds_dir):
    _edit(ds_dir, lambda d: d["shards"][0].__setitem__("name", "../../etc/passwd"))
    with pytest.raises(ManifestError, match="unsafe"):
        open_dataset(ds_dir)


def test_fingerprint_detects_edits(ds_dir):
    _edit(ds_dir, lambda d: d["stats"].__setitem__("x", 1), refresh_fingerprint=False)
    with pytest.raises(ManifestError, match="fingerprint"):
        open_dataset(ds_dir)


def test_fingerprint_ignores_created_only(ds_dir):
    before = Manifest.load(ds_dir).fingerprint
    _edit(ds_dir, lambda d: d.__setitem__("created", {"at": "another time"}), refresh_fingerprint=False)
    assert Manifest.load(ds_dir).fingerprint == before


def test_totals_must_add_up(ds_dir):
    _edit(ds_dir, lambda d: d["totals"].__setitem__("docs", 10**12))
    with pytest.raises(ManifestError, match="totals.docs"):
        open_dataset(ds_dir)


def test_negative_and_huge_counts_rejected(ds_dir):
    _edit(ds_dir, lambda d: d["shards"][0].__setitem__("docs", -1))
    with pytest.raises(ManifestError, match="non-negative"):
        open_dataset(ds_dir)


def test_version_and_format(ds_dir):
    _edit(ds_dir, lambda d: d.__setitem__("format_version", 99))
    with pytest.raises(ManifestError, match="version 99"):
        open_dataset(ds_dir)


def test_not_json_and_deep_nesting(ds_dir):
    (ds_dir / MANIFEST_NAME).write_bytes(b"[" * 100_000)
    with pytest.raises(ManifestError, match="not valid JSON"):
        open_dataset(ds_dir)


def test_missing_manifest_mentions_unfinished_pack(tmp_path):
    (tmp_path / ".shardkit-journal.jsonl").write_text("")
    with pytest.raises(ManifestError, match="unfinished pack"):
        open_dataset(tmp_path)
