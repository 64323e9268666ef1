"""Deterministic skips: global batches a run never delivers, so an operator can step over bad data.

A skip is an inclusive range of global batch indices `[first, last]` — the loader's own `batch_index`,
the coordinate `shardkit explain` takes and the state records, never the trainer's optimizer step (which
falls behind it by the batches skipped). Skipped batches are removed from the stream and nothing else
moves: batch 412051 holds the same rows with or without `skip: [[412000, 412050]]`, on every rank and
world size, so adding a skip to a running job is an exact resume, and `explain` of any other batch is
unchanged. Sources still count the skipped rows as consumed (the recipe's proportions and epochs are of
the data *planned*; the skipped rows are not replaced).

A loader's skips are the union of its configuration's (`skip=`, or a recipe's top-level `skip:`) and the
ones recorded in the state it resumed from: a skip, once recorded, is kept by every later resume whatever
its configuration says, so all ranks and restarts agree.

Items are numbered per rank over the *delivered* stream: `SkipMap` translates those live item indices to
the item indices of the unskipped stream (a binary search over the skipped ranges), so DataLoader workers,
resume and micro-batches all work on a gap-free sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..errors import ConfigError, brief

__all__ = ["SkipMap", "parse_skips", "skips_json"]

Skips = tuple[tuple[int, int], ...]


def parse_skips(value: Any, where: str = "skip") -> Skips:
    """Validated `[[first, last], ...]` (inclusive global batch ranges), sorted, overlapping ones merged."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list of [first, last] global batch ranges, e.g. [[412000, 412050]]; "
                          f"got {brief(value)}")
    ranges = []
    for i, r in enumerate(value):
        pair = list(r) if isinstance(r, (list, tuple)) else None
        if pair is None or len(pair) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer))
                                                 for x in pair):
            raise ConfigError(f"{where}[{i}] must be [first, last], two global batch indices; got {brief(r)}")
        first, last = int(pair[0]), int(pair[1])
        if first < 0 or last < first:
            raise ConfigError(f"{where}[{i}] = [{first}, {last}]: need 0 ≤ first ≤ last (both batches are skipped)")
        ranges.append((first, last))
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def union(*skips: Skips) -> Skips:
    return parse_skips([r for s in skips for r in s])


def skips_json(skips: Skips) -> list[list[int]]:
    return [[a, b] for a, b in skips]


def skipped(skips: Skips, batch: int) -> bool:
    return any(a <= batch <= b for a, b in skips)


class SkipMap:
    """Live item index (over delivered items) ↔ item index of the unskipped stream, for one rank's geometry.

    `unit_of_batch(b)` is the index of batch b's first item (b may be the end of the stream).
    """

    def __init__(self, skips: Skips, unit_of_batch: Callable[[int], int], end: int) -> None:
        self.skips = skips
        pairs = [(unit_of_batch(min(a, end)), unit_of_batch(min(b + 1, end))) for a, b in skips if a < end]
        self.starts = np.array([s for s, e in pairs if e > s], np.int64)
        self.ends = np.array([e for s, e in pairs if e > s], np.int64)
        self.cum = np.concatenate([[0], np.cumsum(self.ends - self.starts)]).astype(np.int64)
        self.live_starts = self.starts - self.cum[:-1]

    def __bool__(self) -> bool:
        return bool(self.starts.size)

    def to_actual(self, live: np.ndarray) -> np.ndarray:
        """Items of the unskipped stream that live items `live` are."""
        k = np.searchsorted(self.live_starts, live, side="right")
        return live + self.cum[k]

    def to_live(self, actual: int) -> int:
        """The live index of item `actual`, or of the first delivered item after it if it is skipped."""
        k = int(np.searchsorted(self.ends, actual, side="right"))
        if k < self.starts.size and int(self.starts[k]) <= actual:
            return int(self.starts[k]) - int(self.cum[k])
        return actual - int(self.cum[k])
