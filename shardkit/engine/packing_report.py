"""What packing does to a dataset at a seq_len: rows, padding, documents split, per-rank attention balance.

The figures `shardkit inspect --packing` and `shardkit stream --packing` print: the table's own statistics,
and the per-rank Σ len² of the first global batches of the loader's real order, as the max/mean over ranks
with contiguous rank slices and with `balance_ranks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .balance import balanced_order, rank_costs
from .packing import PackTable

__all__ = ["packing_report", "rank_balance"]


def rank_balance(table: PackTable, batches: list[np.ndarray], world_size: int) -> dict[str, float]:
    """Mean and worst max/mean of per-rank Σ len² over global batches (row ids of each), without and with
    the balanced deal."""
    plain, even, bound = [], [], []
    for ids in batches:
        costs = table.cost(ids)
        mean = costs.sum() / world_size
        # no deal of B/W rows per rank does better than the rank holding the costliest row plus the
        # cheapest rows it must also take
        per = costs.size // world_size
        floor = float(costs.max() + np.sort(costs)[:per - 1].sum())
        bound.append(max(floor, mean) / mean if mean else 1.0)
        for out, order in ((plain, None), (even, balanced_order(costs, world_size))):
            loads = rank_costs(costs, world_size, order)
            out.append(float(loads.max() / loads.mean()) if loads.mean() > 0 else 1.0)
    return {"world_size": world_size, "batches": len(batches),
            "max_over_mean": float(np.mean(plain)), "max_over_mean_worst": float(np.max(plain)),
            "balanced_max_over_mean": float(np.mean(even)), "balanced_max_over_mean_worst": float(np.max(even)),
            "lower_bound_mean": float(np.mean(bound)), "lower_bound_worst": float(np.max(bound))}


def packing_report(loader: Any, *, world_size: int, batches: int = 64) -> dict[str, Any]:
    """Table statistics and rank balance of a packed single-dataset `Loader` (its global batches from its
    current step)."""
    table = loader._packed_table
    if table is None:
        raise ValueError("packing_report needs a loader with packed rows (packing='first_fit' or 'best_fit')")
    end = loader.num_batches()
    stop = loader.step + batches if end is None else min(end, loader.step + batches)
    ids = [loader.global_sample_ids(b) for b in range(loader.step, stop)]
    ids = [i for i in ids if i.size % world_size == 0]
    out: dict[str, Any] = {"strategy": loader.config.packing.value, "seq_len": table.seq_len, **table.stats()}
    if ids:
        out["balance"] = rank_balance(table, ids, world_size)
    return out
