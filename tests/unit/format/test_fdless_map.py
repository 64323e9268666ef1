"""Mappings that hold no descriptor: the same bytes and arrays as mmap / np.load(mmap_mode="r"), read-only,
no descriptor open after mapping, unmapped once the last array is gone."""

import gc
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardkit.format.fdless_map import map_npy, map_readonly


def _open_fds_to(path):
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                out.append(fd)
        except OSError:
            pass
    return out


def _mapped(path):
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_maps_the_bytes_without_a_descriptor_and_unmaps_when_the_arrays_are_gone(tmp_path):
    path = tmp_path / "f.bin"
    data = np.random.default_rng(0).integers(0, 256, 3 * 4096 + 17, dtype=np.uint8)
    path.write_bytes(data.tobytes())
    raw, ident = map_readonly(path)
    assert np.array_equal(raw, data) and ident.size == data.size
    assert _open_fds_to(path) == [] and _mapped(path)
    view = raw[100:200].view(np.uint16)  # a view keeps the mapping alive
    del raw
    gc.collect()
    assert _mapped(path) and np.array_equal(view, data[100:200].view(np.uint16))
    del view
    gc.collect()
    assert not _mapped(path)


def test_read_only(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"\x01" * 64)
    raw, _ = map_readonly(path)
    with pytest.raises(ValueError):
        raw[0] = 2
    with pytest.raises(ValueError):
        raw.view(np.uint32)[1] = 0


def test_empty_file_and_missing_file(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    raw, ident = map_readonly(tmp_path / "empty")
    assert raw.size == 0 and ident.size == 0
    with pytest.raises(FileNotFoundError):
        map_readonly(tmp_path / "absent")


@settings(max_examples=60, deadline=None)
@given(arr=hnp.arrays(st.sampled_from(["<i8", "<i4", "<u2", "|b1", ">f8", "<f4", "|u1"]),
                      hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=7)),
       fortran=st.booleans())
def test_npy_arrays_read_as_np_load_gives_them(tmp_path_factory, arr, fortran):
    path = tmp_path_factory.mktemp("npy") / "a.npy"
    np.save(path, np.asfortranarray(arr) if fortran else arr, allow_pickle=False)
    got = map_npy(path)
    want = np.load(path, allow_pickle=False)
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
    assert got.flags.f_contiguous == want.flags.f_contiguous and not got.flags.writeable
    assert _open_fds_to(path) == []


def test_npy_refuses_object_arrays_and_a_short_file(tmp_path):
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="pickle"):
        map_npy(obj)
    short = tmp_path / "short.npy"
    np.save(short, np.arange(100, dtype=np.int64))
    with open(short, "r+b") as f:
        f.truncate(os.path.getsize(short) - 8)
    with pytest.raises(ValueError, match="header describes"):
        map_npy(short)


def test_file_id_notices_a_size_change_of_the_mapped_file_only(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"\x00" * 8192)
    _, ident = map_readonly(path)
    assert ident.changed_size(path) is None
    with open(path, "r+b") as f:
        f.truncate(4096)
    assert ident.changed_size(path) == 4096
    other = tmp_path / "g.bin"
    other.write_bytes(b"\x00" * 100)
    os.replace(other, path)  # the path now names another file: the mapped one cannot be truncated by name
    assert ident.changed_size(path) is None
    path.unlink()
    assert ident.changed_size(path) is None
