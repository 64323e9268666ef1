"""Global batch-size schedules: B(b) and S(b) = Σ_{i<b} B(i) in O(log stages), never O(b).

Every schedule compiles, once, to a short table of stages — (first batch, samples before it, batch size),
the last stage open-ended — so `start(b)` at batch 10 or 10 million is one binary search, and a loader can
resume from a sample count alone. All lookups accept an int (→ int) or an integer array (→ int64 array).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from dataclasses import dataclass
from enum import Enum
from typing import Any, overload

import numpy as np

from ..errors import ConfigError
from ._checks import index_array, nonneg_int, positive_int

__all__ = ["BatchSchedule", "Constant", "Ramp", "Piecewise", "ScheduleUnit", "parse_schedule"]

_MAX_STAGES = 1_000_000  # a guard against a typo turning the table into gigabytes


class _Stages:
    """Stage j covers batches [first_batch[j], first_batch[j + 1]) of size sizes[j], starting at first_sample[j]."""

    def __init__(self, stages: list[tuple[int, int, int]]) -> None:
        merged: list[tuple[int, int, int]] = []
        for b, s, size in stages:  # drop empty stages, merge equal neighbours: the table stays minimal
            if merged and merged[-1][0] == b:
                merged.pop()
            if not merged or merged[-1][2] != size:
                merged.append((b, s, size))
        self.rows = tuple(merged)
        self.batch = [r[0] for r in merged]
        self.sample = [r[1] for r in merged]
        self.size = [r[2] for r in merged]
        self.arrays = tuple(np.array(col, dtype=np.int64) for col in (self.batch, self.sample, self.size))

    @classmethod
    def by_batches(cls, pieces: list[tuple[int, int]], final: int) -> _Stages:
        """Piece (until, size) covers the batches from the previous `until` up to (excluding) this one."""
        rows, b, s = [], 0, 0
        for until, size in pieces:
            rows.append((b, s, size))
            s += (until - b) * size
            b = until
        return cls([*rows, (b, s, final)])

    @classmethod
    def by_samples(cls, thresholds: list[int], sizes: list[int], final: int) -> _Stages:
        """Batch b has size sizes[j] for the first j with S(b) < thresholds[j], else `final`.

        The size is decided by the samples consumed *before* the batch, so a threshold that falls inside a
        batch takes effect at the next batch boundary.
        """
        rows, b, s = [], 0, 0
        for threshold, size in zip(thresholds, sizes):
            if s < threshold:
                rows.append((b, s, size))
                count = -(-(threshold - s) // size)
                b, s = b + count, s + count * size
        return cls([*rows, (b, s, final)])


class BatchSchedule(ABC):
    """The common interface: `size(b)` = B(b), `start(b)` = S(b), and their inverses."""

    _stages: _Stages

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The JSON-able form `parse_schedule` reads back (stored in loader state dicts and recipes)."""

    @property
    def stages(self) -> tuple[tuple[int, int, int], ...]:
        """(first batch, samples before it, batch size) per stage; the sizes are the only values B takes."""
        return self._stages.rows

    @overload
    def size(self, batch: int) -> int: ...
    @overload
    def size(self, batch: np.ndarray) -> np.ndarray: ...
    def size(self, batch: int | np.ndarray) -> int | np.ndarray:
        """B(b): the global batch size of batch `b`."""
        st = self._stages
        if _is_scalar(batch):
            return st.size[bisect_right(st.batch, nonneg_int("batch index", batch)) - 1]
        b = index_array(batch, None, "batch index")
        return st.arrays[2][np.searchsorted(st.arrays[0], b, side="right") - 1]

    @overload
    def start(self, batch: int) -> int: ...
    @overload
    def start(self, batch: np.ndarray) -> np.ndarray: ...
    def start(self, batch: int | np.ndarray) -> int | np.ndarray:
        """S(b): global samples consumed before batch `b`."""
        st = self._stages
        if _is_scalar(batch):
            b = nonneg_int("batch index", batch)
            j = bisect_right(st.batch, b) - 1
            return st.sample[j] + (b - st.batch[j]) * st.size[j]
        arr = index_array(batch, None, "batch index")
        k = np.searchsorted(st.arrays[0], arr, side="right") - 1
        return st.arrays[1][k] + (arr - st.arrays[0][k]) * st.arrays[2][k]

    @overload
    def batch_at_sample(self, sample: int) -> int: ...
    @overload
    def batch_at_sample(self, sample: np.ndarray) -> np.ndarray: ...
    def batch_at_sample(self, sample: int | np.ndarray) -> int | np.ndarray:
        """The batch b with S(b) ≤ sample < S(b) + B(b)."""
        st = self._stages
        if _is_scalar(sample):
            s = nonneg_int("sample index", sample)
            j = bisect_right(st.sample, s) - 1
            return st.batch[j] + (s - st.sample[j]) // st.size[j]
        arr = index_array(sample, None, "sample index")
        k = np.searchsorted(st.arrays[1], arr, side="right") - 1
        return st.arrays[0][k] + (arr - st.arrays[1][k]) // st.arrays[2][k]

    def batch_starting_at(self, sample: int) -> int:
        """The batch b with S(b) == sample exactly — how resume turns a consumed-sample count into a step."""
        b = self.batch_at_sample(nonneg_int("sample index", sample))
        first = self.start(b)
        if first != sample:
            raise ConfigError(f"{sample} samples is not a batch boundary of this schedule: batch {b} covers "
                              f"samples [{first}, {first + self.size(b)}); resume from {first} or "
                              f"{first + self.size(b)}")
        return b


