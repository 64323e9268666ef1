"""Stored rows' cu_seqlens: every item's boundaries and max_seqlen from the stored segment lengths of its rows,
built for many items at once — by NumPy (`item_boundaries`, one running sum over the run) and by the compiled
loop (`kernels.row_boundaries`) — equal to the boundaries computed item by item, for rows anywhere in the store
(in any order, repeated), items of any sizes, and rows of one segment or many."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine import kernels
from shardkit.engine.packed_rows import item_boundaries


def _numpy(seg, seg_ptr, seg_max, ids, bounds, seq_len):
    s0 = seg_ptr[ids]
    x, cut, longest = item_boundaries(seg, s0, seg_ptr[ids + 1] - s0, seg_max[ids], np.array(bounds), seq_len)
    return [x[a:z] for a, z in zip(cut[:-1], cut[1:])], longest


def _compiled(seg, seg_ptr, seg_max, ids, bounds, seq_len):
    kernel = kernels.row_boundaries()
    if kernel is None:
        pytest.fail("numba is a test dependency: the compiled kernel must be tested")
    s0 = seg_ptr[ids]
    x, ptr, longest = kernel(seg, s0, seg_ptr[ids + 1] - s0, seg_max[ids], np.array(bounds, dtype=np.int64))
    assert x.size == ptr[-1]  # nothing left uninitialised past the last item
    cut = ptr.tolist()
    return [x[a:z] for a, z in zip(cut[:-1], cut[1:])], longest.tolist()


IMPLEMENTATIONS = pytest.mark.parametrize("build", [_numpy, _compiled], ids=["numpy", "compiled"])


def _store(rng, rows, seq_len):
    """A row store's segment files: each row's segment lengths (≥ 1 segment, summing to seq_len)."""
    per_row = []
    for _ in range(rows):
        cuts = np.sort(rng.choice(np.arange(1, seq_len), size=int(rng.integers(0, min(6, seq_len - 1) + 1)),
                                  replace=False))
        per_row.append(np.diff(np.concatenate([[0], cuts, [seq_len]])).astype(np.int32))
    counts = np.array([p.size for p in per_row])
    seg_ptr = np.concatenate([[0], np.cumsum(counts)])
    return np.concatenate(per_row), seg_ptr, np.array([p.max() for p in per_row], dtype=np.int32), per_row


def _expected(per_row, ids, bounds, seq_len):
    cus, longest = [], []
    for a, z in zip(bounds[:-1], bounds[1:]):
        lens = np.concatenate([per_row[r] for r in ids[a:z]])
        cus.append(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        longest.append(int(lens.max()))
        assert cus[-1][-1] == (z - a) * seq_len
    return cus, longest


@IMPLEMENTATIONS
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), store_rows=st.integers(1, 40), slab=st.integers(1, 60), seq_len=st.integers(2, 40),
       sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8))
def test_every_item_gets_its_own_boundaries(build, seed, store_rows, slab, seq_len, sizes):
    rng = np.random.default_rng(seed)
    seg, seg_ptr, seg_max, per_row = _store(rng, store_rows, seq_len)
    ids = rng.integers(0, store_rows, slab)  # a slab's rows: anywhere in the store, repeats allowed
    # items of changing sizes (a batch schedule's steps, a last short item), covering the slab
    bounds = [0]
    while bounds[-1] < slab:
        bounds.append(min(slab, bounds[-1] + sizes[(len(bounds) - 1) % len(sizes)]))
    cus, longest = build(seg, seg_ptr, seg_max, ids, bounds, seq_len)
    want_cus, want_longest = _expected(per_row, ids, bounds, seq_len)
    assert longest == want_longest
    assert len(cus) == len(want_cus)
    for got, want in zip(cus, want_cus):
        assert got.dtype == np.int32 and np.array_equal(got, want)


@IMPLEMENTATIONS
def test_items_are_independent_arrays(build):
    """A trainer that edits one item's cu_seqlens in place does not change another's."""
    rng = np.random.default_rng(0)
    seg, seg_ptr, seg_max, _ = _store(rng, 8, 16)
    cus, _ = build(seg, seg_ptr, seg_max, np.arange(8), [0, 4, 8], 16)
    before = cus[1].copy()
    cus[0][:] = -1
    assert np.array_equal(cus[1], before)


def _in_fresh_process(code, **env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_kernels_off_by_environment_or_without_numba():
    """`SHARDKIT_NO_NUMBA=1`, or numba not installed, gives the NumPy path (no kernel), never an error; and
    `import shardkit` (a Loader included) does not import numba: only the first stored batch that needs it."""
    probe = "from shardkit.engine.kernels import row_boundaries; print(row_boundaries() is None)"
    assert _in_fresh_process(probe) == "False"
    assert _in_fresh_process(probe, SHARDKIT_NO_NUMBA="1") == "True"
    assert _in_fresh_process("import sys; sys.modules['numba'] = None; " + probe) == "True"
    assert _in_fresh_process("import sys, shardkit; from shardkit import Loader, MixtureLoader; "
                             "print('numba' in sys.modules)") == "False"


def test_a_windows_loader_does_not_import_numba(tmp_path):
    _in_fresh_process(
        "import sys, numpy as np; from shardkit import Loader; from shardkit.writer import write_dataset; "
        f"write_dataset({str(tmp_path / 'd')!r}, [np.arange(1, 500, dtype=np.uint16)]); "
        f"next(iter(Loader({str(tmp_path / 'd')!r}, seq_len=16, batch_schedule=2))); "
        "assert 'numba' not in sys.modules")
