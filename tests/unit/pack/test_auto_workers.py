"""`workers=0`: one tokenizer process per usable core, or the one-worker thread pipeline on one or two."""

import os
import subprocess
import sys

import pytest

from shardkit.pack.config import PackConfig, auto_workers, usable_cores


def test_one_worker_on_one_or_two_cores_else_one_per_core():
    assert [auto_workers(c) for c in (1, 2, 3, 4, 64)] == [1, 1, 3, 4, 64]


def test_an_explicit_worker_count_is_kept():
    assert PackConfig(inputs=("x",), output="o", workers=2).effective_workers == 2
    assert PackConfig(inputs=("x",), output="o").effective_workers == auto_workers(usable_cores())


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_the_affinity_mask_not_the_machine_decides():
    """A job's share of the machine is its affinity mask (taskset, a container's cpuset), not the core count."""
    code = ("import os\nfrom shardkit.pack.config import PackConfig, usable_cores\n"
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "print(usable_cores(), os.cpu_count(), PackConfig(inputs=('x',), output='o').effective_workers)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    usable, machine, workers = map(int, done.stdout.split())
    assert (usable, workers) == (1, 1) and machine == os.cpu_count()
