"""Pack throughput vs the tokenizer's own speed, the fast path vs `tokenizers`, and memory flatness.

One run prints:
  * floor: the fastest backend's own batch encode over the same texts in memory, all cores, no I/O
  * pack (auto backend) tokens/s and its ratio to the floor            (target ≥ 0.90)
  * pack with --tokenizer-backend hf, and auto / hf                     (target ≥ 4×, identical shard bytes)
  * peak RSS of the pack process tree at two corpus sizes               (target ≤ 1 GiB, within 10%)

    python benchmarks/bench_pack.py [--size 100MB] [--repeat 4] [--workers 0]
    python benchmarks/bench_pack.py --executor ray [--num-tasks 2]   # Ray vs local executor tokens/s
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from make_corpus import build  # noqa: E402
from rss import run_measured  # noqa: E402

from shardkit.tokenizers import load_tokenizer  # noqa: E402
from shardkit.units import parse_bytes  # noqa: E402

GPT2 = HERE.parents[1] / "shared" / "data" / "tokenizers" / "gpt2" / "tokenizer.json"
DATA = HERE.parent / "bench-data"


def corpus(size: str) -> Path:
    path = DATA / f"corpus-{size}"
    if not path.is_dir():
        build(parse_bytes(size), path)
    return path


def repeated_corpus(src: Path, times: int) -> Path:
    """`times` copies of the small corpus: same document-size distribution, `times`× the bytes."""
    path = DATA / f"{src.name}-x{times}"
    if not path.is_dir():
        path.mkdir(parents=True)
        for k in range(times):
            for p in sorted(src.glob("*.jsonl")):
                shutil.copyfile(p, path / f"copy{k}-{p.name}")
    return path


def load_texts(path: Path) -> list[str]:
    texts = []
    for p in sorted(path.glob("*.jsonl")):
        with open(p, encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def floor_tokens_per_s(texts: list[str], threads: int) -> tuple[float, int]:
    enc = load_tokenizer(str(GPT2), backend="tiktoken").encoding  # the compiled tiktoken Encoding
    # the same semantics as pack: special-token text in a document is ordinary text
    enc.encode_ordinary_batch(texts[:50], num_threads=threads)  # warm-up
    t0 = time.perf_counter()
    ids = enc.encode_ordinary_batch(texts, num_threads=threads)
    dt = time.perf_counter() - t0
    return sum(map(len, ids)) / dt, sum(map(len, ids))


def run_pack(src: Path, out: Path, workers: int, backend: str) -> tuple[dict, float, int]:
    shutil.rmtree(out, ignore_errors=True)
    exe = Path(sys.executable).with_name("shardkit")
    cmd = [str(exe), "pack", str(src), "-o", str(out), "--tokenizer", str(GPT2), "--tokenizer-backend", backend,
           "--workers", str(workers), "--quiet", "--json"]
    done, wall, peak = run_measured(cmd)
    if done.returncode:
        raise SystemExit(f"pack failed: {done.stderr}")
    return json.loads(done.stdout), wall, peak


def shard_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.bin"))} | {
        p.name: p.read_bytes() for p in sorted(path.glob("*.idx"))}


def bench_executors(src: Path, cores: int, num_tasks: int, repeat: int) -> None:
    """tokens/s of `--num-tasks N` on the Ray executor vs the local executor: same data, same run.

    Both run in this process through `pack_job` (tasks + merge); runs alternate local, ray, local, ray, … and
    the best of each is compared, so a neighbour's load hits both alike. Ray's one-off start-up (a local
    instance here; a running cluster in production) is reported apart from the job time.
    """
    import logging

    import ray

    from shardkit.pack import PackConfig, TokenizeOptions
    from shardkit.pack.executors import LocalExecutor, RayExecutor, pack_job

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=cores, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    print(f"ray     local instance with {cores} CPUs started in {time.perf_counter() - t0:.1f}s (not in the job times)")
    best: dict[str, tuple[float, int, str]] = {}
    try:
        for k in range(repeat):
            for name, executor in (("local", LocalExecutor()), ("ray", RayExecutor())):
                out = DATA / f"out-exec-{name}"
                shutil.rmtree(out, ignore_errors=True)
                cfg = PackConfig(inputs=(str(src),), output=str(out), tokenize=TokenizeOptions(tokenizer=str(GPT2)),
                                 workers=cores)
                r = pack_job(cfg, num_tasks=num_tasks, executor=executor)
                tps = r.merge.manifest.num_tokens / r.elapsed
                print(f"run {k}   {name:5s} {num_tasks} tasks: {tps / 1e6:6.2f} M tok/s ({r.elapsed:.1f}s, "
                      f"{r.merge.manifest.num_tokens:,} tokens)")
                if name not in best or tps > best[name][0]:
                    best[name] = (tps, r.merge.manifest.num_tokens, r.merge.fingerprint)
    finally:
        ray.shutdown()
    (lt, _, lfp), (rt, _, rfp) = best["local"], best["ray"]
    print(f"local   executor ({num_tasks} tasks one after another, {cores} tokenizer processes each): "
          f"{lt / 1e6:.2f} M tok/s (best of {repeat})")
    print(f"ray     executor ({num_tasks} tasks side by side, 1 CPU each): {rt / 1e6:.2f} M tok/s (best of {repeat})")
    print(f"ratio   ray / local = {rt / lt:.3f}; Ray overhead {(1 - rt / lt) * 100:+.1f}%   (target ≤ 10%); "
          f"identical datasets: {lfp == rfp}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100MB")
    ap.add_argument("--repeat", type=int, default=4, help="the big corpus is this many copies of the small one")
    ap.add_argument("--workers", type=int, default=0, help="0 = one per core")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--executor", choices=["local", "ray"], default=None,
                    help="ray: compare `--num-tasks N` on the Ray and the local executor, then stop")
    ap.add_argument("--num-tasks", type=int, default=0, help="tasks for --executor (0 = one per core)")
    args = ap.parse_args()
    if not GPT2.exists():
        raise SystemExit(f"needs the real GPT-2 tokenizer at {GPT2}")
    cores = os.cpu_count() or 1
    workers = args.workers or cores
    src = corpus(args.size)
    nbytes = sum(p.stat().st_size for p in src.glob("*.jsonl"))
    print(f"machine: {cores} cores; corpus {src} ({nbytes / 1e6:.1f} MB); tokenizer {GPT2.name} (GPT-2)")
    if args.executor == "ray":
        print(f"load:   {os.getloadavg()[0]:.2f} (1-min average) at start")
        bench_executors(src, cores, args.num_tasks or cores, max(2, args.repeat // 2))
        print(f"load:   {os.getloadavg()[0]:.2f} (1-min average) at end")
        return

    texts = load_texts(src)
    floor, floor_tokens = floor_tokens_per_s(texts, cores)
    del texts
    print(f"floor   tiktoken encode_ordinary_batch, {cores} threads, in memory: {floor / 1e6:8.2f} M tok/s "
          f"({floor_tokens:,} tokens)")

    res, wall, peak_small = run_pack(src, DATA / "out-auto", workers, "auto")
    auto_tps = res["tokens"] / wall
    print(f"pack    auto ({res['tokenizer_backend']}), {workers} workers: {auto_tps / 1e6:8.2f} M tok/s "
          f"(wall {wall:.1f}s incl. start-up; {res['tokens']:,} tokens; peak RSS {peak_small / 2**20:.0f} MiB)")
    print(f"ratio   pack / floor = {auto_tps / floor:.3f}   (target ≥ 0.90)")
    print(f"        excluding interpreter start-up (pack() call only, {res['seconds']:.1f}s): "
          f"{res['tokens'] / res['seconds'] / 1e6:.2f} M tok/s, ratio {res['tokens'] / res['seconds'] / floor:.3f}")
    if res["tokens"] != floor_tokens + res["docs"]:
        print(f"WARNING token count {res['tokens']:,} != floor {floor_tokens:,} + {res['docs']:,} EOS")

    if not args.skip_hf:
        hres, hwall, _ = run_pack(src, DATA / "out-hf", workers, "hf")
        hf_tps = hres["tokens"] / hwall
        same = shard_bytes(DATA / "out-auto") == shard_bytes(DATA / "out-hf")
        print(f"pack    hf (tokenizers), {workers} workers:   {hf_tps / 1e6:8.2f} M tok/s (wall {hwall:.1f}s)")
        print(f"ratio   auto / hf = {auto_tps / hf_tps:.2f}×   (target ≥ 4×); identical shard bytes: {same}")

    if not args.skip_big:
        big = repeated_corpus(src, args.repeat)
        bres, bwall, peak_big = run_pack(big, DATA / "out-big", workers, "auto")
        print(f"pack    auto on {args.repeat}× the corpus: {bres['tokens'] / bwall / 1e6:8.2f} M tok/s; "
              f"peak RSS {peak_big / 2**20:.0f} MiB vs {peak_small / 2**20:.0f} MiB at 1× "
              f"({(peak_big / peak_small - 1) * 100:+.1f}%; target ≤ 1024 MiB and within 10%)")


if __name__ == "__main__":
    main()
