"""Scale simulation: what grows with the corpus — per shard, per resume, per step — and what must not.

    python benchmarks/scale_sim.py            # 10 → 10,000 shards (~1 min)
    python benchmarks/scale_sim.py --full     # also 44,704 shards: 12T int32 tokens, the real size

Datasets are synthetic but real on disk: every shard is a 1 GiB *sparse* `.bin` (the default shard size, of
int32 tokens: 2**28 tokens, 65,536 samples of seq_len 4096), a real Megatron `.idx` and a `.sum.json`,
under a manifest written by the real serializer — so `open_dataset`, `Loader`, resume and batches run
the production code paths on a corpus of the real shape while costing almost no disk. The loader is
rank 517 of 1,024 (128 nodes × 8 GPUs) with a batch ramp 1,024 → 4,096 samples (16.8M tokens). Each
size is measured in a fresh process (RSS, mappings and file descriptors are per process).

Parts: (A) the manifest alone, in memory, up to 100,000 shards; (B) open, construct, resume, steps, RSS,
mappings and fds per touched shard; (C) the open-file limit probe; (D) document-index memory with
position_ids; (E) readahead bytes against bytes delivered per world size; (F) the sample order alone over
2.9e9 samples. Anything that grows where it should not is listed under FLAGS with its measured number.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shardkit import Loader, Manifest, Ramp, open_dataset
from shardkit.engine import BatchFields
from shardkit.format.idx import encode_index
from shardkit.format.manifest import compute_fingerprint
from shardkit.order import SampleOrder, ShuffleConfig
from shardkit.writer import write_dataset

SEQ = 4096
ITEM = 4  # int32: a vocabulary above 65,536 ids
SHARD_TOKENS = (1 << 30) // ITEM  # the default 1 GiB shard
FULL_SHARDS = 44_704  # ⌈12e12 tokens × 4 B / 1 GiB⌉
WORLD, RANK = 1024, 517
RESUME_STEP = 700_000  # ≈ one epoch of 12T tokens at 4,096 × 4,096 tokens per step
STEPS = 2048  # batches timed after the resume: two planning chunks of this rank
UNITS = 256  # micro-batch items timed through iter_units
SCHEDULE = Ramp(start=1024, increment=1024, ramp_samples=20_000_000, final=4096)
DOC_TOKENS = 1000  # a realistic mean document length, for manifest entries and index sizes


def best_of(n: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def proc_status() -> dict[str, int]:
    """RssAnon / RssFile / VmRSS in bytes, mappings and open fds of this process."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    out["maps"] = len(Path("/proc/self/maps").read_text().splitlines())
    out["fds"] = len(os.listdir("/proc/self/fd"))
    return out


# -- synthetic datasets -----------------------------------------------------------------------------------
def _template(root: Path) -> tuple[dict[str, Any], bytes]:
    """A real one-shard manifest and its .sum.json, to copy every field the writer sets."""
    path = root / "template"
    if not (path / "manifest.json").exists():
        write_dataset(path, [np.arange(16, dtype=np.int32)], dtype="int32")
    doc = json.loads((path / "manifest.json").read_text())
    return doc, (path / f"{doc['shards'][0]['name']}.sum.json").read_bytes()


def manifest_doc(template: dict[str, Any], shards: list[tuple[str, int, int]]) -> dict[str, Any]:
    """The template manifest with `shards` = [(name, docs, tokens)], totals and fingerprint recomputed."""
    doc = json.loads(json.dumps(template))
    proto = doc["shards"][0]
    entries = []
    for name, docs, tokens in shards:
        e = dict(proto)
        e.update(name=name, docs=docs, tokens=tokens, bin_bytes=tokens * ITEM,
                 idx_bytes=34 + 12 * docs + 8 * (docs + 1))
        entries.append(e)
    doc["shards"] = entries
    doc["totals"].update(shards=len(entries), docs=sum(d for _, d, _ in shards),
                         tokens=sum(t for _, _, t in shards), bytes=sum(t for _, _, t in shards) * ITEM)
    doc.pop("fingerprint", None)
    doc["fingerprint"] = compute_fingerprint(doc)
    return doc


