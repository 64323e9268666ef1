"""Compressed shards: zstd ratio and decompression speed on real GPT-2 token data, against floors.

For each dataset (plain packed shards of real text, GPT-2 ids, uint16) and each zstd level × frame size:
  * ratio          uncompressed bytes / NAME.bin.zst bytes (frame index and footer included)
  * compress       MB/s of uncompressed input, 1 thread and 2 threads (what pack spends per shard)
  * decompress     MB/s and M tokens/s of the verified frame-by-frame path (`iter_frames`: frame
                   header checks + zstd + xxh3 of every frame), 1 and 2 threads — what the loader's
                   decompressed cache and `verify` pay once per shard
  * random read    µs per 64 KiB read at a random offset through a `FramedReader` (one frame decoded
                   per read: the remote block cache / `decompress_range` path)
and, measured in the same run on the same bytes:
  * memcpy floor   copying the uncompressed bytes (what reading a plain, cached .bin costs at best)
  * whole-file     one zstd frame of the whole buffer at the same level, decompressed in one call
                   (the fastest zstd can go on these bytes: no framing, no verification)

Every timing is the best of `--repeats` (median in the JSON). The machine is shared (2 vCPUs, other
agents): the load average is printed before and after.

    python benchmarks/bench_zstd.py [--dataset DIR ...] [--levels 1,3,9] [--frames 1MiB,2MiB,4MiB,8MiB,16MiB]
                                    [--max-bytes 64MiB] [--repeats 3] [--json out.json]

Without --dataset: the shared corpus (/work/shared/data/corpus, ~33 MB of text, no repeats) packed once
with the GPT-2 tokenizer into bench-data/zstd-corpus, plus bench-data/out-auto if present (the 100 MB
benchmark corpus: the shared corpus, Python sources and /usr/share/doc, partly repeated).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import zstandard  # noqa: E402

from shardkit.format import open_dataset  # noqa: E402
from shardkit.format.compressed import iter_frames  # noqa: E402
from shardkit.format.zstd_frames import FramedReader  # noqa: E402
from shardkit.units import human_bytes, parse_bytes  # noqa: E402
from shardkit.writer import Codec, CompressionConfig  # noqa: E402
from shardkit.writer.compress import compress_file  # noqa: E402

DATA = HERE.parent / "bench-data"
SHARED = HERE.parents[1] / "shared" / "data"
RANDOM_READ = 64 << 10


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def shared_corpus_dataset() -> Path:
    out = DATA / "zstd-corpus"
    if (out / "manifest.json").is_file():
        return out
    from shardkit.pack import PackConfig, TokenizeOptions, pack
    from shardkit.writer import ShardLimits
    print(f"packing {SHARED / 'corpus'} with GPT-2 into {out} (once) …", flush=True)
    pack(PackConfig(inputs=(str(SHARED / "corpus"),), output=str(out), workers=2, overwrite=True,
                    tokenize=TokenizeOptions(tokenizer=str(SHARED / "tokenizers" / "gpt2" / "tokenizer.json")),
                    limits=ShardLimits(max_bytes=1 << 30),
                    max_skip_fraction=1.0))  # the 3 cp1252 Gutenberg books are skipped, as in the recorded runs
    return out


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(best wall, median wall, best CPU) seconds of `fn()`; CPU = this thread's CPU time, which a loaded
    machine inflates far less than wall time (meaningful for single-threaded work only)."""
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return min(wall), statistics.median(wall), min(cpu)


def decode_all(zst: Path, threads: int) -> None:
    for _ in iter_frames(zst, threads=threads):
        pass


def random_reads(reader: FramedReader, offsets: np.ndarray) -> None:
    for o in offsets.tolist():
        reader.read(o, RANDOM_READ)


