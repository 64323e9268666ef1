"""Tokenizer encode speed on real text with the GPT-2 tokenizer: the fast path vs `tokenizers`.

One run prints tokens/s for
  * floors, all cores: `tokenizers` encode_batch and tiktoken encode_ordinary_batch (our compiled Encoding)
  * shardkit `Tokenizer.encode_batch`, single-threaded (as in each pack worker): backend auto (fast
    path) and backend hf, checking both give identical ids
  * the ratios fast/hf, single-threaded and all cores                    (target ≥ 4× single-threaded)

    python benchmarks/bench_tokenizers.py [--books 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402

from shardkit.tokenizers import Tokenizer, load_tokenizer  # noqa: E402
from shardkit.tokenizers.hf import load_hf_json, set_parallelism  # noqa: E402

SHARED = HERE.parents[1] / "shared" / "data"
GPT2 = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
CORPUS = SHARED / "corpus"


def documents(books: int, doc_chars: int = 8192) -> list[str]:
    """The corpora cut at blank lines into documents of about `doc_chars`, so batches parallelise."""
    texts = [(CORPUS / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8"),
             (CORPUS / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8-sig") for p in sorted((CORPUS / "gutenberg").glob("*-0.txt"))[:books]]
    docs: list[str] = []
    for text in texts:
        cur: list[str] = []
        size = 0
        for para in text.replace("\r\n", "\n").split("\n\n"):
            cur.append(para)
            size += len(para)
            if size >= doc_chars:
                docs.append("\n\n".join(cur))
                cur, size = [], 0
        if cur:
            docs.append("\n\n".join(cur))
    return docs


def best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t0)
    return min(times), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--books", type=int, default=3, help="Gutenberg books to add (default 3)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; the best counts")
    args = ap.parse_args()
    if not GPT2.exists():
        sys.exit(f"GPT-2 tokenizer not found at {GPT2}")
    docs = documents(args.books)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    cores = os.cpu_count() or 1
    print(f"{len(docs)} documents, {mb:.1f} MB of text; {cores} cores")

    fast = load_tokenizer(str(GPT2), threads=1)
    hf = load_tokenizer(str(GPT2), backend="hf", threads=1)
    print(f"backends: auto → {fast.spec.backend}, hf → {hf.spec.backend}")

    def ours(tok: Tokenizer) -> Callable[[], int]:
        return lambda: int(tok.encode_batch(docs)[0].size)

    rows: dict[str, tuple[float, int]] = {}
    rows["shardkit auto (tiktoken), 1 thread"] = best(ours(fast), args.repeat)
    rows["shardkit hf, 1 thread"] = best(ours(hf), args.repeat)
    if not np.array_equal(fast.encode_batch(docs)[0], hf.encode_batch(docs)[0]):
        sys.exit("FAIL: the fast path and tokenizers gave different ids")

    raw_hf = load_hf_json(str(GPT2))
    enc = fast.encoding

    def hf_all() -> int:
        set_parallelism(0)
        return sum(len(e.ids) for e in raw_hf.encode_batch(docs, add_special_tokens=False))

    def tt_all() -> int:
        return sum(map(len, enc.encode_ordinary_batch(docs, num_threads=cores)))

    rows[f"tokenizers encode_batch, {cores} threads"] = best(hf_all, args.repeat)
    rows[f"tiktoken encode_ordinary_batch, {cores} threads"] = best(tt_all, args.repeat)

    rate = {name: n / t for name, (t, n) in rows.items()}
    for name, (t, n) in rows.items():
        print(f"  {name:45s} {rate[name] / 1e6:6.2f} M tok/s  ({n:,} tokens in {t:.2f} s)")
    names = list(rate)
    print(f"ratio fast/hf, 1 thread (shardkit):        {rate[names[0]] / rate[names[1]]:.1f}×   (target ≥ 4×)")
    print(f"ratio fast/hf, {cores} threads (libraries):     {rate[names[3]] / rate[names[2]]:.1f}×")
    print(f"shardkit fast path / tiktoken floor per thread: {rate[names[0]] / (rate[names[3]] / cores):.2f}")


if __name__ == "__main__":
    main()
