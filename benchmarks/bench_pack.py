"""Pack throughput per tokenizer backend, each stage's floor measured alone, and memory flatness.

One run, on the bench corpus (real text, JSONL) and on 4× that corpus, prints:
  * each stage's floor, measured alone in this run, as tokens/s of the corpus's tokens:
      read      the project's reader blocks (read + decompress), bytes only
      decode    JSONL bytes already in memory → texts, with each decoder measured (stdlib scanner as the
                reader uses it, orjson, msgspec, pyarrow.json when installed); the floor is the fastest
      tokenize  fastokens' flat batch call on the texts in memory, in chunks as pack sends them, in W
                processes side by side (W = workers), each encoding every W-th chunk
      write     the real ShardWriter: tokens + index + block checksums (xxh3-128) + fsync
  * pack tokens/s with each backend (hf, tiktoken — what `auto` was before fastokens — fastokens, auto)
    at 1 and 2 workers, and the ratio of auto to the slowest floor          (target ≥ 0.8)
  * auto / tiktoken in the same run                                        (target ≥ 4×)
  * the same on the 4× corpus: auto at every worker count, tiktoken at the most workers
  * what the pipeline allows on this machine's cores, from the floors (see `bounds`)
  * shard bytes identical to the hf pack; peak RSS of the pack process tree at 1× and 4×

    python benchmarks/bench_pack.py [--size 100MB] [--repeat 4] [--skip-hf]
    python benchmarks/bench_pack.py --executor ray [--num-tasks 2]   # Ray vs local executor tokens/s
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from make_corpus import build  # noqa: E402
from rss import run_measured  # noqa: E402

from shardkit.pack.chunks import CHUNK_CHARS, CHUNK_DOCS  # noqa: E402
from shardkit.readers.compression import iter_blocks  # noqa: E402
from shardkit.sources import input_compression  # noqa: E402
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


def files_of(path: Path) -> list[Path]:
    return sorted(path.glob("*.jsonl"))


# ---- stage floors -------------------------------------------------------------------------------------

def floor_read(files: list[Path]) -> float:
    t0 = time.perf_counter()
    n = 0
    for p in files:
        for block in iter_blocks(str(p), input_compression(str(p))):
            n += len(block)
    return time.perf_counter() - t0


def _lines(files: list[Path]) -> list[bytes]:
    out = []
    for p in files:
        out += p.read_bytes().splitlines()
    return out


def floor_decode(files: list[Path]) -> dict[str, float]:
    """Seconds to turn the files' bytes (already in memory) into the list of texts, per decoder."""
    import json.scanner

    blobs = [p.read_bytes() for p in files]
    out: dict[str, float] = {}
    scan = json.scanner.make_scanner(json.JSONDecoder())
    t0 = time.perf_counter()
    texts = []
    for b in blobs:
        for line in b.decode("utf-8").split("\n"):
            if line:
                texts.append(scan(line, 0)[0]["text"])
    out["stdlib scanner"] = time.perf_counter() - t0
    n = len(texts)
    del texts
    try:
        import orjson
        t0 = time.perf_counter()
        texts = [orjson.loads(line)["text"] for b in blobs for line in b.split(b"\n") if line]
        out["orjson"] = time.perf_counter() - t0
        assert len(texts) == n
        del texts
    except ImportError:
        pass
    try:
        import msgspec

        class Doc(msgspec.Struct):
            text: str

        dec = msgspec.json.Decoder(Doc)
        t0 = time.perf_counter()
        texts = [dec.decode(line).text for b in blobs for line in b.split(b"\n") if line]
        out["msgspec (typed)"] = time.perf_counter() - t0
        assert len(texts) == n
        del texts
    except ImportError:
        pass
    import pyarrow as pa
    import pyarrow.json as pj
    t0 = time.perf_counter()
    texts = []
    for b in blobs:
        table = pj.read_json(pa.BufferReader(b), read_options=pj.ReadOptions(block_size=16 << 20))
        texts += table.column("text").to_pylist()
    out["pyarrow.json"] = time.perf_counter() - t0
    assert len(texts) == n
    return out


