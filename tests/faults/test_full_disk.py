"""Full disks and I/O errors: a pack that cannot write stops with one clear line and resumes; reads that
fail are reported, never turned into silent wrong data.

Real small file systems (a tmpfs of 1 MiB, a loop-mounted ext4 image) fill up for real; strace
injects the errors a disk can return at one exact call (ENOSPC on the manifest or the journal, EIO on
an fsync or a read). The remote block cache on a full disk is tested with the remote cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from faults_support import (
    STRACE,
    assert_incomplete,
    assert_journaled_shards_whole,
    can_mount,
    pack_cmd,
    real,
    resize_tmpfs,
    run,
    strace_cmd,
    tmpfs,
    verdict,
)
from integration.pack.test_crash_resume import _corpus
from support.cli import shardkit_cmd
from support.dataset_bytes import assert_same_dataset

from shardkit.errors import IntegrityError, ManifestError
from shardkit.format import open_dataset
from shardkit.verify.report import Verdict
from shardkit.writer import write_dataset
from shardkit.writer.journal import JOURNAL_NAME

MOUNT = can_mount()
needs_mount = pytest.mark.skipif(MOUNT is not None, reason=str(MOUNT))
needs_strace = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A corpus (about 2.7 MiB of shards) and its uninterrupted pack on the ordinary file system."""
    base = real(tmp_path_factory.mktemp("disk"))
    src = _corpus(base / "in", files=3, docs=300, seed=3)
    ref = base / "ref"
    r = run(pack_cmd(src, ref))
    assert r.returncode == 0, r.stderr
    return src, ref


def _assert_one_line_error(r, *, names: str, says: str) -> str:
    """Exit 1, no traceback, and the last line names the file and the cause."""
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    line = r.stderr.strip().splitlines()[-1]
    assert names in line and says.lower() in line.lower(), line
    return line


# -- the disk fills up --------------------------------------------------------------------------------
@needs_mount
@pytest.mark.parametrize("free", ["remount", "filler"])
def test_pack_on_a_full_tmpfs_stops_cleanly_and_resumes(reference, tmp_path, free):
    """1 MiB for 2.7 MiB of shards: ENOSPC names the file, nothing is corrupt, and after making room the
    same command finishes byte-identically (by remounting bigger, or by deleting a filler file)."""
    src, ref = reference
    size = "1m" if free == "remount" else "8m"  # (tmpfs rounds each small file up to a 4 KiB page)
    with tmpfs(tmp_path / "fs", size) as fs:
        filler = fs / "filler"
        if free == "filler":  # leave about 600 KiB
            filler.write_bytes(b"\0" * ((8 << 20) - (600 << 10)))
        out = fs / "out"
        r = run(pack_cmd(src, out))
        line = _assert_one_line_error(r, names=str(out), says="no space left on device")
        assert "re-run the same `shardkit pack` command" in line and ".tmp" in line, line
        kept = assert_journaled_shards_whole(out)
        assert kept, "nothing was journaled before the disk filled"
        assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")], "temp files left on a full disk"
        assert_incomplete(out, "disk full")
        if free == "remount":
            resize_tmpfs(fs, "16m")
        else:
            filler.unlink()
        done = run(pack_cmd(src, out))
        assert done.returncode == 0, done.stderr
        assert f"resumed: {len(kept)} shard(s)" in done.stdout
        assert_same_dataset(ref, out)
        assert verdict(out).verdict is Verdict.OK


@needs_mount
def test_pack_on_a_full_ext4_image_stops_cleanly_and_resumes(reference, tmp_path):
    """The same on a loop-mounted ext4 (block allocation, its own ENOSPC timing), room made by deleting."""
    src, ref = reference
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    if subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True).returncode:
        pytest.skip("mkfs.ext4 is not available")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode:
        pytest.skip("no loop device to mount an ext4 image")
    try:
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * (free - (700 << 10)))
        out = mnt / "out"
        r = run(pack_cmd(src, out))
        _assert_one_line_error(r, names=str(out), says="no space left on device")
        kept = assert_journaled_shards_whole(out)
        assert_incomplete(out, "ext4 full")
        filler.unlink()
        done = run(pack_cmd(src, out))
        assert done.returncode == 0, done.stderr
        assert f"resumed: {len(kept)} shard(s)" in done.stdout
        assert_same_dataset(ref, out)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# -- one call fails (strace error injection) -------------------------------------------------------------
