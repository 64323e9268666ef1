"""Loader throughput, resume latency, memory flatness and read amplification, against floors from this run.

One run prints (seq_len 2048, block shuffle, warm page cache unless said otherwise):
  * floor: sequential copy of the dataset's token bytes into a preallocated buffer (the memcpy bound), best of 5
  * Loader tokens/s at global batch 8 and 64, one process            (targets: ≥ 1 G tok/s; ≥ 0.5× floor)
  * the same at batch 64 on the 1 GB dataset (two 512 MiB shards, larger than the L3 cache), against its
    own floor: rows come from DRAM and every slab mixes shards (the case of a real many-shard corpus)
  * through torch: ShardkitDataLoader with 2 workers at batch 8      (target ≥ 200 M tok/s), and a plain
    DataLoader over ShardkitIterableDataset (one tensor set per batch) for comparison
  * resume latency: load_state_dict + first batch at sample 1e3 and 1e7 (target ≤ 50 ms, flat)
  * peak RSS streaming one epoch of a 1 GB and a 4 GB dataset          (target: flat)
  * read amplification per epoch, page cache = 25 % of a 1 GB dataset, block vs full shuffle
    (target block ≤ 1.05×): measured for real in a cgroup-v1/v2 memory limit from /proc/self/io
    read_bytes after evicting the files, where the machine allows it; always also an exact LRU
    simulation over the 4 KiB pages the loader touches

    python benchmarks/bench_stream.py [--quick] [--skip-big]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from rss import run_measured  # noqa: E402
from synthetic import token_dataset  # noqa: E402

from shardkit.format import open_dataset  # noqa: E402
from shardkit.loader import Loader  # noqa: E402

DATA = HERE.parent / "bench-data"
SEQ = 2048
PAGE = 4096


def dataset(name: str, tokens: int) -> Path:
    return token_dataset(DATA / name, tokens, seed=1234)


def warm(path: Path) -> None:
    for p in sorted(path.glob("*.bin")):
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


class Floor:
    """The sequential copy of the dataset's bytes into a preallocated buffer, timed on demand."""

    def __init__(self, path: Path) -> None:
        self.ds = open_dataset(path)
        self.buf = np.empty(self.ds.num_tokens, dtype=self.ds.dtype)
        self.once()  # the buffer's pages are faulted in here, never inside a timed pass

    def once(self) -> float:
        t0 = time.perf_counter()
        at = 0
        for shard in self.ds.shards:
            t = shard.tokens
            np.copyto(self.buf[at:at + t.size], t)
            at += t.size
        return self.ds.num_tokens / (time.perf_counter() - t0)

    def best(self, passes: int = 5) -> float:
        return max(self.once() for _ in range(passes))


