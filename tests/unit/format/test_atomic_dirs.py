"""Directories built under a temporary name and published by one rename (`building_dir`), removed at once
(`remove_dir`), and the leftovers of killed builders found and removed (`remove_leftovers`)."""

import errno
import os

import pytest

from shardkit.format.atomic import WriteError, building_dir, remove_dir, remove_leftovers


def _write(d, name, data=b"x"):
    (d / name).write_bytes(data)


def test_published_whole_with_the_leftovers_of_dead_builders_removed(tmp_path):
    final = tmp_path / "t"
    for stale in ("t.tmp-1", "t.damaged-2"):
        (tmp_path / stale).mkdir()
        _write(tmp_path / stale, "half")
    (tmp_path / "t.rows.tmp-3").mkdir()  # another directory's (t.rows) temporary: not t's to remove
    (tmp_path / "tx.tmp-4").mkdir()
    with building_dir(final) as tmp:
        assert tmp.name == f"t.tmp-{os.getpid()}" and not final.exists()
        _write(tmp, "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t", "t.rows.tmp-3", "tx.tmp-4"]
    assert (final / "a").read_bytes() == b"x"


def test_a_failed_build_leaves_nothing(tmp_path):
    final = tmp_path / "t"
    with pytest.raises(KeyError), building_dir(final) as tmp:
        _write(tmp, "a")
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []


def test_a_write_error_inside_names_the_file_and_says_what_to_do(tmp_path):
    final = tmp_path / "t"
    with pytest.raises(WriteError) as err, building_dir(final, "run again") as tmp:
        raise OSError(errno.ENOSPC, "No space left on device")  # what a file object's write raises
    e = err.value
    assert e.errno == errno.ENOSPC and e.path == str(tmp)
    assert str(e).endswith("No space left on device (ENOSPC); free space on that file system, then run again")
    assert list(tmp_path.iterdir()) == []


def test_an_error_about_another_file_passes_through(tmp_path):
    """A read of the dataset failing inside the build is not a write error of the cache."""
    final = tmp_path / "t"
    with pytest.raises(OSError) as err, building_dir(final):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/shard-00001.bin")
    assert type(err.value) is FileNotFoundError and list(tmp_path.iterdir()) == []


def test_remove_dir_and_remove_leftovers(tmp_path):
    final = tmp_path / "t"
    final.mkdir()
    _write(final, "a")
    remove_dir(final)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "t.tmp-9").mkdir()
    assert [p.name for p in remove_leftovers(final)] == ["t.tmp-9"] and list(tmp_path.iterdir()) == []
