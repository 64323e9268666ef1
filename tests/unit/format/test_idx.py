import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format.idx import HEADER_SIZE, INDEX_MAGIC, check_index_arrays, encode_index, read_index

lengths_st = st.lists(st.integers(0, 5000), max_size=300).map(lambda xs: np.array(xs, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, dtype=st.sampled_from(["uint16", "int32"]))
def test_round_trip(tmp_path_factory, lengths, dtype):
    path = tmp_path_factory.mktemp("idx") / "a.idx"
    path.write_bytes(encode_index(lengths, np.dtype(dtype)))
    idx = read_index(path)
    assert idx.header.num_sequences == lengths.size
    assert idx.header.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(idx.lengths, lengths)
    itemsize = np.dtype(dtype).itemsize
    expected_ptr = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * itemsize if lengths.size else []
    np.testing.assert_array_equal(idx.pointers, expected_ptr)
    np.testing.assert_array_equal(idx.doc_indices, np.arange(lengths.size + 1))
    check_index_arrays(idx, "x", bin_size=int(lengths.sum()) * itemsize)


def _write(tmp_path, data: bytes):
    p = tmp_path / "x.idx"
    p.write_bytes(data)
    return p


def test_rejects_bad_magic(tmp_path):
    raw = bytearray(encode_index(np.array([3, 4]), np.dtype("uint16")))
    raw[0:1] = b"X"
    with pytest.raises(ManifestError, match="magic"):
        read_index(_write(tmp_path, bytes(raw)))


def test_rejects_truncation_and_append(tmp_path):
    raw = encode_index(np.array([3, 4, 5]), np.dtype("uint16"))
    with pytest.raises(ManifestError, match="truncated"):
        read_index(_write(tmp_path, raw[:-1]))
    with pytest.raises(ManifestError, match="truncated or appended"):
        read_index(_write(tmp_path, raw + b"\0"))
    with pytest.raises(ManifestError, match="shorter than"):
        read_index(_write(tmp_path, raw[:10]))


def test_rejects_absurd_counts_without_allocating(tmp_path):
    header = struct.pack("<9sQBQQ", INDEX_MAGIC, 1, 8, 10**18, 10**18)
    with pytest.raises(ManifestError, match="impossible"):
        read_index(_write(tmp_path, header + b"\0" * 64))


def test_rejects_unknown_version_and_dtype(tmp_path):
    good = encode_index(np.array([1]), np.dtype("uint16"))
    bad_version = good[:9] + struct.pack("<Q", 2) + good[17:]
    with pytest.raises(ManifestError, match="version"):
        read_index(_write(tmp_path, bad_version))
    bad_dtype = good[:17] + bytes([7]) + good[18:]  # float32
    with pytest.raises(ManifestError, match="dtype"):
        read_index(_write(tmp_path, bad_dtype))


def test_rejects_negative_lengths_and_overlapping_pointers(tmp_path):
    raw = bytearray(encode_index(np.array([2, 2, 2]), np.dtype("uint16")))
    neg = bytearray(raw)
    neg[HEADER_SIZE:HEADER_SIZE + 4] = struct.pack("<i", -5)
    with pytest.raises(ManifestError, match="negative"):
        read_index(_write(tmp_path, bytes(neg)))
    overlap = bytearray(raw)
    ptr_off = HEADER_SIZE + 4 * 3 + 8  # second pointer
    overlap[ptr_off:ptr_off + 8] = struct.pack("<q", 1)
    with pytest.raises(ManifestError, match="overlapping or gapped"):
        read_index(_write(tmp_path, bytes(overlap)))


def test_header_layout_is_megatron_v1():
    raw = encode_index(np.array([5]), np.dtype("uint16"))
    assert raw[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack("<Q", raw[9:17])[0] == 1
    assert raw[17] == 8  # megatron DType.uint16
    assert struct.unpack("<QQ", raw[18:34]) == (1, 2)
    assert encode_index(np.array([5]), np.dtype("int32"))[17] == 4
