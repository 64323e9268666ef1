"""Where a batch of best-fit rows from the row store spends its time, against plain windows: each part is
taken out in turn (replaced by a cached result), in a fresh process pinned to one core, and the time per
batch of 8 compared.

  windows               plain windows, as streamed
  windows, no copy      the same with the slab copy replaced by a cached slab: the engine's own work
  store                 best-fit rows from the row store, fields=["cu_seqlens"]
  store, no cu_seqlens  the same with `PackedReader._stored_boundaries` returning a cached array: what
                        cu_seqlens costs
  store, engine only    no cu_seqlens and the row copy replaced by a cached slab: the engine's own work

Each variant runs in its own process (the stubs replace module functions), the variants alternate for
`--rounds` rounds and the best of each is printed. The stubs change what the batches hold, so this is a
cost breakdown, never a correctness check. Corpora are bench_packing's (built on first use).

    python benchmarks/bench_packed_parts.py [--corpus gutenberg] [--rounds 3] [--batches 40000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VARIANTS = ("windows", "windows, no copy", "store", "store, no cu_seqlens", "store, engine only")


def _run_variant(corpus: str, seq_len: int, variant: str, batches: int, slab_kib: int | None) -> float:
    """Best µs per batch of three stretches of `batches` batches, in this process."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import numpy as np
    from bench_packing import DATA
    from bench_packing import corpus as built

    from shardkit.engine import gather, packed_rows
    from shardkit.loader import Loader

    if slab_kib:
        packed_rows.STORE_SLAB_BYTES = slab_kib << 10
    if variant == "windows, no copy":
        real_slab, slabs = gather._Chunk.slab, {}

        def cached_slab(self, a: int, z: int):
            if z - a not in slabs:
                slabs[z - a] = real_slab(self, a, z)
            self._next += 1
            return slabs[z - a]
        gather._Chunk.slab = cached_slab
    if variant in ("store, no cu_seqlens", "store, engine only"):
        x = np.zeros(2, dtype=np.int32)

        def no_boundaries(self, rows, bounds, k0: int, k1: int, seq_len: int):
            return x, [0] + [2] * (k1 - k0), [1] * (k1 - k0)
        packed_rows.PackedReader._stored_boundaries = no_boundaries
    if variant == "store, engine only":
        real_rows, rows = packed_rows.PackedReader._store_rows, {}

        def cached_rows(self, store, ids):
            if ids.size not in rows:
                rows[ids.size] = real_rows(self, store, ids)
            return rows[ids.size]
        packed_rows.PackedReader._store_rows = cached_rows
    kw = {} if variant.startswith("windows") else dict(packing="best_fit", packing_cache_dir=DATA / "tables",
                                                       packing_store=True, fields=["cu_seqlens"])
    it = iter(Loader(built(corpus), seq_len=seq_len, batch_schedule=8, seed=1, **kw))
    for _ in range(2000):
        next(it)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(batches):
            next(it)
        best = min(best, (time.perf_counter() - t0) / batches * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="gutenberg", choices=["gutenberg", "long-mix", "wikitext"])
    ap.add_argument("--seq-lens", default="2048,8192")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=40000)
    ap.add_argument("--no-numba", action="store_true",
                    help="stored cu_seqlens by NumPy runs, not the compiled loop (SHARDKIT_NO_NUMBA=1)")
    ap.add_argument("--store-slab-kib", type=int, default=None,
                    help="store slabs of this many KiB (packed_rows.STORE_SLAB_BYTES), to tune it")
    ap.add_argument("--core", type=int, default=os.cpu_count() - 1 if os.cpu_count() else 0)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(_run_variant(args.corpus, args.seq_len, args.variant, args.batches, args.store_slab_kib))
        return
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    print(f"bench_packed_parts  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  commit {sha.strip()}  "
          f"{args.corpus}, batch 8, core {args.core}, best of {args.rounds} (µs per batch), stored cu_seqlens "
          f"{'by NumPy runs' if args.no_numba else 'compiled'}, store slabs "
          f"{args.store_slab_kib or 1024} KiB")
    env = dict(os.environ, SHARDKIT_NO_NUMBA="1") if args.no_numba else None
    for seq_len in (int(x) for x in args.seq_lens.split(",")):
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for v in VARIANTS:
                out = subprocess.run([sys.executable, __file__, "--variant", v, "--seq-len", str(seq_len),
                                      "--corpus", args.corpus, "--batches", str(args.batches)] +
                                     (["--store-slab-kib", str(args.store_slab_kib)] if args.store_slab_kib else []),
                                     capture_output=True, text=True, check=True, env=env,
                                     preexec_fn=lambda: os.sched_setaffinity(0, {args.core}))
                times[v].append(float(out.stdout.split()[-1]))
        m = {v: min(t) for v, t in times.items()}  # the least disturbed run of each: a cost, not a rate
        print(f"  seq_len {seq_len:,}: " + "  ".join(f"{v} {m[v]:.2f}" for v in VARIANTS))
        print(f"    windows: engine {m['windows, no copy']:.2f} + copy {m['windows'] - m['windows, no copy']:.2f};  "
              f"store: engine {m['store, engine only']:.2f} + row copy "
              f"{m['store, no cu_seqlens'] - m['store, engine only']:.2f} + cu_seqlens "
              f"{m['store'] - m['store, no cu_seqlens']:.2f};  store ÷ windows {m['windows'] / m['store']:.2f}×")


if __name__ == "__main__":
    main()
