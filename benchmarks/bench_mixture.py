"""Mixture loader throughput against the single-source loader on the same data, and resume latency.

One run prints (seq_len 2048, block shuffle, warm page cache):
  * single-source `Loader` tokens/s on source a, at global batch 8 and 64 (the floor of this run)
  * `MixtureLoader` tokens/s for a mixture of 3 sources (a, b, c: 0.5 / 0.3 / 0.2) at batch 8 and 64,
    and the ratio to the floor                                             (target ≥ 0.8×)
  * the same for a mixture of a with itself three times (exactly the same bytes as the floor)
  Each is the best of --repeats rounds; a round runs all three in turn (the machine is shared).
  * resume latency: `load_state_dict` + first batch at 1e3 and 1e7 samples into phase 2 of a two-phase
    recipe whose phase 2 switches to seq_len 4096                           (target ≤ 50 ms, flat)
  * the load average before and after (the machine is shared: numbers are only as good as the load)

Numbers are printed, never asserted. Datasets (random uint16 tokens, documents of 100–4,000 tokens) are
built once under bench-data/.

    python benchmarks/bench_mixture.py [--tokens 64M] [--seconds 2] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from synthetic import token_dataset  # noqa: E402

from shardkit.loader import Loader, MixtureLoader  # noqa: E402
from shardkit.units import human_count, parse_count  # noqa: E402

DATA = HERE.parent / "bench-data"
SEQ = 2048
BATCHES = (8, 64)


def dataset(name: str, tokens: int, seed: int) -> Path:
    return token_dataset(DATA / f"mixture-{name}-{tokens}", tokens, seed=seed, shard_bytes=256 << 20)


def _rate(make, seconds: float) -> float:
    """tokens/s of one ~`seconds` run of a fresh loader (iteration only; construction not timed)."""
    it = iter(make())
    tokens = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(64):
            tokens += next(it)["input_ids"].size
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return tokens / dt


def rates(makers: dict, seconds: float, repeats: int) -> dict[str, float]:
    """Best tokens/s of each loader over `repeats` rounds; every round runs all of them in turn, so a change
    in the machine's load hits the loader and the mixtures alike."""
    best = dict.fromkeys(makers, 0.0)
    for _ in range(repeats):
        for name, make in makers.items():
            best[name] = max(best[name], _rate(make, seconds))
    return best


def recipe(paths: dict[str, Path], mix: dict[str, float], batch: int) -> dict:
    return {"seed": 1, "seq_len": SEQ, "sources": {n: {"path": str(p)} for n, p in paths.items()},
            "phases": [{"name": "main", "tokens": "1T", "batch": batch, "mix": mix}]}


def resume_latency(paths: dict[str, Path], into_phase2: int, repeats: int) -> float:
    """Median ms of load_state_dict + the first batch, `into_phase2` samples into phase 2."""
    r = {"seed": 1, "sources": {n: {"path": str(p)} for n, p in paths.items()},
         "phases": [{"name": "short", "tokens": 1_000_000 * SEQ, "seq_len": SEQ, "batch": 64,
                     "mix": {"a": 0.5, "b": 0.3, "c": 0.2}},
                    {"name": "long", "tokens": "1T", "seq_len": 2 * SEQ, "batch": 64,
                     "mix": {"a": 0.2, "b": 0.3, "c": 0.5}}]}
    probe = MixtureLoader(r, rank=0, world_size=1)
    state = probe.state_at(probe.plan.bounds[1].first_batch + into_phase2 // 64)
    times = []
    for _ in range(repeats):
        loader = MixtureLoader(r, rank=0, world_size=1)
        t0 = time.perf_counter()
        loader.load_state_dict(state)
        next(iter(loader))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="64M", help="tokens per source dataset")
    ap.add_argument("--seconds", type=float, default=2.0, help="streaming time per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tokens = parse_count(args.tokens)
    load_before = os.getloadavg()
    paths = {n: dataset(n, tokens, seed) for seed, n in enumerate("abc")}
    for p in paths.values():  # warm the page cache
        for f in p.glob("*.bin"):
            with open(f, "rb") as fh:
                while fh.read(64 << 20):
                    pass
    out: dict = {"tokens_per_source": tokens, "seq_len": SEQ, "load_before": load_before, "batches": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same = {n: paths["a"] for n in ("a1", "a2", "a3")}  # three sources, exactly the floor's bytes
        for batch in BATCHES:
            single = functools.partial(Loader, paths["a"], seq_len=SEQ, batch_schedule=batch, seed=1, rank=0,
                                       world_size=1)
            three = functools.partial(MixtureLoader, recipe(paths, {"a": 0.5, "b": 0.3, "c": 0.2}, batch), rank=0,
                                      world_size=1)
            three_same = functools.partial(MixtureLoader, recipe(same, {"a1": 0.5, "a2": 0.3, "a3": 0.2}, batch),
                                           rank=0, world_size=1)
            r = rates({"loader": single, "mixture3": three, "same": three_same}, args.seconds, args.repeats)
            floor, mix3, mix_same = r["loader"], r["mixture3"], r["same"]
            out["batches"][batch] = {"loader": floor, "mixture3": mix3, "mixture3_same_data": mix_same,
                                     "ratio": mix3 / floor, "ratio_same_data": mix_same / floor}
        out["resume_ms"] = {str(n): resume_latency(paths, n, max(3, args.repeats)) for n in (1_000, 10_000_000)}
    out["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print(f"seq_len {SEQ}, {human_count(tokens)} tokens per source, best of {args.repeats} × {args.seconds:.1f}s")
    for batch, r in out["batches"].items():
        print(f"  batch {batch:3d}: loader {human_count(r['loader'])} tok/s | mixture of 3 "
              f"{human_count(r['mixture3'])} tok/s = {r['ratio']:.2f}× (target ≥ 0.80) | 3 × the same data "
              f"{human_count(r['mixture3_same_data'])} tok/s = {r['ratio_same_data']:.2f}×")
    for n, ms in out["resume_ms"].items():
        print(f"  resume {int(n):.0e} samples into phase 2: {ms:.1f} ms (target ≤ 50 ms)")
    la = out["load_after"]
    print(f"load average after {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")


if __name__ == "__main__":
    main()
