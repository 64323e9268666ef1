"""Units: what one DataLoader item is — a rank's whole batch, or one of its micro-batches.

Unit u of a rank is the u-th item it delivers; with micro-batches, units run through the global sample
stream `world_size · micro_batch_size` samples at a time, so the mapping needs only the schedule's S(b)
and its inverse. Shared by the single-source and the mixture loader, whose schedules differ.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..order import item_sequence

__all__ = ["UnitIndex"]


class UnitIndex:
    """(batch, micro) ↔ unit index, for a loader with `world_size`, `config.micro_batch_size` and the two
    schedule functions below."""

    world_size: int
    config: object

    def _samples_before(self, batch: int) -> int:
        """Global samples delivered before global batch `batch` (S(b))."""
        raise NotImplementedError

    def _batch_at_sample(self, sample: int) -> int:
        """The global batch holding global sample `sample`."""
        raise NotImplementedError

    def _unit_rows(self) -> int:
        return self.world_size * (self.config.micro_batch_size or 0)  # type: ignore[attr-defined]

    def unit_index(self, batch: int, micro: int = 0) -> int:
        """Index of (batch, micro) in the flat sequence of items this rank delivers."""
        if not self.config.micro_batch_size:  # type: ignore[attr-defined]
            return batch
        return self._samples_before(batch) // self._unit_rows() + micro

    def unit_position(self, unit: int) -> tuple[int, int]:
        """(batch, micro) of item `unit`, so any worker can start anywhere (O(log stages))."""
        if not self.config.micro_batch_size:  # type: ignore[attr-defined]
            return unit, 0
        sample = unit * self._unit_rows()
        b = self._batch_at_sample(sample)
        return b, (sample - self._samples_before(b)) // self._unit_rows()

    def _unit_walk(self, first_unit: int, stride: int, run: int, stop: int | None, end: int | None
                   ) -> Iterator[tuple[int, int, int]]:
        """(unit, batch, micro) for the units `item_sequence(first_unit, stride, run)` names, below `stop`
        and before batch `end` (None: endless)."""
        t = 0
        while True:
            u = int(item_sequence(first_unit, stride, run, t, 1)[0])
            t += 1
            if stop is not None and u >= stop:
                return
            b, k = self.unit_position(u)
            if end is not None and b >= end:
                return
            yield u, b, k
