"""The packing cache under crashes and full disks: a builder SIGKILLed while it writes a packing table or a
row store leaves a temporary directory the next builder removes (a crash loop cannot fill the disk), the
next loader builds and streams the same batches; a store that does not fit its file system is one clear
error that says how much room it needs, leaves nothing behind, and builds once there is room."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from faults_support import can_mount, resize_tmpfs, tmpfs
from support.cli import shardkit_cmd

from shardkit import Loader
from shardkit.errors import ConfigError
from shardkit.format.atomic import WriteError
from shardkit.writer import write_dataset

SEQ = 512
needs_mount = pytest.mark.skipif(can_mount() is not None, reason=str(can_mount()))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """About 6 M tokens in 60,000 documents: a store build takes a few tenths of a second, long enough to be
    killed inside."""
    root = tmp_path_factory.mktemp("packcache")
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 200, 60_000)
    flat = rng.integers(1, 60000, size=int(sizes.sum()), dtype=np.uint16)
    write_dataset(root / "ds", np.split(flat, np.cumsum(sizes)[:-1]), max_tokens_per_shard=1 << 20)
    return root / "ds"


def _loader(path, cache, **kw):
    return Loader(path, seq_len=SEQ, batch_schedule=8, seed=3, packing="best_fit", packing_cache_dir=cache, **kw)


def _batches(loader, n=20):
    out = []
    for b, _ in zip(loader, range(n)):
        out.append({k: v.copy() for k, v in b.items() if isinstance(v, np.ndarray)})
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)


BUILD = textwrap.dedent("""
    import sys
    from shardkit import Loader
    Loader(sys.argv[1], seq_len=int(sys.argv[3]), batch_schedule=8, seed=3, packing="best_fit",
           packing_cache_dir=sys.argv[2], packing_store=True)
