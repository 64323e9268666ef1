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
  * table build memory: 2 M documents written a shard at a time (the cache's way) and built in memory
  * stream throughput, batch 8 (every loader of a seq_len timed in alternating stretches, best of 5):
    best-fit rows ÷ plain windows and ÷ windows with the same fields
    (position_ids, cu_seqlens, loss_mask), ÷ two gather floors of the same rows with no loader (np.take
    with a prebuilt index; and that plus the fields' bytes), and all of them ending in int64 torch
    tensors                                                                    (goal ≥ 0.8×)
  * the same from the row store (packing_store=True: the rows materialised beside the table, copied whole):
    best-fit rows from the store ÷ plain windows                               (goal ≥ 0.8×)
  * row store build time per GB of tokens (a 100 M-token synthetic dataset) and its size on disk
  * resume latency: load_state_dict + first batch at step 10⁶ and 10³           (goal ≤ 50 ms, flat)
  * per-rank Σ len² max/mean over 256 global batches of 64 at world size 8, without and with
    balance_ranks, gutenberg and long-mix                                      (goal ≤ 1.05 with)
    and for gutenberg 8,192: other seeds, global batches of 256 / 1024 over 8 / 64 ranks, and a
    cost-aware best-fit variant (padding and balance)
  * read amplification of an epoch, windows vs best-fit rows, page cache = 25 % of a 1 GB synthetic
    dataset in a memory cgroup (skipped with --skip-reads)
  * cold page cache (root only: the page cache is dropped; skipped with --skip-reads): the 1 GB synthetic
    streamed by windows and by best-fit rows from the row store (fields=["cu_seqlens"]) with and without
    page-cache hints

    python benchmarks/bench_packing.py [--seconds 3] [--json out.json] [--skip-reads]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from synthetic import token_dataset  # noqa: E402

from shardkit.engine.core import SLAB_BYTES  # noqa: E402
from shardkit.engine.fields import BatchFields  # noqa: E402
from shardkit.engine.pack_table import cached_table, document_spans, save_table, write_table  # noqa: E402
from shardkit.engine.packed_fields import packed_fields, segment_starts  # noqa: E402
from shardkit.engine.packing import PackSpec, build_table, concat_ranges, split_pieces  # noqa: E402
from shardkit.engine.packing_report import rank_balance  # noqa: E402
from shardkit.engine.row_store import cached_store  # noqa: E402
from shardkit.format import open_dataset  # noqa: E402
from shardkit.loader import Loader  # noqa: E402
from shardkit.planner.measure import measure_node  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402

try:  # the trainer-side figures need torch; the rest of the benchmark does not
    import torch

    from shardkit.adapters.torch_dataset import to_torch
except ImportError:
    torch = None

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


def _many_docs(n_docs: int) -> Path:
    """A dataset of `n_docs` documents, lengths resampled from the gutenberg paragraphs, in shards of 16 Mi
    tokens (built once under bench-data/packing/)."""
    path = DATA / f"many-docs-{n_docs}"
    if (path / "manifest.json").exists():
        return path
    _, lengths = document_spans(open_dataset(corpus("gutenberg")))
    sample = np.random.default_rng(1).choice(lengths, size=n_docs)
    rng = np.random.default_rng(2)

    def docs():
        for a in range(0, n_docs, 100_000):
            sizes = sample[a:a + 100_000]
            flat = rng.integers(0, 50257, size=int(sizes.sum()), dtype=np.uint16)
            yield from np.split(flat, np.cumsum(sizes)[:-1])
    shutil.rmtree(path, ignore_errors=True)
    write_dataset(path, docs(), max_tokens_per_shard=16 << 20)
    return path


def build_memory(n_docs: int = 2_000_000) -> list[dict]:
    """The table of a dataset of `n_docs` documents built and written (best_fit, seq_len 2,048): as the cache
    does it (`write_table`, a shard at a time) and in memory (`build_table` over every document, then
    `save_table`): seconds, and the peak of memory allocated meanwhile (tracemalloc, a second run: it slows
    the Python loops it traces)."""
    import tracemalloc

    ds = open_dataset(_many_docs(n_docs))
    spec = PackSpec(strategy="best_fit", seq_len=2048)
    out = []
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        ways = {"write_table (a shard at a time)": lambda d: write_table(d, ds, spec),
                "build_table + save_table (in memory)":
                    lambda d: save_table(d, build_table(*document_spans(ds), spec), ds.fingerprint, spec)}
        for k, (name, build) in enumerate(ways.items()):
            t = time.perf_counter()
            build(Path(tmp) / f"t{k}")
            seconds = time.perf_counter() - t
            tracemalloc.start()
            build(Path(tmp) / f"m{k}")
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            out.append({"way": name, "docs": n_docs, "shards": ds.num_shards, "seconds": seconds,
                        "peak_bytes": peak, "peak_bytes_per_doc": peak / n_docs})
    return out


class _Stream:
    """One loader's batches, timed in stretches; `convert` is applied to every batch inside the timing (the
    trainer's side: numpy → torch)."""

    def __init__(self, loader: Loader, convert=None, key: str = "input_ids") -> None:
        self.it, self.seq_len, self.convert, self.key = iter(loader), loader.config.seq_len, convert, key
        for _ in range(20):
            next(self.it)
        self.best = 0.0

    def stretch(self, seconds: float) -> None:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            b = next(self.it)
            if self.convert is not None:
                self.convert(b)
            n += b[self.key].shape[0] * self.seq_len
        self.best = max(self.best, n / (time.perf_counter() - t0))


def alternated(streams: dict[str, _Stream], seconds: float, rounds: int = 5) -> dict[str, float]:
    """Best input tokens per second of each stream over `rounds` rounds in which every stream runs for
    `seconds / rounds`: a change in the machine's speed (a shared VM) falls on all of them alike, so their
    ratios hold. A stretch spans many chunks and boundary runs, so no per-chunk cost escapes the timing."""
    for _ in range(rounds):
        for st in streams.values():
            st.stretch(seconds / rounds)
    return {name: st.best for name, st in streams.items()}


class GatherFloor:
    """What any packed reader must do at least, with no loader: the loader's own rows of one epoch, a slab
    of `SLAB_BYTES` at a time, copied from a fresh mapping of the shard by one `np.take` whose index array
    (every slot of the slab, pieces back to back) was built before the timing; with `fields`, the slab's
    position_ids and loss_mask (precomputed) copied into their buffers too — the bytes a packed batch holds,
    moved once, nothing computed."""

    def __init__(self, path: Path, cache: Path, seq_len: int, batch: int) -> None:
        ds = open_dataset(path)
        if ds.num_shards != 1:
            raise SystemExit(f"{path}: the gather floor reads one shard; the dataset has {ds.num_shards}")
        self.tokens = ds.shards[0].tokens_of(ds.shards[0].map_bin())
        table = cached_table(ds, PackSpec(strategy="best_fit", seq_len=seq_len), cache)
        loader = Loader(path, seq_len=seq_len, batch_schedule=batch, seed=1, packing="best_fit",
                        packing_cache_dir=cache)
        width = seq_len + 1
        ids = np.concatenate([loader.global_sample_ids(b) for b in range(table.num_rows // batch)])
        per = max(batch, (SLAB_BYTES // (width * ds.dtype.itemsize)) // batch * batch)
        wanted = BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True)
        self.slabs = []
        for a in range(0, ids.size - per + 1, per):
            idx, counts, starts, lengths = table.pieces(ids[a:a + per])
            slot, used = segment_starts(lengths, counts, width)
            index = np.zeros(per * width, dtype=np.int64)
            index[concat_ranges(slot, lengths)] = concat_ranges(starts, lengths)
            f = packed_fields(lengths, counts, table.first[idx], seq_len, wanted)
            self.slabs.append((index, np.ascontiguousarray(f["position_ids"]), f["loss_mask"]))
        self.out = np.empty(per * width, dtype=ds.dtype)
        self.pos = np.empty_like(self.slabs[0][1])
        self.mask = np.empty_like(self.slabs[0][2])
        self.tokens_per_slab = per * seq_len

    def copy_tok_s(self, seconds: float) -> float:
        """The bytes of a packed slab (tokens, int64 position_ids, float32 loss_mask) copied once from
        contiguous buffers, nothing gathered or computed: the ceiling of any reader that hands out a packed
        batch as new arrays (the row store's rows are gathered, not contiguous, so it is below this)."""
        _, pos, mask = self.slabs[0]
        src = np.ones_like(self.out)
        best = 0.0
        for _ in range(3):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds / 3:
                for _ in range(len(self.slabs)):
                    np.copyto(self.out, src)
                    np.copyto(self.pos, pos)
                    np.copyto(self.mask, mask)
                    n += self.tokens_per_slab
            best = max(best, n / (time.perf_counter() - t0))
        return best

    def tok_s(self, seconds: float, fields: bool) -> float:
        best = 0.0
        for _ in range(3):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds / 3:
                for index, pos, mask in self.slabs:
                    np.take(self.tokens, index, out=self.out)
                    if fields:
                        np.copyto(self.pos, pos)
                        np.copyto(self.mask, mask)
                    n += self.tokens_per_slab
            best = max(best, n / (time.perf_counter() - t0))
        return best


def _torch_convert():
    """The trainer's side of a batch: `to_torch` with int64 token ids (what an embedding takes; uint16 is
    not a torch index type). None without torch."""
    return None if torch is None else (lambda b: to_torch(b, torch.int64))


# fields a trainer names (packed rows then carry only those, BatchFields.for_packed_rows): varlen attention
# (cu_seqlens), with the loss mask, and RoPE positions instead of boundaries
VARLEN_SETS = {"cu_seqlens": ["cu_seqlens"], "cu_seqlens+loss_mask": ["cu_seqlens", "loss_mask"],
               "position_ids": ["position_ids"]}


def throughput(cache: Path, seconds: float) -> list[dict]:
    path = corpus("gutenberg")
    out = []
    convert = _torch_convert()
    for L in SEQS:
        def loader(seq_len: int = L, **kw) -> Loader:  # batch 8 of gutenberg at this seq_len
            return Loader(path, seq_len=seq_len, batch_schedule=8, seed=1, **kw)

        def stored_rows(**kw) -> Loader:  # best-fit rows read from the row store
            return loader(packing="best_fit", packing_cache_dir=cache, packing_store=True, **kw)

        fields = {"position_ids": True, "cu_seqlens": True, "loss_mask": True}
        streams = {"windows": _Stream(loader()), "windows_fields": _Stream(loader(fields=fields)),
                   "best_fit": _Stream(loader(packing="best_fit", packing_cache_dir=cache)),
                   "store": _Stream(stored_rows()),
                   "store_tokens_only": _Stream(stored_rows(fields={"tokens_only": True}), key="tokens"),
                   **{f"store_{name}": _Stream(stored_rows(fields=named)) for name, named in VARLEN_SETS.items()}}
        if convert is not None:
            streams.update({
                "torch_windows": _Stream(loader(), convert), "torch_windows_fields": _Stream(loader(fields=fields), convert),
                "torch_best_fit": _Stream(loader(packing="best_fit", packing_cache_dir=cache), convert),
                "torch_store": _Stream(stored_rows(), convert),
                "torch_store_cu_seqlens": _Stream(stored_rows(fields=VARLEN_SETS["cu_seqlens"]), convert)})
        tok_s = alternated(streams, seconds)
        floor = GatherFloor(path, cache, L, 8)
        r = {"seq_len": L, "windows_tok_s": tok_s["windows"], "windows_fields_tok_s": tok_s["windows_fields"],
             "best_fit_tok_s": tok_s["best_fit"], "store_tok_s": tok_s["store"],
             "store_named_tok_s": {name: tok_s[f"store_{name}"] for name in VARLEN_SETS},
             "store_tokens_only_tok_s": tok_s["store_tokens_only"],
             "floor_take_tok_s": floor.tok_s(seconds, fields=False),
             "floor_take_fields_tok_s": floor.tok_s(seconds, fields=True),
             "floor_copy_fields_tok_s": floor.copy_tok_s(seconds)}
        r.update({f"{name}_tok_s": v for name, v in tok_s.items() if name.startswith("torch_")})
        out.append(r)
    return out


def long_throughput(cache: Path, seconds: float) -> list[dict]:
    """The same on long documents (long-mix: 1.1–1.2 attention segments per row): plain windows, best-fit
    rows from the store with `fields=["cu_seqlens"]` and with every field, alternated."""
    path = corpus("long-mix")
    out = []
    for L in SEQS:
        def loader(seq_len: int = L, **kw) -> Loader:
            return Loader(path, seq_len=seq_len, batch_schedule=8, seed=1, **kw)
        store = dict(packing="best_fit", packing_cache_dir=cache, packing_store=True)
        tok_s = alternated({"windows": _Stream(loader()), "store": _Stream(loader(**store)),
                            "store_cu_seqlens": _Stream(loader(fields=["cu_seqlens"], **store))}, seconds)
        out.append({"seq_len": L, **{f"{k}_tok_s": v for k, v in tok_s.items()}})
    return out


def _anon_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("RssAnon"))


def store_build(sizes: tuple[int, ...] = (20_000_000, 100_000_000)) -> list[dict]:
    """Seconds to build the row store of synthetic datasets (documents of 100–4,000 tokens, as
    bench_stream's), per GB of tokens, table build excluded; the peak anonymous memory the build adds
    (sampled every 5 ms: flat in the dataset's size); the store's bytes on disk ÷ the tokens'."""
    out = []
    for tokens in sizes:
        path = token_dataset(ROOT / "bench-data" / f"store-{tokens}", tokens, seed=99)
        for L in SEQS:  # each in a fresh process: its memory is not the heap this one freed
            got = subprocess.run([sys.executable, __file__, "--build-store", str(path), str(L)], check=True,
                                 capture_output=True, text=True, cwd=ROOT)
            out.append(json.loads(got.stdout.strip().splitlines()[-1]))
    return out


def _build_once(ds, L: int) -> dict:
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _anon_mib())
            time.sleep(0.005)

    cache = Path(tempfile.mkdtemp(dir=DATA))
    try:
        spec = PackSpec(strategy="best_fit", seq_len=L)
        t0 = time.perf_counter()
        table = cached_table(ds, spec, cache)
        t1 = time.perf_counter()
        before = _anon_mib()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        store = cached_store(ds, table, spec, cache)
        t2 = time.perf_counter()
        done.set()
        watcher.join()
        t3 = time.perf_counter()
        again = cached_store(ds, table, spec, cache)  # opening: meta, sizes, digests of the small files
        t4 = time.perf_counter()
        t5 = time.perf_counter()
        again.check(np.arange(again.rows))  # what a process's first epoch hashes, block by block
        t6 = time.perf_counter()
        files = {p.name: p.stat().st_size for p in store.directory.iterdir()}
        gb = ds.num_tokens * ds.dtype.itemsize / 1e9
        return {"seq_len": L, "tokens": ds.num_tokens, "table_s": t1 - t0, "store_s": t2 - t1,
                "store_s_per_gb": (t2 - t1) / gb, "bytes": sum(files.values()), "files": files,
                "disk_over_tokens": sum(files.values()) / (ds.num_tokens * ds.dtype.itemsize),
                "build_anon_mib": max(0, peak[0] - before), "open_ms": (t4 - t3) * 1e3,
                "verify_all_s_per_gb": (t6 - t5) / (sum(files.values()) / 1e9)}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


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


def balance_more(cache: Path) -> dict:
    """gutenberg 8,192 (the configuration above the goal): the figure for other seeds, at larger global
    batches, and for a cost-aware variant of best-fit."""
    path = corpus("gutenberg")
    seeds = []
    for seed in (1, 2, 3, 4):
        loader = Loader(path, seq_len=8192, batch_schedule=64, seed=seed, packing="best_fit", packing_cache_dir=cache)
        seeds.append({"seed": seed, **rank_balance(loader._packed_table, [loader.global_sample_ids(b)
                                                                          for b in range(256)], 8)})
    larger = []
    for batch, world in ((256, 8), (256, 64), (1024, 8), (1024, 64)):
        loader = Loader(path, seq_len=8192, batch_schedule=batch, seed=1, packing="best_fit", packing_cache_dir=cache)
        larger.append({"batch": batch, **rank_balance(loader._packed_table, [loader.global_sample_ids(b)
                                                                             for b in range(64)], world)})
    return {"seeds": seeds, "larger": larger, "cost_aware": cost_aware(path, 8192)}


def _cost_aware_rows(sizes: list[int], width: int, medium: int) -> np.ndarray:
    """Σ len² per row of best-fit decreasing where pieces of at least `medium` tokens go to the fitting row of
    least Σ len² instead of least room (spreading medium documents over the rows of long ones)."""
    room = np.zeros(max(1, len(sizes)), np.int64)
    cost = np.zeros(max(1, len(sizes)))
    n = 0
    for i in np.argsort(-np.asarray(sizes), kind="stable").tolist():
        size = sizes[i]
        fit = np.flatnonzero(room[:n] >= size)
        if fit.size:
            r = int(fit[np.argmin(cost[fit])] if size >= medium else fit[np.argmin(room[fit])])
        else:
            r, n = n, n + 1
            room[r] = width
        room[r] -= size
        cost[r] += float(size) ** 2
    return cost[:n]


def cost_aware(path: Path, seq_len: int, batch: int = 64, world: int = 8, batches: int = 256) -> list[dict]:
    """Padding and Σ len² balance of best-fit vs the cost-aware variant, rows drawn in a seeded random order
    (a stand-in for the shuffle, the same for every variant)."""
    starts, lengths = document_spans(open_dataset(path))
    spec = PackSpec(strategy="best_fit", seq_len=seq_len)
    pstart, plen, _, doc = split_pieces(starts, lengths, seq_len)
    group = starts[doc] // spec.group_tokens
    out = []
    for medium in (None, 2048, 512, 256):
        if medium is None:
            table = build_table(starts, lengths, spec)
            costs, rows = table.cost(np.arange(table.num_rows)), table.num_rows
        else:
            parts = []
            for g in np.unique(group).tolist():
                sizes = plen[group == g]
                parts.append(np.full(int((sizes == spec.width).sum()), float(spec.width) ** 2))
                parts.append(_cost_aware_rows(sizes[sizes < spec.width].tolist(), spec.width, medium))
            costs = np.concatenate(parts)
            rows = costs.size
        rng = np.random.default_rng(0)
        order = np.concatenate([rng.permutation(rows) for _ in range(batches * batch // rows + 1)])
        ids = [order[b * batch:(b + 1) * batch] for b in range(batches)]
        bal = rank_balance(_Costs(costs), ids, world)
        out.append({"medium": medium, "rows": rows, "padding": 1 - int(plen.sum()) / (rows * spec.width), **bal})
    return out


class _Costs:
    """Row costs in the shape `rank_balance` reads (`cost(rows)`)."""

    def __init__(self, costs: np.ndarray) -> None:
        self.costs = costs

    def cost(self, rows: np.ndarray) -> np.ndarray:
        return self.costs[rows]


def read_amplification(cache: Path, cache_fraction: float = 0.25) -> list[dict]:
    """Storage bytes read in the second epoch ÷ the dataset's bytes, windows vs packed rows, one loader in a
    fresh process whose page cache (a memory cgroup) holds `cache_fraction` of the 1 GB synthetic dataset
    of `bench_stream.py` (documents of 100–4,000 tokens): the configuration bench_stream measures (seq_len
    2,048, batch 64, block shuffle of 2 blocks per group)."""
    path = token_dataset(ROOT / "bench-data" / "stream-1GB", 500_000_000, seed=1234)
    ds = open_dataset(path)
    data_bytes = sum(s.bin_path.stat().st_size for s in ds.shards)
    out = []
    for packing in ("window", "best_fit"):
        options = {"seq_len": 2048, "batch_schedule": 64, "seed": 1, "group_blocks": 2}
        if packing == "window":
            rows = ds.num_tokens // 2048
        else:
            options |= {"packing": packing, "packing_cache_dir": str(cache)}
            rows = cached_table(ds, PackSpec(strategy=packing, seq_len=2048), cache).num_rows
        epoch = rows // 64
        t0 = time.perf_counter()
        got = measure_node(path, world_size=1, ranks=[0], warm_steps=epoch, steps=epoch,
                           memory_limit=int(data_bytes * cache_fraction), loader_options=options, timeout=3600)
        out.append({"packing": packing, "read_bytes": got["read_bytes"], "data_bytes": data_bytes,
                    "amplification": got["read_bytes"] / data_bytes, "limited": got["limited"],
                    "evicted": got["evicted"], "rows": got["rows"], "seconds": time.perf_counter() - t0})
    return out


COLD_BATCHES = 3000


def cold_reads(cache: Path, batches: int = COLD_BATCHES) -> list[dict] | str:
    """Batches 2..`batches` (64 rows of 2,048) of the 1 GB synthetic, each loader in a fresh process whose
    page cache was dropped after the loader was made (its table and store built before): plain windows,
    best-fit rows from the row store with fields=["cu_seqlens"], and the same without page-cache hints
    (readahead=False). The first batch (numba's import, the first block's hash) is reported apart."""
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        return "skipped: dropping the page cache needs root"
    token_dataset(ROOT / "bench-data" / "stream-1GB", 500_000_000, seed=1234)
    out = []
    for variant in ("windows", "store", "store, no hints"):
        done = subprocess.run([sys.executable, __file__, "--cold-run", variant, str(cache), str(batches)],
                              capture_output=True, text=True, check=True)
        out.append(json.loads(done.stdout.splitlines()[-1]))
    return out


def _cold_run(variant: str, cache: Path, batches: int) -> dict:
    options: dict = {"seq_len": 2048, "batch_schedule": 64, "seed": 1}
    if variant != "windows":
        options |= {"packing": "best_fit", "packing_cache_dir": str(cache), "packing_store": True,
                    "fields": ["cu_seqlens"], "readahead": variant == "store"}
    loader = Loader(ROOT / "bench-data" / "stream-1GB", **options)
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
    it = iter(loader)
    t0 = time.perf_counter()
    next(it)
    t1 = time.perf_counter()
    for _ in range(batches - 1):
        next(it)
    t2 = time.perf_counter()
    return {"variant": variant, "batches": batches, "first_batch_s": t1 - t0, "rest_s": t2 - t1,
            "rest_tok_s": (batches - 1) * 64 * 2048 / (t2 - t1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput figure")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--skip-reads", action="store_true", help="no read amplification (1 GB dataset, minutes)")
    ap.add_argument("--only", choices=["throughput", "store", "cold"], default=None,
                    help="just the throughput table (with the row store), or that and the store build; or just "
                         "the cold page cache reads")
    ap.add_argument("--build-store", nargs=2, metavar=("DATASET", "SEQ_LEN"), help=argparse.SUPPRESS)
    ap.add_argument("--cold-run", nargs=3, metavar=("VARIANT", "CACHE", "BATCHES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_store:  # one store build, in the fresh process store_build() starts
        print(json.dumps(_build_once(open_dataset(args.build_store[0]), int(args.build_store[1]))))
        return
    if args.cold_run:  # one cold loader, in the fresh process cold_reads() starts
        print(json.dumps(_cold_run(args.cold_run[0], Path(args.cold_run[1]), int(args.cold_run[2]))))
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    print(f"bench_packing  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  commit {commit}  "
          f"{platform.processor() or platform.machine()}  {os.cpu_count()} cpus")
    cache = DATA / "tables"
    results: dict = {"commit": commit}
    if args.only is None:
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
        results["build_memory"] = mem = build_memory()
        print(f"\ntable build memory, best_fit, seq_len 2,048, {mem[0]['docs']:,} documents in {mem[0]['shards']} shards "
              "(gutenberg paragraph lengths), peak allocated (tracemalloc)")
        for r in mem:
            print(f"  {r['way']:<38} {r['seconds']:6.1f} s   peak {r['peak_bytes'] / 2**20:7.1f} MiB = "
                  f"{r['peak_bytes_per_doc']:6.1f} bytes per document")
    if args.only == "cold":
        _print_cold(results, cache)
        return _dump(args, results)
    results["throughput"] = tp = throughput(cache, args.seconds)
    print("\nstream throughput, batch 8, gutenberg (loaders alternated, best of 5 stretches), M tok/s")
    for r in tp:
        b = r["best_fit_tok_s"]
        print(f"  seq_len {r['seq_len']:>5,}: best_fit {b / 1e6:7.1f}  windows {r['windows_tok_s'] / 1e6:7.1f}  "
              f"windows+fields {r['windows_fields_tok_s'] / 1e6:7.1f}  floor take {r['floor_take_tok_s'] / 1e6:7.1f}"
              f"  floor take+fields {r['floor_take_fields_tok_s'] / 1e6:7.1f}")
        print(f"    best_fit = {b / r['windows_tok_s']:.2f}× plain windows, {b / r['windows_fields_tok_s']:.2f}× "
              f"windows+fields, {b / r['floor_take_tok_s']:.2f}× the take floor, "
              f"{b / r['floor_take_fields_tok_s']:.2f}× the take+fields floor; take floor = "
              f"{r['floor_take_tok_s'] / r['windows_tok_s']:.2f}× plain windows")
        if "torch_best_fit_tok_s" in r:
            tb = r["torch_best_fit_tok_s"]
            print(f"    to torch (int64 ids): best_fit {tb / 1e6:7.1f}  windows {r['torch_windows_tok_s'] / 1e6:7.1f}  "
                  f"windows+fields {r['torch_windows_fields_tok_s'] / 1e6:7.1f}  →  "
                  f"{tb / r['torch_windows_tok_s']:.2f}× windows, {tb / r['torch_windows_fields_tok_s']:.2f}× "
                  f"windows+fields")
        st = r["store_tok_s"]
        print(f"    row store: best_fit {st / 1e6:7.1f} = {st / r['windows_tok_s']:.2f}× plain windows (goal ≥ 0.8×), "
              f"{st / b:.2f}× gathered best_fit, {st / r['windows_fields_tok_s']:.2f}× windows+fields; tokens only "
              f"(DataLoader adapters' item) {r['store_tokens_only_tok_s'] / 1e6:7.1f} = "
              f"{r['store_tokens_only_tok_s'] / r['windows_tok_s']:.2f}× plain windows")
        print("    row store, only the fields named: " + "  ".join(
            f"{name} {v / 1e6:7.1f} = {v / r['windows_tok_s']:.2f}×" for name, v in r["store_named_tok_s"].items())
            + " plain windows (goal ≥ 0.8×)")
        c = r["floor_copy_fields_tok_s"]
        print(f"    copy floor (a packed slab's bytes copied once, contiguous, nothing gathered) {c / 1e6:7.1f} = "
              f"{c / r['windows_tok_s']:.2f}× plain windows; row store = {st / c:.2f}× the copy floor")
        if "torch_store_tok_s" in r:
            print(f"    row store to torch: {r['torch_store_tok_s'] / 1e6:7.1f} = "
                  f"{r['torch_store_tok_s'] / r['torch_windows_tok_s']:.2f}× windows to torch; only cu_seqlens "
                  f"{r['torch_store_cu_seqlens_tok_s'] / 1e6:7.1f} = "
                  f"{r['torch_store_cu_seqlens_tok_s'] / r['torch_windows_tok_s']:.2f}×")
    results["long_throughput"] = lt = long_throughput(cache, args.seconds)
    print("\nstream throughput, batch 8, long-mix (loaders alternated, best of 5 stretches), M tok/s")
    for r in lt:
        w = r["windows_tok_s"]
        print(f"  seq_len {r['seq_len']:>5,}: windows {w / 1e6:7.1f}  row store, cu_seqlens "
              f"{r['store_cu_seqlens_tok_s'] / 1e6:7.1f} = {r['store_cu_seqlens_tok_s'] / w:.2f}× (goal ≥ 0.8×)  "
              f"every field {r['store_tok_s'] / 1e6:7.1f} = {r['store_tok_s'] / w:.2f}×")
    if args.only == "throughput":
        return _dump(args, results)
    results["store_build"] = sb = store_build()
    print("\nrow store build (best_fit, synthetic datasets, table build excluded)")
    for r in sb:
        print(f"  {r['tokens'] / 1e6:5.0f} M tokens, seq_len {r['seq_len']:>5,}: {r['store_s']:.1f} s = "
              f"{r['store_s_per_gb']:.1f} s per GB of tokens (table {r['table_s']:.1f} s); memory +{r['build_anon_mib']} MiB; "
              f"on disk {r['bytes'] / 2**20:,.0f} MiB = {r['disk_over_tokens']:.2f}× the tokens; open {r['open_ms']:.1f} ms; "
              f"hashing every block (once per process, on first read) {r['verify_all_s_per_gb']:.2f} s per GB")
    if args.only == "store":
        return _dump(args, results)
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
    results["balance_more"] = more = balance_more(cache)
    print("\ngutenberg seq_len 8,192, balance_ranks: per-rank Σ len² max/mean (lower bound) by seed, 256 batches of 64 "
          "over 8 ranks")
    print("  " + "  ".join(f"seed {r['seed']}: {r['balanced_max_over_mean']:.3f} ({r['lower_bound_mean']:.3f})"
                           for r in more["seeds"]))
    print("  larger global batches (64 batches each): " + "  ".join(
        f"{r['batch']} rows / {r['world_size']} ranks: {r['max_over_mean']:.3f} → {r['balanced_max_over_mean']:.3f} "
        f"({r['lower_bound_mean']:.3f})" for r in more["larger"]))
    print("  cost-aware best-fit (rows in a seeded random order, 256 batches of 64, 8 ranks):")
    for r in more["cost_aware"]:
        name = "best_fit" if r["medium"] is None else f"pieces ≥ {r['medium']} to the cheapest row"
        print(f"    {name:<34} padding {100 * r['padding']:.3f}%  balanced {r['balanced_max_over_mean']:.4f}  "
              f"lower bound {r['lower_bound_mean']:.4f}")
    if not args.skip_reads:
        results["reads"] = rd = read_amplification(cache)
        print("\nread amplification, 2nd epoch, 1 GB synthetic, page cache (cgroup) = 25 % of it, seq_len 2048, "
              "batch 64, 2 blocks/group")
        for r in rd:
            print(f"  {r['packing']:<9}: {r['amplification']:.3f}× ({r['read_bytes'] / 2**20:,.0f} MiB read of "
                  f"{r['data_bytes'] / 2**20:,.0f}; cgroup limit applied: {r['limited']}, cache emptied: "
                  f"{r['evicted']}; {r['seconds']:.0f} s)")
        _print_cold(results, cache)
    _dump(args, results)


def _print_cold(results: dict, cache: Path) -> None:
    results["cold"] = cold = cold_reads(cache)
    print(f"\ncold page cache, 1 GB synthetic, seq_len 2,048, batch 64: batches 2–{COLD_BATCHES:,} after dropping "
          "the page cache (the first batch apart)")
    if isinstance(cold, str):
        print(f"  {cold}")
        return
    for r in cold:
        print(f"  {r['variant']:<16} {r['rest_s']:5.2f} s = {r['rest_tok_s'] / 1e6:6.0f} M tok/s  (first batch "
              f"{r['first_batch_s']:.2f} s)")


def _dump(args: argparse.Namespace, results: dict) -> None:
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
