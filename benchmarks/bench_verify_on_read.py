"""Streaming with `verify_on_read` as a ratio of streaming without it (goal ≥ 0.8×), page cache warm.

A fresh loader reads one whole epoch (block shuffle, seq_len 2048) of a 256M-token dataset in 256 MiB
shards with 16 MiB checksum blocks; with `verify_on_read=True` every block is hashed once, on its first
read, so the epoch is the worst case (later epochs verify nothing). Batches are consumed as `tokens` arrays
(nothing is copied after the loader). Runs alternate without / with, best of `--repeats` each. Floors,
measured in the same run: xxh3-128 over the whole dataset through a mapping (the verification's own work)
and a plain copy of it (the loader's). Also printed: a fresh loader's time to its first batch, both ways.

    python benchmarks/bench_verify_on_read.py [--tokens 256M] [--repeats 3]
"""

from __future__ import annotations

import argparse
import mmap
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import xxhash  # noqa: E402
from synthetic import token_dataset  # noqa: E402

from shardkit.format import open_dataset  # noqa: E402
from shardkit.loader import Loader  # noqa: E402
from shardkit.units import parse_count  # noqa: E402


def _epoch(path: Path, batch: int, verify: bool) -> tuple[float, int, dict]:
    """(seconds for one epoch, tokens delivered, integrity metrics)."""
    loader = Loader(path, seq_len=2048, batch_schedule=batch, seed=3, max_epochs=1, fields=["tokens_only"], release="unmap",
                    verify_on_read=verify)
    n = 0
    t = time.perf_counter()
    for item in loader:
        n += item["tokens"].size
    dt = time.perf_counter() - t
    got = loader.metrics.to_json().get("integrity", {})
    loader.close()
    return dt, n, got


def _first_batch(path: Path, verify: bool) -> float:
    t = time.perf_counter()
    loader = Loader(path, seq_len=2048, batch_schedule=8, seed=3, fields=["tokens_only"], release="unmap",
                    verify_on_read=verify)
    next(iter(loader))
    dt = time.perf_counter() - t
    loader.close()
    return dt * 1e3


def _floors(path: Path) -> tuple[float, float]:
    """(xxh3-128 GB/s through a mapping, copy GB/s) over every shard, best of 3."""
    ds = open_dataset(path)
    maps = []
    for s in ds.shards:
        with open(s.bin_path, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    total = sum(len(m) for m in maps)
    best_h = best_c = float("inf")
    out = np.empty(max(len(m) for m in maps), dtype=np.uint8)
    for _ in range(3):
        t = time.perf_counter()
        for m in maps:
            mv = memoryview(m)
            for lo in range(0, len(m), 16 << 20):
                xxhash.xxh3_128_digest(mv[lo:lo + (16 << 20)])
        best_h = min(best_h, time.perf_counter() - t)
        t = time.perf_counter()
        for m in maps:
            np.copyto(out[:len(m)], np.frombuffer(m, dtype=np.uint8))
        best_c = min(best_c, time.perf_counter() - t)
    return total / best_h / 1e9, total / best_c / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="256M")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = token_dataset(ROOT / "bench-data" / f"verify-{args.tokens}", parse_count(args.tokens), seed=61,
                         shard_bytes=256 << 20)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    _epoch(path, 64, False)  # page cache warm
    hash_gbs, copy_gbs = _floors(path)
    print(f"floors: xxh3-128 through a mapping {hash_gbs:.1f} GB/s, copy {copy_gbs:.1f} GB/s")
    print(f"{'batch':>5}  {'without':>12}  {'with':>12}  {'with ÷ without':>14}  verified")
    for batch in (8, 64):
        best = {False: float("inf"), True: float("inf")}
        toks, info = 0, {}
        for _ in range(args.repeats):
            for verify in (False, True):
                dt, toks, got = _epoch(path, batch, verify)
                best[verify] = min(best[verify], dt)
                if verify:
                    info = got
        off, on = toks / best[False] / 1e6, toks / best[True] / 1e6
        print(f"{batch:>5}  {off:>8.0f} M/s  {on:>8.0f} M/s  {on / off:>14.3f}  "
              f"{info.get('blocks_verified', 0)} blocks, {info.get('bytes_verified', 0) / 2**20:.0f} MiB")
    fb = {v: min(_first_batch(path, v) for _ in range(args.repeats)) for v in (False, True)}
    print(f"first batch of a fresh loader: {fb[False]:.1f} ms without, {fb[True]:.1f} ms with")


if __name__ == "__main__":
    main()