def loader_vs_floor(path: Path, floor: Floor, batch: int, seconds: float, rounds: int = 7, *,
                    release: str = "evict") -> tuple[float, float, float]:
    """(best loader tok/s, best floor tok/s, median per-round ratio): each round times three floor passes
    and then a stretch of the loader, so both see the same machine (other tenants come and go)."""
    loader = Loader(path, seq_len=SEQ, batch_schedule=batch, seed=1, shuffle="block", release=release)
    it = iter(loader)
    for _ in range(max(50, loader.num_samples // batch)):  # one epoch: pages mapped, caches warm
        next(it)
    rates, floors = [], []
    for _ in range(rounds):
        floors.append(floor.best(3))
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / rounds:
            for _ in range(64):
                next(it)
            n += 64
        rates.append(n * batch * SEQ / (time.perf_counter() - t0))
    return max(rates), max(floors), float(np.median(np.array(rates) / np.array(floors)))


def torch_tokens_per_s(path: Path, batch: int, workers: int, seconds: float, *, grouped: bool) -> float:
    from torch.utils.data import DataLoader

    from shardkit.torch import ShardkitDataLoader, ShardkitIterableDataset

    loader = Loader(path, seq_len=SEQ, batch_schedule=batch, seed=1, shuffle="block")
    dl = (ShardkitDataLoader(loader, num_workers=workers) if grouped
          else DataLoader(ShardkitIterableDataset(loader), batch_size=None, num_workers=workers))
    it = iter(dl)
    for _ in range(200):
        next(it)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(64):
            next(it)
        n += 64
    rate = n * batch * SEQ / (time.perf_counter() - t0)
    del it
    return rate


def resume_ms(path: Path, sample: int) -> tuple[float, float]:
    """(load_state_dict + first batch on a live loader, fresh open + load + first batch) in ms, best of 5."""
    live = fresh = float("inf")
    for _ in range(5):
        loader = Loader(path, seq_len=SEQ, batch_schedule=8, seed=1, shuffle="block")
        state = loader.state_at(sample // 8)
        t0 = time.perf_counter()
        loader.load_state_dict(state)
        next(iter(loader))
        live = min(live, (time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        again = Loader(path, seq_len=SEQ, batch_schedule=8, seed=1, shuffle="block")
        again.load_state_dict(state)
        next(iter(again))
        fresh = min(fresh, (time.perf_counter() - t0) * 1e3)
    return live, fresh


_EPOCH_CHILD = """
import sys, time, json
from shardkit.loader import Loader
loader = Loader(sys.argv[1], seq_len=2048, batch_schedule=64, seed=1, shuffle=sys.argv[2],
                group_blocks=int(sys.argv[3]) or None)
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
part = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0  # of each epoch
per_epoch = loader.num_samples // 64
marks = []
t0 = time.perf_counter()
for e in range(epochs):
    marks.append(open("/proc/self/io").read())
    for b in loader.iter_batches(e * per_epoch, stop=e * per_epoch + int(per_epoch * part)):
        pass
marks.append(open("/proc/self/io").read())
print(json.dumps({"seconds": time.perf_counter() - t0, "io": marks, "metrics": loader.metrics.to_json()}))
"""


def epoch_rss(path: Path) -> tuple[int, float]:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    done, wall, peak = run_measured([sys.executable, "-c", _EPOCH_CHILD, str(path), "block", "0"], env=env)
    if done.returncode:
        raise SystemExit(done.stderr)
    return peak, wall


def lru_amplification(path: Path, shuffle: str, cache_fraction: float, group_blocks: int | None) -> float:
    """Exact LRU over the 4 KiB pages each sample's window touches, in delivery order, for one epoch.

    Pages are numbered through the shard files back to back, so a window that crosses into the next
    shard touches the tail of one file and the head of the next: one contiguous range of page numbers.
    """
    loader = Loader(path, seq_len=SEQ, batch_schedule=64, seed=1, shuffle=shuffle, group_blocks=group_blocks,
                    readahead=False)
    ds = loader.dataset
    item = ds.dtype.itemsize
    page0 = np.concatenate([[0], np.cumsum([-(-s.tokens.nbytes // PAGE) for s in ds.shards])])
    total_pages = int(page0[-1])
    capacity = int(total_pages * cache_fraction)
    ids = loader.order.sample_ids(0, np.arange(loader.num_samples, dtype=np.int64))

    def page(tokens: np.ndarray) -> np.ndarray:
        shard = np.searchsorted(ds.token_offsets, tokens, side="right") - 1
        return page0[shard] + ((tokens - ds.token_offsets[shard]) * item) // PAGE

    first, last = page(ids * SEQ), page(ids * SEQ + SEQ)
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for a, z in zip(first.tolist(), last.tolist()):
        for p in range(a, z + 1):
            if p in cache:
                cache.move_to_end(p)
            else:
                misses += 1
                cache[p] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return misses / total_pages


def _cgroup_dir() -> tuple[Path, str] | None:
    """A fresh memory cgroup we may limit (v1 memory.limit_in_bytes or v2 memory.max), or None."""
    name = f"shardkit-bench-{os.getpid()}"
    for root, limit in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                        (Path("/sys/fs/cgroup/unified"), "memory.max"), (Path("/sys/fs/cgroup"), "memory.max")):
        try:
            if not (root / "cgroup.procs").exists():
                continue
            d = root / name
            d.mkdir()
            if (d / limit).exists():
                return d, limit
            d.rmdir()
        except OSError:
            continue
    return None


def evict(path: Path) -> None:
    for p in path.glob("*.bin"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cgroup_amplification(path: Path, shuffle: str, cache_fraction: float, group_blocks: int | None
                         ) -> tuple[float, float] | None:
    """(read_bytes / dataset bytes, seconds) for one epoch in a memory cgroup; None if not allowed."""
    cg = _cgroup_dir()
    if cg is None:
        return None
    d, limit_file = cg
    data_bytes = sum(p.stat().st_size for p in path.glob("*.bin"))
    try:
        # the limit covers the child's own memory too: measure its baseline first (imports, no data)
        base = subprocess.run([sys.executable, "-c", "import resource, shardkit.loader, numpy;"
                               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
        baseline = int(base.stdout) * 1024 + (32 << 20)
        (d / limit_file).write_text(str(baseline + int(data_bytes * cache_fraction)))
        evict(path)
        code = (f"open({str(d / 'cgroup.procs')!r}, 'w').write(str(__import__('os').getpid()))\n"
                + _EPOCH_CHILD)
        # two epochs, the second measured: the steady state, where the last group's hint for the next
        # epoch (read once per epoch, used in the next) is counted once, as in a long run
        # full shuffle reads randomly from storage (minutes per epoch here): one epoch's first 5 %, counted
        # against 5 % of the bytes (a cold cache, so a slight overestimate)
        epochs, part = ("1", 0.05) if shuffle == "full" else ("2", 1.0)
        done = subprocess.run([sys.executable, "-c", code, str(path), shuffle, str(group_blocks or 0), epochs,
                               str(part)],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
        if done.returncode:
            print(f"  (cgroup run failed: {done.stderr.strip().splitlines()[-1:]})")
            return None
        out = json.loads(done.stdout)

        def read_bytes(text: str) -> int:
            return int(next(line.split()[1] for line in text.splitlines() if line.startswith("read_bytes")))

        io = [read_bytes(m) for m in out["io"]]
        return (io[-1] - io[-2]) / (data_bytes * part), out["seconds"]
    finally:
        with contextlib.suppress(OSError):  # the child has exited, so the group is empty
            d.rmdir()


def l3_cache() -> str:
    try:
        return Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings")
    ap.add_argument("--skip-big", action="store_true", help="no 1 GB / 4 GB datasets (RSS, amplification)")
    ap.add_argument("--only-big", action="store_true", help="only the 1 GB / 4 GB figures")
    args = ap.parse_args()
    secs = 1.0 if args.quick else 3.0
    print(f"machine: {os.cpu_count()} cores, L3 {l3_cache()}, load {os.getloadavg()[0]:.2f}; seq_len {SEQ}, "
          "block shuffle")

    if not args.only_big:
        small_figures(secs)
    if not args.skip_big:
        big_figures()


def small_figures(secs: float) -> None:
    small = dataset("stream-27M", 27_000_000)
    # warm the page cache the way a training job does: from storage, through the loader's own reads. The
    # pages the build just wrote are small folios; read back through the loader's MADV_HUGEPAGE mapping
    # they are 2 MiB folios, as they are for any dataset a job reads from disk (docs/loader.md)
    evict(small)
    for _ in Loader(small, seq_len=SEQ, batch_schedule=64, seed=1, shuffle="block", max_epochs=1):
        pass
    floor = Floor(small)
    print(f"floor    sequential copy into a preallocated buffer: {floor.best() / 1e9:6.2f} G tok/s (27 M tokens); "
          "re-measured beside every loader round below")
    for batch, target in ((8, "≥ 1 G tok/s"), (64, "≥ 0.5× floor")):
        r, f, med = loader_vs_floor(small, floor, batch, secs)
        print(f"loader   batch {batch:3d}, one process: {r / 1e9:6.2f} G tok/s = {r / f:.2f}× the best floor "
              f"({f / 1e9:.2f} G) ({target}); median of the per-round ratios {med:.2f}×")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch    not installed: DataLoader figures skipped")
    else:
        for batch in (8, 64):
            r = torch_tokens_per_s(small, batch, 2, secs, grouped=True)
            print(f"torch    batch {batch:3d}, ShardkitDataLoader 2 workers: {r / 1e6:7.0f} M tok/s"
                  + ("  (target ≥ 200 M)" if batch == 8 else ""))
        r = torch_tokens_per_s(small, 8, 2, secs, grouped=False)
        print(f"torch    batch   8, DataLoader(ShardkitIterableDataset) 2 workers: {r / 1e6:5.0f} M tok/s "
              "(one transfer per batch)")

    for sample in (1_000, 10_000_000):
        live, fresh = resume_ms(small, sample)
        print(f"resume   at sample {sample:>10,}: {live:6.2f} ms load_state_dict + first batch; "
              f"{fresh:6.2f} ms incl. opening the dataset (target ≤ 50 ms, flat)")



def big_figures() -> None:
    gb1 = dataset("stream-1GB", 500_000_000)
    gb4 = dataset("stream-4GB", 2_000_000_000)
    for name, path in (("1 GB", gb1), ("4 GB", gb4)):
        warm(path)
        peak, wall = epoch_rss(path)
        print(f"rss      one epoch of the {name} dataset, batch 64: peak {peak / 2**20:6.0f} MiB ({wall:.1f}s)")

    # DRAM-bound speed: warmed as a job does (evicted, read back through the loader's huge-page mapping);
    # release="unmap" keeps the page cache warm (the default "evict" would re-read each group from storage)
    evict(gb1)
    for _ in Loader(gb1, seq_len=SEQ, batch_schedule=64, seed=1, shuffle="block", max_epochs=1, release="unmap"):
        pass
    floor = Floor(gb1)
    r, f, med = loader_vs_floor(gb1, floor, 64, 3.0, release="unmap")
    print(f"loader   batch  64 on the 1 GB dataset (2 shards, > L3): {r / 1e9:6.2f} G tok/s = {r / f:.2f}× its floor "
          f"({f / 1e9:.2f} G); median of the per-round ratios {med:.2f}×")
    del floor

    print("read amplification, page cache = 25 % of the 1 GB dataset (bytes fetched per epoch / dataset bytes):")
    for shuffle, groups, label in (("block", 2, "block, 2 blocks/group (2 groups fit the cache)"),
                                   ("block", None, "block, default 8 blocks/group"),
                                   ("full", None, "full")):
        sim = lru_amplification(gb1, shuffle, 0.25, groups)
        real = cgroup_amplification(gb1, shuffle, 0.25, groups)
        what = "first 5 % of an epoch" if shuffle == "full" else "2nd epoch"
        real_s = (f"{real[0]:5.2f}× measured in a memory cgroup ({what}; {real[1]:.0f}s)" if real
                  else "cgroup not available")
        print(f"  {label:50s} LRU simulation {sim:5.2f}×; {real_s}")
    print("  (target: block ≤ 1.05×)")


if __name__ == "__main__":
    main()
