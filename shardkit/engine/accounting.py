"""Live accounting of a run against its recipe: per source and phase, what was delivered vs what was asked.

Everything is of the global stream (all ranks) before a batch, computed from the plan in O(phases × skips)
— exact after any resume, nothing counted per batch. A sample gives `seq_len` tokens (its labels), as
everywhere in shardkit's token counts.

Per phase and source:
  tokens          delivered (skipped batches excluded: they were never handed to the trainer)
  skipped_tokens  planned for the source in skipped batches
  target_tokens   the recipe's share of the phase's whole budget: weight × phase tokens
  expected_tokens the recipe's share of what the phase has delivered so far: weight × phase tokens so far
  proportion      tokens ÷ phase tokens so far (the achieved weight)
  error_tokens    tokens − expected_tokens (the interleave keeps |error| below a batch's rows per source;
                  skips add their own deviation, reported here rather than corrected)
Per source over the run: tokens, target_tokens, error_tokens (sums over phases), `epochs` consumed (stream
positions ÷ windows per epoch at each seq_len; skipped rows count: the order moved past them) and
`documents_seen`, which is exact when a whole number of epochs has passed and otherwise the expected count
min(1, epochs) × documents (a shuffled epoch's positions fall uniformly over the windows).
"""

from __future__ import annotations

from typing import Any

from .plan import ENDLESS_TOKENS
from .windows import num_windows

__all__ = ["accounting"]


def _planned(cursor: Any, x: int, y: int) -> list[int]:
    """Samples per source in global batches [x, y)."""
    if y <= x:
        return [0] * len(cursor.plan.sources)
    return (cursor.samples_before(y) - cursor.samples_before(x)).tolist()


def accounting(loader: Any, batch: int | None = None) -> dict[str, Any]:
    """The run's accounting before global batch `batch` (default: the loader's next batch), as a plain dict."""
    plan = loader.engine.plan
    cursor = plan.cursor
    b = loader.step if batch is None else int(batch)
    b = min(b, plan.phases.num_batches)
    names = plan.names
    skips = getattr(loader, "skips", ())
    phases_out = []
    totals = {n: {"tokens": 0, "skipped_tokens": 0, "target_tokens": 0.0, "error_tokens": 0.0, "positions": 0.0}
              for n in names}
    for phase, bounds in zip(plan.phases.phases, plan.phases.bounds):
        start = max(bounds.first_batch, cursor.anchor)
        stop = min(bounds.first_batch + bounds.num_batches, b)
        L = phase.seq_len
        endless = phase.tokens >= ENDLESS_TOKENS  # a single dataset without a budget: no target
        planned = _planned(cursor, start, stop)
        skipped = [0] * len(names)
        for a, z in skips:
            part = _planned(cursor, max(a, start), min(z + 1, stop))
            skipped = [s + p for s, p in zip(skipped, part)]
        delivered = [(p - s) * L for p, s in zip(planned, skipped)]
        so_far = sum(delivered)
        weights = phase.weights
        sources = {}
        for j, name in enumerate(names):
            if name not in weights and not planned[j]:
                continue
            w = float(weights.get(name, 0))
            target = None if endless else w * phase.tokens
            expected = w * so_far
            sources[name] = {"weight": w, "tokens": delivered[j], "skipped_tokens": skipped[j] * L,
                             "target_tokens": None if target is None else round(target),
                             "expected_tokens": round(expected, 1),
                             "proportion": round(delivered[j] / so_far, 6) if so_far else 0.0,
                             "error_tokens": round(delivered[j] - expected, 1)}
            t = totals[name]
            t["tokens"] += delivered[j]
            t["skipped_tokens"] += skipped[j] * L
            t["target_tokens"] += target or 0.0
            t["error_tokens"] += delivered[j] - expected
            windows = num_windows(plan.sources[name].dataset.num_tokens, L)
            t["positions"] += planned[j] / windows if windows else 0.0
        phases_out.append({"name": phase.name, "seq_len": L, "tokens": so_far,
                           "target_tokens": None if endless else phase.tokens,
                           "batches": max(0, stop - start), "sources": sources})
    sources_out = {}
    for name in names:
        t = totals[name]
        ds = plan.sources[name].dataset
        epochs = t["positions"] + _offset_epochs(cursor, plan, name)
        exact = epochs >= 1 or epochs == 0
        sources_out[name] = {"tokens": t["tokens"], "skipped_tokens": t["skipped_tokens"],
                             "target_tokens": round(t["target_tokens"]) or None, "error_tokens": round(t["error_tokens"], 1),
                             "epochs": round(epochs, 6),
                             "documents_seen": ds.num_docs if epochs >= 1 else round(epochs * ds.num_docs),
                             "documents": ds.num_docs, "documents_seen_exact": exact}
    return {"batch": b, "tokens": sum(p["tokens"] for p in phases_out), "skips": [list(s) for s in skips],
            "phases": phases_out, "sources": sources_out}


def _offset_epochs(cursor: Any, plan: Any, name: str) -> float:
    """Epochs a source had consumed before this loader's recipe took over (recorded offsets), at its first
    seq_len."""
    j = plan.names.index(name)
    off = int(cursor.offset_samples[j])
    if not off:
        return 0.0
    first = next((p.seq_len for p in plan.phases.phases if name in p.weights), plan.phases.phases[0].seq_len)
    windows = num_windows(plan.sources[name].dataset.num_tokens, first)
    return off / windows if windows else 0.0
