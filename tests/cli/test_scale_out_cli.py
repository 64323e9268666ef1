"""`shardkit pack --num-tasks/--task-id` and `shardkit merge`: a job array gives what one command gives."""

import json

import pytest
from click.testing import CliRunner
from support.dataset_bytes import dataset_files

from cli.main import cli
from shardkit import open_dataset


@pytest.fixture()
def src(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for k in range(2):
        (d / f"f{k}.jsonl").write_text("".join(json.dumps({"text": f"{k}:{i} " + "x" * (i % 90)}) + "\n"
                                               for i in range(150)))
    return d


def _pack(src, out, *extra):
    return CliRunner().invoke(cli, ["pack", str(src), "-o", str(out), "--shard-size", "4KB", "--checksum-block-size",
                                    "4KiB", "--workers", "1", "--quiet", "-t", "bytes", "--split-granularity", "2KiB", *extra])


def test_job_array_then_merge_equals_one_job_command(src, tmp_path):
    for i in range(3):  # what a Slurm array runs: one task per array index
        r = _pack(src, tmp_path / "parts" / f"t{i}", "--num-tasks", "3", "--task-id", str(i))
        assert r.exit_code == 0, r.output
        assert f"→ {tmp_path / 'parts' / f't{i}'}" in r.output
    parts = [str(tmp_path / "parts" / f"t{i}") for i in (2, 0, 1)]  # any order
    r = CliRunner().invoke(cli, ["merge", *parts, "-o", str(tmp_path / "merged")])
    assert r.exit_code == 0, r.output
    assert "merged 3 part(s)" in r.output and "hard-linked" in r.output
    again = CliRunner().invoke(cli, ["merge", *parts, "-o", str(tmp_path / "merged"), "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["already_merged"] is True
    r = _pack(src, tmp_path / "job", "--num-tasks", "3", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["executor"] == "local" and report["num_tasks"] == 3 and report["parts_dir"] is None
    assert report["fingerprint"] == open_dataset(tmp_path / "merged").fingerprint
    assert dataset_files(tmp_path / "job") == dataset_files(tmp_path / "merged")
    assert not (tmp_path / "job.parts").exists()


def test_job_text_summary_and_kept_parts(src, tmp_path):
    r = _pack(src, tmp_path / "job", "--num-tasks", "2", "--keep-parts", "--parts-dir", str(tmp_path / "pp"))
    assert r.exit_code == 0, r.output
    assert "as 2 task(s) on local" in r.output and f"parts kept in {tmp_path / 'pp'}" in r.output
    assert sorted(p.name for p in (tmp_path / "pp").iterdir()) == ["task-00000", "task-00001"]


@pytest.mark.parametrize("args, message", [
    (["--task-id", "1"], "--task-id needs --num-tasks"),
    (["--num-tasks", "3", "--task-id", "3"], "not below --num-tasks 3"),
    (["--executor", "ray"], "--executor ray needs --num-tasks"),
    (["--num-tasks", "2", "--task-id", "0", "--executor", "ray"], "drop --task-id"),
    (["--num-tasks", "0"], "0"),
])
def test_usage_errors_exit_2(src, tmp_path, args, message):
    r = _pack(src, tmp_path / "o", *args)
    assert r.exit_code == 2 and message in r.output, r.output


def test_merge_errors_are_one_line_exit_1(src, tmp_path):
    assert _pack(src, tmp_path / "t0", "--num-tasks", "2", "--task-id", "0").exit_code == 0
    r = CliRunner().invoke(cli, ["merge", str(tmp_path / "t0"), "-o", str(tmp_path / "m")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.startswith("Error: missing part(s) for task(s) 1 of 2") and len(r.output.strip().splitlines()) == 1
    assert CliRunner().invoke(cli, ["merge", "-o", str(tmp_path / "m")]).exit_code == 2


def test_rerunning_a_finished_task_keeps_its_part(src, tmp_path):
    args = ["--num-tasks", "2", "--task-id", "1"]
    assert _pack(src, tmp_path / "t1", *args).exit_code == 0
    before = dataset_files(tmp_path / "t1")
    r = _pack(src, tmp_path / "t1", *args)  # a re-submitted job array: this task is already done
    assert r.exit_code == 0 and "finished part is kept" in r.output, r.output
    assert dataset_files(tmp_path / "t1") == before
    r = _pack(src, tmp_path / "t1", "--num-tasks", "3", "--task-id", "1")  # not this task's part: refused
    assert r.exit_code == 1 and "not this task's part" in r.output and "--overwrite" in r.output
