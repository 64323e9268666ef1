import json
import os

import numpy as np
import pytest
from verify_testutil import build_dataset, flip_bit, resign, texts

from shardkit.errors import ConfigError
from shardkit.format import open_dataset
from shardkit.format.checksums import digest_bytes
from shardkit.format.manifest import compute_fingerprint
from shardkit.verify import Check, Verdict, verify_dataset
from shardkit.writer import write_dataset

BLOCK = 64


@pytest.fixture()
def ds(tmp_path):
    build_dataset(tmp_path / "ds", n_docs=30, shard_tokens=200, block_size=BLOCK)
    return tmp_path / "ds"


def _checks(report):
    return {(p.check, p.shard) for p in report.problems}


@pytest.mark.parametrize("mode", ["quick", "full", "deep"])
@pytest.mark.parametrize("jobs", [1, 3])
def test_clean_dataset_is_ok(ds, mode, jobs):
    r = verify_dataset(ds, mode=mode, jobs=jobs)
    assert r.verdict is Verdict.OK and r.ok and not r.problems, r.to_json()
    assert r.shards_ok == r.shards >= 3
    bins = sum(os.path.getsize(p) for p in ds.glob("*.bin"))
    small = sum(os.path.getsize(p) for p in ds.iterdir() if p.suffix in (".idx", ".jsonl"))
    assert r.bytes_hashed == (small if mode == "quick" else small + bins)
    assert r.bytes_scanned == (bins if mode == "deep" else 0)
    json.dumps(r.to_json())


def test_unfinished_pack_is_incomplete_not_corrupt(tmp_path):
    d = tmp_path / "packing"
    d.mkdir()
    (d / ".shardkit-journal.jsonl").write_text('{"kind": "job", "version": 1, "job_id": "x", "job": {}}\n')
    (d / "shard-00000.bin").write_bytes(b"\0" * 10)
    r = verify_dataset(d)
    assert r.verdict is Verdict.INCOMPLETE and not r.ok
    assert not r.problems
    assert "unfinished pack" in r.notes[0] and "0 shard(s) finished" in r.notes[0]
    assert r.to_json()["verdict"] == "incomplete"


def test_not_a_dataset_is_corrupt(tmp_path):
    r = verify_dataset(tmp_path)
    assert r.verdict is Verdict.CORRUPT and r.problems[0].check is Check.DATASET
    r = verify_dataset(tmp_path / "nope")
    assert r.verdict is Verdict.CORRUPT and "cannot be listed" in r.problems[0].detail


def test_leftover_journal_next_to_manifest_is_a_note(ds):
    (ds / ".shardkit-journal.jsonl").write_text("")
    r = verify_dataset(ds)
    assert r.ok and any("journal" in n for n in r.notes)


def test_adjacent_bad_blocks_merge_into_one_range(ds):
    path = ds / "shard-00001.bin"
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(2 * BLOCK + 3)
        f.write(b"\xff" * (2 * BLOCK))  # touches blocks 2, 3 and 4
    r = verify_dataset(ds, mode="full", jobs=2)
    [p] = r.problems
    assert (p.check, p.shard, p.file) == (Check.CHECKSUM, "shard-00001", "shard-00001.bin")
    assert p.byte_range == (2 * BLOCK, min(5 * BLOCK, size))
    assert "blocks 2–4" in p.detail


def test_one_bad_shard_never_hides_another(ds):
    flip_bit(ds / "shard-00000.bin", 5, 0)
    (ds / "shard-00001.sum.json").write_text("{}")
    (ds / "shard-00002.idx").unlink()
    r = verify_dataset(ds)
    assert (Check.CHECKSUM, "shard-00000") in _checks(r)
    assert (Check.SIDECAR, "shard-00001") in _checks(r)
    assert (Check.MISSING, "shard-00002") in _checks(r)
    assert r.bad_shards == ["shard-00000", "shard-00001", "shard-00002"]
    assert r.shards_ok == r.shards - 3


