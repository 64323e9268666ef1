"""Megatron's samples in the read engine (`order="megatron"`): rows of document pieces, read as packed rows.

A Megatron sample (megatron-core's GPTDataset / BlendedDataset, `shardkit.megatron`) is `seq_len + 1`
tokens cut from documents in Megatron's shuffled document order: a few document pieces back to back. That
is the shape of a packed row, so `MegatronRows` stands in for `Windows` with the interface
`PackedReader` reads (`table.pieces`, `table.first`), and the engine copies Megatron samples with the packed
reader — no second reader. The plan streams the order unshuffled (`ShuffleMode.NONE`, one pass): position
`p` of the stream is Megatron's sample `p`.

`MegatronInterleave` gives each rank the samples Megatron-LM's `MegatronPretrainingSampler` gives it: a
global batch of `B` is `B / (m·W)` micro-steps of `m·W` consecutive samples, rank `r` taking
`[r·m, (r+1)·m)` of each (the engine's own slicing would give rank `r` the contiguous `[r·B/W, (r+1)·B/W)`).
It is a permutation within each global batch, so the global batches, the state and resume on another world
size are the engine's own.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset
from ..megatron.order import BlendOrder, GPTOrder
from ..megatron.pieces import order_pieces
from .config import Placement
from .packed_rows import PackedWindows
from .plan import Plan

__all__ = ["MegatronInterleave", "MegatronRows", "MegatronTable", "uses_megatron"]


class MegatronTable:
    """`PackTable`'s reading interface over a Megatron order, computed per call (nothing is stored per sample).

    `pieces(ids)` returns piece indices `0..n-1` of this call, and `first` is this call's "starts a document"
    flags, so `first[idx]` right after `pieces` reads as it does on a packing table."""

    def __init__(self, order: GPTOrder | BlendOrder) -> None:
        self.order = order
        self.first = np.zeros(0, dtype=bool)
        self._last: tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None

    def pieces(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(piece indices of `rows` in row order, pieces per row, flat token starts, lengths)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._last is not None and np.array_equal(self._last[0], rows):  # verify_on_read / row_identity
            # ask for a slab's pieces before the reader does
            counts, start, length, first = self._last[1]
        else:
            counts, start, length, first = order_pieces(self.order, rows)
            self._last = (rows.copy(), (counts, start, length, first))
        self.first = first
        return np.arange(start.size, dtype=np.int64), counts, start, length

    def cost(self, rows: np.ndarray) -> np.ndarray:
        raise ConfigError("balance_ranks does not apply to order='megatron': Megatron's sampler fixes which rank "
                          "trains which sample")


class MegatronRows(PackedWindows):
    """The samples of a Megatron order over one dataset, as packed rows (sample id = Megatron's sample id).

    A `PackedWindows` by type, so the engine reads them with its packed-row path; its table is computed."""

    def __init__(self, dataset: Dataset, order: GPTOrder | BlendOrder, gid_base: int = 0) -> None:
        if hasattr(dataset, "read_gate"):
            raise ConfigError(f"{dataset.path}: order='megatron' reads local datasets only; copy it locally")
        if not order.config.add_extra_token_to_sequence:
            raise ConfigError("order='megatron' rows are seq_len + 1 tokens (add_extra_token_to_sequence=True)")
        self.dataset = dataset
        self.order = order
        self.table = MegatronTable(order)  # type: ignore[assignment]
        self.seq_len = order.config.sequence_length
        self.width = self.seq_len + 1
        self.gid_base = gid_base
        self.num_samples = len(order)
        if self.num_samples == 0:
            raise ConfigError(f"{dataset.path}: the Megatron order holds no sample")
        self.offsets = dataset.token_offsets
        self.sizes = np.diff(self.offsets)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, start within it) of each sample's first piece."""
        counts, start, _, _ = order_pieces(self.order, np.asarray(sample_ids, dtype=np.int64))
        first = start[np.cumsum(counts) - counts]
        shard = np.searchsorted(self.offsets, first, side="right") - 1
        return shard, first - self.offsets[shard]

    def inside(self, shard: np.ndarray, local: np.ndarray) -> np.ndarray:
        return np.ones(np.shape(shard), dtype=bool)  # pieces are parts of documents, which never cross shards

    def token_ranges(self, first: np.ndarray, stop: np.ndarray) -> list[tuple[int, int, int]]:
        """No block hints: Megatron's shuffle index scatters consecutive samples over the whole prefix."""
        return []


def uses_megatron(plan: Plan) -> bool:
    return any(isinstance(s.windows, MegatronRows) for s in plan.streams.values())


class MegatronInterleave:
    """Remaps a rank's phase positions to its `MegatronPretrainingSampler` share (see the module docstring)."""

    def __init__(self, plan: Plan, placement: Placement) -> None:
        self.plan = plan
        self.world = placement.world_size
        self.mbs = placement.micro_batch_size

    def applies(self, phase: int) -> bool:
        return self.world > 1 and bool(self.mbs)

    def remap(self, phase: int, batches: np.ndarray, counts: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Positions of items (of `batches`, `counts` rows each, concatenated) in Megatron's rank slicing."""
        assert self.mbs is not None
        sizes, starts = self.plan.sizes(phase, batches)
        base = np.repeat(starts, counts)
        per = np.repeat(sizes // self.world, counts)
        q = positions - base
        r, rem = np.divmod(q, per)
        k, j = np.divmod(rem, self.mbs)
        return base + k * (self.mbs * self.world) + r * self.mbs + j
