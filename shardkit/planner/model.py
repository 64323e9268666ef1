"""Predict, step by step through a recipe's phases and batch ramp, what each node reads from storage.

The model (every formula, and its validation, is in docs/planner.md):

* A node runs `G` of the `W = N·G` ranks, so it reads the fraction `f = G / W` of every global batch's
  rows of every source — spread over each shuffle group by the shuffle.
* Per sample of source `j` drawn at seq_len `L`, the node reads `b_j(f) = L·itemsize · mean_pages(1 − (1 −
  f)^k)` bytes from storage (`geometry.bytes_per_sample`; `k` windows cover a page). Storage bytes of a step
  are `Σ_j rows_j(step) · b_j(f)`, rows from the recipe's exact interleave.
* Working set: what the node has read ahead of its copies and must keep cached until they happen. One rank
  hints whole groups: the current group of each source, then the next (`WS` from `Σ_j g_j·s_j` to twice
  that; `g` group samples, `s` bytes per sample stride). Several ranks hint their own rows, between two and
  four groups' worth of global rows ahead (`H = 2·min_j g_j … 4·min_j g_j`, within the engine's chunk),
  split by the phase's weights: `WS = H · Σ_j w_j · b_j(f)`.
* Pages hinted further ahead than the cache holds are evicted before they are copied and read again. With
  the horizon spread evenly over its range, the fraction of reads served by the cache is `h = clamp((C −
  WS_lo) / (WS_hi − WS_lo), 0, 1)` and storage bytes are `(2 − h) ×` the base; it fits when `WS_hi ≤ C`.
* Step time: given, or the global batch's tokens over `W ×` tokens per GPU-second; bandwidth = bytes /
  step time, per node and for the cluster (× N).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..engine.core import CHUNK_ROWS
from ..engine.packed_rows import PackedWindows
from ..errors import ConfigError
from ..order import ShuffleMode
from .geometry import bytes_per_sample

__all__ = ["Cluster", "IOPlan", "Interval", "StreamShape", "plan_io", "plan_loader"]


@dataclass(frozen=True)
class Cluster:
    """The machines a run will use."""

    nodes: int
    ranks_per_node: int
    page_cache_bytes: int  # page cache available to the data on each node
    storage_gbps: float | None = None  # aggregate storage bandwidth of the cluster, gigabits per second
    step_seconds: float | None = None  # one optimizer step
    gpu_tokens_per_second: float | None = None  # or: the step time from each rank's training throughput

    def __post_init__(self) -> None:
        for name in ("nodes", "ranks_per_node", "page_cache_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        for name in ("storage_gbps", "step_seconds", "gpu_tokens_per_second"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        if self.step_seconds is not None and self.gpu_tokens_per_second is not None:
            raise ConfigError("give step_seconds or gpu_tokens_per_second, not both")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class StreamShape:
    """What the model needs of one source at one seq_len."""

    source: str
    seq_len: int
    itemsize: int
    num_samples: int  # per epoch
    group_samples: int
    shuffle: str



@dataclass
class Interval:
    """Steps [first, end) of one phase at one batch size: what each node reads per step."""

    first: int
    end: int
    phase: int
    phase_name: str
    seq_len: int
    batch_size: int
    samples: dict[str, int]  # per source, all ranks
    tokens: dict[str, int]
    node_bytes: float  # storage bytes per node over the interval (re-reads included)
    working_set: float  # bytes a node must keep cached (the top of its range)
    fits: bool
    hit_rate: float
    step_seconds: float | None
    node_gbytes_per_s: float | None
    cluster_gbytes_per_s: float | None
    storage_ok: bool | None

    @property
    def steps(self) -> int:
        return self.end - self.first


@dataclass
class IOPlan:
    cluster: Cluster
    streams: list[StreamShape]
    intervals: list[Interval] = field(default_factory=list)

    @property
    def node_bytes(self) -> float:
        return sum(i.node_bytes for i in self.intervals)

    @property
    def first_overflow(self) -> Interval | None:
        """The first interval whose working set does not fit a node's page cache."""
        return next((i for i in self.intervals if not i.fits), None)

    def node_bytes_between(self, first: int, end: int) -> float:
        """Predicted storage bytes per node over steps [first, end) (intervals pro rata)."""
        total = 0.0
        for i in self.intervals:
            lo, hi = max(first, i.first), min(end, i.end)
            if hi > lo:
                total += i.node_bytes * (hi - lo) / i.steps
        return total

    def to_json(self) -> dict[str, Any]:
        over = self.first_overflow
        return {"cluster": asdict(self.cluster), "streams": [asdict(s) for s in self.streams],
                "node_bytes": self.node_bytes, "cluster_bytes": self.node_bytes * self.cluster.nodes,
                "first_overflow": None if over is None else {"step": over.first, "phase": over.phase_name},
                "intervals": [{**asdict(i), "steps": i.steps} for i in self.intervals]}


def plan_loader(loader: Any, cluster: Cluster, *, points: int = 200) -> IOPlan:
    """The I/O plan of a loader's stream (a `Loader` or `MixtureLoader`, any rank) on `cluster`."""
    if loader.engine.placement.world_size != cluster.world_size:
        raise ConfigError(f"the loader was built for world size {loader.engine.placement.world_size}, the "
                          f"cluster has {cluster.world_size} ranks ({cluster.nodes} × {cluster.ranks_per_node})")
    return plan_io(loader.engine.plan, cluster, points=points)


