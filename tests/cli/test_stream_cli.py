import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("s") / "ds"
    rng = np.random.default_rng(5)
    write_dataset(d, [rng.integers(0, 500, size=int(rng.integers(5, 200)), dtype=np.uint16) for _ in range(400)],
                  max_tokens_per_shard=9000, checksum_block_size=4096)
    return d


def _stream(*args):
    r = CliRunner().invoke(cli, ["stream", *map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_digest_is_deterministic_and_worker_independent(ds):
    a = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "40")
    again = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "40")
    assert again["digest"] == a["digest"]
    b = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "40", "--workers", "2")
    assert a["digest"] == b["digest"] and a["batches"] == 40 and a["tokens"] == 40 * 4 * 32
    c = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "40", "--seed", "1")
    assert c["digest"] != a["digest"]


def test_start_step_continues_the_same_stream(ds):
    whole = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "30", "--shuffle", "none")
    head = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "10", "--shuffle", "none")
    tail = _stream(ds, "--seq-len", "32", "--batch", "4", "--steps", "20", "--shuffle", "none", "--start-step", "10")
    assert head["last_batch"] == 9 and tail["first_batch"] == 10 and tail["last_batch"] == 29
    assert head["state_after"]["batch"] == 10 and whole["batches"] == 30


def test_bad_input_is_one_line(ds):
    r = CliRunner().invoke(cli, ["stream", str(ds), "--seq-len", "100000000"])
    assert r.exit_code == 1 and "seq_len" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["stream", str(ds), "--batch", "3", "--world-size", "2"])
    assert r.exit_code == 1 and "divisible" in r.output
