"""Reader throughput against floors measured in the same run, on the same bytes.

Generates ~100 MB of JSON lines with short records (an id and a 50-600 character text) in a temporary
directory, plus .gz/.zst copies, one .txt and one .parquet file, then prints MB/s for each reader next to its
floor: a raw `f.read()` of the file, raw decompression of the same stream, or pyarrow's own column read.
MB/s always counts *uncompressed* bytes so the rows compare (for .txt and parquet: the text bytes). Each figure is the best of --repeat runs (the
machine may be shared).

    python benchmarks/bench_readers.py [--mb 100] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import json.scanner
import random
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardkit.readers import ReaderConfig, read_records  # noqa: E402
from shardkit.sources import InputFile  # noqa: E402

WORDS = ["the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
         "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
         "an", "they", "you", "were", "her", "she", "there", "all", "one", "data", "model", "token",
         "shard", "über", "naïve", "café"]


def generate(directory: Path, mb: int) -> dict[str, Path]:
    rng = random.Random(0)
    plain = directory / "bench.jsonl"
    texts: list[str] = []
    size = 0
    with plain.open("w", encoding="utf-8") as f:
        i = 0
        while size < mb * 1_000_000:
            text = " ".join(rng.choices(WORDS, k=rng.randint(10, 100)))
            line = json.dumps({"id": f"doc-{i}", "text": text}, ensure_ascii=False) + "\n"
            f.write(line)
            size += len(line.encode())
            texts.append(text)
            i += 1
    data = plain.read_bytes()
    paths = {"jsonl": plain, "gz": directory / "bench.jsonl.gz", "zst": directory / "bench.jsonl.zst",
             "txt": directory / "bench.txt", "parquet": directory / "bench.parquet"}
    paths["gz"].write_bytes(gzip.compress(data, compresslevel=6))
    paths["zst"].write_bytes(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data))
    paths["txt"].write_text("\n\n".join(texts), encoding="utf-8")
    table = pa.table({"id": [f"doc-{k}" for k in range(len(texts))], "text": texts})
    pq.write_table(table, paths["parquet"], row_group_size=65536)
    return paths


def best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t0)
    return min(times), n


def raw_read(path: Path) -> Callable[[], int]:
    def run() -> int:
        n = 0
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                n += len(block)
        return n
    return run


def raw_gunzip(path: Path) -> Callable[[], int]:
    def run() -> int:
        d, n = zlib.decompressobj(wbits=31), 0
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                n += len(d.decompress(block))
        return n
    return run


def raw_unzstd(path: Path) -> Callable[[], int]:
    def run() -> int:
        n = 0
        with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
            while block := r.read(1 << 20):
                n += len(block)
        return n
    return run


def json_parse_only(path: Path) -> Callable[[], int]:
    """The stdlib parse alone (json.loads of every line of the decoded file): no reader can beat this much."""
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]

    def run() -> int:
        loads = json.loads
        for line in lines:
            loads(line)
        return len(lines)
    return run


def read_decode(path: Path) -> Callable[[], int]:
    """A whole-file read plus the UTF-8 decode every str-producing reader must do."""
    def run() -> int:
        with open(path, "rb") as f:
            return len(f.read().decode("utf-8"))
    return run


def scan_only(path: Path) -> Callable[[], int]:
    """Block read + UTF-8 decode + split + the C JSON scanner per line: the reader minus building records."""
    scan = json.scanner.c_make_scanner(json.JSONDecoder())

    def run() -> int:
        n, pending = 0, b""
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                cut = block.rfind(b"\n") + 1
                for line in (pending + block[:cut]).decode("utf-8").split("\n")[:-1]:
                    scan(line, 0)
                    n += 1
                pending = block[cut:]
        return n
    return run


def pyarrow_text(path: Path) -> Callable[[], int]:
    def run() -> int:
        n = 0
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], use_threads=False):
            n += len(batch.column(0).to_pylist())
        return n
    return run


def reader(path: Path, config: ReaderConfig) -> Callable[[], int]:
    f = InputFile(url=str(path), size=path.stat().st_size, source=str(path))

    def run() -> int:
        n = 0
        for rec in read_records(f, config):
            n += rec.error is None
        return n
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="size of the plain JSONL file in MB (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is shown (default 3)")
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory instead of a temp one")
    args = ap.parse_args()

    directory = args.keep or Path(tempfile.mkdtemp(prefix="shardkit-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        paths = generate(directory, args.mb)
        mb = paths["jsonl"].stat().st_size / 1e6
        txt_mb = paths["txt"].stat().st_size / 1e6
        records = paths["jsonl"].read_bytes().count(b"\n")
        print(f"generated {mb:.0f} MB JSONL ({records:,} records, "
              f".gz {paths['gz'].stat().st_size / 1e6:.0f} MB, .zst {paths['zst'].stat().st_size / 1e6:.0f} MB) "
              f"in {time.perf_counter() - t0:.0f}s; best of {args.repeat}; MB/s of uncompressed bytes\n")
        plain = ReaderConfig()
        with_id = ReaderConfig(id_field="id")
        rows = [
            ("jsonl", reader(paths["jsonl"], plain), raw_read(paths["jsonl"]), "raw f.read()", mb),
            ("jsonl + id field", reader(paths["jsonl"], with_id), raw_read(paths["jsonl"]), "raw f.read()", mb),
            ("jsonl (vs json.loads)", reader(paths["jsonl"], plain), json_parse_only(paths["jsonl"]),
             "json.loads per line", mb),
            ("jsonl (vs C scanner)", reader(paths["jsonl"], plain), scan_only(paths["jsonl"]),
             "read+decode+split+scan", mb),
            ("jsonl.gz", reader(paths["gz"], plain), raw_gunzip(paths["gz"]), "raw zlib inflate", mb),
            ("jsonl.zst", reader(paths["zst"], plain), raw_unzstd(paths["zst"]), "raw zstd stream", mb),
            ("txt", reader(paths["txt"], plain), raw_read(paths["txt"]), "raw f.read()", txt_mb),
            ("txt (vs read+decode)", reader(paths["txt"], plain), read_decode(paths["txt"]),
             "f.read().decode()", txt_mb),
            ("parquet", reader(paths["parquet"], plain), pyarrow_text(paths["parquet"]),
             "pyarrow batches+to_pylist", txt_mb),
        ]
        print(f"{'reader':24s} {'MB/s':>8s}   {'floor':26s} {'MB/s':>8s}   ratio")
        for name, fn, floor_fn, floor_name, size in rows:
            t_reader, _ = best(fn, args.repeat)
            t_floor, _ = best(floor_fn, args.repeat)
            r, f = size / t_reader, size / t_floor
            print(f"{name:24s} {r:8.1f}   {floor_name:26s} {f:8.1f}   {r / f:5.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