def plan_io(plan: Any, cluster: Cluster, *, points: int = 200) -> IOPlan:
    """The I/O plan of an engine `Plan` (see `plan_loader`): about `points` intervals over the whole run,
    split at every phase and batch-size change."""
    names = plan.names
    packed = sorted({st.name for st in plan.streams.values() if isinstance(st.windows, PackedWindows)})
    if packed:
        raise ConfigError(f"the I/O planner models window rows; source(s) {', '.join(packed)} use packed rows "
                          "(packing=), which it does not model yet: plan with packing: window for an estimate "
                          "(a packed row reads about the bytes of a window)")
    shapes = {key: StreamShape(source=st.name, seq_len=st.seq_len, itemsize=st.windows.dataset.dtype.itemsize,
                               num_samples=st.num_samples, group_samples=st.order.group_samples,
                               shuffle=st.order.mode.value)
              for key, st in plan.streams.items()}
    share = cluster.ranks_per_node / cluster.world_size
    per_sample = {key: bytes_per_sample(s.seq_len, s.itemsize, share) for key, s in shapes.items()}
    out = IOPlan(cluster=cluster, streams=list(shapes.values()))
    end = plan.end
    if end <= 0:
        return out
    cuts = {0, end}
    for i, b in enumerate(plan.phases.bounds):
        sched = plan.phases.phases[i].batch
        for first, _, _ in sched.stages:
            if first < b.num_batches:
                cuts.add(b.first_batch + first)
        cuts.add(min(end, b.first_batch + b.num_batches))
    cuts.update(np.linspace(0, end, max(2, points) + 1).astype(np.int64).tolist())
    grid = sorted(c for c in cuts if 0 <= c <= end)
    cursor = plan.cursor
    before_s, before_t = cursor.samples_before(0), cursor.tokens_before(0)
    for a, z in zip(grid[:-1], grid[1:]):
        if z <= a:
            continue
        after_s, after_t = cursor.samples_before(z), cursor.tokens_before(z)
        samples, tokens = after_s - before_s, after_t - before_t
        before_s, before_t = after_s, after_t
        phase = int(plan.phase_of(np.array([a]))[0])
        p = plan.phases.phases[phase]
        keys = [(names.index(n), p.seq_len) for n, _ in p.mix]
        base = sum(float(samples[j]) * per_sample[(j, length)] for j, length in keys)
        lo, hi = _working_set(p, keys, shapes, per_sample, cluster.world_size)
        cache = cluster.page_cache_bytes
        hit = 1.0 if cache >= hi else 0.0 if cache <= lo else (cache - lo) / (hi - lo)
        fits = hit == 1.0
        ws = hi
        node_bytes = base * (2.0 - hit)
        size = plan.batch_size(a)
        step_s = cluster.step_seconds
        if step_s is None and cluster.gpu_tokens_per_second is not None:
            step_s = size * p.seq_len / (cluster.world_size * cluster.gpu_tokens_per_second)
        node_gb = cluster_gb = ok = None
        if step_s is not None:
            node_gb = node_bytes / (z - a) / step_s / 1e9
            cluster_gb = node_gb * cluster.nodes
            ok = None if cluster.storage_gbps is None else cluster_gb * 8 <= cluster.storage_gbps
        out.intervals.append(Interval(
            first=a, end=z, phase=phase, phase_name=p.name, seq_len=p.seq_len, batch_size=size,
            samples={names[j]: int(samples[j]) for j in range(len(names)) if samples[j]},
            tokens={names[j]: int(tokens[j]) for j in range(len(names)) if tokens[j]},
            node_bytes=node_bytes, working_set=ws, fits=fits, hit_rate=hit, step_seconds=step_s,
            node_gbytes_per_s=node_gb, cluster_gbytes_per_s=cluster_gb, storage_ok=ok))
    return out


def _working_set(phase: Any, keys: list[tuple[int, int]], shapes: dict[tuple[int, int], StreamShape],
                 per_sample: dict[tuple[int, int], float], world_size: int) -> tuple[float, float]:
    """(least, most) bytes a node holds read ahead of its copies during a phase (the module docstring)."""
    if world_size == 1:  # whole groups: the current one, then the next one too
        one = sum(min(shapes[k].group_samples, shapes[k].num_samples) * shapes[k].seq_len * shapes[k].itemsize
                  for k in keys)
        return float(one), 2.0 * one
    weights = [float(w) for _, w in phase.mix]
    total = sum(weights)
    per_row = sum(w / total * per_sample[k] for w, k in zip(weights, keys))
    blocked = [min(shapes[k].group_samples, shapes[k].num_samples) for k in keys
               if shapes[k].shuffle == ShuffleMode.BLOCK.value]
    if blocked:  # a rank hints two groups' share ahead, renewed when one is left: 2 to 4 groups of rows
        ahead = 2 * min(blocked)
    else:  # 8 MiB of a rank's rows
        ahead = max(1, (8 << 20) // ((phase.seq_len + 1) * max(shapes[k].itemsize for k in keys))) * world_size
    chunk = CHUNK_ROWS * len(keys) * world_size  # hints stop at the end of the engine's chunk
    return min(ahead, chunk) * per_row, min(2 * ahead, chunk) * per_row
