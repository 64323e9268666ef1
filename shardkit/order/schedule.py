"""Global batch-size schedules: B(b) and S(b) = Σ_{i<b} B(i), in O(log stages), never O(b).

Every schedule is a table of stages (first batch, samples before it, batch size), built once at
construction; resume at batch 10 or 10 million costs one binary search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError

__all__ = ["BatchSchedule", "Constant", "Ramp", "Piecewise", "parse_schedule"]

_MAX_STAGES = 1_000_000


class BatchSchedule(Protocol):
    def size(self, batch: int) -> int: ...
    def start(self, batch: int) -> int: ...
    def batch_at_sample(self, sample: int) -> int: ...
    def to_json(self) -> dict[str, Any]: ...


def _positive(name: str, v: Any) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


class _Stages:
    """Stage j: batches [b_j, b_{j+1}) all of size s_j, starting at sample S_j; the last stage is open."""

    def __init__(self, first_batch: list[int], first_sample: list[int], sizes: list[int]) -> None:
        self.b = np.asarray(first_batch, dtype=np.int64)
        self.s = np.asarray(first_sample, dtype=np.int64)
        self.size = np.asarray(sizes, dtype=np.int64)

    @classmethod
    def by_sample_bounds(cls, sizes: list[int], bounds_num: list[int], den: int) -> _Stages:
        """Stage j is used by batch b while S(b) · den < bounds_num[j] (the last size is used after)."""
        fb, fs, sz = [0], [0], [sizes[0]]
        b = s = 0
        for j, bound in enumerate(bounds_num):
            size = sizes[j]
            remaining = bound - s * den
            count = -(-remaining // (size * den)) if remaining > 0 else 0
            b += count
            s += count * size
            if count == 0 and fb[-1] == b:
                sz[-1] = sizes[j + 1]
            else:
                fb.append(b)
                fs.append(s)
                sz.append(sizes[j + 1])
        return cls(fb, fs, sz)

    def stage_of_batch(self, batch: int) -> int:
        return int(np.searchsorted(self.b, batch, side="right")) - 1

    def batch_size(self, batch: int) -> int:
        return int(self.size[self.stage_of_batch(_nonneg(batch))])

    def batch_start(self, batch: int) -> int:
        j = self.stage_of_batch(_nonneg(batch))
        return int(self.s[j]) + (batch - int(self.b[j])) * int(self.size[j])

    def batch_of_sample(self, sample: int) -> int:
        j = int(np.searchsorted(self.s, _nonneg(sample), side="right")) - 1
        while j > 0 and self.s[j] == self.s[j - 1]:  # pragma: no cover - empty stages are never stored
            j -= 1
        return int(self.b[j]) + (sample - int(self.s[j])) // int(self.size[j])


def _nonneg(x: int) -> int:
    if x < 0:
        raise ConfigError(f"batch and sample indices are non-negative, got {x}")
    return int(x)


@dataclass(frozen=True)
class Constant:
    batch_size: int

    def __post_init__(self) -> None:
        _positive("batch size", self.batch_size)

    def size(self, batch: int) -> int:
        _nonneg(batch)
        return self.batch_size

    def start(self, batch: int) -> int:
        return _nonneg(batch) * self.batch_size

    def batch_at_sample(self, sample: int) -> int:
        return _nonneg(sample) // self.batch_size

    def to_json(self) -> dict[str, Any]:
        return {"constant": self.batch_size}


@dataclass(frozen=True)
class Ramp:
    """Megatron-LM's rampup-batch-size: start + floor(S(b) / (ramp_samples / n_inc)) · increment, ≤ final."""

    start_size: int
    increment: int
    ramp_samples: int
    final: int
    _stages: _Stages = field(init=False, repr=False, compare=False)

    def __init__(self, start: int, increment: int, ramp_samples: int, final: int) -> None:
        object.__setattr__(self, "start_size", _positive("ramp start", start))
        object.__setattr__(self, "increment", _positive("ramp increment", increment))
        object.__setattr__(self, "ramp_samples", _positive("ramp samples", ramp_samples))
        object.__setattr__(self, "final", _positive("final batch size", final))
        if final < start or (final - start) % increment:
            raise ConfigError(f"ramp: final ({final}) - start ({start}) must be a non-negative multiple of "
                              f"increment ({increment})")
        n_inc = (final - start) // increment
        if n_inc > _MAX_STAGES:
            raise ConfigError(f"ramp has {n_inc:,} increments; at most {_MAX_STAGES:,}")
        if n_inc == 0:
            stages = _Stages([0], [0], [final])
        else:
            sizes = [start + j * increment for j in range(n_inc + 1)]
            bounds = [(j + 1) * ramp_samples for j in range(n_inc)]  # S · n_inc < (j+1) · ramp_samples
            stages = _Stages.by_sample_bounds(sizes, bounds, n_inc)
        object.__setattr__(self, "_stages", stages)

    def size(self, batch: int) -> int:
        return self._stages.batch_size(batch)

    def start(self, batch: int) -> int:
        return self._stages.batch_start(batch)

    def batch_at_sample(self, sample: int) -> int:
        return self._stages.batch_of_sample(sample)

    def to_json(self) -> dict[str, Any]:
        return {"ramp": {"start": self.start_size, "increment": self.increment,
                         "ramp_samples": self.ramp_samples, "final": self.final}}


