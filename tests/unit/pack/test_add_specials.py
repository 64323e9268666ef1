"""`add_specials` (EOS/BOS around every document, vectorised) equals the obvious per-document loop."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.pack.worker import add_specials


def _reference(ids: np.ndarray, lengths: np.ndarray, bos: int | None, eos: int | None, dtype: np.dtype):
    out: list[int] = []
    new_lengths = []
    pos = 0
    for n in lengths.tolist():
        doc = ([bos] if bos is not None else []) + ids[pos:pos + n].tolist() + ([eos] if eos is not None else [])
        pos += n
        out += doc
        new_lengths.append(len(doc))
    return np.array(out, dtype=dtype), np.array(new_lengths, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=30), bos=st.sampled_from([None, 7, 65535]),
       eos=st.sampled_from([None, 0, 65534]), dtype=st.sampled_from([np.uint16, np.uint32]), seed=st.integers(0, 9))
def test_add_specials_equals_the_per_document_loop(lengths, bos, eos, dtype, seed):
    lengths_a = np.array(lengths, dtype=np.int64)
    ids = np.random.default_rng(seed).integers(0, 65536, int(lengths_a.sum()), dtype=np.uint32)
    out, new_lengths = add_specials(ids, lengths_a, bos, eos, np.dtype(dtype))
    ref, ref_lengths = _reference(ids, lengths_a, bos, eos, np.dtype(dtype))
    assert out.dtype == np.dtype(dtype) and new_lengths.dtype == np.int64
    assert np.array_equal(out, ref) and np.array_equal(new_lengths, ref_lengths)
