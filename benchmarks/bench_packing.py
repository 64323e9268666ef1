"""Document packing on real corpora, in one run: padding, documents split, plan build time, stream
throughput against windows, resume latency far into the run, and per-rank attention balance.

Corpora (../shared/data, packed once under bench-data/packing/ with the real GPT-2 tokenizer there, EOS
appended):
  wikitext    WikiText-2 test split, one document per non-empty line (paragraphs and headings)
  gutenberg   the 29 Gutenberg novels cut into paragraphs (blank-line separated)
  long-mix    whole documents: the 29 novels, the WikiText articles, HumanEval, tinyshakespeare

Printed, at seq_len 2,048 and 8,192:
  * padding fraction and documents split for window / first_fit / best_fit   (goal: best-fit ≤ 1 % at 2,048)
  * plan build time per million documents (lengths resampled from the gutenberg paragraphs)
  * stream throughput, batch 8: best-fit rows ÷ windows with the same fields (position_ids, cu_seqlens,
    loss_mask) and ÷ plain windows                                            (goal ≥ 0.8×)
  * resume latency: load_state_dict + first batch at step 10⁶ and 10³           (goal ≤ 50 ms, flat)
  * per-rank Σ len² max/mean over 256 global batches of 64 at world size 8, without and with
    balance_ranks, gutenberg and long-mix                                      (goal ≤ 1.05 with)

    python benchmarks/bench_packing.py [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from shardkit.engine.pack_table import document_spans  # noqa: E402
from shardkit.engine.packing import PackSpec, build_table  # noqa: E402
from shardkit.engine.packing_report import rank_balance  # noqa: E402
from shardkit.format import open_dataset  # noqa: E402
from shardkit.loader import Loader  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DATA = ROOT / "bench-data" / "packing"
TOKENIZER = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
SEQS = (2048, 8192)


def _text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("cp1252")  # three of the novels are Windows-1252 (see the data README)


def _documents(name: str) -> list[str]:
    corpus = SHARED / "corpus"
    wiki = _text(corpus / "wikitext-2-raw" / "wiki.test.raw").replace("\r\n", "\n")
    books = [_text(p).replace("\r\n", "\n") for p in sorted((corpus / "gutenberg").glob("*.txt"))]
    if name == "wikitext":
        return [line.strip() for line in wiki.split("\n") if line.strip()]
    if name == "gutenberg":
        return [p.strip() for b in books for p in re.split(r"\n\s*\n", b) if p.strip()]
    articles = [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki) if a.strip()]
    with gzip.open(corpus / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        code = [(r := json.loads(line))["prompt"] + r["canonical_solution"] + r["test"] for line in f]
    shakespeare = _text(corpus / "tinyshakespeare" / "input.txt")
    return books + articles + code + [shakespeare]


def corpus(name: str) -> Path:
    """The packed dataset of one corpus (built once)."""
    out = DATA / name
    if (out / "manifest.json").exists():
        return out
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        src = Path(tmp) / f"{name}.jsonl"
        with open(src, "w", encoding="utf-8") as f:
            for text in _documents(name):
                f.write(json.dumps({"text": text}) + "\n")
        subprocess.run([sys.executable, "-m", "cli.main", "pack", str(src), "-o", str(out), "-t", str(TOKENIZER),
                        "-w", "2", "--shard-size", "64MiB"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out


def window_split(lengths: np.ndarray, seq_len: int) -> int:
    """Documents that windows cut: not inside one window of seq_len + 1 tokens."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ends = starts + lengths
    return int(np.count_nonzero((lengths > 0) & (ends - 1 > (starts // seq_len) * seq_len + seq_len)))


def padding_table(names: list[str]) -> list[dict]:
    out = []
    for name in names:
        ds = open_dataset(corpus(name))
        starts, lengths = document_spans(ds)
        for L in SEQS:
            row = {"corpus": name, "seq_len": L, "docs": int(lengths.size), "tokens": int(lengths.sum()),
                   "window": {"padding": 0.0, "split": window_split(lengths, L)}}
            for strategy in ("first_fit", "best_fit"):
                t = time.perf_counter()
                table = build_table(starts, lengths, PackSpec(strategy=strategy, seq_len=L))
                s = table.stats()
                row[strategy] = {"padding": s["padding_fraction"], "split": s["documents_split"], "rows": s["rows"],
                                 "build_s": time.perf_counter() - t}
            out.append(row)
    return out


def build_rate(n_docs: int = 1_000_000) -> list[dict]:
    """Plan build seconds per million documents, lengths resampled from the gutenberg paragraphs."""
    _, lengths = document_spans(open_dataset(corpus("gutenberg")))
    sample = np.random.default_rng(0).choice(lengths, size=n_docs)
    starts = np.concatenate([[0], np.cumsum(sample)[:-1]])
    out = []
    for L in SEQS:
        for strategy in ("first_fit", "best_fit"):
            t = time.perf_counter()
            build_table(starts, sample, PackSpec(strategy=strategy, seq_len=L))
            out.append({"seq_len": L, "strategy": strategy, "s_per_million_docs": (time.perf_counter() - t) * 1e6 / n_docs})
    return out


def _tok_s(loader: Loader, seconds: float) -> float:
    it = iter(loader)
    for _ in range(20):
        next(it)
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            b = next(it)
            n += b["input_ids"].size
        best = max(best, n / (time.perf_counter() - t0))
    return best


def throughput(cache: Path, seconds: float) -> list[dict]:
    path = corpus("gutenberg")
    out = []
    for L in SEQS:
        fields = {"position_ids": True, "cu_seqlens": True, "loss_mask": True}
        plain = _tok_s(Loader(path, seq_len=L, batch_schedule=8, seed=1), seconds)
        doc = _tok_s(Loader(path, seq_len=L, batch_schedule=8, seed=1, fields=fields), seconds)
        best = _tok_s(Loader(path, seq_len=L, batch_schedule=8, seed=1, packing="best_fit", packing_cache_dir=cache),
                      seconds)
        out.append({"seq_len": L, "windows_tok_s": plain, "windows_fields_tok_s": doc, "best_fit_tok_s": best,
                    "ratio_vs_windows_fields": best / doc, "ratio_vs_windows": best / plain})
    return out


def resume_latency(cache: Path) -> list[dict]:
    path = corpus("gutenberg")
    out = []
    for step in (1_000, 1_000_000):
        t0 = time.perf_counter()
        loader = Loader(path, seq_len=2048, batch_schedule=64, seed=1, packing="best_fit", packing_cache_dir=cache,
                        rank=3, world_size=8, balance_ranks=True)
        state = loader.state_at(step)
        opened = time.perf_counter() - t0
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            loader.load_state_dict(state)
            next(iter(loader))
            best = min(best, time.perf_counter() - t)
        out.append({"step": step, "resume_ms": best * 1e3, "open_ms": opened * 1e3})
    return out


def balance(cache: Path) -> list[dict]:
    out = []
    for name in ("gutenberg", "long-mix"):
        for L in SEQS:
            loader = Loader(corpus(name), seq_len=L, batch_schedule=64, seed=1, packing="best_fit",
                            packing_cache_dir=cache)
            ids = [loader.global_sample_ids(b) for b in range(256)]
            out.append({"corpus": name, "seq_len": L, **rank_balance(loader._packed_table, ids, 8)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput figure")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    print(f"bench_packing  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  commit {commit}  "
          f"{platform.processor() or platform.machine()}  {os.cpu_count()} cpus")
    cache = DATA / "tables"
    results: dict = {"commit": commit}
    results["padding"] = pad = padding_table(["wikitext", "gutenberg", "long-mix"])
    print("\npadding fraction (documents split) per corpus and seq_len")
    print(f"  {'corpus':<10} {'seq_len':>7} {'docs':>7} {'tokens':>10}  {'window':>14}  {'first_fit':>16}  {'best_fit':>16}")
    for r in pad:
        w, f, b = r["window"], r["first_fit"], r["best_fit"]
        print(f"  {r['corpus']:<10} {r['seq_len']:>7,} {r['docs']:>7,} {r['tokens']:>10,}  "
              f"{100 * w['padding']:>5.2f}% ({w['split']:>5,})  {100 * f['padding']:>6.2f}% ({f['split']:>5,})  "
              f"{100 * b['padding']:>6.2f}% ({b['split']:>5,})")
    results["build"] = rate = build_rate()
    print("\nplan build time per million documents (gutenberg paragraph lengths)")
    for r in rate:
        print(f"  seq_len {r['seq_len']:>5,} {r['strategy']:<9} {r['s_per_million_docs']:6.2f} s")
    results["throughput"] = tp = throughput(cache, args.seconds)
    print("\nstream throughput, batch 8, gutenberg (best of 3)")
    for r in tp:
        print(f"  seq_len {r['seq_len']:>5,}: windows {r['windows_tok_s'] / 1e6:8.1f} M tok/s, windows+fields "
              f"{r['windows_fields_tok_s'] / 1e6:7.1f} M, best_fit {r['best_fit_tok_s'] / 1e6:7.1f} M  →  "
              f"{r['ratio_vs_windows_fields']:.2f}× windows+fields, {r['ratio_vs_windows']:.2f}× plain windows")
    results["resume"] = rs = resume_latency(cache)
    print("\nresume latency (best_fit, seq_len 2048, batch 64, rank 3 of 8, balanced): load_state_dict + first batch")
    for r in rs:
        print(f"  step {r['step']:>9,}: {r['resume_ms']:6.1f} ms  (loader construction incl. table open: "
              f"{r['open_ms']:.0f} ms)")
    results["balance"] = bal = balance(cache)
    print("\nper-rank Σ len² max/mean, world size 8, 256 global batches of 64, best_fit")
    for r in bal:
        print(f"  {r['corpus']:<10} seq_len {r['seq_len']:>5,}: contiguous slices {r['max_over_mean']:.3f} (worst "
              f"{r['max_over_mean_worst']:.3f}); balance_ranks {r['balanced_max_over_mean']:.3f} (worst "
              f"{r['balanced_max_over_mean_worst']:.3f}); lower bound {r['lower_bound_mean']:.3f} (worst "
              f"{r['lower_bound_worst']:.3f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
