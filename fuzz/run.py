"""Run every fuzz target (or one) for a bounded time, one after another, each in its own subprocess.

    .venv/bin/python fuzz/run.py --seconds 60 [--target idx] [--json]

Each target starts from its committed seeds (fuzz/corpus/<target>/) in a scratch copy, so new inputs
libFuzzer finds do not grow the committed corpus. Prints executions per target; a crash, a hang past
`--timeout` seconds or RSS past `--rss-limit-mb` leaves the input under fuzz/crashes/ and exits 1.
Targets run sequentially: one core at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"
CRASHES = FUZZ / "crashes"
TARGETS = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))


@dataclass
class Outcome:
    target: str
    seconds: float
    executions: int
    new_units: int
    peak_rss_mb: int
    crashes: list[str]
    ok: bool


def _stat(log: str, key: str) -> int:
    m = re.search(rf"stat::{key}:\s+(\d+)", log)
    return int(m.group(1)) if m else 0


def run_target(target: str, seconds: int, *, timeout: int, rss_limit_mb: int, python: str,
               crashes_dir: Path = CRASHES) -> Outcome:
    """One libFuzzer run of `seconds`; the crash files it wrote are listed, the process never outlives us."""
    crashes_dir.mkdir(parents=True, exist_ok=True)
    before = set(crashes_dir.iterdir())
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as work:
        cmd = [python, "-m", f"fuzz.fuzz_{target}", work, str(FUZZ / "corpus" / target),
               f"-max_total_time={seconds}", f"-timeout={timeout}", f"-rss_limit_mb={rss_limit_mb}",
               f"-artifact_prefix={crashes_dir}/{target}-", "-print_final_stats=1", "-max_len=65536"]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, errors="replace",
                                  timeout=seconds + timeout + 120)
            log, code = proc.stderr + proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            log, code = f"{e.stderr or ''}\nrun.py: killed after {seconds + timeout + 120}s", -9
        took = time.monotonic() - t0
    crashes = sorted(str(p) for p in set(crashes_dir.iterdir()) - before)
    if code != 0:
        tail = "\n".join(log.splitlines()[-40:])
        print(f"--- {target}: exit {code}\n{tail}\n---", file=sys.stderr)
    return Outcome(target, round(took, 1), _stat(log, "number_of_executed_units"), _stat(log, "new_units_added"),
                   _stat(log, "peak_rss_mb"), crashes, code == 0 and not crashes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, required=True, help="fuzzing time per target")
    ap.add_argument("--target", action="append", choices=TARGETS, help="only this target (repeatable)")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take (a hang)")
    ap.add_argument("--rss-limit-mb", type=int, default=2048, help="memory one run may use")
    ap.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    args = ap.parse_args(argv)
    outcomes = []
    for target in args.target or TARGETS:
        o = run_target(target, args.seconds, timeout=args.timeout, rss_limit_mb=args.rss_limit_mb,
                       python=sys.executable)
        outcomes.append(o)
        status = "ok" if o.ok else "CRASH " + " ".join(o.crashes or ["(see log above)"])
        print(f"{o.target:15s} {o.executions:>10,} execs in {o.seconds:6.1f}s  new units {o.new_units:>5}  "
              f"peak rss {o.peak_rss_mb:>5} MB  {status}", flush=True)
    if args.json:
        print(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
