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


def test_verify_on_read_stops_on_a_flipped_byte_or_skips_it_and_says_so(tmp_path):
    d = tmp_path / "ds"
    rng = np.random.default_rng(6)
    write_dataset(d, [rng.integers(0, 500, size=int(rng.integers(5, 200)), dtype=np.uint16) for _ in range(400)],
                  max_tokens_per_shard=9000, checksum_block_size=4096)
    args = ["stream", str(d), "--seq-len", "32", "--batch", "4", "--steps", "150", "--verify-on-read"]
    clean = CliRunner().invoke(cli, [*args, "--json"])
    assert clean.exit_code == 0 and json.loads(clean.output)["metrics"]["integrity"]["corrupt_blocks"] == 0
    f = d / "shard-00000.bin"
    raw = bytearray(f.read_bytes())
    raw[4096 + 10] ^= 1
    f.write_bytes(bytes(raw))
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "checksum block 1 of shard shard-00000" in r.output and "shardkit verify --full" in r.output
    r = CliRunner().invoke(cli, [*args, "--on-corrupt", "skip"])
    assert r.exit_code == 0, r.output
    assert "1 damaged" in r.output and "rows replaced (on_corrupt=skip)" in r.output
    assert "shard shard-00000, block 1" in r.output
    got = json.loads(CliRunner().invoke(cli, [*args, "--on-corrupt", "skip", "--json"]).output)
    assert got["metrics"]["integrity"]["rows_replaced"] == sum(e["rows_replaced"]
                                                               for e in got["metrics"]["integrity"]["events"]) > 0
