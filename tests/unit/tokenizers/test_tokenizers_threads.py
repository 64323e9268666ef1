"""`threads=1` really encodes on the calling thread: no rayon pool appears in the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import os, sys
from shardkit.tokenizers import load_tokenizer
def threads():
    return len(os.listdir("/proc/self/task"))
tok = load_tokenizer(sys.argv[1], backend=sys.argv[2], threads=int(sys.argv[3]))
before = threads()
texts = ["some words to encode, again and again. " * 50] * 400
for _ in range(3):
    tok.encode_batch(texts)
print(before, threads())
"""


def _thread_counts(path, backend, threads):
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(path), backend, str(threads)], check=True,
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    before, after = map(int, out.stdout.split())
    return before, after


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads through /proc")
def test_threads_1_starts_no_thread_pool(tiny_json):
    for backend in ("hf", "tiktoken", "fastokens"):
        before, after = _thread_counts(tiny_json, backend, 1)
        assert after == before, backend


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads through /proc")
def test_threads_2_does_start_a_pool(tiny_json):
    before, after = _thread_counts(tiny_json, "hf", 2)
    assert after > before
