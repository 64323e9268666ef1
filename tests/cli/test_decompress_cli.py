"""`shardkit pack --compression zstd`, `inspect`, `verify` and `decompress` from the command line."""

import json

import pytest
from click.testing import CliRunner
from support.dataset_bytes import assert_same_dataset
from unit.verify.verify_testutil import flip_bit

from cli.main import cli
from shardkit.format.zstd_frames import FramedReader


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli-zst")
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"line {i} " + "the same words again " * (i % 9 + 1)}) + "\n"
                           for i in range(400)))
    common = ["--shard-size", "8KB", "--checksum-block-size", "4KiB", "-w", "1", "-q", "-t", "bytes"]
    plain, comp = base / "plain", base / "zst"
    assert run("pack", src, "-o", plain, *common).exit_code == 0
    r = run("pack", src, "-o", comp, *common, "--compression", "zstd", "--compression-level", "6",
            "--frame-size", "2KiB")
    assert r.exit_code == 0, r.output
    assert "compressed (zstd) to" in r.output
    return src, plain, comp


def test_pack_writes_zst_shards_with_options_in_the_manifest(packed):
    _, _, comp = packed
    doc = json.loads((comp / "manifest.json").read_text())
    assert doc["pack"]["options"]["compression"] == {"codec": "zstd", "level": 6, "frame_size": 2048}
    assert doc["format_version"] == 2
    assert sorted({p.suffix for p in comp.iterdir() if not p.name.startswith(".")}) == [".idx", ".json", ".zst"]


@pytest.mark.parametrize("args", [["--compression-level", "5"], ["--frame-size", "1MiB"],
                                  ["--compression", "zstd", "--compression-level", "30"],
                                  ["--compression", "zstd", "--frame-size", "0"],
                                  ["--compression", "zstd", "--frame-size", "2GiB"],
                                  ["--compression", "lz4"]])
def test_bad_compression_options_are_usage_errors(packed, tmp_path, args):
    src, _, _ = packed
    r = run("pack", src, "-o", tmp_path / "o", "-q", "-t", "bytes", *args)
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_inspect_shows_ratio_per_shard_and_total(packed):
    _, _, comp = packed
    r = run("inspect", comp)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("compressed "))
    assert "zstd level 6, 2.0 KiB frames" in line and "ratio" in line
    assert "shard-00000" in r.output and "×" in r.output
    doc = json.loads(run("inspect", comp, "--json").output)
    assert doc["stored_bytes"] < doc["bin_bytes"] and len(doc["compression"]) == doc["shards"]
    assert "compressed" not in run("inspect", packed[1]).output


def test_verify_names_the_frame_of_a_flipped_bit(packed, tmp_path):
    _, _, comp = packed
    import shutil
    d = tmp_path / "d"
    shutil.copytree(comp, d)
    zst = d / "shard-00001.bin.zst"
    with FramedReader(zst) as r:
        f = r.index.frames[2]
    flip_bit(zst, f.offset + 3, 2)
    assert run("verify", d, "--quick", "-q").exit_code == 0  # --quick reads no frame
    res = run("verify", d, "-q")
    assert res.exit_code == 1
    row = next(x for x in res.output.splitlines() if " frames " in x)
    assert row.startswith("shard-00001") and "frame 2 " in row
    assert f"bytes [{f.offset}, {f.offset + f.length})" in row
    doc = json.loads(run("verify", d, "--json").output)
    assert doc["bad_shards"] == ["shard-00001"] and doc["bytes_decompressed"] > 0


def test_decompress_round_trip_equals_the_plain_pack(packed, tmp_path):
    _, plain, comp = packed
    out = tmp_path / "back"
    r = run("decompress", comp, "-o", out, "-q")
    assert r.exit_code == 0, r.output
    assert "decompressed" in r.output and "fingerprint" in r.output
    assert_same_dataset(plain, out)
    assert run("verify", out, "-q").exit_code == 0
    doc = json.loads(run("decompress", comp, "-o", tmp_path / "again", "--json").output)
    assert doc["fingerprint"] == json.loads((plain / "manifest.json").read_text())["fingerprint"]


def test_decompress_refuses_a_non_empty_output_and_a_corrupt_source(packed, tmp_path):
    _, _, comp = packed
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = run("decompress", comp, "-o", tmp_path / "full")
    assert r.exit_code == 1 and "not empty" in r.output and "Traceback" not in r.output
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(comp, bad)
    zst = bad / "shard-00000.bin.zst"
    with FramedReader(zst) as rd:
        f = rd.index.frames[1]
    flip_bit(zst, f.offset + 1, 0)
    r = run("decompress", bad, "-o", tmp_path / "out")
    assert r.exit_code == 1 and "frame 1" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out").glob("*.bin"))