""")


def _kill_inside_build(corpus, cache: Path, pattern: str) -> list[Path]:
    """Start a loader that builds the table and store in `cache`, SIGKILL it as soon as a temporary directory
    matching `pattern` holds a file, and return the leftovers."""
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(corpus), str(cache), str(SEQ)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any(any(p.iterdir()) for p in cache.glob(pattern) if p.is_dir()):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, f"the builder finished before it was killed ({proc.returncode})"
    return list(cache.glob(pattern))


@pytest.mark.parametrize("what,pattern", [("table", "best_fit-L*[0-9a-f].tmp-*"), ("store", "*.rows.tmp-*")],
                         ids=["table", "store"])
def test_a_builder_killed_mid_build_leaves_nothing_the_next_one_keeps(corpus, tmp_path, what, pattern):
    cache = tmp_path / "cache"
    left = _kill_inside_build(corpus, cache, pattern)
    assert left, f"no temporary {what} directory after the kill"
    if what == "store":  # the table was published before the store was started
        assert [p for p in cache.iterdir() if p.is_dir() and p.name.endswith(tuple("0123456789abcdef"))]
    assert not list(cache.glob("*.rows/meta.json")), "a store was published by the killed builder"
    got = _batches(_loader(corpus, cache, packing_store=True))
    assert not [p.name for p in cache.iterdir() if ".tmp-" in p.name or ".damaged-" in p.name], \
        sorted(p.name for p in cache.iterdir())
    _same(got, _batches(_loader(corpus, tmp_path / "fresh", packing_store=True)))
    _same(got, _batches(_loader(corpus, cache)))  # and the rows gathered from the dataset


def test_a_crash_loop_does_not_pile_up_half_built_stores(corpus, tmp_path):
    """Three builders killed in turn: at most one temporary store directory exists at any time."""
    cache = tmp_path / "cache"
    for _ in range(3):
        assert len(_kill_inside_build(corpus, cache, "*.rows.tmp-*")) == 1
    _batches(_loader(corpus, cache, packing_store=True), 2)
    assert not list(cache.glob("*.tmp-*"))


@needs_mount
def test_a_store_that_does_not_fit_is_one_clear_error_and_builds_once_there_is_room(corpus, tmp_path):
    """The table (about 1 MiB) fits a 4 MiB tmpfs, the store (about 26 MiB) does not: `WriteError` naming a
    file of the temporary store, the file system being full and the room the store needs; nothing is left
    in the cache but the table; `shardkit stream --packing-store` says the same in one line; after a
    remount with room the same loader builds the store and streams the gathered rows."""
    with tmpfs(tmp_path / "fs", "4m") as fs:
        cache = fs / "cache"
        with pytest.raises(WriteError) as err:
            _loader(corpus, cache, packing_store=True)
        msg = str(err.value)
        assert ".rows.tmp-" in msg and "No space left on device" in msg, msg
        assert "free space on that file system, then run again, or pass a packing_cache_dir" in msg, msg
        assert "the store needs about 2" in msg and "MiB" in msg, msg
        assert sorted(p.name.split("-L")[0] for p in cache.iterdir() if p.is_dir()) == ["best_fit"]
        assert not list(cache.glob("*.tmp-*"))
        r = subprocess.run([*shardkit_cmd(), "stream", str(corpus), "--seq-len", str(SEQ), "--batch", "8",
                            "--packing", "best_fit", "--packing-store", "--packing-cache-dir", str(cache),
                            "--steps", "5", "--json"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        line = r.stderr.strip().splitlines()[-1]
        assert "No space left on device" in line and "the store needs about" in line, line
        assert not list(cache.glob("*.tmp-*"))
        resize_tmpfs(fs, "64m")
        got = _batches(_loader(corpus, cache, packing_store=True))
        assert json.loads((next(cache.glob("*.rows")) / "meta.json").read_text())["rows"] > 0
    _same(got, _batches(_loader(corpus, tmp_path / "gathered")))


def _remount(fs: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(fs)], check=True)


@needs_mount
def test_a_prebuilt_cache_mounted_read_only_is_used_as_it_is(corpus, tmp_path):
    """A cache built elsewhere and mounted read-only (no lock file can be opened): the table and store there
    are opened, verified and streamed; a damaged store (a bit flipped in every block) is read from the
    dataset with a warning that it could not be moved aside; a missing table, or a damaged one, is a
    `ConfigError` saying the cache is not writable and what to do."""
    with tmpfs(tmp_path / "fs", "64m") as fs:
        cache = fs / "cache"
        want = _batches(_loader(corpus, cache, packing_store=True))
        _remount(fs, "ro")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # an intact read-only store: no warning
                _same(_batches(_loader(corpus, cache, packing_store=True)), want)
            with pytest.raises(ConfigError, match=r"packing table cache .* is not writable .* holds no packing "
                                                  r"table for this loader; pass a writable cache directory"):
                Loader(corpus, seq_len=SEQ // 2, batch_schedule=8, packing="best_fit", packing_cache_dir=cache)
        finally:
            _remount(fs, "rw")
        tokens = next(cache.glob("*.rows")) / "tokens.bin"
        meta = json.loads((tokens.parent / "meta.json").read_text())
        row_bytes = (SEQ + 1) * 2
        with open(tokens, "r+b") as f:
            for at in range(0, tokens.stat().st_size, meta["block_rows"] * row_bytes):
                f.seek(at + 5)
                byte = f.read(1)[0]
                f.seek(at + 5)
                f.write(bytes([byte ^ 0x10]))
        _remount(fs, "ro")
        try:
            with pytest.warns(RuntimeWarning) as caught:
                got = _batches(_loader(corpus, cache, packing_store=True))
            said = " | ".join(str(w.message) for w in caught)
            assert "is damaged, reading its rows from the dataset" in said and "could not be moved aside" in said, said
            _same(got, want)
        finally:
            _remount(fs, "rw")
        table = next(p for p in cache.iterdir() if p.is_dir() and not p.name.endswith(".rows"))
        (table / "meta.json").write_text("{")
        _remount(fs, "ro")
        try:
            with pytest.raises(ConfigError, match=r"packing table .* cannot be used .* and its cache .* is not "
                                                  r"writable .* to build it again; pass a writable cache"):
                _loader(corpus, cache)
        finally:
            _remount(fs, "rw")
