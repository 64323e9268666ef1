"""The fuzz harnesses run: every committed corpus input replays cleanly, and each atheris target fuzzes briefly.

The replay is the regression test of every crash input kept in fuzz/corpus/ (files named `regress-*`);
the atheris pass (2 s per target, each in its own process, two at a time: about 50 s in all, most of it
importing) proves each harness still starts and finds no crash in its first few thousand inputs. Longer
runs: `python fuzz/run.py --seconds 120`.
"""

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fuzz.run import TARGETS as HARNESSES
from fuzz.run import run_target
from fuzz.targets import TARGETS, run_one

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def test_every_target_has_a_harness_and_seeds():
    assert sorted(HARNESSES) == sorted(TARGETS)
    for name in TARGETS:
        seeds = list((CORPUS / name).iterdir())
        assert seeds and sum(p.stat().st_size for p in seeds) < 64 << 10, name


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_replays_cleanly(name):
    for path in sorted((CORPUS / name).iterdir()):
        assert run_one(TARGETS[name], path.read_bytes(), budget=10) in ("ok", "error", "rejected"), path


@pytest.fixture(scope="module")
def atheris_runs(tmp_path_factory):
    """Every harness fuzzed for 2 s, two processes at a time (the runs are independent): {name: (outcome,
    crashes_dir)}."""
    def run(name):
        crashes = tmp_path_factory.mktemp(f"crashes-{name}")
        return name, (run_target(name, 2, timeout=10, rss_limit_mb=2048, python=sys.executable,
                                 crashes_dir=crashes), crashes)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, sorted(TARGETS)))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed (test extra)")
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_atheris_harness_runs_without_a_crash(name, atheris_runs):
    outcome, crashes = atheris_runs[name]
    assert outcome.ok, f"{name}: {outcome.crashes} {[p.read_bytes()[:200] for p in crashes.iterdir()]}"
    assert outcome.executions > 0
    print(f"\nfuzz {name}: {outcome.executions:,} executions in 2 s, no crash")  # the counts in docs/reliability.md
