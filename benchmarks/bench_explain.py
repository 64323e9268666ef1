"""`explain` latency at step 10**3 and 10**8: provenance is computed from the order, so the two must match.

For a single dataset and for a 3-source, 2-phase recipe (seq_len 2048, global batch 64 over world size 8),
each figure is the best of `--repeats` calls of `explain(loader, step, rank=0)` (this rank's 8 rows: source,
shard, documents, token ranges; no decode — the synthetic data has no tokenizer). The floor, measured in the
same run, is what a resume at that step costs the loader itself: `load_state_dict(state_at(step))` plus its
first batch. Printed: milliseconds, the 10**8 ÷ 10**3 ratio (target ≈ 1, "O(1) in the step") and explain ÷
resume (explain reads the same rows' indices and tokens, so ≈ 1 is expected).

    python benchmarks/bench_explain.py [--tokens 48M] [--repeats 7]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from synthetic import token_dataset  # noqa: E402

from shardkit.engine.explain import explain  # noqa: E402
from shardkit.loader import Loader, MixtureLoader  # noqa: E402
from shardkit.units import parse_count  # noqa: E402

STEPS = (10 ** 3, 10 ** 8)


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def _resume(loader, step: int) -> None:
    loader.load_state_dict(loader.state_at(step))
    next(iter(loader))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="48M")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    data = ROOT / "bench-data"
    total = parse_count(args.tokens)
    paths = [token_dataset(data / f"explain-{i}", total // 3, seed=40 + i, shard_bytes=16 << 20) for i in range(3)]
    recipe = {"seed": 1, "seq_len": 2048, "sources": {f"s{i}": {"path": str(p)} for i, p in enumerate(paths)},
              "phases": [{"name": "a", "tokens": 2048 * 64 * 500, "batch": 64, "mix": {"s0": 0.5, "s1": 0.3, "s2": 0.2}},
                         {"name": "b", "tokens": 2048 * 64 * 2 * 10 ** 8, "batch": 64, "mix": {"s0": 0.2, "s1": 0.8}}]}
    loaders = {
        "single": Loader(paths[0], seq_len=2048, batch_schedule=64, world_size=8, rank=0, readahead=False),
        "recipe": MixtureLoader(recipe, world_size=8, rank=0, readahead=False),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}; "
          f"commit {commit}; {total:,} tokens in 3 datasets of 16 MiB shards")
    print(f"{'stream':8} {'step':>11} {'explain ms':>11} {'resume ms':>10} {'explain/resume':>15}")
    for name, loader in loaders.items():
        ms = {}
        for step in STEPS:
            explain(loader, step, 0, decode=False)  # warm: the indices touched are mapped once
            e = _best(lambda ld=loader, s=step: explain(ld, s, 0, decode=False), args.repeats)
            r = _best(lambda ld=loader, s=step: _resume(ld, s), args.repeats)
            ms[step] = e
            print(f"{name:8} {step:>11,} {e:>11.2f} {r:>10.2f} {e / r:>15.2f}")
        print(f"{name:8} explain at 10^8 / at 10^3: {ms[STEPS[1]] / ms[STEPS[0]]:.2f} (target ≈ 1)")
        loader.close()


if __name__ == "__main__":
    main()
