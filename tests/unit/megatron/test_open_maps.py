"""The Megatron order's mapped files stay within a descriptor budget, and a cached entry reopened after the
budget let it go is not trusted blindly: a file changed since it was checked is checked again."""

import os

import numpy as np

from shardkit.megatron.cache import IndexCache
from shardkit.megatron.open_maps import OpenMaps, default_budget


def test_least_recently_used_values_go_first_within_the_budget():
    maps = OpenMaps(budget=5)
    loads = []

    def loader(k):
        return lambda: loads.append(k) or f"value-{k}"

    assert maps.get("a", 3, loader("a")) == "value-a"
    assert maps.get("b", 1, loader("b")) == "value-b"
    assert maps.get("a", 3, loader("a")) == "value-a"  # held: not loaded again, now the most recent
    maps.get("c", 2, loader("c"))  # 3 + 1 + 2 > 5: "b", the least recently used, goes
    assert maps._held <= 5 and list(maps._entries) == ["a", "c"]
    maps.get("b", 1, loader("b"))  # 3 + 2 + 1 > 5: "a" goes
    assert list(maps._entries) == ["c", "b"] and loads == ["a", "b", "c", "b"] and maps.loads == 4
    big = maps.get("huge", 9, loader("huge"))  # more than the budget alone: held by itself
    assert big == "value-huge" and list(maps._entries) == ["huge"]


def test_the_default_budget_is_a_sixteenth_of_the_soft_limit():
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert default_budget() == (4096 if soft == resource.RLIM_INFINITY else max(8, soft // 16))


def test_a_cached_entry_is_checked_again_once_its_file_changed(tmp_path):
    cache = IndexCache(tmp_path)
    builds = []

    def build():
        builds.append(1)
        return {"x": np.arange(1000, dtype=np.int64)}

    cache.get({"k": 1}, build)
    np.testing.assert_array_equal(cache.get({"k": 1}, build)["x"], np.arange(1000))  # opened: checked once
    np.testing.assert_array_equal(cache.get({"k": 1}, build)["x"], np.arange(1000))  # reopened: identity known
    assert len(builds) == 1
    (path,) = tmp_path.glob("*-x.npy")
    raw = bytearray(path.read_bytes())
    raw[-8] ^= 0xFF  # one value of the array flipped in place (shape and dtype unchanged)
    with open(path, "r+b") as f:
        f.write(raw)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new identity, whatever the clock
    np.testing.assert_array_equal(cache.get({"k": 1}, build)["x"], np.arange(1000))  # caught and rebuilt
    assert len(builds) == 2
