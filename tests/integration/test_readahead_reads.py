"""What a rank really reads from storage (the kernel's count, /proc/self/io), not what the loader hints.

With several ranks each rank reads its own rows of a shuffle group, about 1/W of it. A page fault on a
file mapping makes the kernel read around the faulting page (`read_ahead_kb`, often 128 KiB–2.5 MiB), which
would fetch the other ranks' rows too: W nodes would each read the whole group from shared storage. The
engine advises such mappings MADV_RANDOM; this test counts the bytes read in a fresh process whose files
were evicted from the page cache first (`shardkit.planner.measure`, which also validates the I/O planner).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.token_data import random_dataset

from shardkit.planner.measure import measure_node


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 MiB of uint16 tokens (16,384 rows of 2,048) in 16 MiB shards: 16 groups of 1,024 rows."""
    return random_dataset(tmp_path_factory.mktemp("reads") / "ds", 32 << 20, shard_bytes=16 << 20, seed=0)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io (Linux)")
def test_one_rank_of_eight_reads_about_its_own_rows_not_the_whole_group(dataset: Path) -> None:
    got = measure_node(dataset, world_size=8, ranks=[3], warm_steps=0, steps=64,
                       loader_options={"seq_len": 2048, "batch_schedule": 64, "seed": 3, "shuffle": "block",
                                       "block_samples": 64, "group_blocks": 16})
    got["read"] = got["read_bytes"]
    got["bin_bytes"] = sum(f.stat().st_size for f in dataset.glob("*.bin"))
    if not got["evicted"]:
        pytest.skip("this file system keeps clean pages after POSIX_FADV_DONTNEED: reads cannot be counted")
    # the rank read 64 steps × 8 rows; with hints two groups ahead it has asked for about 2 × 1,024 / 8 more
    # rows; each 2,049-token window spans 2 pages (8 KiB). Read-around would fetch whole groups: ~W× that.
    rows_touched = got["rows"] + 2 * 1024 // 8 + 64
    ceiling = 1.25 * rows_touched * 8192
    assert got["read"] <= ceiling, (
        f"rank 3 of 8 read {got['read']:,} bytes from storage for {got['rows']} rows of its own "
        f"(≤ {ceiling:,.0f} expected; the dataset is {got['bin_bytes']:,} bytes)")
    assert got["read"] >= got["rows"] * 4096  # it did read its rows from storage (the count is real)
