"""The I/O planner: its page geometry against brute force, its predictions against the bytes a real node
reads from storage (the kernel's count, files evicted first, in a memory cgroup where allowed), and
`shardkit plan`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.token_data import random_dataset

from cli.main import cli
from shardkit import Loader
from shardkit.planner import Cluster, bytes_per_sample, coverage, plan_loader
from shardkit.planner.geometry import PAGE
from shardkit.planner.measure import measure_node


@settings(max_examples=60, deadline=None)
@given(seq_len=st.integers(1, 5000), itemsize=st.sampled_from([1, 2, 4]))
def test_page_coverage_equals_counting_the_windows(seq_len, itemsize):
    k = coverage(seq_len, itemsize)
    stride, width = seq_len * itemsize, (seq_len + 1) * itemsize
    windows = np.arange(0, (k.size + 2) * PAGE // stride + 2, dtype=np.int64) * stride
    for p in range(1, min(k.size, 50)):  # page 0 has no window before it in this count; the period repeats
        lo, hi = p * PAGE, (p + 1) * PAGE
        assert k[p] == int(((windows < hi) & (windows + width > lo)).sum())


def test_bytes_per_sample_bounds():
    assert bytes_per_sample(2048, 2, 1.0) == 4096  # one node reads every page once
    # sparse rows: each 2,049-token window spans 2 pages, so ≈ 2 pages per own row
    assert bytes_per_sample(2048, 2, 1 / 64) == pytest.approx(2 * 4096 / 64, rel=0.01)
    assert bytes_per_sample(2048, 2, 0.25) == pytest.approx(4096 * (1 - 0.75 ** 2))
    with pytest.raises(ValueError):
        bytes_per_sample(2048, 2, 0.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 M uint16 tokens (64 MiB) in 16 MiB shards."""
    return random_dataset(tmp_path_factory.mktemp("planner") / "ds", 32 << 20, shard_bytes=16 << 20, seed=7)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io (Linux)")
@pytest.mark.parametrize("world, per_node, seq_len, batch, block, groups, steps", [
    (8, 2, 2048, 64, 64, 16, 1000),  # a node of 2 ranks in 8: a quarter of every group
    (4, 1, 1024, 32, 128, 8, 2000),  # one rank in 4, shorter rows (3 windows per page)
])
def test_predicted_node_reads_match_the_kernels_count(dataset, world, per_node, seq_len, batch, block, groups,
                                                      steps):
    options = {"seq_len": seq_len, "batch_schedule": batch, "seed": 1, "block_samples": block,
               "group_blocks": groups}
    cache = 64 << 20
    with Loader(dataset, world_size=world, rank=0, **options) as loader:
        plan = plan_loader(loader, Cluster(nodes=world // per_node, ranks_per_node=per_node,
                                           page_cache_bytes=cache), points=50)
    assert plan.first_overflow is None
    warm = 100
    got = measure_node(dataset, world_size=world, ranks=list(range(per_node)), warm_steps=warm, steps=steps,
                       memory_limit=cache, loader_options=options)
    if not got["evicted"]:
        pytest.skip("this file system keeps clean pages after POSIX_FADV_DONTNEED: reads cannot be counted")
    predicted = plan.node_bytes_between(warm, warm + steps)
    assert got["read_bytes"] == pytest.approx(predicted, rel=0.10), (got, predicted)


def _recipe(tmp_path: Path, dataset: Path) -> Path:
    recipe = {"seed": 0, "seq_len": 512, "sources": {"a": {"path": str(dataset)}},
              "phases": [{"name": "warm", "tokens": 2_000_000, "batch": {"ramp": {"start": 8, "increment": 8,
                                                                                  "ramp_samples": 1000,
                                                                                  "final": 32}},
                          "mix": {"a": 1}},
                         {"name": "long", "seq_len": 2048, "tokens": 4_000_000, "batch": 16, "mix": {"a": 1}}]}
    p = tmp_path / "recipe.json"
    p.write_text(json.dumps(recipe))
    return p


def test_plan_cli_table_json_and_report(tmp_path, dataset):
    recipe = _recipe(tmp_path, dataset)
    args = ["plan", "--recipe", str(recipe), "--nodes", "2", "--ranks-per-node", "4", "--page-cache", "1MiB",
            "--gpu-tokens-per-second", "5000", "--storage-gbps", "0.001"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "stops fitting at step 0 (phase 'warm'" in out.output
    assert "storage is short from step" in out.output and "long" in out.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    phases = {i["phase_name"] for i in data["intervals"]}
    assert phases == {"warm", "long"}
    assert {i["batch_size"] for i in data["intervals"] if i["phase_name"] == "warm"} == {8, 16, 24, 32}
    for i in data["intervals"]:  # a node of 4 ranks in 8 reads half of every group, twice: nothing fits
        assert i["hit_rate"] == 0 and not i["fits"]
        assert i["node_bytes"] == pytest.approx(2 * i["samples"]["a"] * bytes_per_sample(i["seq_len"], 2, 0.5))
    report = tmp_path / "plan.html"
    out = CliRunner().invoke(cli, [*args, "--report", str(report)])
    assert out.exit_code == 0 and report.read_text().count("data:image/png;base64,") == 1
    bad = CliRunner().invoke(cli, [*args, "--report", str(tmp_path / "plan.txt")])
    assert bad.exit_code != 0 and "write a .png or an .html file" in bad.output
    both = CliRunner().invoke(cli, [*args, "--step-seconds", "1"])
    assert both.exit_code == 2 and "not both" in both.output


def test_plan_refuses_packed_rows_by_name(tmp_path, dataset):
    recipe = json.loads(_recipe(tmp_path, dataset).read_text())
    recipe["packing"] = "best_fit"
    p = tmp_path / "packed.json"
    p.write_text(json.dumps(recipe))
    out = CliRunner().invoke(cli, ["plan", "--recipe", str(p), "--nodes", "2", "--ranks-per-node", "4",
                                   "--page-cache", "1GiB"], env={"SHARDKIT_PACK_CACHE_DIR": str(tmp_path / "pk")})
    assert out.exit_code != 0 and "source(s) a use packed rows" in out.output
