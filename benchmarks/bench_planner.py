"""The I/O planner's predictions against what a simulated node really reads from storage, in one run.

For each configuration, `shardkit.planner.measure.measure_node` runs the node's ranks (loaders of world
size W) in a fresh process, its files evicted from the page cache first, in a memory cgroup limited to the
loaders' own memory plus the page cache given (where this machine allows cgroups), and reports the bytes
the kernel read (`/proc/self/io`). The planner predicts the same steps. Printed: predicted, measured, and
measured ÷ predicted (goal: within ±10 % where the working set fits). Steps are paced (`--step-ms`) so the
loaders' hints run ahead of their copies as they do in a training run.

    python benchmarks/bench_planner.py [--tokens 96M] [--step-ms 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from synthetic import token_dataset  # noqa: E402

from shardkit import Loader  # noqa: E402
from shardkit.planner import Cluster, plan_loader  # noqa: E402
from shardkit.planner.measure import measure_node  # noqa: E402
from shardkit.units import human_bytes, parse_count  # noqa: E402

# (label, world size, ranks per node, seq_len, batch, block samples, group blocks, steps, page cache MiB)
CONFIGS = [
    ("2 of 8 ranks, 2048, fits", 8, 2, 2048, 64, 256, 16, 3000, 256),
    ("1 of 4 ranks, 1024, fits", 4, 1, 1024, 32, 128, 8, 4000, 256),
    ("4 of 16 ranks, 2048, fits", 16, 4, 2048, 64, 64, 16, 2000, 256),
    ("2 of 8 ranks, 2048, cache below the hint horizon", 8, 2, 2048, 64, 256, 16, 3000, 16),
    ("2 of 8 ranks, 2048, cache far below it", 8, 2, 2048, 64, 256, 16, 3000, 2),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="96M")
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tokens = parse_count(a.tokens)
    data = token_dataset(HERE.parent / "bench-data" / f"engine-{tokens}" / "all", tokens, seed=1,
                         shard_bytes=256 << 20)
    commit = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"{platform.machine()}, {platform.platform()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"commit {commit}; {human_bytes(tokens * 2)} of uint16 tokens; steps paced {a.step_ms} ms")
    rows = []
    for label, world, per_node, seq_len, batch, block, groups, steps, cache_mib in CONFIGS:
        options = {"seq_len": seq_len, "batch_schedule": batch, "seed": 1, "block_samples": block,
                   "group_blocks": groups}
        cache = cache_mib << 20
        with Loader(data, world_size=world, rank=0, **options) as loader:
            plan = plan_loader(loader, Cluster(nodes=world // per_node, ranks_per_node=per_node,
                                               page_cache_bytes=cache), points=100)
        warm = 200
        got = measure_node(data, world_size=world, ranks=list(range(per_node)), warm_steps=warm, steps=steps,
                           memory_limit=cache, step_seconds=a.step_ms / 1000, loader_options=options)
        predicted = plan.node_bytes_between(warm, warm + steps)
        first = plan.intervals[0]
        row = {"config": label, "predicted": predicted, "measured": got["read_bytes"],
               "ratio": got["read_bytes"] / predicted, "working_set": first.working_set, "hit": first.hit_rate,
               "cache": cache, "limited": got["limited"], "evicted": got["evicted"]}
        rows.append(row)
        print(f"  {label:50s} predicted {human_bytes(predicted):>10}  measured {human_bytes(got['read_bytes']):>10}"
              f"  ×{row['ratio']:.3f}  (working set {human_bytes(first.working_set)}, cache "
              f"{human_bytes(cache)}{'' if got['limited'] else ' NOT LIMITED'}"
              f"{'' if got['evicted'] else ', NOT EVICTED'}; predicted hit rate {first.hit_rate:.2f})")
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
