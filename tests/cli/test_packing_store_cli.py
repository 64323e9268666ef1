"""`shardkit stream --packing-store`: the same batches (digest) as gathered packed rows, the store built in
the packing cache, and a clear error without packed rows."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("ps") / "ds"
    rng = np.random.default_rng(4)
    write_dataset(d, [rng.integers(0, 500, size=int(rng.integers(2, 150)), dtype=np.uint16) for _ in range(400)],
                  max_tokens_per_shard=9000, checksum_block_size=4096)
    return d


def _run(*args, code=0):
    r = CliRunner().invoke(cli, list(map(str, args)))
    assert r.exit_code == code, r.output
    return r.output


def test_stream_from_the_store_has_the_gathered_digest(ds, tmp_path):
    common = [ds, "--seq-len", "64", "--batch", "8", "--steps", "40", "--packing", "best_fit",
              "--packing-cache-dir", tmp_path / "pc", "--json"]
    gathered = json.loads(_run("stream", *common))
    stored = json.loads(_run("stream", *common, "--packing-store"))
    assert stored["digest"] == gathered["digest"]
    assert [p.name for p in (tmp_path / "pc").iterdir() if p.name.endswith(".rows")]


def test_stream_recipe_from_the_store(ds, tmp_path):
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"seed": 2, "packing": "first_fit", "sources": {"a": {"path": str(ds)}},
                                  "phases": [{"name": "p", "tokens": 20000, "seq_len": 32, "batch": 4,
                                              "mix": {"a": 1}}]}))
    common = ["--recipe", recipe, "--steps", "30", "--packing-cache-dir", tmp_path / "pc", "--json"]
    assert json.loads(_run("stream", *common))["digest"] == \
        json.loads(_run("stream", *common, "--packing-store"))["digest"]


def test_packing_store_without_packed_rows_is_an_error(ds):
    assert "packing_store=True stores packed rows" in _run("stream", ds, "--packing-store", code=1)
