"""Page-cache hints: each block hinted once while held, finished groups released, upcoming ones never."""

import mmap
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine.mapper import Mapper
from shardkit.engine.plan import Stream
from shardkit.engine.readahead import (
    HINTS_AVAILABLE,
    GroupHints,
    HintWorker,
    ReadMetrics,
    _block_tasks,
    _row_range_tasks,
)
from shardkit.engine.windows import Windows
from shardkit.format import open_dataset
from shardkit.order import SampleOrder, ShuffleConfig
from shardkit.writer import write_dataset

SEQ = 64
BLOCK = 16  # samples per block → 1024 tokens → 2 KiB of uint16


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("ra") / "ds"
    rng = np.random.default_rng(0)
    write_dataset(path, [rng.integers(0, 1000, 4096, dtype=np.uint16) for _ in range(8)],
                  max_tokens_per_shard=10_000)  # 32768 tokens in 4 shards: 32 blocks
    return open_dataset(path)


class _Hints:
    """The old test surface over GroupHints: enter_group(epoch, group, blocks, next) and wait()."""

    def __init__(self, ds, block, *, evict=True):
        if not HINTS_AVAILABLE:
            pytest.skip("madvise is not available here")
        windows = Windows(ds, SEQ)
        order = SampleOrder(windows.num_samples, ShuffleConfig(mode="block", block_samples=block, group_blocks=8), 1)
        self.stream = Stream(index=0, name="data", seq_len=SEQ, windows=windows, order=order, limit=None)
        self.mapper = Mapper([ds], 16)
        self.worker = HintWorker(self.mapper)
        self.metrics = ReadMetrics()
        self.hints = GroupHints(self.stream, self.worker, self.metrics, local=True, whole_groups=True, evict=evict)

    def enter_group(self, epoch, group, blocks, next_blocks):
        order = self.stream.order  # the test names the blocks: make the order give exactly those
        order.blocks_of_group = lambda e, g: {(epoch, group): blocks}.get((e, g), next_blocks)
        order.group_after = lambda e, g, k=1: (e, g + k)
        self.hints.enter(epoch, group)

    def release(self, blocks):
        self.worker.submit(_block_tasks(self.hints.release_kind, self.stream, blocks, self.metrics))
        self.worker.wait()

    def wait(self):
        self.worker.wait()


def _readahead(ds):
    ra = _Hints(ds, BLOCK)
    return ra, ra.metrics


def test_a_single_group_dataset_is_hinted_once_and_never_released(dataset):
    ra, metrics = _readahead(dataset)
    blocks = np.arange(32)
    ra.enter_group(0, 0, blocks, blocks)
    ra.wait()
    first = metrics.bytes_prefetched
    # each block's range starts at a page boundary, so 2 KiB blocks count up to a page more each
    assert dataset.num_tokens * 2 <= first <= dataset.num_tokens * 2 + 32 * 4096
    for epoch in range(1, 4):  # every epoch is the same group of all blocks
        ra.enter_group(epoch, 0, blocks, blocks)
        ra.wait()
    assert metrics.bytes_released == 0
    assert metrics.bytes_prefetched == first
    assert metrics.groups_entered == 4


def test_finished_groups_are_released_but_not_blocks_about_to_be_read(dataset):
    ra, metrics = _readahead(dataset)
    groups = [np.arange(g * 8, g * 8 + 8) for g in range(4)]
    ra.enter_group(0, 0, groups[0], groups[1])
    ra.wait()
    assert metrics.bytes_released == 0
    hinted = metrics.bytes_prefetched
    ra.enter_group(0, 1, groups[1], groups[2])  # delivery is in order: group 0 is finished
    ra.wait()
    group2_bytes = metrics.bytes_prefetched - hinted  # group 1 was hinted already: only group 2 is new
    released_group0 = metrics.bytes_released
    assert released_group0 > 0 and group2_bytes > 0
    ra.enter_group(0, 2, groups[2], groups[3])
    ra.enter_group(0, 3, groups[3], groups[0])  # the next epoch starts with group 0 again
    ra.wait()
    released = metrics.bytes_released
    # entering epoch 1's group 0 must not release group 0 (current) nor group 1 (next)
    ra.enter_group(1, 0, groups[0], groups[1])
    ra.wait()
    before = metrics.bytes_prefetched
    ra.enter_group(1, 1, groups[1], groups[2])
    ra.wait()
    assert metrics.bytes_prefetched - before == group2_bytes  # only group 2 (released since) is hinted again
    assert metrics.bytes_released > released


_MINCORE = """
import ctypes, mmap, os, sys
import numpy as np
libc = ctypes.CDLL(None, use_errno=True)
size = os.path.getsize(sys.argv[1])
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
arr = np.frombuffer(m, dtype=np.uint8)
vec = (ctypes.c_ubyte * (-(-size // mmap.PAGESIZE)))()
rc = libc.mincore(ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(size), vec)
print(-1 if rc else sum(v & 1 for v in vec))
"""


def _resident_pages(path) -> int:
    """Pages of `path` in the page cache, asked by a fresh process (no mapping of ours pins them)."""
    import subprocess
    import sys

    out = int(subprocess.run([sys.executable, "-c", _MINCORE, str(path)], capture_output=True, text=True,
                             check=True).stdout)
    if out < 0:
        pytest.skip("mincore is not available")
    return out


