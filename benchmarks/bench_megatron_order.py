"""Time to the first batch of a Megatron blend: megatron-core's index build against shardkit's compatible order.

Both sides start from an empty index cache, in a fresh process each (so peak RSS is each side's own), on
the same two-prefix blend (weights 0.7 / 0.3, random uint16 documents of 100–4,000 tokens): megatron-core
through `BlendedMegatronDatasetBuilder` then `dataset[0]`; shardkit through `build_order` then the first
`MegatronBatches` micro-batch; `Loader(order="megatron")` to its first batch. Printed: seconds and peak RSS of each and shardkit ÷ megatron-core (time
ratio < 1 is faster). Both must agree on the first batch's tokens (checked by digest).

    python benchmarks/bench_megatron_order.py [--samples 1000000] [--tokens 20000000] [--seq-len 1024]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shardkit import Loader  # noqa: E402
from shardkit.engine import BatchFields  # noqa: E402
from shardkit.format import open_dataset  # noqa: E402
from shardkit.megatron import MegatronBatches, MegatronConfig, Split, build_order, prefixes_of  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402


def _make(root: Path, tokens: int) -> str:
    """One dataset of two shards of about tokens / 2 each: the blend's two prefixes."""
    rng = np.random.default_rng(0)
    docs, n = [], 0
    while n < tokens:
        d = rng.integers(0, 50_000, size=int(rng.integers(100, 4_000)), dtype=np.uint16)
        docs.append(d)
        n += d.size
    write_dataset(root / "ds", docs, dtype="uint16", max_tokens_per_shard=tokens // 2 + 4_000,
                  checksum_block_size=1 << 20)
    return str(root / "ds")


def _shardkit(path: str, a: argparse.Namespace, cache: str) -> str:
    prefixes = prefixes_of(open_dataset(path))[:2]
    cfg = MegatronConfig(sequence_length=a.seq_len, random_seed=1234, split="1", path_to_cache=cache)
    order = build_order(prefixes, [0.7, 0.3], a.samples, Split.train, cfg)
    batch = next(iter(MegatronBatches(order, micro_batch_size=1)))
    return hashlib.sha256(batch["tokens"][0].tobytes()).hexdigest()


def _loader(path: str, a: argparse.Namespace, cache: str) -> str:
    ds = open_dataset(path)
    loader = Loader(ds, seq_len=a.seq_len, seed=1234, batch_schedule=8, micro_batch_size=8, order="megatron",
                    megatron={"num_samples": a.samples, "prefixes": [0, 1], "weights": [0.7, 0.3], "split": "1",
                              "path_to_cache": cache}, fields=BatchFields(tokens_only=True))
    batch = next(iter(loader))
    return hashlib.sha256(batch["tokens"][0].astype(np.int64).tobytes()).hexdigest()


def _megatron(path: str, a: argparse.Namespace, cache: str) -> str:
    import torch  # noqa: PLC0415 - the megatron side only: its import cost is part of what it measures
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: PLC0415
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: PLC0415

    class Tok:
        eod, vocab_size, unique_identifiers = 0, 50_257, {"class": "bench"}

    torch.distributed.init_process_group("gloo", init_method=f"file://{cache}/pg", rank=0, world_size=1)
    names = [str(Path(path) / s.name) for s in open_dataset(path).shards[:2]]
    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=a.seq_len, blend=(names, [0.7, 0.3]), split="1",
                           path_to_cache=cache, tokenizer=Tok(), reset_position_ids=False,
                           reset_attention_mask=False, eod_mask_loss=False)
    ds = BlendedMegatronDatasetBuilder(GPTDataset, [a.samples, 0, 0], lambda: True, cfg).build()[0]
    d, j = int(ds.dataset_index[0]), int(ds.dataset_sample_index[0])
    text = ds.datasets[d]._query_document_sample_shuffle_indices(j)[0]
    return hashlib.sha256(text.tobytes()).hexdigest()


SIDES = {"megatron": _megatron, "shardkit": _shardkit, "loader": _loader}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=1_000_000)
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--side", choices=list(SIDES))
    p.add_argument("--path")
    a = p.parse_args()
    if a.side:
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            digest = SIDES[a.side](a.path, a, cache)
            secs = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"seconds": secs, "rss_mib": rss, "digest": digest}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = _make(Path(tmp), a.tokens)
        res = {}
        for side in SIDES:
            cmd = [sys.executable, __file__, "--side", side, "--samples", str(a.samples), "--seq-len",
                   str(a.seq_len), "--path", path]
            res[side] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    m, s, lo = res["megatron"], res["shardkit"], res["loader"]
    print(f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}")
    print(f"blend of 2 prefixes, {a.tokens:,} tokens, {a.samples:,} samples, seq_len {a.seq_len}")
    print(f"megatron-core: first batch after {m['seconds']:.2f} s, peak RSS {m['rss_mib']:.0f} MiB")
    print(f"shardkit:      first batch after {s['seconds']:.2f} s, peak RSS {s['rss_mib']:.0f} MiB")
    print(f"shardkit Loader(order='megatron'): first batch after {lo['seconds']:.2f} s, peak RSS "
          f"{lo['rss_mib']:.0f} MiB")
    print(f"shardkit / megatron-core: time {s['seconds'] / m['seconds']:.2f}, RSS {s['rss_mib'] / m['rss_mib']:.2f}")
    print(f"Loader / megatron-core: time {lo['seconds'] / m['seconds']:.2f}, RSS {lo['rss_mib'] / m['rss_mib']:.2f}")
    print("first sample identical:", m["digest"] == s["digest"] == lo["digest"])


if __name__ == "__main__":
    main()
