"""`shardkit verify` throughput vs the floor of hashing the same bytes, warm page cache.

One run prints:
  * floor: xxh3-128 over the same 16 MiB blocks of every .bin/.idx, one process per core (pread + hash)
  * verify (full, one thread per core) GB/s and its ratio to the floor        (target ≥ 0.80)
  * verify with one thread vs the floor with one process (threads vs processes, per core)
  * verify --quick seconds (no .bin read) and --deep GB/s (hash + token scan)
  * the load average before and after (the machine is shared: numbers are only as good as the load)

The dataset (random uint16 tokens, 1 GiB shards, 16 MiB blocks) is built once under bench-data/.

    python benchmarks/bench_verify.py [--size 2.5GiB] [--repeats 3] [--jobs 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import xxhash  # noqa: E402

from shardkit.format.checksums import ShardChecksums  # noqa: E402
from shardkit.format.manifest import Manifest  # noqa: E402
from shardkit.units import human_bytes, parse_bytes  # noqa: E402
from shardkit.verify import verify_dataset  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402

DATA = HERE.parent / "bench-data"
BLOCK = 16 << 20
SHARD = 1 << 30
CHUNK = 16 << 20


def dataset(size: int) -> Path:
    path = DATA / f"verify-{size}"
    if (path / "manifest.json").is_file():
        return path
    if path.exists():
        for p in path.iterdir():
            p.unlink()
    rng = np.random.default_rng(0)
    tokens = size // 2

    def docs():
        left = tokens
        while left > 0:
            n = min(left, int(rng.integers(1, 32768)))
            left -= n
            yield rng.integers(0, 65535, size=n, dtype=np.uint16)

    print(f"building {human_bytes(size)} dataset in {path} (once) …", flush=True)
    t0 = time.perf_counter()
    write_dataset(path, docs(), tokenizer={"kind": "random", "name": "random", "path": None, "vocab_size": 65535,
                                           "eos_id": None, "bos_id": None, "sha256": None},
                  max_bytes_per_shard=SHARD, checksum_block_size=BLOCK)
    print(f"  built in {time.perf_counter() - t0:.1f}s", flush=True)
    return path


def block_list(path: Path) -> list[tuple[str, int, int]]:
    """(file, start, end) of every block verify hashes, in the same order."""
    out = []
    for e in Manifest.load(path).shards:
        sums = ShardChecksums.read(path / e.sum_name)
        for name, fc in sums.files.items():
            out += [(str(path / name), *fc.block_range(i, sums.block_size)) for i in range(len(fc.blocks))]
    return out


def _hash_blocks(blocks: list[tuple[str, int, int]]) -> int:
    buf = memoryview(bytearray(CHUNK))
    n = 0
    for file, start, end in blocks:
        fd = os.open(file, os.O_RDONLY)
        h = xxhash.xxh3_128()
        pos = start
        while pos < end:
            got = os.preadv(fd, [buf[:min(CHUNK, end - pos)]], pos)
            h.update(buf[:got])
            pos += got
        h.hexdigest()
        os.close(fd)
        n += end - start
    return n


def floor(blocks, procs: int, repeats: int) -> float:
    """Best GB/s of `procs` processes each hashing every procs-th block (pool started outside the timing)."""
    parts = [blocks[i::procs] for i in range(procs)]
    best = 0.0
    with Pool(procs) as pool:
        pool.map(_hash_blocks, [[b] for b in blocks[:procs]])  # start workers
        for _ in range(repeats):
            t0 = time.perf_counter()
            n = sum(pool.map(_hash_blocks, parts))
            best = max(best, n / (time.perf_counter() - t0) / 1e9)
    return best


def best_verify(path: Path, mode: str, jobs: int, repeats: int) -> tuple[float, float]:
    """(best GB/s of bytes read, its seconds)."""
    best = (0.0, 0.0)
    for _ in range(repeats):
        r = verify_dataset(path, mode=mode, jobs=jobs)
        if not r.ok:
            raise SystemExit(f"verify found problems in the benchmark dataset: {r.to_json()['problems'][:3]}")
        rate = (r.bytes_hashed + r.bytes_scanned) / r.seconds / 1e9
        if rate > best[0]:
            best = (rate, r.seconds)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2.5GiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=0, help="0: one per core")
    args = ap.parse_args()
    cores = args.jobs or len(os.sched_getaffinity(0))
    path = dataset(parse_bytes(args.size))
    load_before = os.getloadavg()
    blocks = block_list(path)
    total = sum(e - s for _, s, e in blocks)
    _hash_blocks(blocks)  # warm the page cache
    print(f"dataset {path}: {human_bytes(total)} in {len(blocks)} blocks; {cores} core(s); "
          f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    f_all = floor(blocks, cores, args.repeats)
    v_all, v_sec = best_verify(path, "full", cores, args.repeats)
    f_one = floor(blocks, 1, args.repeats)
    v_one, _ = best_verify(path, "full", 1, args.repeats)
    _, q_sec = best_verify(path, "quick", cores, args.repeats)
    d_all, d_sec = best_verify(path, "deep", cores, max(1, args.repeats - 1))
    load_after = os.getloadavg()
    result = {
        "bytes": total, "cores": cores,
        "floor_gbps": round(f_all, 2), "verify_gbps": round(v_all, 2), "verify_seconds": round(v_sec, 3),
        "ratio": round(v_all / f_all, 3), "target": 0.8,
        "floor_1proc_gbps": round(f_one, 2), "verify_1thread_gbps": round(v_one, 2),
        "ratio_1": round(v_one / f_one, 3),
        "quick_seconds": round(q_sec, 4), "deep_gbps": round(d_all, 2), "deep_seconds": round(d_sec, 3),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
    }
    print(f"floor ({cores} proc)      {f_all:6.2f} GB/s")
    print(f"verify ({cores} threads)  {v_all:6.2f} GB/s  ratio {v_all / f_all:.2f}  (target ≥ 0.80: "
          f"{'PASS' if v_all / f_all >= 0.8 else 'FAIL'})")
    print(f"floor (1 proc)       {f_one:6.2f} GB/s; verify (1 thread) {v_one:6.2f} GB/s, ratio {v_one / f_one:.2f}")
    print(f"verify --quick       {q_sec:6.3f} s")
    print(f"verify --deep        {d_all:6.2f} GB/s of bytes read (hash + token scan), {d_sec:.2f} s")
    print(f"load average after   {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
