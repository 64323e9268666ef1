"""`shardkit stream --order megatron`: the loader's Megatron order from the command line."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit import Loader
from shardkit.stream import stream
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("m") / "ds"
    rng = np.random.default_rng(8)
    write_dataset(d, [rng.integers(0, 500, size=int(rng.integers(5, 300)), dtype=np.uint16) for _ in range(400)],
                  max_tokens_per_shard=12000, checksum_block_size=4096)
    return d


def _stream(*args, code=0):
    r = CliRunner().invoke(cli, ["stream", *map(str, args), "--json"])
    assert r.exit_code == code, r.output
    return json.loads(r.output) if code == 0 else r.output


_BLEND = ["--order", "megatron", "--megatron-samples", "2000", "--megatron-data-path",
          "0.7 shard-00001 0.3 shard-00000", "--seq-len", "32", "--batch", "8", "--micro-batch-size", "2",
          "--seed", "4"]


def test_cli_streams_the_loaders_megatron_order(ds, tmp_path):
    out = _stream(ds, *_BLEND, "--steps", "20", "--world-size", "2", "--rank", "1",
                  "--megatron-cache-dir", tmp_path / "c")
    loader = Loader(ds, seq_len=32, batch_schedule=8, micro_batch_size=2, seed=4, world_size=2, rank=1,
                    order="megatron", megatron={"num_samples": 2000, "prefixes": ["shard-00001", "shard-00000"],
                                                "weights": [0.7, 0.3]})
    assert out["digest"] == stream(loader, steps=20).digest
    assert out["state_after"]["stream"]["definition"]["order"]["kind"] == "megatron"
    # a Megatron checkpoint's counter continues where --start-step of the same batch does
    a = _stream(ds, *_BLEND, "--steps", "5", "--consumed-samples", "48")
    b = _stream(ds, *_BLEND, "--steps", "5", "--start-step", "6")
    assert a["digest"] == b["digest"] and a["first_batch"] == 6


def test_cli_streams_another_split(ds):
    out = _stream(ds, *_BLEND, "--megatron-split", "90,10,0", "--megatron-split-name", "valid", "--steps", "5")
    loader = Loader(ds, seq_len=32, batch_schedule=8, micro_batch_size=2, seed=4, order="megatron",
                    megatron={"num_samples": 2000, "prefixes": ["shard-00001", "shard-00000"], "weights": [0.7, 0.3],
                              "split": "90,10,0", "split_name": "valid"})
    assert out["digest"] == stream(loader, steps=5).digest
    assert out["digest"] != _stream(ds, *_BLEND, "--megatron-split", "90,10,0", "--steps", "5")["digest"]


def test_dataloader_workers_deliver_the_same_batches(ds, tmp_path):
    pytest.importorskip("torch")
    cache = ["--megatron-cache-dir", tmp_path / "c"]  # the workers reopen the order from the index cache
    one = _stream(ds, *_BLEND, "--steps", "12", *cache)
    two = _stream(ds, *_BLEND, "--steps", "12", "--workers", "2", *cache)
    assert one["digest"] == two["digest"] and two["batches"] == 12


def test_cli_megatron_usage_errors(ds):
    assert "applies to --order megatron only" in _stream(ds, "--megatron-samples", "10", code=2)
    assert "needs --megatron-samples" in _stream(ds, "--order", "megatron", code=2)
    assert "WEIGHT SHARD" in _stream(ds, *_BLEND[:4], "--megatron-data-path", "0.5", code=2)
    out = _stream(ds, *_BLEND[:4], "--megatron-data-path", "0.5 nope 0.5 shard-00000", code=1)
    assert "no shard named 'nope'" in out and "Traceback" not in out
