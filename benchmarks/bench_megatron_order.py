"""Time to the first batch of a Megatron blend: megatron-core's index build against shardkit's compatible order.

Both sides start from an empty index cache, in a fresh process each (so peak RSS is each side's own), on
the same two-prefix blend (weights 0.7 / 0.3, random uint16 documents of 100–4,000 tokens): megatron-core
through `BlendedMegatronDatasetBuilder` then `dataset[0]`; shardkit through `build_order` then the first
`MegatronBatches` micro-batch. Printed: seconds and peak RSS of each and shardkit ÷ megatron-core (time
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

from shardkit.format import open_dataset  # noqa: E402
from shardkit.megatron import MegatronBatches, MegatronConfig, Split, build_order, prefixes_of  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402


def _make(root: Path, tokens: int) -> list[Path]:
    out = []
    for k, share in enumerate((0.6, 0.4)):
        rng = np.random.default_rng(k)
        docs, n = [], 0
        while n < tokens * share:
            d = rng.integers(0, 50_000, size=int(rng.integers(100, 4_000)), dtype=np.uint16)
            docs.append(d)
            n += d.size
        write_dataset(root / f"ds{k}", docs, dtype="uint16", max_tokens_per_shard=10**12, checksum_block_size=1 << 20)
        out.append(root / f"ds{k}")
    return out


def _shardkit(dirs: list[str], a: argparse.Namespace, cache: str) -> str:
    prefixes = [prefixes_of(open_dataset(d))[0] for d in dirs]
    cfg = MegatronConfig(sequence_length=a.seq_len, random_seed=1234, split="1", path_to_cache=cache)
    order = build_order(prefixes, [0.7, 0.3], a.samples, Split.train, cfg)
    batch = next(iter(MegatronBatches(order, micro_batch_size=1)))
    return hashlib.sha256(batch["tokens"][0].tobytes()).hexdigest()


def _megatron(dirs: list[str], a: argparse.Namespace, cache: str) -> str:
    import torch  # noqa: PLC0415 - the megatron side only: its import cost is part of what it measures
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: PLC0415
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: PLC0415

    class Tok:
        eod, vocab_size, unique_identifiers = 0, 50_257, {"class": "bench"}

    torch.distributed.init_process_group("gloo", init_method=f"file://{cache}/pg", rank=0, world_size=1)
    names = [str(Path(d) / open_dataset(d).shards[0].name) for d in dirs]
    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=a.seq_len, blend=(names, [0.7, 0.3]), split="1",
                           path_to_cache=cache, tokenizer=Tok(), reset_position_ids=False,
                           reset_attention_mask=False, eod_mask_loss=False)
    ds = BlendedMegatronDatasetBuilder(GPTDataset, [a.samples, 0, 0], lambda: True, cfg).build()[0]
    d, j = int(ds.dataset_index[0]), int(ds.dataset_sample_index[0])
    text = ds.datasets[d]._query_document_sample_shuffle_indices(j)[0]
    return hashlib.sha256(text.tobytes()).hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=1_000_000)
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--side", choices=["shardkit", "megatron"])
    p.add_argument("--dirs", nargs="*")
    a = p.parse_args()
    if a.side:
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            digest = (_shardkit if a.side == "shardkit" else _megatron)(a.dirs, a, cache)
            secs = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"seconds": secs, "rss_mib": rss, "digest": digest}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [str(d) for d in _make(Path(tmp), a.tokens)]
        res = {}
        for side in ("megatron", "shardkit"):
            cmd = [sys.executable, __file__, "--side", side, "--samples", str(a.samples), "--seq-len",
                   str(a.seq_len), "--dirs", *dirs]
            res[side] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    m, s = res["megatron"], res["shardkit"]
    print(f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}")
    print(f"blend of 2 prefixes, {a.tokens:,} tokens, {a.samples:,} samples, seq_len {a.seq_len}")
    print(f"megatron-core: first batch after {m['seconds']:.2f} s, peak RSS {m['rss_mib']:.0f} MiB")
    print(f"shardkit:      first batch after {s['seconds']:.2f} s, peak RSS {s['rss_mib']:.0f} MiB")
    print(f"shardkit / megatron-core: time {s['seconds'] / m['seconds']:.2f}, RSS {s['rss_mib'] / m['rss_mib']:.2f}")
    print("first sample identical:", m["digest"] == s["digest"])


if __name__ == "__main__":
    main()
