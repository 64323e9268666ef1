"""`merge_parts`: one valid dataset over real parts, refusing parts that do not belong together."""

import json
import os

import numpy as np
import pytest
from support.dataset_bytes import dataset_files
from support.paths import GPT2_JSON

from shardkit import Loader, LoaderConfig, open_dataset, verify_dataset
from shardkit.errors import ManifestError, PackError
from shardkit.format.manifest import MANIFEST_NAME
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.pack.merge import merge_parts
from shardkit.pack.tasks import TaskSpec
from shardkit.verify.report import Verdict
from shardkit.writer import ShardLimits
from shardkit.writer.journal import MERGE_MARKER_NAME

LIMITS = ShardLimits(max_bytes=3000, checksum_block_size=4096)


def _src(d):
    d.mkdir()
    for k in range(3):
        with open(d / f"f{k}.jsonl", "w") as f:
            for i in range(120):
                f.write(json.dumps({"text": f"file {k} doc {i} " + "ab" * (i % 40)}) + "\n")
    return d


def _part(src, out, n, i, **kw):
    kw.setdefault("limits", LIMITS)
    pack(PackConfig(inputs=(str(src),), output=str(out), workers=1,
                    task=TaskSpec(num_tasks=n, task_id=i, granularity=kw.pop("granularity", 1024)), **kw))
    return out


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    base = tmp_path_factory.mktemp("merge")
    src = _src(base / "in")
    return src, [_part(src, base / f"p{i}", 3, i) for i in range(3)]


def test_merge_is_a_valid_dataset_the_loader_streams(parts, tmp_path):
    src, ps = parts
    r = merge_parts(ps, tmp_path / "m")
    assert r.parts == 3 and not r.already_merged and r.linked_files == 3 * len(r.manifest.shards)
    ds = open_dataset(tmp_path / "m")
    assert [s.name for s in ds] == [s.name for p in ps for s in open_dataset(p)]  # task order
    assert verify_dataset(tmp_path / "m", mode="full").ok
    first = next(iter(Loader(tmp_path / "m", LoaderConfig(seq_len=64, batch_schedule=4, seed=1))))
    assert first["input_ids"].shape[0] == 4
    # no byte copied: every shard file is the part's own inode
    for s in ds:
        name = s.entry.bin_name
        a, b = (tmp_path / "m" / name).stat(), next(p / name for p in ps if (p / name).exists()).stat()
        assert a.st_ino == b.st_ino and a.st_nlink >= 2
    tasks = ds.manifest.pack["tasks"]
    assert tasks["num_tasks"] == 3 and [p["task_id"] for p in tasks["parts"]] == [0, 1, 2]


def test_remerge_is_idempotent_in_place_and_elsewhere(parts, tmp_path):
    _, ps = parts
    a = merge_parts(ps, tmp_path / "a")
    before = (tmp_path / "a" / MANIFEST_NAME).read_bytes()
    again = merge_parts(list(reversed(ps)), tmp_path / "a")
    assert again.already_merged and again.fingerprint == a.fingerprint and again.linked_files == 0
    assert (tmp_path / "a" / MANIFEST_NAME).read_bytes() == before  # left as it was
    b = merge_parts(ps, tmp_path / "b")
    assert b.fingerprint == a.fingerprint
    assert dataset_files(tmp_path / "a") == dataset_files(tmp_path / "b")


def test_crash_mid_merge_then_rerun_finishes_identically(parts, tmp_path):
    _, ps = parts
    clean = merge_parts(ps, tmp_path / "clean")
    out = tmp_path / "out"
    out.mkdir()
    names = [s.name for s in clean.manifest.shards]
    blocker = out / f"{names[len(names) // 2]}.idx"
    blocker.mkdir()  # the merge stops half-way, as if killed: some shards linked, no manifest
    (out / f".{names[0]}.bin.tmp").write_bytes(b"leftover of a killed earlier try")
    with pytest.raises(PackError, match="run the merge again"):
        merge_parts(ps, out)
    assert not (out / MANIFEST_NAME).exists() and (out / f"{names[0]}.bin").exists()
    stopped = verify_dataset(out, mode="full")  # unfinished, not a dataset that lost its manifest
    assert stopped.verdict is Verdict.INCOMPLETE and "unfinished merge" in " ".join(stopped.notes)
    with pytest.raises(ManifestError, match="unfinished merge"):
        open_dataset(out)
    blocker.rmdir()
    r = merge_parts(ps, out)
    assert r.fingerprint == clean.fingerprint and 0 < r.linked_files < clean.linked_files
    assert dataset_files(out) == dataset_files(tmp_path / "clean")
    assert verify_dataset(out, mode="full").ok and not (out / MERGE_MARKER_NAME).exists()