@dataclass(frozen=True)
class Piecewise:
    """Batch size `size_i` until `until_i` consumed steps (or tokens), then `final`.

    By steps: piece i covers batches [until_{i-1}, until_i). By tokens: batch b uses piece i while the
    tokens consumed before it, S(b) · seq_len, are below until_i — so a boundary in tokens is rounded up
    to the next batch boundary, deterministically.
    """

    pieces: tuple[tuple[int, int], ...]
    final: int
    unit: str = "steps"
    seq_len: int | None = None
    _stages: _Stages = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pieces = tuple((int(u), int(s)) for u, s in self.pieces)
        object.__setattr__(self, "pieces", pieces)
        _positive("final batch size", self.final)
        if self.unit not in ("steps", "tokens"):
            raise ConfigError(f"piecewise unit must be 'steps' or 'tokens', got {self.unit!r}")
        prev = 0
        for until, size in pieces:
            _positive("piece batch size", size)
            if until <= prev:
                raise ConfigError(f"piecewise boundaries must increase, got {until} after {prev}")
            prev = until
        if self.unit == "steps":
            fb, fs, sz, b, s = [], [], [], 0, 0
            for until, size in pieces:
                fb.append(b), fs.append(s), sz.append(size)
                s += (until - b) * size
                b = until
            fb.append(b), fs.append(s), sz.append(self.final)
            stages = _Stages(fb, fs, sz)
        else:
            seq = _positive("seq_len (needed for a schedule in tokens)", self.seq_len)
            sizes = [size for _, size in pieces] + [self.final]
            stages = _Stages.by_sample_bounds(sizes, [until for until, _ in pieces], seq)
        object.__setattr__(self, "_stages", stages)

    def size(self, batch: int) -> int:
        return self._stages.batch_size(batch)

    def start(self, batch: int) -> int:
        return self._stages.batch_start(batch)

    def batch_at_sample(self, sample: int) -> int:
        return self._stages.batch_of_sample(sample)

    def to_json(self) -> dict[str, Any]:
        return {"piecewise": {"unit": self.unit, "pieces": [list(p) for p in self.pieces], "final": self.final,
                              "seq_len": self.seq_len}}


def parse_schedule(obj: Any) -> BatchSchedule:
    """From an int or the dict `to_json()` writes: {"constant": 8} | {"ramp": {...}} | {"piecewise": {...}}."""
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return Constant(int(obj))
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ConfigError(f"a batch schedule is an int or one of {{constant|ramp|piecewise: ...}}, got {obj!r}")
    (kind, body), = obj.items()
    try:
        if kind == "constant":
            return Constant(body)
        if kind == "ramp":
            return Ramp(start=body["start"], increment=body["increment"],
                        ramp_samples=body.get("ramp_samples", body.get("over_samples")), final=body["final"])
        if kind == "piecewise":
            return Piecewise(pieces=tuple(tuple(p) for p in body["pieces"]), final=body["final"],
                             unit=body.get("unit", "steps"), seq_len=body.get("seq_len"))
    except (KeyError, TypeError) as e:
        raise ConfigError(f"batch schedule {kind}: missing or malformed field {e}") from None
    raise ConfigError(f"unknown batch schedule {kind!r} (expected constant, ramp or piecewise)")