def _texts(files: list[str]) -> list[str]:
    out = []
    for p in files:
        with open(p, encoding="utf-8") as f:
            out += [json.loads(line)["text"] for line in f]
    return out


def _chunks(texts: list[str]) -> list[list[str]]:
    """The batches pack sends a worker (chunks.py: CHUNK_CHARS characters or CHUNK_DOCS documents)."""
    out, cur, chars = [], [], 0
    for t in texts:
        cur.append(t)
        chars += len(t)
        if chars >= CHUNK_CHARS or len(cur) >= CHUNK_DOCS:
            out.append(cur)
            cur, chars = [], 0
    return out + ([cur] if cur else [])


def _encode_share(files: list[str], share: int, workers: int, backend: str, start, results) -> None:
    tok = load_tokenizer(str(GPT2), backend=backend, threads=1)
    chunks = _chunks(_texts(files))[share::workers]
    tok.encode_batch(chunks[0][:20])  # warm-up outside the timing
    start.wait()
    t0 = time.perf_counter()
    n = 0
    for c in chunks:
        ids, _ = tok.encode_batch(c)
        n += int(ids.size)
    results.put((n, time.perf_counter() - t0))


def floor_tokenize(files: list[Path], workers: int, backend: str = "fastokens") -> tuple[int, float]:
    """(tokens, seconds): `workers` processes side by side, each encoding every `workers`-th chunk."""
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_encode_share, args=([str(p) for p in files], k, workers, backend, start, results))
             for k in range(workers)]
    for p in procs:
        p.start()
    res = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(n for n, _ in res), max(dt for _, dt in res)