def token_bytes(path: Path, max_bytes: int) -> tuple[bytes, int]:
    ds = open_dataset(path)
    n = min(ds.num_tokens, max_bytes // ds.dtype.itemsize)
    return ds.read_tokens(0, n).tobytes(), ds.dtype.itemsize


def bench_dataset(path: Path, levels: list[int], frames: list[int], max_bytes: int, repeats: int,
                  scratch: Path) -> dict:
    data, itemsize = token_bytes(path, max_bytes)
    size = len(data)
    mb = size / 1e6
    raw = scratch / "raw.bin"
    raw.write_bytes(data)
    src = np.frombuffer(data, dtype=np.uint8)
    dst = np.empty_like(src)
    memcpy, memcpy_med, memcpy_cpu = timed(partial(np.copyto, dst, src), max(repeats, 5))
    out: dict = {"dataset": str(path), "bytes": size, "tokens": size // itemsize,
                 "memcpy_mb_s": mb / memcpy, "memcpy_mb_s_median": mb / memcpy_med, "memcpy_mb_s_cpu": mb / memcpy_cpu,
                 "runs": []}
    print(f"\n{path.name}: {human_bytes(size)} of tokens ({size // itemsize:,} tokens); memcpy floor "
          f"{mb / memcpy_cpu:,.0f} MB/s per core (CPU time; wall {mb / memcpy:,.0f})")
    print("one thread, per CPU second:                                           two threads, wall:")
    print(f"{'level':>5} {'frame':>8} {'ratio':>6} {'comp':>6} {'decode':>7} {'Mtok/s':>7} {'vs memcpy':>9} "
          f"{'whole':>7} {'vs whole':>8} {'rand 64K':>9} {'comp':>6} {'decode':>7}")
    rng = np.random.default_rng(0)
    for level in levels:
        whole = zstandard.ZstdCompressor(level=level).compress(data)
        dctx = zstandard.ZstdDecompressor()
        w_best, w_med, w_cpu = timed(partial(dctx.decompress, whole, max_output_size=size), repeats)
        whole_ratio = size / len(whole)
        for frame in frames:
            cfg = CompressionConfig(codec=Codec.ZSTD, level=level, frame_size=frame)
            zst = scratch / f"l{level}-f{frame}.zst"
            compress = partial(compress_file, raw, zst, cfg, checksum_block_size=16 << 20)
            n = 1 if level >= 9 else repeats
            c1, _, c1_cpu = timed(partial(compress, threads=1), n)
            c2, _, _ = timed(partial(compress, threads=2), n)
            ratio = size / zst.stat().st_size
            d1, d1_med, d1_cpu = timed(partial(decode_all, zst, 1), repeats)
            d2, d2_med, _ = timed(partial(decode_all, zst, 2), repeats)
            offsets = rng.integers(0, size - RANDOM_READ, size=64)
            with FramedReader(zst, cache_frames=0) as r:
                rr, _, rr_cpu = timed(partial(random_reads, r, offsets), repeats)
            row = {"level": level, "frame_size": frame, "ratio": ratio, "whole_file_ratio": whole_ratio,
                   "compress_mb_s_cpu": mb / c1_cpu, "compress_mb_s_1t": mb / c1, "compress_mb_s_2t": mb / c2,
                   "decompress_mb_s_cpu": mb / d1_cpu, "decompress_mb_s_1t": mb / d1,
                   "decompress_mb_s_2t": mb / d2, "decompress_mb_s_1t_median": mb / d1_med,
                   "decompress_mb_s_2t_median": mb / d2_med, "decompress_mtok_s_cpu": size / itemsize / d1_cpu / 1e6,
                   "whole_file_decompress_mb_s_cpu": mb / w_cpu, "whole_file_decompress_mb_s": mb / w_best,
                   "whole_file_decompress_mb_s_median": mb / w_med,
                   "vs_memcpy_cpu": d1_cpu / memcpy_cpu, "vs_whole_file_cpu": d1_cpu / w_cpu,
                   "random_64k_read_us_cpu": rr_cpu / len(offsets) * 1e6,
                   "random_64k_read_us": rr / len(offsets) * 1e6}
            out["runs"].append(row)
            print(f"{level:>5} {human_bytes(frame):>8} {ratio:>6.3f} {mb / c1_cpu:>6,.0f} {mb / d1_cpu:>7,.0f} "
                  f"{row['decompress_mtok_s_cpu']:>7,.0f} {row['vs_memcpy_cpu']:>8.1f}x {mb / w_cpu:>7,.0f} "
                  f"{row['vs_whole_file_cpu']:>7.2f}x {row['random_64k_read_us_cpu']:>7,.0f}µs "
                  f"{mb / c2:>6,.0f} {mb / d2:>7,.0f}")
            zst.unlink()
        print(f"{level:>5} {'whole':>8} {whole_ratio:>6.3f}  (one frame, no index: the ratio ceiling)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", action="append", type=Path, default=None)
    ap.add_argument("--levels", default="1,3,9")
    ap.add_argument("--frames", default="1MiB,2MiB,4MiB,8MiB,16MiB")
    ap.add_argument("--max-bytes", default="64MiB", help="at most this many token bytes per dataset")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    datasets = args.dataset or [shared_corpus_dataset()] + [p for p in [DATA / "out-auto"]
                                                            if (p / "manifest.json").is_file()]
    levels = [int(x) for x in args.levels.split(",")]
    frames = [parse_bytes(x) for x in args.frames.split(",")]
    print(f"load average before: {load()} ({os.cpu_count()} CPUs); zstandard {zstandard.__version__} "
          f"(libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))})")
    results = {"load_before": load(), "cpus": os.cpu_count(), "datasets": []}
    with tempfile.TemporaryDirectory(prefix="bench-zstd-", dir=DATA if DATA.is_dir() else None) as tmp:
        for d in datasets:
            results["datasets"].append(bench_dataset(d, levels, frames, parse_bytes(args.max_bytes),
                                                     args.repeats, Path(tmp)))
    results["load_after"] = load()
    print(f"\nload average after: {results['load_after']}")
    print("columns: MB/s of uncompressed bytes. decode = verified frame-by-frame decode (frame checks + zstd + "
          "xxh3 of each frame); vs memcpy = decode time / copy time of the same bytes; whole = one-frame zstd "
          "decompress of the same bytes in one call; vs whole = framed decode time / whole-file time; rand 64K "
          "= one 64 KiB read at a random offset (decodes the frame(s) it touches). Two threads: wall clock.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
