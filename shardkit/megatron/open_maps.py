"""The mapped files a Megatron order reads — each prefix's `.idx` and its cached index arrays — held within a
descriptor budget.

A blend names one prefix per `--data-path` entry, and a run can name thousands. Every mapped file holds a
descriptor for as long as it is mapped (CPython's `mmap` keeps a duplicate), so keeping each prefix's index
and its three cached `.npy` arrays mapped for the whole run needs four descriptors per prefix — past a
normal `ulimit -n` of 1,024 at 256 prefixes. `OpenMaps` is a least-recently-used set of them whose
descriptors stay within `budget` (a sixteenth of the soft limit, beside the read engine's quarter): an
evicted entry's mapping closes once the last array taken from it is gone, and the next use maps the file
again — without re-checking it (files are checked once per identity, see `IndexCache` and
`MegatronPrefix.index_arrays`).
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["OPEN_MAPS", "OpenMaps", "default_budget"]


def default_budget() -> int:
    """A sixteenth of the soft RLIMIT_NOFILE (at least 8 descriptors; 4,096 without a limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(8, soft // 16)


class OpenMaps:
    """An LRU of loaded values, each costing some descriptors; the total stays within `budget`."""

    def __init__(self, budget: int | None = None) -> None:
        self._budget = budget
        self._entries: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.loads = 0  # how many times a value was (re)loaded: a thrashing budget shows here

    @property
    def budget(self) -> int:
        if self._budget is None:
            self._budget = default_budget()
        return self._budget

    def get(self, key: Hashable, fds: int, load: Callable[[], Any]) -> Any:
        """The value for `key`, loaded (holding `fds` descriptors) if it is not held; the least recently used
        values are let go first to stay within the budget."""
        with self._lock:
            got = self._entries.get(key)
            if got is not None:
                self._entries.move_to_end(key)
                return got[1]
        value = load()
        with self._lock:
            self.loads += 1
            if key not in self._entries:
                while self._entries and self._held + fds > self.budget:
                    _, (n, _) = self._entries.popitem(last=False)
                    self._held -= n
                self._entries[key] = (fds, value)
                self._held += fds
            return value


OPEN_MAPS = OpenMaps()