def test_swapped_shards_are_both_reported(ds):
    a, b = ds / "shard-00000.bin", ds / "shard-00001.bin"
    tmp = ds / "swap"
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)
    r = verify_dataset(ds)
    assert set(r.bad_shards) == {"shard-00000", "shard-00001"}


def test_truncation_reports_missing_range_and_checks_the_rest(ds):
    path = ds / "shard-00002.bin"
    size = os.path.getsize(path)
    os.truncate(path, size - 10)
    r = verify_dataset(ds)
    [p] = r.problems
    assert p.check is Check.SIZE and p.byte_range == (size - 10, size) and "truncated" in p.detail
    assert r.bytes_hashed > 0


def _rewrite_sidecar(ds, shard, fn):
    path = ds / f"{shard}.sum.json"
    doc = json.loads(path.read_bytes())
    fn(doc)
    raw = json.dumps(doc).encode()
    path.write_bytes(raw)
    mpath = ds / "manifest.json"
    m = json.loads(mpath.read_bytes())
    next(s for s in m["shards"] if s["name"] == shard)["sum_xxh3"] = digest_bytes(raw)
    m["fingerprint"] = compute_fingerprint(m)
    mpath.write_bytes((json.dumps(m, indent=1, sort_keys=True) + "\n").encode())


def test_sidecar_naming_a_foreign_file_is_reported(ds):
    entry = {"size": 5, "blocks": ["0" * 32]}
    _rewrite_sidecar(ds, "shard-00001", lambda d: d["files"].__setitem__("../../etc/passwd", entry))
    r = verify_dataset(ds)
    [p] = r.problems
    assert (p.check, p.shard) == (Check.SIDECAR, "shard-00001") and "../../etc/passwd" in p.detail


def test_sidecar_listed_ids_file_must_exist_with_its_size(ds):
    (ds / "shard-00000.ids.jsonl").unlink()
    with open(ds / "shard-00001.ids.jsonl", "ab") as f:
        f.write(b'"x"\n')
    r = verify_dataset(ds, mode="quick")
    assert (Check.MISSING, "shard-00000") in _checks(r)
    assert (Check.SIZE, "shard-00001") in _checks(r)


def test_ids_must_have_one_line_per_document(ds):
    p = ds / "shard-00000.ids.jsonl"
    p.write_bytes(p.read_bytes().split(b"\n", 1)[1])
    resign(ds)
    r = verify_dataset(ds, mode="quick")
    assert _checks(r) == {(Check.IDS, "shard-00000")}


def test_statistics_must_describe_the_shards(ds):
    def edit(doc):
        doc["stats"]["doc_length_histogram"]["counts"][2] += 1
        doc["stats"]["tokens"] += 1
    resign(ds, edit)
    r = verify_dataset(ds, mode="quick")
    assert [p.check for p in r.problems] == [Check.STATS, Check.STATS]
    assert all(p.shard is None for p in r.problems)


def test_non_canonical_manifest_is_reported(ds):
    raw = (ds / "manifest.json").read_bytes()
    (ds / "manifest.json").write_bytes(json.dumps(json.loads(raw)).encode())  # same content, other layout
    open_dataset(ds)  # still a valid manifest
    [p] = verify_dataset(ds, mode="quick").problems
    assert p.check is Check.MANIFEST and "canonical" in p.detail


def _shard(ds, name):
    return next(x for x in open_dataset(ds).shards if x.name == name)


def test_deep_finds_ids_outside_the_vocabulary(ds):
    off = int(_shard(ds, "shard-00001").index.pointers[2]) + 2
    with open(ds / "shard-00001.bin", "r+b") as f:
        f.seek(off)
        f.write(np.array([300], "<u2").tobytes())
    resign(ds)
    assert verify_dataset(ds, mode="full").ok  # the chain is consistent: only token checks can tell
    [p] = verify_dataset(ds, mode="deep").problems
    assert (p.check, p.shard, p.byte_range) == (Check.TOKENS, "shard-00001", (off, off + 2))
    assert "id 300" in p.detail


