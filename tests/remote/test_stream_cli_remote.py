"""`shardkit stream s3://…`: the CLI streams a remote dataset through the block cache, with the same digest
as the local dataset, and says clearly what is wrong with a bad URL or a cache flag on a local dataset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit.writer import write_dataset

FLAGS = ["--seq-len", "127", "--batch", "8", "--steps", "30", "--seed", "5", "--json"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    rng = np.random.default_rng(11)
    docs = [rng.integers(0, 60000, size=int(rng.integers(20, 2000)), dtype=np.uint16) for _ in range(200)]
    path = tmp_path_factory.mktemp("stream-cli") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=60_000, checksum_block_size=16 << 10)
    return path


def _upload(s3, local) -> str:
    client = s3.server.client()
    for f in sorted(local.iterdir()):
        client.put_object(Bucket=s3.bucket, Key=f"ds/{f.name}", Body=f.read_bytes())
    return s3.url("ds")


def _invoke(*args):
    return CliRunner().invoke(cli, ["stream", *map(str, args)])


def test_remote_stream_has_the_local_digest(s3, local, tmp_path):
    url = _upload(s3, local)
    here = _invoke(local, *FLAGS)
    there = _invoke(url, *FLAGS, "--cache-dir", tmp_path / "cache", "--cache-limit", "8MiB",
                    "--storage-option", f"client_kwargs.endpoint_url={s3.endpoint_url}")
    assert here.exit_code == 0 and there.exit_code == 0, (here.output, there.output)
    a, b = json.loads(here.output), json.loads(there.output)
    assert a["digest"] == b["digest"] and a["tokens"] == b["tokens"] == 30 * 8 * 127
    assert b["cache"]["bytes_downloaded"] > 0 and b["cache"]["cache_used"] <= 8 << 20
    # the same again in a new process (download counters are per process): everything is cached, and
    # each cached block is verified on its first pin instead of downloaded
    warm = subprocess.run([str(Path(sys.executable).with_name("shardkit")), "stream", url, *FLAGS, "--cache-dir",
                           str(tmp_path / "cache"), "--cache-limit", "8MiB", "--storage-option",
                           f"client_kwargs.endpoint_url={s3.endpoint_url}"], capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    w = json.loads(warm.stdout)
    assert w["digest"] == a["digest"] and w["cache"]["bytes_downloaded"] == 0 and w["cache"]["blocks_verified"] > 0

def test_text_report_shows_the_cache(s3, local, tmp_path):
    url = _upload(s3, local)
    r = _invoke(url, "--seq-len", "127", "--batch", "4", "--steps", "5", "--cache-dir", tmp_path / "c",
                "--storage-option", f"client_kwargs.endpoint_url={s3.endpoint_url}")
    assert r.exit_code == 0, r.output
    assert "cache:" in r.output and "MiB downloaded" in r.output


def test_bad_urls_and_misplaced_flags_are_one_line_errors(s3, local, tmp_path):
    missing = _invoke(s3.url("no-such-dataset"), *FLAGS, "--cache-dir", tmp_path / "c",
                      "--storage-option", f"client_kwargs.endpoint_url={s3.endpoint_url}")
    assert missing.exit_code == 1 and "Traceback" not in missing.output
    assert "no-such-dataset" in missing.output.strip().splitlines()[-1]
    not_dir = _invoke(tmp_path / "nothing-here", *FLAGS)
    assert not_dir.exit_code == 2 and "not a directory" in not_dir.output
    flag = _invoke(local, *FLAGS, "--cache-limit", "1GiB")
    assert flag.exit_code == 2 and "--cache-limit applies to a remote DATASET URL only" in flag.output