def _is_scalar(x: Any) -> bool:
    if isinstance(x, int):  # the common case first: this runs per batch
        return True
    return not isinstance(x, np.ndarray) and np.ndim(x) == 0


@dataclass(frozen=True)
class Constant(BatchSchedule):
    """B(b) = batch_size for every batch."""

    batch_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_size", positive_int("batch size", self.batch_size))
        object.__setattr__(self, "_stages", _Stages([(0, 0, self.batch_size)]))

    def to_json(self) -> dict[str, Any]:
        return {"constant": self.batch_size}


@dataclass(frozen=True, init=False)
class Ramp(BatchSchedule):
    """Megatron-LM's `--rampup-batch-size start increment ramp_samples` with global batch size `final`.

    With n_inc = (final − start) / increment and spi = ramp_samples / n_inc (a float, as in Megatron), batch
    b has size `final` once S(b) > ramp_samples and otherwise `start + int(S(b) / spi) · increment`. The
    float division is reproduced exactly (IEEE doubles are the same everywhere), so the sizes match a
    Megatron run batch for batch, including the rare cases where its rounding delays an increment by one.
    """

    start_size: int
    increment: int
    ramp_samples: int
    final: int

    def __init__(self, start: int, increment: int, ramp_samples: int, final: int) -> None:
        start = positive_int("ramp start batch size", start)
        increment = positive_int("ramp increment", increment)
        ramp_samples = positive_int("ramp_samples", ramp_samples)
        final = positive_int("final batch size", final)
        if final <= start or (final - start) % increment:
            raise ConfigError(f"ramp: final ({final}) − start ({start}) must be a positive multiple of the "
                              f"increment ({increment}); for a fixed size use {{'constant': {final}}}")
        n_inc = (final - start) // increment
        if n_inc > _MAX_STAGES:
            raise ConfigError(f"ramp has {n_inc:,} increments; at most {_MAX_STAGES:,} are supported")
        for name, value in (("start_size", start), ("increment", increment), ("ramp_samples", ramp_samples),
                            ("final", final)):
            object.__setattr__(self, name, value)
        spi = ramp_samples / n_inc

        def steps(s: int) -> int:  # Megatron's update(consumed_samples), in increments
            return n_inc if s > ramp_samples else int(s / spi)

        thresholds = []  # thresholds[k-1]: the fewest consumed samples with `steps` ≥ k
        for k in range(1, n_inc + 1):
            t = min(-(-k * ramp_samples // n_inc), ramp_samples + 1)  # exact answer; float may shift it by 1
            while t > 0 and steps(t - 1) >= k:
                t -= 1
            while steps(t) < k:
                t += 1
            thresholds.append(t)
        sizes = [start + k * increment for k in range(n_inc)]
        object.__setattr__(self, "_stages", _Stages.by_samples(thresholds, sizes, final))

    def to_json(self) -> dict[str, Any]:
        return {"ramp": {"start": self.start_size, "increment": self.increment,
                         "ramp_samples": self.ramp_samples, "final": self.final}}


class ScheduleUnit(Enum):
    """What a piecewise boundary counts: optimizer steps (batches) or tokens consumed (samples × seq_len)."""

    STEPS = "steps"
    TOKENS = "tokens"


@dataclass(frozen=True, kw_only=True)
class Piecewise(BatchSchedule):
    """Batch size `size_i` until `until_i` steps (or tokens) are consumed, then `final`.

    By steps: piece i covers batches [until_{i−1}, until_i). By tokens: batch b uses piece i while the
    tokens consumed before it, S(b) · seq_len, are below until_i — a boundary inside a batch takes effect
    at the next batch boundary (never splits a batch), the same rule as Megatron's ramp.
    """

    pieces: tuple[tuple[int, int], ...]
    final: int
    unit: ScheduleUnit = ScheduleUnit.STEPS
    seq_len: int | None = None

    def __post_init__(self) -> None:
        raw = self.pieces if isinstance(self.pieces, (list, tuple)) else None
        if raw is None or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in raw):
            raise ConfigError(f"pieces must be a list of (until, size) pairs, got {self.pieces!r}")
        pieces = tuple((positive_int("piece boundary", u), positive_int("piece batch size", s)) for u, s in raw)
        if len(pieces) > _MAX_STAGES:
            raise ConfigError(f"{len(pieces):,} pieces; at most {_MAX_STAGES:,} are supported")
        for (a, _), (b, _) in zip(pieces, pieces[1:]):
            if b <= a:
                raise ConfigError(f"piecewise boundaries must increase, got {b} after {a}")
        unit = self.unit
        if not isinstance(unit, ScheduleUnit):
            try:
                unit = ScheduleUnit(str(unit).strip().lower())
            except ValueError:
                raise ConfigError(f"piecewise unit must be 'steps' or 'tokens', got {unit!r}") from None
        final = positive_int("final batch size", self.final)
        if unit is ScheduleUnit.TOKENS:
            seq_len = positive_int("seq_len (a schedule in tokens needs it)", self.seq_len)
            thresholds = [-(-until // seq_len) for until, _ in pieces]  # S·seq_len < until ⟺ S < ⌈until/seq_len⌉
            stages = _Stages.by_samples(thresholds, [s for _, s in pieces], final)
        else:
            if self.seq_len is not None:
                raise ConfigError("seq_len applies only to unit='tokens'; drop it for a schedule in steps")
            seq_len = None
            stages = _Stages.by_batches(list(pieces), final)
        for name, value in (("pieces", pieces), ("final", final), ("unit", unit), ("seq_len", seq_len),
                            ("_stages", stages)):
            object.__setattr__(self, name, value)

    def to_json(self) -> dict[str, Any]:
        return {"piecewise": {"unit": self.unit.value, "pieces": [list(p) for p in self.pieces],
                              "final": self.final, "seq_len": self.seq_len}}


_FIELDS = {"ramp": {"start", "increment", "ramp_samples", "final"},
           "piecewise": {"pieces", "final", "unit", "seq_len"}}


def parse_schedule(obj: Any) -> BatchSchedule:
    """A schedule from an int, a schedule, or the dict `to_json()` writes.

    `{"constant": 8}`, `{"ramp": {"start", "increment", "ramp_samples", "final"}}`,
    `{"piecewise": {"pieces": [[until, size], ...], "final", "unit": "steps"|"tokens", "seq_len"}}`.
    """
    if isinstance(obj, BatchSchedule):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return Constant(int(obj))
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ConfigError(f"a batch schedule is an int or one of {{constant|ramp|piecewise: ...}}, got {obj!r}")
    ((kind, body),) = obj.items()
    if kind == "constant":
        return Constant(body["size"] if isinstance(body, dict) and set(body) == {"size"} else body)
    if kind not in _FIELDS:
        raise ConfigError(f"unknown batch schedule {kind!r} (expected constant, ramp or piecewise)")
    if not isinstance(body, dict):
        raise ConfigError(f"batch schedule {kind}: expected an object with {sorted(_FIELDS[kind])}, got {body!r}")
    unknown = set(body) - _FIELDS[kind]
    if unknown:
        raise ConfigError(f"batch schedule {kind}: unknown field(s) {sorted(unknown)}; "
                          f"expected {sorted(_FIELDS[kind])}")
    try:
        if kind == "ramp":
            return Ramp(**body)
        return Piecewise(pieces=tuple(tuple(p) for p in body["pieces"]), final=body["final"],
                         unit=body.get("unit", "steps"), seq_len=body.get("seq_len"))
    except (KeyError, TypeError) as e:
        raise ConfigError(f"batch schedule {kind}: missing or malformed field ({e})") from None