def test_deep_finds_a_document_without_eos(ds):
    s = _shard(ds, "shard-00002")
    end = int(s.index.pointers[1]) + 2 * int(s.index.lengths[1]) - 2
    with open(ds / "shard-00002.bin", "r+b") as f:
        f.seek(end)
        f.write(np.array([65], "<u2").tobytes())
    resign(ds)
    [p] = verify_dataset(ds, mode="deep").problems
    assert (p.check, p.shard, p.byte_range) == (Check.EOS, "shard-00002", (end, end + 2))
    assert "1 of" in p.detail and "document 1 " in p.detail


def test_deep_checks_bos_when_the_manifest_says_so(ds):
    resign(ds, lambda d: d.__setitem__("bos_prepended", True))
    r = verify_dataset(ds, mode="deep")
    assert {p.check for p in r.problems} == {Check.BOS} and len(r.bad_shards) == r.shards


def test_deep_without_tokenizer_is_a_note(tmp_path):
    write_dataset(tmp_path / "ds", [np.arange(9, dtype=np.uint16)] * 3, checksum_block_size=BLOCK)
    r = verify_dataset(tmp_path / "ds", mode="deep")
    assert r.ok and any("no tokenizer" in n for n in r.notes)


def test_decode_sample_with_the_bytes_tokenizer(ds):
    r = verify_dataset(ds, mode="deep", decode_sample=4)
    assert r.ok and len(r.samples) == 4
    original = texts(30)
    for s in r.samples:
        assert s["text"] == original[s["doc"]] + "<|endoftext|>"
    assert r.samples[0]["doc"] == 0 and r.samples[-1]["doc"] == 29


def test_progress_reports_each_phase_to_its_end(ds):
    seen = []
    verify_dataset(ds, mode="deep", progress=seen.append, jobs=2)
    phases = {p.phase for p in seen}
    assert phases == {"structure", "content", "tokens"}
    for phase in phases:
        last = [p for p in seen if p.phase == phase][-1]
        assert last.done == last.total > 0


def test_bad_arguments_raise_config_error(ds):
    with pytest.raises(ConfigError, match="mode"):
        verify_dataset(ds, mode="fast")
    with pytest.raises(ConfigError, match="jobs"):
        verify_dataset(ds, jobs=0)
    with pytest.raises(ConfigError, match="decode_sample"):
        verify_dataset(ds, decode_sample=-1)


def test_fifo_and_outside_symlink_are_missing_without_hanging(ds, tmp_path):
    (ds / "shard-00000.idx").unlink()
    os.mkfifo(ds / "shard-00000.idx")
    outside = tmp_path / "elsewhere.bin"
    os.replace(ds / "shard-00001.bin", outside)
    os.symlink(outside, ds / "shard-00001.bin")
    r = verify_dataset(ds, mode="deep")
    by = {p.shard: p for p in r.problems if p.check is Check.MISSING}
    assert "not a regular file" in by["shard-00000"].detail
    assert "outside the dataset" in by["shard-00001"].detail


def test_stray_files_are_noted_not_failed(ds):
    (ds / "shard-00000.bin.bak").write_bytes(b"x")
    r = verify_dataset(ds, mode="quick")
    assert r.ok and any("shard-00000.bin.bak" in n for n in r.notes)


def test_adopted_megatron_data_checks_document_count(ds, tmp_path):
    from shardkit.adopt import adopt

    out = tmp_path / "adopted"
    adopt([ds / "shard-00000", ds / "shard-00001"], out, checksum_block_size=BLOCK)
    r = verify_dataset(out, mode="deep")
    assert r.ok, r.to_json()
    assert any("no tokenizer" in n for n in r.notes)
    resign(out, lambda d: d["stats"].__setitem__("megatron_documents", 999))
    [p] = verify_dataset(out, mode="quick").problems
    assert p.check is Check.STATS and "megatron_documents" in p.detail
