"""`shardkit stream --packing` and `shardkit inspect --packing`: the report, determinism, usage errors; and
`--packing-store`: the same batches (digest) as gathered packed rows, the store built in the packing cache,
and a clear error without packed rows."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("p") / "ds"
    rng = np.random.default_rng(9)
    write_dataset(d, [rng.integers(0, 500, size=int(rng.integers(2, 150)), dtype=np.uint16) for _ in range(500)],
                  max_tokens_per_shard=9000, checksum_block_size=4096)
    return d


def _run(*args, code=0):
    r = CliRunner().invoke(cli, list(map(str, args)))
    assert r.exit_code == code, r.output
    return r.output


def test_stream_packed_rows_report_and_digest(ds, tmp_path):
    common = [ds, "--seq-len", "64", "--batch", "8", "--steps", "30", "--packing-cache-dir", tmp_path / "pc"]
    a = json.loads(_run("stream", *common, "--packing", "best_fit", "--json"))
    again = json.loads(_run("stream", *common, "--packing", "best_fit", "--json"))
    ff = json.loads(_run("stream", *common, "--packing", "first_fit", "--json"))
    win = json.loads(_run("stream", *common, "--json"))
    assert a["digest"] == again["digest"] and a["digest"] != ff["digest"] != win["digest"]
    p = a["packing"]
    assert p["strategy"] == "best_fit" and p["seq_len"] == 64 and 0 <= p["padding_fraction"] < 0.05
    assert p["documents"] == 500 and p["rows"] > 0
    assert ff["packing"]["padding_fraction"] >= p["padding_fraction"]
    assert "packing" not in win
    text = _run("stream", *common, "--packing", "best_fit", "--world-size", "4", "--rank", "2")
    assert "packing best_fit at seq_len 64:" in text and "% padding" in text and "balanced" in text


def test_stream_packing_usage_errors(ds, tmp_path):
    out = _run("stream", ds, "--packing", "bestfit", code=2)
    assert "'bestfit' is not one of" in out
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"seq_len": 32, "sources": {"a": {"path": str(ds)}},
                                  "phases": [{"name": "p", "tokens": 10000, "batch": 4, "mix": {"a": 1}}]}))
    assert "--packing does not apply with --recipe" in _run("stream", "--recipe", recipe, "--packing", "best_fit",
                                                            code=2)
    assert "balance_ranks=True deals packed rows" in _run("stream", ds, "--balance-ranks", code=1)


def test_inspect_reports_packing(ds, tmp_path):
    text = _run("inspect", ds, "--packing", "best_fit", "--seq-len", "64", "--world-size", "4", "--batch", "16",
                "--packing-cache-dir", tmp_path / "pc")
    assert "packing    best_fit at seq_len 64:" in text and "world size 4" in text
    data = json.loads(_run("inspect", ds, "--packing", "first_fit", "--seq-len", "64", "--json",
                           "--packing-cache-dir", tmp_path / "pc"))
    assert data["packing"]["strategy"] == "first_fit" and data["packing"]["balance"]["world_size"] == 8
    assert "not divisible" in _run("inspect", ds, "--packing", "best_fit", "--batch", "6", "--world-size", "4",
                                   code=2)


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