def test_evict_drops_finished_blocks_from_the_page_cache(dataset):
    # one block spans the first shard: the kernel drops whole page-cache folios only, and a small file
    # read in one go may sit in one large folio
    ra = _Hints(dataset, dataset.shards[0].num_tokens // SEQ + 1)
    path = dataset.shards[0].bin_path
    with open(path, "rb") as f:
        f.read()  # bring the whole file into the page cache
    assert _resident_pages(path) > 0
    ra.release(np.array([0]))  # unmap, then evict (mapped pages cannot be evicted)
    assert _resident_pages(path) == 0
    kept = _Hints(dataset, dataset.shards[0].num_tokens // SEQ + 1, evict=False)
    with open(path, "rb") as f:
        f.read()
    kept.release(np.array([0]))
    assert _resident_pages(path) > 0  # release="unmap": the pages stay cached for other readers


def test_one_hint_thread_whatever_the_number_of_groups(dataset):
    """Hints run on one worker thread per loader: entering 300 groups never adds threads."""
    ra = _Hints(dataset, 1)
    before = threading.active_count()
    for g in range(300):
        ra.enter_group(0, g, np.array([g % 32]), np.array([(g + 1) % 32]))
    ra.wait()
    assert threading.active_count() <= before + 1
    assert ra.metrics.groups_entered == 300
    ra.worker.close()
    assert not ra.worker.alive


def test_read_metrics_equal_a_per_step_count():
    """Steps are marked in the epoch map lazily, per run of consecutive rows: the counts must not change."""
    rng = np.random.default_rng(3)
    lazy = ReadMetrics()
    seen: dict[int, set[int]] = {}
    for chunk in range(6):
        epoch = chunk // 2
        blocks = rng.integers(0, 50, size=400)
        bounds = np.unique(np.concatenate([[0, 400], rng.integers(0, 400, size=7)])).tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            lazy.record_step(epoch, blocks, lo, hi, 10, 50)
            seen.setdefault(epoch, set()).update(blocks[lo:hi].tolist())
            if rng.random() < 0.5:  # unread steps accumulate as one pending run
                continue
            m = lazy.to_json()
            assert m["epoch"] == epoch
            assert m["epoch_distinct_blocks"] == len(seen[epoch])
            assert m["step_distinct_blocks"] == len(set(blocks[lo:hi].tolist()))
            assert m["step_bytes"] == (hi - lo) * 10


def _vm_flags(path) -> list[set[str]]:
    """The VmFlags of every mapping of `path` in this process (from /proc/self/smaps)."""
    out, current = [], None
    with open("/proc/self/smaps", encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            current = fields[5] if len(fields) > 5 else None
        elif line.startswith("VmFlags:") and current == str(path):
            out.append(set(fields[1:]))
    return out


@pytest.mark.parametrize("shuffle, flag", [("block", "hg"), ("none", "hg"), ("full", "rr")])
def test_mappings_are_advised_for_the_shuffle_mode(tmp_path, shuffle, flag):
    """Block and no shuffle: 2 MiB pages (random 4 KiB windows are TLB-bound with small ones); full
    shuffle: no read-around."""
    from shardkit.loader import Loader
    path = tmp_path / "ds"
    rng = np.random.default_rng(1)
    write_dataset(path, [rng.integers(0, 1000, 3000, dtype=np.uint16) for _ in range(4)])
    ld = Loader(path, seq_len=SEQ, batch_schedule=4, shuffle=shuffle, seed=1)
    next(iter(ld))
    if not HINTS_AVAILABLE:
        pytest.skip("madvise is not available here")
    flags = _vm_flags(ld.dataset.shards[0].bin_path.resolve())
    assert flags and all(flag in f for f in flags), flags
    other = {"hg": "rr", "rr": "hg"}[flag]
    assert not any(other in f for f in flags)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 299), min_size=1, max_size=60), width=st.sampled_from([7, 65, 2049]),
       name=st.sampled_from(["tokens", "mask"]))
def test_store_row_hints_cover_exactly_the_pages_of_the_rows(ids, width, name):
    """The hints of rows read from a row store: page-aligned, ascending, disjoint ranges of the named file
    covering every page the rows touch and no other (rows of consecutive ids are one run, as hint_store_rows
    makes them)."""
    store = SimpleNamespace(tokens=np.zeros((300, width), np.uint16), mask=np.zeros((300, width - 1), np.uint8),
                            directory=Path("store"), rows=300)
    ids = np.unique(ids)
    new = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1] + 1])
    ends = ids[np.r_[new[1:], ids.size] - 1] + 1
    tasks = _row_range_tasks("prefetch", store, (name,), ids[new], ends, ReadMetrics())
    array, page = getattr(store, name), mmap.PAGESIZE
    row_bytes = array.strides[0]
    want = {p for r in ids.tolist() for p in range(r * row_bytes // page, -(-(r + 1) * row_bytes // page))}
    got: set[int] = set()
    last_end = -1
    for kind, _, file, start, length in tasks:
        assert kind == "prefetch" and file.array is array and file.path == str(Path("store") / f"{name}.bin")
        assert start % page == 0 and start > last_end and length > 0
        got |= set(range(start // page, -(-(start + length) // page)))
        last_end = start + length
    assert got == want
