"""One measurement of the loader figures, with whatever `shardkit` is first on sys.path (run by bench_engine).

Uses only API that both the current engine and the release before it have, so the same probe measures
either one: `Loader`, `Loader.from_recipe`, `iter_units`, `state_at` / `load_state_dict`, and
`shardkit.torch.ShardkitDataLoader`. Prints one JSON object: tokens/s, items/s or milliseconds per figure.

    python benchmarks/engine_probe.py FIGURE DATA_DIR [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from shardkit import Loader

SEQ = 2048


def _rate(it, seconds: float, key: str = "input_ids") -> tuple[float, float]:
    """(tokens/s, items/s) of one ~`seconds` run of an iterator of batch dicts (warm-up: its first 16)."""
    for _ in range(16):
        next(it)
    tokens = items = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(32):
            item = next(it)
            tokens += item[key].numel() if hasattr(item[key], "numel") else item[key].size
            items += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return tokens / dt, items / dt


def _recipe(data: Path, batch: int, names: tuple[str, str, str]) -> dict:
    return {"seed": 1, "seq_len": SEQ, "phases": [{"name": "p", "tokens": 10**12, "batch": batch,
                                                   "mix": {"a": 0.5, "b": 0.3, "c": 0.2}}],
            "sources": {k: {"path": str(data / n)} for k, n in zip("abc", names)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("figure")
    ap.add_argument("data", type=Path)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    data, f, s = a.data, a.figure, a.seconds
    warnings.simplefilter("ignore")
    out: dict[str, float] = {}
    if f.startswith("single"):  # the single-source loader over the whole dataset
        batch = int(f[len("single"):])
        out["tok_s"], out["items_s"] = _rate(iter(Loader(data / "all", seq_len=SEQ, batch_schedule=batch, seed=1,
                                                         release="unmap")), s)
    elif f.startswith("mixture"):  # three distinct sources (a third of the data each), 0.5 / 0.3 / 0.2
        batch = int(f[len("mixture"):])
        loader = Loader.from_recipe(_recipe(data, batch, ("a", "b", "c")), release="unmap")
        out["tok_s"], out["items_s"] = _rate(iter(loader), s)
    elif f.startswith("self"):  # the whole dataset three times: exactly the single-source bytes
        batch = int(f[len("self"):])
        loader = Loader.from_recipe(_recipe(data, batch, ("all", "all", "all")), release="unmap")
        out["tok_s"], out["items_s"] = _rate(iter(loader), s)
    elif f == "workers2":  # ShardkitDataLoader, 2 worker processes, batch 8
        from shardkit.torch import ShardkitDataLoader

        loader = Loader(data / "all", seq_len=SEQ, batch_schedule=8, seed=1, release="unmap")
        out["tok_s"], out["items_s"] = _rate(iter(ShardkitDataLoader(loader, num_workers=2)), s)
    elif f == "micro_items":  # the DataLoader-worker item path with micro-batches: iter_units, in-process
        loader = Loader(data / "all", seq_len=SEQ, batch_schedule=64, seed=1, micro_batch_size=1, release="unmap")
        out["tok_s"], out["items_s"] = _rate((item for _, item in loader.iter_units(0, stride=2)), s)
    elif f == "micro_iter":  # the same micro-batches through plain iteration
        loader = Loader(data / "all", seq_len=SEQ, batch_schedule=64, seed=1, micro_batch_size=1, release="unmap")
        out["tok_s"], out["items_s"] = _rate(iter(loader), s)
    elif f == "resume":  # load_state_dict + first batch at 1e3 and 1e7 batches, best of 5 each
        for at in (1_000, 10_000_000):
            best = float("inf")
            for _ in range(5):
                ld = Loader(data / "all", seq_len=SEQ, batch_schedule=64, seed=1)
                state = ld.state_at(at)
                t0 = time.perf_counter()
                ld.load_state_dict(state)
                next(iter(ld))
                best = min(best, time.perf_counter() - t0)
            out[f"resume_ms_{at:.0e}"] = best * 1000
    else:
        raise SystemExit(f"unknown figure {f!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