INJECTED = [  # (what fails, syscall, file in the output dir, nth, errno, what the error says)
    ("the manifest cannot be written", "write", ".manifest.json.tmp", 1, "ENOSPC", "no space left on device"),
    ("a journal append cannot be written", "write", JOURNAL_NAME, 7, "ENOSPC", "no space left on device"),
    ("a shard's fsync reports an I/O error", "fsync", ".shard-00004.bin.tmp", 1, "EIO", "input/output error"),
    ("a sidecar's fsync reports a full disk", "fsync", ".shard-00009.sum.json.tmp", 1, "ENOSPC",
     "no space left on device"),
    ("a shard rename fails", "rename", ".shard-00012.idx.tmp", 1, "EIO", "input/output error"),
    ("the directory fsync fails", "fsync", ".", 20, "EIO", "input/output error"),
]


@needs_strace
@pytest.mark.parametrize(("what", "syscall", "name", "nth", "err", "says"), INJECTED, ids=[i[0] for i in INJECTED])
def test_a_failing_write_stops_the_pack_and_the_rerun_is_identical(reference, tmp_path, what, syscall, name, nth,
                                                                    err, says):
    src, ref = reference
    out = real(tmp_path) / "out"
    path = out if name == "." else out / name
    r = run(strace_cmd(pack_cmd(src, out), syscall=syscall, path=path, nth=nth, log=tmp_path / "s.log",
                       action=f"error={err}"))
    _assert_one_line_error(r, names=str(out), says=says)
    assert f"({err})" in r.stderr
    assert not (out / "manifest.json").exists()
    entries = assert_journaled_shards_whole(out)
    if name == JOURNAL_NAME:  # the shard whose entry failed is complete on disk but not journaled: redone
        # (the line was still in the file's buffer: closing the journal may have written it after all)
        assert len(entries) in (nth - 1, nth)
    assert_incomplete(out, what)
    done = run(pack_cmd(src, out))
    assert done.returncode == 0, done.stderr
    assert_same_dataset(ref, out)


@needs_strace
def test_an_input_read_error_stops_the_pack(reference, tmp_path):
    """An I/O error is not bad data: skipping it would make the output depend on a transient fault."""
    src, ref = reference
    out = real(tmp_path) / "out"
    victim = sorted(src.iterdir())[1]
    r = run(strace_cmd(pack_cmd(src, out), syscall="read", path=victim, nth=1, log=tmp_path / "s.log",
                       action="error=EIO"))
    _assert_one_line_error(r, names=victim.name, says="input/output error")
    assert_incomplete(out, "input read error")
    assert run(pack_cmd(src, out)).returncode == 0
    assert_same_dataset(ref, out)


# -- reads of a dataset that fail ------------------------------------------------------------------------
@pytest.fixture()
def dataset(tmp_path):
    rng = np.random.default_rng(0)
    docs = [np.append(rng.integers(0, 255, int(rng.integers(2000, 6000)), dtype=np.uint16), 256) for _ in range(60)]
    path = real(tmp_path) / "ds"
    write_dataset(path, docs, max_tokens_per_shard=50_000, checksum_block_size=4096, eos_appended=True,
                  tokenizer={"kind": "bytes", "name": "bytes", "vocab_size": 258, "eos_id": 256, "bos_id": 257})
    return path, np.concatenate(docs)


def _verify_json(path: Path, *args: str, inject: tuple[str, Path, str, int]) -> dict:
    """`shardkit verify --json` (one thread: strace traces the main thread) with one read failing."""
    syscall, target, action, nth = inject
    cmd = strace_cmd(shardkit_cmd() + ["verify", str(path), "--json", "--jobs", "1", "-q", *args], syscall=syscall,
                     path=target, nth=nth, log=path.parent / "v.log", action=action)
    r = run(cmd)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


