"""The read engine against the release before it, in one run: every loader figure, new ÷ old.

For each figure, `engine_probe.py` runs in a fresh process once with this checkout's `shardkit` and once
with the previous release's (a `git worktree` of `--baseline`, default the last commit before the engine),
alternating, `--repeats` times; the best of each is kept (the machine may be shared). Figures:

  single8 / single64     single-source Loader tok/s at global batch 8 / 64 (seq_len 2048, block shuffle)
  mixture8 / mixture64   a recipe of 3 distinct sources (a third of the data each; 0.5/0.3/0.2) tok/s
  self8 / self64         a recipe of the whole dataset three times (the single-source bytes exactly)
  workers2               ShardkitDataLoader with 2 worker processes, batch 8, tok/s
  micro_items            iter_units (the DataLoader-worker item path) with micro-batches of 1, items/s
  micro_iter             the same micro-batches through plain iteration, items/s
  resume                 load_state_dict + first batch at batch 1e3 and 1e7, ms

Printed: each figure for both, the ratio new ÷ old (≥ 1 is "not slower"; for resume old ÷ new), and the
mixture ÷ single-source ratios of the new engine (target ≥ 0.9). Data: random uint16 tokens in documents
of 100–4,000 tokens, 256 MiB shards, built once under bench-data/; the page cache is warm (the data fits).

    python benchmarks/bench_engine.py [--tokens 96M] [--seconds 2] [--repeats 3] [--baseline fff95c8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from synthetic import token_dataset  # noqa: E402

from shardkit.units import human_count, parse_count  # noqa: E402

FIGURES = ["single8", "mixture8", "self8", "single64", "mixture64", "self64", "workers2", "micro_items",
           "micro_iter", "resume"]


def _data(tokens: int) -> Path:
    root = ROOT / "bench-data" / f"engine-{tokens}"
    token_dataset(root / "all", tokens, seed=1, shard_bytes=256 << 20)
    for i, name in enumerate("abc"):
        token_dataset(root / name, tokens // 3, seed=10 + i, shard_bytes=256 << 20)
    return root


def _baseline(commit: str) -> Path:
    where = ROOT / "bench-data" / f"baseline-{commit}"
    if not (where / "shardkit").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), commit], check=True,
                       capture_output=True)
    return where


def _probe(code: Path, figure: str, data: Path, seconds: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    r = subprocess.run([sys.executable, str(HERE / "engine_probe.py"), figure, str(data), "--seconds", str(seconds)],
                       capture_output=True, text=True, env=env, cwd=str(code), timeout=900)
    if r.returncode:
        raise SystemExit(f"{figure} with {code}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="96M")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", default="fff95c8")
    ap.add_argument("--figures", default=",".join(FIGURES))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = _data(parse_count(a.tokens))
    old = _baseline(a.baseline)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load0 = os.getloadavg()[0]
    best: dict[tuple[str, str], dict[str, float]] = {}
    for figure in a.figures.split(","):
        for _ in range(a.repeats):
            for version, code in (("old", old), ("new", ROOT)):
                got = _probe(code, figure, data, a.seconds)
                prev = best.setdefault((figure, version), {})
                for k, v in got.items():
                    better = min if k.startswith("resume") else max
                    prev[k] = better(prev.get(k, v), v)
    report = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.processor() or platform.platform()}",
              "date": time.strftime("%Y-%m-%d"), "commit": commit, "baseline": a.baseline,
              "tokens": parse_count(a.tokens), "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
              "figures": {f"{f}/{v}": d for (f, v), d in best.items()}}
    ratios = {}
    for figure in a.figures.split(","):
        old_d, new_d = best[(figure, "old")], best[(figure, "new")]
        for k in new_d:
            ratios[f"{figure}.{k} new/old"] = (old_d[k] / new_d[k]) if k.startswith("resume") else new_d[k] / old_d[k]
    for b in (8, 64):
        if (f"single{b}", "new") in best and (f"mixture{b}", "new") in best:
            ratios[f"mixture{b}/single{b} (new)"] = best[(f"mixture{b}", "new")]["tok_s"] / best[(f"single{b}", "new")]["tok_s"]
            ratios[f"mixture{b}/single{b} (old)"] = best[(f"mixture{b}", "old")]["tok_s"] / best[(f"single{b}", "old")]["tok_s"]
        if (f"self{b}", "new") in best and (f"single{b}", "new") in best:
            ratios[f"self{b}/single{b} (new)"] = best[(f"self{b}", "new")]["tok_s"] / best[(f"single{b}", "new")]["tok_s"]
    if ("micro_items", "new") in best and ("micro_iter", "new") in best:
        # iter_units with stride 2 yields every other item: compare per delivered item
        ratios["micro_items/micro_iter items/s (new)"] = best[("micro_items", "new")]["items_s"] / best[("micro_iter", "new")]["items_s"]
        ratios["micro_items/micro_iter items/s (old)"] = best[("micro_items", "old")]["items_s"] / best[("micro_iter", "old")]["items_s"]
    report["ratios"] = {k: round(v, 3) for k, v in ratios.items()}
    if a.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['machine']}; {report['date']}; commit {commit} vs {a.baseline}; {human_count(report['tokens'])} "
          f"tokens; load {report['load']}")
    for (f, v), d in sorted(best.items()):
        print(f"  {f:12} {v}: " + ", ".join(f"{k} {human_count(x) if not k.startswith('resume') else f'{x:.2f}'}"
                                             for k, x in d.items()))
    for k, v in report["ratios"].items():
        print(f"  {k:45} {v:.3f}")


if __name__ == "__main__":
    main()
