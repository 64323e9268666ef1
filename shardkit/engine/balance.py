"""Balanced ranks: the rows of each global batch dealt to ranks so every rank's attention cost is even.

With document masking a packed row costs about Σ len² over its documents (attention is quadratic within
each document), so rows of equal tokens can differ several-fold in compute and the slowest rank sets the
step time. `balanced_order` deals a global batch's rows longest-processing-time first to the least loaded
rank that still has room (each rank gets exactly its B / W rows); rank r takes the rows the deal gave it,
in their order in the batch. Which rows make up the global batch is unchanged — only which rank trains
which — and the deal is a pure function of the batch's rows and the world size, so every rank computes
the same deal without talking to the others, and resume on any world size stays exact.
"""

from __future__ import annotations

import heapq

import numpy as np

from .packed_rows import PackedWindows
from .plan import Plan

__all__ = ["Balancer", "balanced_order", "rank_costs"]


def balanced_order(costs: np.ndarray, world_size: int) -> np.ndarray:
    """A permutation p of the batch's rows: rank r's rows are p[r·B/W : (r+1)·B/W] (ascending)."""
    costs = np.asarray(costs, dtype=np.float64)
    per = costs.size // world_size
    if world_size == 1 or per == 0:
        return np.arange(costs.size, dtype=np.int64)
    heap = [(0.0, r) for r in range(world_size)]
    taken: list[list[int]] = [[] for _ in range(world_size)]
    for i in np.argsort(-costs, kind="stable").tolist():
        load, r = heapq.heappop(heap)
        taken[r].append(i)
        if len(taken[r]) < per:
            heapq.heappush(heap, (load + float(costs[i]), r))
    shares = np.array(taken, dtype=np.int64)  # (world, per)
    _refine(shares, costs)
    return np.sort(shares, axis=1).reshape(-1)


def _refine(shares: np.ndarray, costs: np.ndarray, rounds: int | None = None) -> None:
    """Swap one row between the most and the least loaded rank while that lowers the most loaded one
    (the largest-first deal with equal row counts can leave a rank of many expensive rows)."""
    for _ in range(rounds if rounds is not None else 4 * shares.shape[0]):
        loads = costs[shares].sum(axis=1)
        a, b = int(np.argmax(loads)), int(np.argmin(loads))
        gap = loads[a] - loads[b]
        if gap <= 0:
            return
        delta = costs[shares[a]][:, None] - costs[shares[b]][None, :]  # moving row i of a for row j of b
        # the new larger of the two loads; only swaps with 0 < delta < gap lower the maximum
        after = np.where((delta > 0) & (delta < gap), np.maximum(loads[a] - delta, loads[b] + delta), np.inf)
        i, j = np.unravel_index(int(np.argmin(after)), after.shape)
        if not np.isfinite(after[i, j]):
            return
        shares[a, i], shares[b, j] = shares[b, j], shares[a, i]


def rank_costs(costs: np.ndarray, world_size: int, order: np.ndarray | None = None) -> np.ndarray:
    """Σ cost per rank of one global batch (contiguous slices, after `order` if given)."""
    c = np.asarray(costs, dtype=np.float64)
    if order is not None:
        c = c[order]
    return c.reshape(world_size, -1).sum(axis=1)


class Balancer:
    """Remaps a rank's phase positions to its balanced share of each global batch (packed phases only)."""

    def __init__(self, plan: Plan, world_size: int) -> None:
        self.plan = plan
        self.world_size = world_size
        self._last: tuple[int, int, np.ndarray] | None = None  # (phase, batch, permutation)

    def applies(self, phase: int) -> bool:
        p = self.plan.phases.phases[phase]
        return self.world_size > 1 and all(
            isinstance(self.plan.streams[(self.plan.names.index(n), p.seq_len)].windows, PackedWindows)
            for n, _ in p.mix)

    def costs(self, phase: int, batch: int) -> np.ndarray:
        """Σ len² of each row of global batch `batch`, in batch order."""
        starts = self.plan.sizes(phase, np.array([batch], dtype=np.int64))
        size, start = int(starts[0][0]), int(starts[1][0])
        rows = self.plan.rows(phase, np.arange(start, start + size, dtype=np.int64))
        out = np.empty(rows.size, dtype=np.float64)
        for j, stream in rows.streams.items():
            sel = np.flatnonzero(rows.src == j)
            out[sel] = stream.windows.table.cost(rows.ids[sel])  # type: ignore[attr-defined]
        return out

    def order(self, phase: int, batch: int) -> np.ndarray:
        if self._last is not None and self._last[:2] == (phase, batch):
            return self._last[2]
        perm = balanced_order(self.costs(phase, batch), self.world_size)
        self._last = (phase, batch, perm)
        return perm

    def remap(self, phase: int, batches: np.ndarray, counts: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Positions of items (of `batches`, `counts` rows each, concatenated) after the balanced deal."""
        _, starts = self.plan.sizes(phase, batches)
        item_start = np.repeat(starts, counts)
        item_batch = np.repeat(batches, counts)
        out = positions.copy()
        for b in np.unique(batches).tolist():
            sel = np.flatnonzero(item_batch == b)
            base = item_start[sel]
            out[sel] = base + self.order(phase, int(b))[positions[sel] - base]
        return out
