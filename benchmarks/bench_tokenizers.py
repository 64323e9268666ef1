"""Tokenizer encode speed on real text with the GPT-2 tokenizer: fastokens, the tiktoken fast path, `tokenizers`.

One run prints tokens/s for
  * floors, all cores: `tokenizers` encode_batch and tiktoken encode_ordinary_batch (our compiled Encoding)
  * shardkit `Tokenizer.encode_batch`, single-threaded (as in each pack worker), for each backend (fastokens,
    tiktoken, hf), on documents of ~8 KB and on whole files; the first pass over the texts (cold: no
    word cache) and the best of the repeats; checking all give identical ids
  * the ratios to hf and to tiktoken, single-threaded, first pass         (target ≥ 4× hf)

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

from shardkit.tokenizers import load_tokenizer  # noqa: E402
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
    cores = os.cpu_count() or 1
    shapes = {"~8 KB documents": documents(args.books), "whole files": documents(args.books, doc_chars=1 << 30)}
    backends = ("fastokens", "tiktoken", "hf")
    print(f"{cores} cores; auto → {load_tokenizer(str(GPT2)).spec.backend}")
    for shape, docs in shapes.items():
        mb = sum(len(d.encode()) for d in docs) / 1e6
        print(f"{shape}: {len(docs)} documents, {mb:.1f} MB of text")
        rate: dict[str, float] = {}
        ref = None
        for b in backends:
            # a fresh tokenizer per shape: fastokens and tokenizers cache the pieces they have seen, and a
            # pack worker never sees the same document twice (the first pass is the fair figure)
            tok = load_tokenizer(str(GPT2), backend=b, threads=1)
            tok.encode_batch(["Warm-up: 12 words, once."])  # one-off set-up (regex JIT) is not encoding speed
            cold, n = best(lambda tok=tok: int(tok.encode_batch(docs)[0].size), 1)  # noqa: B023
            warm, _ = best(lambda tok=tok: int(tok.encode_batch(docs)[0].size), args.repeat)  # noqa: B023
            rate[b] = n / cold
            print(f"  shardkit {b:9s} 1 thread: {n / cold / 1e6:6.2f} M tok/s first pass, "
                  f"{n / warm / 1e6:6.2f} M tok/s best of {args.repeat}  ({n:,} tokens)")
            ids = tok.encode_batch(docs)[0]
            if ref is None:
                ref = ids
            elif not np.array_equal(ids, ref):
                sys.exit(f"FAIL: {b} gave different ids")
        print(f"  ratio (first pass) fastokens/hf {rate['fastokens'] / rate['hf']:.1f}×, fastokens/tiktoken "
              f"{rate['fastokens'] / rate['tiktoken']:.1f}×, tiktoken/hf {rate['tiktoken'] / rate['hf']:.1f}×")

    docs = shapes["~8 KB documents"]
    raw_hf = load_hf_json(str(GPT2))
    enc = load_tokenizer(str(GPT2), backend="tiktoken").encoding

    def hf_all() -> int:
        set_parallelism(0)
        return sum(len(e.ids) for e in raw_hf.encode_batch(docs, add_special_tokens=False))

    def tt_all() -> int:
        return sum(map(len, enc.encode_ordinary_batch(docs, num_threads=cores)))

    for name, fn in ((f"tokenizers encode_batch, {cores} threads", hf_all),
                     (f"tiktoken encode_ordinary_batch, {cores} threads", tt_all)):
        t, n = best(fn, args.repeat)
        print(f"  {name:45s} {n / t / 1e6:6.2f} M tok/s")


if __name__ == "__main__":
    main()