@needs_strace
@pytest.mark.parametrize("mode", ["full", "deep"])
@pytest.mark.parametrize(("fault", "action", "says"), [
    ("shrank", "retval=0", "shrank"),  # a read at end of file: the shard was truncated after its size check
    ("eio", "error=EIO", "input/output error"),
])
def test_verify_names_the_shard_whose_read_fails(dataset, mode, fault, action, says):
    path, _ = dataset
    victim = path / "shard-00002.bin"
    blocks = -(-victim.stat().st_size // 4096)  # full: fail the first block read; deep: its token scan's first read
    report = _verify_json(path, *([] if mode == "full" else ["--deep"]),
                          inject=("read", victim, action, 1 if mode == "full" else blocks + 1))
    assert report["verdict"] == "corrupt"
    bad = [p for p in report["problems"] if p["file"] == victim.name]
    assert bad and all(p["shard"] == "shard-00002" for p in bad), report["problems"]
    assert any(says in p["detail"].lower() for p in bad), bad
    assert report["bad_shards"] == ["shard-00002"]


def test_deep_verify_of_a_shard_truncated_mid_scan_reports_it(dataset, monkeypatch):
    """verify --deep reads each .bin (a mapped one would SIGBUS when truncated during the scan): a short read."""
    import shardkit.verify.deep as deep
    from shardkit.verify import verify_dataset

    path, _ = dataset
    real_read_index = deep.read_index

    def truncating(p, **kw):  # runs after the size check, before the .bin is scanned
        if p.name == "shard-00001.idx":
            os.truncate(p.with_suffix(".bin"), 1000)
        return real_read_index(p, **kw)

    monkeypatch.setattr(deep, "read_index", truncating)
    report = verify_dataset(path, mode="deep", jobs=1)
    assert report.verdict is Verdict.CORRUPT
    assert any(p.shard == "shard-00001" and "shrank to 1,000 bytes" in p.detail for p in report.problems)


def test_dataset_reads_of_a_deleted_or_truncated_shard_raise_naming_it(dataset):
    path, flat = dataset
    ds = open_dataset(path)
    # deleted after open, before first use: ManifestError naming the shard (not a bare FileNotFoundError)
    (path / "shard-00003.bin").unlink()
    start = int(ds.token_offsets[3])
    with pytest.raises(ManifestError, match="shard shard-00003 cannot be read"):
        ds.read_tokens(start, start + 10)
    # deleted while mapped: the mapping keeps the old inode, so reads go on with the right bytes
    assert np.array_equal(ds.read_tokens(0, 100), flat[:100])
    (path / "shard-00000.bin").unlink()
    assert np.array_equal(ds.read_tokens(0, 5000), flat[:5000])
    # truncated while mapped: IntegrityError naming the shard, never a SIGBUS or wrong bytes
    lo = int(ds.token_offsets[1])
    assert np.array_equal(ds.read_tokens(lo, lo + 100), flat[lo:lo + 100])
    os.truncate(path / "shard-00001.bin", 0)
    with pytest.raises(IntegrityError, match="shard-00001") as e:
        ds.read_tokens(lo, lo + 100)
    assert "shrank to 0 bytes" in str(e.value)


LOADER_TRUNCATION = textwrap.dedent("""
    import os, sys
    from shardkit import Loader
    from shardkit.errors import IntegrityError, ManifestError
    loader = Loader(sys.argv[1], seq_len=128, batch_schedule=8, seed=0, shuffle="none")
    it = iter(loader)
    next(it)
    for name in sorted(os.listdir(sys.argv[1])):
        if name.endswith(".bin"):
            os.truncate(os.path.join(sys.argv[1], name), 0)  # e.g. `cp` over a shard: it truncates in place
    try:
        for _ in range(400):
            next(it)
    except IntegrityError as e:  # a shard truncated while mapped
        print("IntegrityError", e.shard)
        sys.exit(3)
    except ManifestError as e:  # a shard truncated before the loader first mapped it
        print("ManifestError", os.path.basename(e.path), e)
        sys.exit(3)
    print("no error")
""")


def test_loader_over_a_shard_truncated_under_it_raises_instead_of_sigbus(dataset, tmp_path):
    path, _ = dataset
    script = tmp_path / "truncate_under_loader.py"
    script.write_text(LOADER_TRUNCATION)
    r = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != -signal.SIGBUS, "the loader process died of SIGBUS"
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.startswith(("IntegrityError shard-", "ManifestError shard-")), r.stdout