def floor_write(tokens: int, docs: int) -> float:
    """The real writer on `tokens` GPT-2 tokens in `docs` documents, 1 GiB shards, as pack calls it."""
    from shardkit.writer.shard_writer import ShardLimits, ShardWriter

    rng = np.random.default_rng(0)
    lengths = np.full(docs, tokens // docs, dtype=np.int64)
    lengths[: tokens - int(lengths.sum())] += 1
    batch_docs = max(1, docs // 64)
    with tempfile.TemporaryDirectory(dir=DATA) as d:
        w = ShardWriter(Path(d), dtype=np.dtype(np.uint16), limits=ShardLimits(), next_index=0, prefix="shard",
                        with_ids=False)
        batches = []
        for s in range(0, docs, batch_docs):
            ln = lengths[s:s + batch_docs]
            batches.append((rng.integers(0, 50257, int(ln.sum()), dtype=np.uint16), ln))
        t0 = time.perf_counter()
        for toks, ln in batches:
            w.write_docs(toks, ln)
        w.close_shard()
        return time.perf_counter() - t0


# ---- pack runs ----------------------------------------------------------------------------------------

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


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def stage_floors(files: list[Path], workers_list: list[int]) -> tuple[int, int, dict[str, float]]:
    """(tokens, docs, floors in tokens/s keyed 'read', 'decode', 'write', 'tokenize@W')."""
    read_s = floor_read(files)
    decoders = floor_decode(files)
    tok1, tok1_s = floor_tokenize(files, 1)
    docs = sum(1 for t in _texts([str(p) for p in files]) if t)  # pack skips empty documents
    write_s = floor_write(tok1 + docs, docs)  # + one EOS per document, as pack writes
    nbytes = sum(p.stat().st_size for p in files)
    print(f"floor   read+decompress        {nbytes / read_s / 1e6:8.0f} MB/s  = {tok1 / read_s / 1e6:8.2f} M tok/s")
    for name, s in sorted(decoders.items(), key=lambda kv: kv[1]):
        print(f"floor   decode ({name:15s}) {nbytes / s / 1e6:6.0f} MB/s  = {tok1 / s / 1e6:8.2f} M tok/s")
    print(f"floor   write+checksum+fsync   {(tok1 + docs) * 2 / write_s / 1e6:8.0f} MB/s  = "
          f"{tok1 / write_s / 1e6:8.2f} M tok/s")
    floors = {"read": tok1 / read_s, "decode": tok1 / min(decoders.values()),
              "decode (stdlib, as the reader)": tok1 / decoders["stdlib scanner"], "write": tok1 / write_s}
    for w in workers_list:
        n, s = (tok1, tok1_s) if w == 1 else floor_tokenize(files, w)
        assert n == tok1
        floors[f"tokenize@{w}"] = n / s
        print(f"floor   tokenize fastokens, {w} process(es) {n / s / 1e6:8.2f} M tok/s ({n:,} tokens)")
    return tok1, docs, floors


def bounds(floors: dict[str, float], workers_list: list[int], cores: int) -> dict[int, float]:
    """tokens/s the pipeline allows from the floors alone (start-up not counted).

    Each token costs CPU in every stage: read r, decode d (the reader's decoder: the stdlib scanner),
    tokenize t, write w (seconds per token, the floors' inverses), so on C cores no pack exceeds
    C / (r + d + t + w). One worker runs reading+decoding, tokenizing and writing in three threads
    (pack/pipeline.py): at most min(1/t, 1/(r + d), min(C, 2) / (r + d + t + w)) (reading and decoding
    hold the GIL: they share one core). W workers each read, decode and tokenize their units in series
    while the parent writes: at most min(W / (r + d + t), 1/w, min(W, C) / (r + d + t + w)).
    """
    r, d = 1 / floors["read"], 1 / floors["decode (stdlib, as the reader)"]
    t, w_ = 1 / floors["tokenize@1"], 1 / floors["write"]
    total = r + d + t + w_
    out = {}
    for w in workers_list:
        if w == 1:
            out[w] = min(1 / t, 1 / (r + d), min(cores, 2) / total)
        else:
            out[w] = min(w / (r + d + t), 1 / w_, min(w, cores) / total)
    return out


def ratios(label: str, auto: dict, old: dict | None, floors: dict[str, float], w: int) -> None:
    """auto against the slowest stage floor at `w` workers and against tiktoken packs of the same run."""
    auto_tps = auto["tokens"] / auto["seconds"]
    stage = {k: v for k, v in floors.items() if not k.startswith("tokenize") or k == f"tokenize@{w}"}
    stage.pop("decode (stdlib, as the reader)")
    slowest = min(stage, key=lambda k: stage[k])
    vs_old = (f"; auto / tiktoken (auto before fastokens) = {auto_tps / (old['tokens'] / old['seconds']):.2f}× "
              "(target ≥ 4×)") if old is not None else ""
    print(f"ratio   {label}: auto / slowest floor ({slowest}, {stage[slowest] / 1e6:.2f} M tok/s) = "
          f"{auto_tps / stage[slowest]:.3f} (target ≥ 0.8){vs_old}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100MB")
    ap.add_argument("--repeat", type=int, default=4, help="the big corpus is this many copies of the small one")
    ap.add_argument("--workers", default="1,2", help="worker counts to run pack at")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--executor", choices=["local", "ray"], default=None,
                    help="ray: compare `--num-tasks N` on the Ray and the local executor, then stop")
    ap.add_argument("--num-tasks", type=int, default=0, help="tasks for --executor (0 = one per core)")
    args = ap.parse_args()
    if not GPT2.exists():
        raise SystemExit(f"needs the real GPT-2 tokenizer at {GPT2}")
    cores = os.cpu_count() or 1
    src = corpus(args.size)
    files = files_of(src)
    nbytes = sum(p.stat().st_size for p in files)
    print(f"machine: {platform.processor() or platform.machine()}, {cores} cores, {platform.python_version()}; "
          f"commit {_commit()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"corpus  {src} ({nbytes / 1e6:.1f} MB, {len(files)} JSONL files); tokenizer {GPT2.name} (GPT-2)")
    if args.executor == "ray":
        bench_executors(src, cores, args.num_tasks or cores, max(2, args.repeat // 2))
        return

    workers_list = [int(w) for w in args.workers.split(",")]
    tokens, docs, floors = stage_floors(files, workers_list)

    backends = ["tiktoken", "fastokens", "auto"] + ([] if args.skip_hf else ["hf"])
    big_results: dict[tuple[str, int], dict] = {}
    results: dict[tuple[str, int], tuple[dict, float, int]] = {}
    for w in workers_list:
        for b in backends:
            if b == "hf" and w != max(workers_list):
                continue  # hf is the reference bytes and the slowest: one run
            res, wall, peak = run_pack(src, DATA / f"out-{b}-{w}", w, b)
            results[(b, w)] = (res, wall, peak)
            tps = res["tokens"] / res["seconds"]
            print(f"pack    {b:9s} ({res['tokenizer_backend']}), {w} worker(s): {tps / 1e6:8.2f} M tok/s "
                  f"(pack() {res['seconds']:.1f}s, wall {wall:.1f}s incl. interpreter start; "
                  f"peak RSS {peak / 2**20:.0f} MiB)")
            if res["tokens"] != tokens + docs or res["docs"] != docs:
                print(f"WARNING {res['tokens']:,} tokens in {res['docs']:,} documents != {tokens:,} + {docs:,} EOS")
    bound = bounds(floors, workers_list, cores)
    for w in workers_list:
        auto = results[("auto", w)][0]
        how = (f"reading+decoding, tokenizing and writing in threads on {min(2, cores)} cores" if w == 1 else
               f"{w} workers each reading+decoding+tokenizing in series, the parent writing, on {cores} cores")
        print(f"bound   {w} worker(s): {bound[w] / 1e6:.2f} M tok/s ({how}; start-up not counted); auto / bound = "
              f"{auto['tokens'] / auto['seconds'] / bound[w]:.3f}")
        ratios(f"{w} worker(s)", auto, results[("tiktoken", w)][0], floors, w)
    if not args.skip_hf:
        ref = shard_bytes(DATA / f"out-hf-{max(workers_list)}")
        same = {f"{b}@{w}": shard_bytes(DATA / f"out-{b}-{w}") == ref for (b, w) in results if b != "hf"}
        print(f"bytes   identical to the hf pack: {same}")
    if not args.skip_big:
        big = repeated_corpus(src, args.repeat)
        top = max(workers_list)
        for w, b in [(w, "auto") for w in workers_list] + [(top, "tiktoken")]:
            bres, _, peak_big = run_pack(big, DATA / "out-big", w, b)
            shutil.rmtree(DATA / "out-big", ignore_errors=True)
            peak_small = results[(b, w)][2]
            print(f"pack    {b:9s} on {args.repeat}× the corpus, {w} worker(s): "
                  f"{bres['tokens'] / bres['seconds'] / 1e6:8.2f} M tok/s (pack() {bres['seconds']:.1f}s); peak RSS "
                  f"{peak_big / 2**20:.0f} MiB vs {peak_small / 2**20:.0f} MiB at 1× "
                  f"({(peak_big / peak_small - 1) * 100:+.1f}%; target flat)")
            big_results[(b, w)] = bres
        for w in workers_list:
            if ("tiktoken", w) in big_results:
                ratios(f"{args.repeat}× corpus, {w} worker(s)", big_results[("auto", w)],
                       big_results[("tiktoken", w)], floors, w)
            else:
                ratios(f"{args.repeat}× corpus, {w} worker(s)", big_results[("auto", w)], None, floors, w)


if __name__ == "__main__":
    main()