def test_a_merge_marker_left_beside_the_manifest_is_noted_then_removed(parts, tmp_path):
    """Killed between writing the manifest and removing its marker: a finished dataset; merging again
    (a no-op) tidies up."""
    _, ps = parts
    merge_parts(ps, tmp_path / "a")
    (tmp_path / "a" / MERGE_MARKER_NAME).write_text("{}\n")
    report = verify_dataset(tmp_path / "a", mode="quick")
    assert report.ok and any(MERGE_MARKER_NAME in n for n in report.notes)
    assert merge_parts(ps, tmp_path / "a").already_merged
    assert not (tmp_path / "a" / MERGE_MARKER_NAME).exists()


def test_refuses_missing_and_duplicate_parts(parts, tmp_path):
    _, ps = parts
    with pytest.raises(PackError, match=r"missing part\(s\) for task\(s\) 1 of 3.*--task-id 1"):
        merge_parts([ps[0], ps[2]], tmp_path / "m")
    with pytest.raises(PackError, match=f"task 2 is given twice: {ps[2]} and {ps[2]}"):
        merge_parts([*ps, ps[2]], tmp_path / "m")
    with pytest.raises(PackError, match="no parts given"):
        merge_parts([], tmp_path / "m")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("change, message", [
    ({"limits": ShardLimits(max_bytes=5000, checksum_block_size=4096)}, "different options.*shard_max_bytes"),
    ({"tokenize": TokenizeOptions(append_eos=False)}, "different EOS setting"),
    pytest.param({"tokenize": TokenizeOptions(tokenizer=str(GPT2_JSON))}, "different tokenizer",
                 marks=pytest.mark.skipif(not GPT2_JSON.is_file(), reason="../shared GPT-2 tokenizer not present")),
    ({"granularity": 2048}, "different split.*split granularity"),
])
def test_refuses_parts_packed_differently(parts, tmp_path, change, message):
    src, ps = parts
    odd = _part(src, tmp_path / "odd", 3, 1, **change)
    with pytest.raises(PackError, match=message) as e:
        merge_parts([ps[0], odd, ps[2]], tmp_path / "m")
    assert str(odd) in str(e.value)


def test_refuses_parts_of_another_split(parts, tmp_path):
    src, ps = parts
    other = _part(src, tmp_path / "other", 4, 1)
    with pytest.raises(PackError, match="different split.*number of tasks"):
        merge_parts([ps[0], other, ps[2]], tmp_path / "m")


def test_refuses_unfinished_and_non_task_parts(parts, tmp_path):
    src, ps = parts

    def interrupt(progress):
        if progress.shards >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(PackConfig(inputs=(str(src),), output=str(tmp_path / "half"), limits=LIMITS, workers=1,
                        task=TaskSpec(num_tasks=3, task_id=1, granularity=1024)), progress=interrupt)
    with pytest.raises(PackError, match=r"unfinished \(task 1 of 3.*--task-id 1"):
        merge_parts([ps[0], tmp_path / "half", ps[2]], tmp_path / "m")
    pack(PackConfig(inputs=(str(src),), output=str(tmp_path / "plain"), limits=LIMITS, workers=1))
    with pytest.raises(PackError, match="not packed as a task"):
        merge_parts([tmp_path / "plain"], tmp_path / "m")
    with pytest.raises(PackError, match="not a directory"):
        merge_parts([tmp_path / "nowhere"], tmp_path / "m")


def test_refuses_to_clobber_another_dataset_or_a_part(parts, tmp_path):
    src, ps = parts
    pack(PackConfig(inputs=(str(src),), output=str(tmp_path / "other"), limits=LIMITS, workers=1))
    with pytest.raises(PackError, match="not the merge of these parts.*--overwrite"):
        merge_parts(ps, tmp_path / "other")
    r = merge_parts(ps, tmp_path / "other", overwrite=True)
    assert open_dataset(tmp_path / "other").fingerprint == r.fingerprint
    with pytest.raises(PackError, match="is one of the parts"):
        merge_parts(ps, ps[1])
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(PackError, match="not a shardkit output"):
        merge_parts(ps, tmp_path / "foreign")


def test_a_corrupted_sidecar_is_refused_before_linking(parts, tmp_path):
    src, _ = parts
    ps = [_part(src, tmp_path / f"q{i}", 2, i) for i in range(2)]
    sidecar = next(ps[1].glob("*.sum.json"))
    sidecar.write_bytes(sidecar.read_bytes().replace(b'"version"', b'"version" '))
    with pytest.raises(PackError, match=f"{sidecar.name} does not match its manifest"):
        merge_parts(ps, tmp_path / "m")
    assert not any(p.suffix == ".bin" for p in (tmp_path / "m").iterdir())


def test_merged_tokens_are_the_parts_tokens_in_task_order(parts, tmp_path):
    _, ps = parts
    merge_parts(ps, tmp_path / "m")
    tokens = np.concatenate([s.tokens for s in open_dataset(tmp_path / "m")])
    want = np.concatenate([s.tokens for p in ps for s in open_dataset(p)])
    assert np.array_equal(tokens, want)
    assert os.path.exists(tmp_path / "m" / MANIFEST_NAME)