def build_sparse(root: Path, num_shards: int, docs_per_shard: int = 1) -> Path:
    """`num_shards` shards of 1 GiB sparse int32 tokens; written once under root/."""
    path = root / f"sparse-{num_shards}x{docs_per_shard}"
    if (path / "manifest.json").exists():
        return path
    template, sidecar = _template(root)
    path.mkdir(parents=True, exist_ok=True)
    lengths = np.full(docs_per_shard, SHARD_TOKENS // docs_per_shard, dtype=np.int64)
    lengths[-1] += SHARD_TOKENS - int(lengths.sum())
    idx = encode_index(lengths, np.dtype("<i4"))
    names = [f"shard-{i:05d}" for i in range(num_shards)]
    for name in names:
        with open(path / f"{name}.bin", "wb") as f:
            f.truncate(SHARD_TOKENS * ITEM)
        (path / f"{name}.idx").write_bytes(idx)
        (path / f"{name}.sum.json").write_bytes(sidecar)
    doc = manifest_doc(template, [(n, docs_per_shard, SHARD_TOKENS) for n in names])
    Manifest.from_json(doc, str(path)).save(path)
    return path


def new_loader(path: Path, **kw: Any) -> Loader:
    kw = {"seq_len": SEQ, "batch_schedule": SCHEDULE, "seed": 1, "rank": RANK, "world_size": WORLD,
          "readahead": False, **kw}
    return Loader(path, **kw)


# -- (A) the manifest alone ----------------------------------------------------------------------------------
def part_manifest(root: Path, sizes: list[int]) -> list[dict[str, Any]]:
    template, _ = _template(root)
    docs = SHARD_TOKENS // DOC_TOKENS
    empty = len(Manifest.from_json(manifest_doc(template, []), "sim").to_bytes())
    rows = []
    for n in sizes:
        doc = manifest_doc(template, [(f"shard-{i:05d}", docs, SHARD_TOKENS) for i in range(n)])
        raw = Manifest.from_json(doc, "sim").to_bytes()
        parse = best_of(3 if n <= 10_000 else 1, lambda raw=raw: Manifest.from_bytes(raw, "sim"))
        rows.append({"shards": n, "bytes": len(raw), "parse_s": parse})
    for r in rows:
        r["bytes_per_entry"] = (r["bytes"] - empty) / r["shards"]
        r["parse_us_per_entry"] = r["parse_s"] / r["shards"] * 1e6
    return rows


# -- (B) one dataset, in a fresh process --------------------------------------------------------------------
def random_faults() -> None:
    """Sim only: mark each shard mapping MADV_RANDOM when it is made.

    A page fault on a file mapping reads `read_ahead_kb` around it (8 MiB on this VM): on a sparse file that
    allocates and zeroes 8 MiB of page cache per row, ~3 ms, which would hide the loader's own cost. With
    MADV_RANDOM a fault maps one page. (On real storage that read-around is real I/O: see docs/scale.md.)
    """
    from shardkit.format import dataset as dataset_module

    original = dataset_module.Shard.map_bin

    def mapped(self: Any) -> Any:
        mm = original(self)
        if mm is not None:
            mm.madvise(mmap.MADV_RANDOM)
        return mm

    dataset_module.Shard.map_bin = mapped  # type: ignore[method-assign]


def measure(path: Path) -> dict[str, Any]:
    random_faults()
    s0 = proc_status()
    loader = new_loader(path)
    s1 = proc_status()
    n = loader.dataset.num_shards
    out: dict[str, Any] = {"shards": n, "samples": loader.num_samples, "rss": s1["VmRSS"] - s0["VmRSS"]}
    out["manifest_s"] = best_of(3, lambda: Manifest.load(path))
    out["open_s"] = best_of(3, lambda: open_dataset(path))
    out["construct_s"] = best_of(3, lambda: new_loader(path))

    probe = new_loader(path, fields=BatchFields(position_ids=True))  # what an epoch does: every shard is used
    mapper = probe.engine.mapper
    k = min(n, 4000)
    a = proc_status()
    peak_maps = peak_fds = 0
    for g in range(n - k, n):
        mapper.tokens(g)
        if g % 97 == 0:
            st = proc_status()
            peak_maps, peak_fds = max(peak_maps, st["maps"] - a["maps"]), max(peak_fds, st["fds"] - a["fds"])
    j = min(n, 1000)
    for g in range(n - j, n):  # position_ids / cu_seqlens: the index gets mapped too
        mapper.doc_starts(g)
    c = proc_status()
    out.update(budget=mapper.budget, shards_touched=k, peak_new_maps=max(peak_maps, c["maps"] - a["maps"]),
               peak_new_fds=max(peak_fds, c["fds"] - a["fds"]), held=mapper.held())
    del probe, mapper
    gc.collect()

    state = loader.state_at(RESUME_STEP)
    out["load_state_us"] = best_of(5, lambda: loader.load_state_dict(state)) * 1e6

    def resume_first() -> None:
        loader.load_state_dict(state)
        next(iter(loader))

    out["resume_first_batch_ms"] = best_of(3, resume_first) * 1e3
    loader.load_state_dict(state)
    it = iter(loader)
    next(it)
    m0 = proc_status()["maps"]
    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(STEPS - 1):
        next(it)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t
    out["new_maps_per_step"] = (proc_status()["maps"] - m0) / (STEPS - 1)  # shards mapped for the first time
    out["step_us"] = wall / (STEPS - 1) * 1e6
    out["step_user_us"] = (r1.ru_utime - r0.ru_utime) / (STEPS - 1) * 1e6
    # the torch adapters' path with micro-batches: iter_units builds each item on its own
    micro = new_loader(path, micro_batch_size=1)
    units = micro.iter_units(micro.unit_index(RESUME_STEP))
    next(units)
    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(UNITS):
        next(units)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out["unit_us"] = (time.perf_counter() - t) / UNITS * 1e6
    out["unit_user_us"] = (r1.ru_utime - r0.ru_utime) / UNITS * 1e6
    plan = loader.engine.plan
    lo = SCHEDULE.start(RESUME_STEP) + RANK * (SCHEDULE.size(RESUME_STEP) // WORLD)
    positions = np.arange(lo, lo + SCHEDULE.size(RESUME_STEP) // WORLD, dtype=np.int64)
    out["plan_ms"] = best_of(5, lambda: plan.rows(0, positions)) * 1e3  # this rank's rows of one batch
    return out


# -- (C) the open-file limit ----------------------------------------------------------------------------------
def fd_probe(path: Path, soft: int) -> dict[str, Any]:
    """Map every shard of the dataset, in order, under a soft RLIMIT_NOFILE of `soft`."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    loader = new_loader(path)
    mapper = loader.engine.mapper
    base, peak = proc_status()["fds"], 0
    for g in range(mapper.num_shards):
        try:
            mapper.tokens(g)
        except OSError as e:
            return {"soft_limit": soft, "failed_at_shard": g, "error": f"{type(e).__name__}: {e}"[:160],
                    "budget": mapper.budget, "peak_fds": peak}
        if g % 101 == 0:
            peak = max(peak, proc_status()["fds"] - base)
    return {"soft_limit": soft, "failed_at_shard": None, "error": None, "budget": mapper.budget, "peak_fds": peak,
            "shards": mapper.num_shards}


# -- (D) document index memory ----------------------------------------------------------------------------------
def measure_docs(path: Path) -> dict[str, Any]:
    loader = new_loader(path, fields=BatchFields(position_ids=True))
    engine = loader.engine
    stream = next(iter(engine.plan.streams.values()))
    per_shard = loader.num_samples // loader.dataset.num_shards
    engine.doc_starts(stream, 7)  # the first shard warms up what any use allocates once
    s0 = proc_status()
    for s in range(1, loader.dataset.num_shards):  # one window's document starts in every other shard
        engine.doc_starts(stream, s * per_shard + 7)
    s1 = proc_status()
    docs = loader.dataset.num_docs - loader.dataset.shards[0].num_docs
    return {"docs": docs, "anon_per_doc": (s1["RssAnon"] - s0["RssAnon"]) / docs,
            "file_per_doc": (s1["RssFile"] - s0["RssFile"]) / docs, "held": engine.mapper.held()}


# -- (E) readahead against delivery ----------------------------------------------------------------------------
def readahead_ratio(root: Path) -> list[dict[str, Any]]:
    """Bytes each rank hints against its own share of the data, for simulated ranks of one world.

    The share is the pages under the rank's delivered windows (a window of seq_len + 1 tokens spans whole
    pages: no reader can fetch less); `hinted/copied` compares with the raw bytes copied as well. One rank
    hints whole shuffle groups (it reads all of them); with several ranks each hints only its own rows. The
    geometry keeps production's proportion (a group lasts 4 global batches: 16,384 samples at 4,096) at a
    small size: blocks of 32 samples, 8 per group, global batch 64.
    """
    path = build_sparse(root, 1, 1)
    rows = []
    steps = 256  # 64 groups: the two groups hinted ahead are a few per cent of what is read
    for world in (1, 8, 16):
        hinted = copied = pages = 0
        for rank in range(world):
            loader = Loader(path, seq_len=SEQ, batch_schedule=64, seed=1, rank=rank, world_size=world,
                            block_samples=32, group_blocks=8)  # finished blocks are evicted: no cache left over
            it = iter(loader)
            for _ in range(steps):
                next(it)
            loader.engine.wait_hints()
            m = loader.metrics.to_json()
            hinted += m["bytes_prefetched"]
            copied += m["bytes_copied"]
            mine = set()
            per = 64 // world
            for b in range(steps):
                ids = loader.global_sample_ids(b)[rank * per:(rank + 1) * per]
                for i in ids.tolist():
                    lo, hi = i * SEQ * ITEM, (i * SEQ + SEQ + 1) * ITEM
                    mine.update(range(lo // mmap.PAGESIZE, (hi - 1) // mmap.PAGESIZE + 1))
            pages += len(mine) * mmap.PAGESIZE
            loader.close()
        rows.append({"world": world, "copied": copied // world, "share": pages // world, "hinted": hinted // world,
                     "ratio": hinted / pages, "ratio_copied": hinted / copied})
    return rows


# -- (F) the sample order alone -------------------------------------------------------------------------------------
def order_only() -> list[dict[str, Any]]:
    rows = []
    for shards in (10, FULL_SHARDS):
        n = shards * SHARD_TOKENS // SEQ
        t = time.perf_counter()
        order = SampleOrder(n, ShuffleConfig.default("block", seq_len=SEQ, itemsize=ITEM, num_samples=n), 1)
        build = time.perf_counter() - t
        start = SCHEDULE.start(RESUME_STEP)
        e, k = divmod(start, n)
        k = min(k, n - 4096)
        batch = np.arange(k, k + 4096, dtype=np.int64)
        rows.append({"samples": n, "build_us": build * 1e6,
                     "global_batch_ms": best_of(5, lambda o=order, e=e, b=batch: o.sample_ids(e, b)) * 1e3,
                     "rank_slice_us": best_of(5, lambda o=order, e=e, b=batch: o.sample_ids(e, b[:4])) * 1e6,
                     "schedule_start_us": best_of(5, lambda: SCHEDULE.start(RESUME_STEP)) * 1e6})
    return rows


# -- driver ---------------------------------------------------------------------------------------------------------
def _child(mode: str, path: Path, *extra: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path), *extra], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _slope(rows: list[dict[str, Any]], key: str) -> float:
    a, b = rows[0], rows[-1]
    return (b[key] - a[key]) / (b["shards"] - a["shards"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", default="10,100,1000,10000", help="comma-separated shard counts")
    p.add_argument("--full", action="store_true", help=f"also {FULL_SHARDS:,} shards (12T int32 tokens)")
    p.add_argument("--root", type=Path, default=None, help="where the sparse datasets go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the datasets for the next run")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        mode, path, *extra = args.child
        result = {"measure": lambda: measure(Path(path)), "fds": lambda: fd_probe(Path(path), int(extra[0])),
                  "docs": lambda: measure_docs(Path(path))}[mode]()
        print(json.dumps(result))
        return
    sizes = sorted({int(s) for s in args.shards.split(",")} | ({FULL_SHARDS} if args.full else set()))
    root = args.root or Path(tempfile.mkdtemp(prefix="shardkit-scale-"))
    try:
        report = run(root, sizes)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report)


def run(root: Path, sizes: list[int]) -> dict[str, Any]:
    report: dict[str, Any] = {"manifest": part_manifest(root, sorted(set(sizes) | {FULL_SHARDS, 100_000}))}
    report["datasets"] = []
    for n in sizes:
        t = time.perf_counter()
        path = build_sparse(root, n)
        row = _child("measure", path)
        row["build_s"] = time.perf_counter() - t
        report["datasets"].append(row)
    biggest = build_sparse(root, max(sizes))
    report["fd_probe"] = _child("fds", biggest, "1024") if max(sizes) > 300 else None
    report["docs"] = _child("docs", build_sparse(root, 32, 131_072))
    report["readahead"] = readahead_ratio(root)
    report["order"] = order_only()
    report["limits"] = {"vm.max_map_count": int(Path("/proc/sys/vm/max_map_count").read_text()),
                        "RLIMIT_NOFILE": list(resource.getrlimit(resource.RLIMIT_NOFILE))}
    report["flags"] = flags(report)
    return report


def _fit(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """(constant, per shard) of a least-squares line through the measurements."""
    per, const = np.polyfit([r["shards"] for r in rows], [r[key] for r in rows], 1)
    return float(const), float(per)


# what must not grow with the shard count, and the noise below which growth is not reported
_FLAT = (("load_state_us", "load_state_dict", "µs", 5.0), ("resume_first_batch_ms", "resume + first batch", "ms", 1.0),
         ("step_user_us", "CPU per step (mostly mapping shards not mapped yet: see new map/st)", "µs", 20.0),
         ("unit_user_us", "CPU per micro-batch item (iter_units: the torch adapters' path)", "µs", 100.0),
         ("plan_ms", "Plan.rows for one rank's slice of a batch", "ms", 0.05),
         ("construct_s", "loader construction", "s", 0.05))


def flags(r: dict[str, Any]) -> list[str]:
    out = []
    d = r["datasets"]
    big = d[-1]
    if len(d) > 1:
        for key, what, unit, noise in _FLAT:
            const, per = _fit(d, key)
            extra = per * FULL_SHARDS
            if extra > max(noise, 0.5 * abs(const)):
                out.append(f"{what} grows with the shard count: {d[0][key]:.3g} {unit} at {d[0]['shards']:,} "
                           f"shards, {big[key]:.3g} {unit} at {big['shards']:,}; fit {const:.3g} + "
                           f"{per * 1000:.3g} {unit} per 1,000 shards → {const + extra:.3g} {unit} at "
                           f"{FULL_SHARDS:,} shards")
    if big["peak_new_maps"] > big["budget"] + 4 or big["peak_new_fds"] > big["budget"] + 4:
        out.append(f"mappings or descriptors exceed the budget of {big['budget']}: {big['peak_new_maps']} mappings, "
                   f"{big['peak_new_fds']} descriptors after touching {big['shards_touched']:,} shards")
    probe = r["fd_probe"]
    if probe and probe["failed_at_shard"] is not None:
        out.append(f"with the common soft limit of {probe['soft_limit']} open files the loader fails after "
                   f"mapping {probe['failed_at_shard']:,} shards: {probe['error']}")
    docs = r["docs"]
    if docs["anon_per_doc"] > 0.5:  # a per-document copy is 8 bytes
        total_docs = FULL_SHARDS * SHARD_TOKENS // DOC_TOKENS
        out.append(f"document index memory grows with the documents touched: {docs['anon_per_doc']:.2f} private "
                   f"bytes per document: {docs['anon_per_doc'] * total_docs / 2**30:,.0f} GiB for 12T tokens")
    for e in r["readahead"]:
        if e["world"] > 1 and e["ratio"] > 1.1:
            out.append(f"readahead at world size {e['world']}: each rank hints {e['ratio']:.2f}× its share")
    return out


def print_report(r: dict[str, Any]) -> None:
    print("(A) manifest, realistic entries (1 GiB shards, 1,000-token documents)")
    print(f"{'shards':>9} {'bytes':>12} {'B/entry':>8} {'parse s':>8} {'µs/entry':>9}")
    for m in r["manifest"]:
        print(f"{m['shards']:>9,} {m['bytes']:>12,} {m['bytes_per_entry']:>8.1f} {m['parse_s']:>8.3f} "
              f"{m['parse_us_per_entry']:>9.1f}")
    print(f"\n(B) sparse 1 GiB shards; loader rank {RANK} of {WORLD}, resume at step {RESUME_STEP:,}")
    cols = [("shards", "shards", "{:,}"), ("samples", "samples", "{:.3g}"), ("manifest_s", "manif s", "{:.3f}"),
            ("open_s", "open s", "{:.3f}"), ("construct_s", "loader s", "{:.3f}"),
            ("rss", "RSS MiB", "{:.1f}"), ("load_state_us", "state µs", "{:.0f}"),
            ("resume_first_batch_ms", "resume ms", "{:.2f}"), ("step_us", "step µs", "{:.0f}"),
            ("step_user_us", "user µs", "{:.0f}"), ("new_maps_per_step", "new map/st", "{:.2f}"),
            ("unit_user_us", "item µs", "{:.0f}"),
            ("plan_ms", "plan ms", "{:.3f}"), ("budget", "budget", "{:,}"), ("peak_new_maps", "peak maps", "{:,}"),
            ("peak_new_fds", "peak fds", "{:,}")]
    print(" ".join(f"{h:>10}" for _, h, _ in cols))
    for row in r["datasets"]:
        shown = {**row, "rss": row["rss"] / 2**20}
        print(" ".join(f"{f.format(shown[k]):>10}" for k, _, f in cols))
    d = r["datasets"]
    if len(d) > 1:
        print(f"per added shard: RSS {_slope(d, 'rss'):,.0f} B, manifest {_slope(d, 'manifest_s') * 1e6:.1f} µs, "
              f"open {_slope(d, 'open_s') * 1e6:.1f} µs, loader {_slope(d, 'construct_s') * 1e6:.1f} µs; "
              f"at {FULL_SHARDS:,} shards ≈ {_slope(d, 'rss') * FULL_SHARDS / 2**20:,.0f} MiB, "
              f"loader {_slope(d, 'construct_s') * FULL_SHARDS:.2f} s")
    if r["fd_probe"]:
        fp = r["fd_probe"]
        print(f"\n(C) RLIMIT_NOFILE soft {fp['soft_limit']}: every shard mapped in turn, failed at shard "
              f"{fp['failed_at_shard']} ({fp['error']}); budget {fp['budget']}, peak {fp['peak_fds']} descriptors")
    d = r["docs"]
    print(f"\n(D) {d['docs']:,} documents with position_ids: {d['anon_per_doc']:.3f} B/doc private, "
          f"{d['file_per_doc']:.2f} B/doc file-backed, {d['held']} mappings held after the walk")
    print("\n(E) readahead per rank: world  copied  share(pages)  hinted  hinted/share  hinted/copied")
    for e in r["readahead"]:
        print(f"    {e['world']:>5} {e['copied']:>10,} {e['share']:>12,} {e['hinted']:>10,} {e['ratio']:>8.2f} "
              f"{e['ratio_copied']:>8.2f}")
    print("\n(F) sample order alone: samples  build µs  global batch ms  rank slice µs  S(b) µs")
    for o in r["order"]:
        print(f"    {o['samples']:>14,} {o['build_us']:>8.1f} {o['global_batch_ms']:>10.3f} "
              f"{o['rank_slice_us']:>12.1f} {o['schedule_start_us']:>9.2f}")
    print(f"\nlimits: {r['limits']}")
    print("\nFLAGS")
    for f in r["flags"]:
        print(f"  ! {f}")


if __name__ == "__main__":
    main()
