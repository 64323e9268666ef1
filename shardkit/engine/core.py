"""The read engine: plan → mapping → gather → fields, one pipeline behind every loader.

An *item* (a DataLoader item) is this rank's share of one global batch, or one micro-batch of it. Items are
numbered per rank; with micro-batches, item u starts at global sample u·W·m, so (batch, micro) of any item
is O(log stages) away. Any worker can start anywhere, and nothing is stored between items but the next
item's position — `state_at` and resume are O(1) at any step.

Per chunk (up to ~64 MiB of this rank's rows) the plan computes every row's source, sample and shard with
array operations; rows are then copied slab by slab (~256 KiB, L2-sized, ending where a shuffle group does)
with one gather each, and items are handed out as views of their slab (a slab is never reused, so items a
caller keeps are never overwritten).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import IntegrityError
from ..format.dataset import Dataset
from ..order import ShuffleMode, item_sequence
from .balance import Balancer
from .config import Placement, ReadOptions, check_divisible
from .fields import BatchFields, DocStarts, assemble
from .gather import Gather
from .identity import packed_identity, row_identity
from .mapper import Mapper
from .megatron_rows import MegatronInterleave, uses_megatron
from .metrics import LoaderMetrics
from .packed_rows import PackedReader, is_packed, store_files_read
from .plan import Plan
from .readahead import (
    GroupHints,
    HintWorker,
    ReadMetrics,
    advise_hugepage,
    advise_random,
    hint_rows,
    hint_store_rows,
)
from .row_store import ROW_FILES
from .skips import SkipMap
from .verify_read import CorruptPolicy, ReadVerifier

__all__ = ["Engine"]

# rows are planned this many bytes at a time (NumPy's per-call cost is paid per chunk, not per item); the
# first chunk after a (re)start is small, so the first batch is quick
CHUNK_BYTES = 64 << 20
CHUNK_ROWS = 16384
FIRST_CHUNK_ROWS = 256
SLAB_BYTES = 256 << 10  # rows are gathered this many bytes at a time: two live slabs stay in L2
_UNITS_PER_CALL = 4096


class Engine:
    """Items of a `Plan` for one rank: the machinery both `Loader` and `MixtureLoader` are facades over."""

    def __init__(self, plan: Plan, datasets: list[Dataset], placement: Placement, read: ReadOptions, *,
                 label_sources: bool) -> None:
        self.plan = plan
        self.datasets = datasets
        self.placement = placement
        self.read = read
        self.label_sources = label_sources  # batches carry `source`, `phase`, `phase_name` (recipes)
        self.dtype = np.result_type(*(d.dtype for d in datasets))
        self._check_geometry()
        self.mapper = Mapper(datasets, read.max_open_shards)
        self._worker = HintWorker(self.mapper)
        self._finalizer = weakref.finalize(self, _shutdown, self._worker, self.mapper)
        multi_rank = placement.world_size > 1
        self.reads: dict[tuple[int, int], ReadMetrics] = {}
        self.hints: dict[tuple[int, int], GroupHints] = {}
        gates: dict[tuple[int, int], Any] = {}
        ds_index = {id(d): i for i, d in enumerate(datasets)}
        advice: dict[int, Any] = {}
        shared = {id(d) for d in datasets if sum(plan.sources[n].dataset is d for n in plan.names) > 1}
        # rows from row stores: the store files their items read (tokens; positions and masks when carried)
        store_files = tuple(ROW_FILES[k] for k in store_files_read(read.fields))
        for key, stream in plan.streams.items():
            ds = stream.windows.dataset
            self.reads[key] = ReadMetrics()
            remote = ds.prefetch_window(stream.seq_len, stream.order.block) if hasattr(ds, "prefetch_window") \
                else None
            if hasattr(ds, "read_gate"):
                gates[key] = ds.read_gate(stream.seq_len)
            # evicting a finished group from the page cache would drop pages another source of the files reads
            evict = read.release == "evict" and id(ds) not in shared
            self.hints[key] = GroupHints(stream, self._worker, self.reads[key], local=read.readahead,
                                         whole_groups=not multi_rank, evict=evict, remote=remote,
                                         store_files=store_files)
            d = ds_index[id(ds)]
            if stream.order.mode is ShuffleMode.FULL or multi_rank:
                # last word: no kernel read-around on a fault where the rows read are sparse (full shuffle,
                # or one rank's share of a group): it would read the pages of other rows or other ranks
                advice[d] = advise_random
            else:
                advice.setdefault(d, advise_hugepage)
        self.mapper.on_map = {d: f for d, f in advice.items()} if read.readahead else {}
        self.gather = Gather(self.mapper, self.dtype, gates)
        self.packed = PackedReader(self.mapper, self.dtype)
        self.balancer: Balancer | MegatronInterleave | None = \
            Balancer(plan, placement.world_size) if read.balance_ranks else None
        if uses_megatron(plan):  # Megatron's sampler decides which rank reads which sample of a batch
            self.balancer = MegatronInterleave(plan, placement)
        skipping = read.on_corrupt is CorruptPolicy.SKIP
        self.verifier = ReadVerifier(datasets, self.mapper, read.on_corrupt, local=read.verify_on_read,
                                     rank=placement.rank) if read.verify_on_read or skipping else None
        self._gates = gates
        self.doc_starts = DocStarts(self.mapper)
        self._block_base: dict[tuple[int, int], int] = {}
        base = 0
        for key, stream in sorted(plan.streams.items()):
            self._block_base[key] = base
            base += stream.order.full_blocks + 1
        self._num_blocks = base
        self.metrics = LoaderMetrics(
            plan=plan.phases, cursor=plan.cursor,
            num_tokens={n: plan.sources[n].dataset.num_tokens for n in plan.names},
            epochs={n: plan.sources[n].epochs for n in plan.names},
            reads={n: [self.reads[k] for k in sorted(plan.streams) if plan.names[k[0]] == n] for n in plan.names},
            itemsize=self.dtype.itemsize, position=lambda: self.batch)
        self.metrics.end_batch, self.metrics.exhausted = plan.end, plan.exhausted
        if self.verifier is not None:
            self.metrics.integrity = self.verifier.to_json
            if self.verifier.checks_local:
                for h in self.hints.values():
                    h.on_enter = self.verifier.lookahead
        self.batch = 0
        self.micro = 0
        self.skips: SkipMap | None = None

    def _check_geometry(self) -> None:
        """Every batch size the run will use, of every stage of every phase, divides over ranks and micro-batches."""
        sizes = []
        for i, (p, b) in enumerate(zip(self.plan.phases.phases, self.plan.phases.bounds)):
            where = f"phases[{i}] ({p.name})" if len(self.plan.phases.phases) > 1 or self.label_sources else \
                "batch_schedule"
            sizes += [(f"{where}, batch {first}", size) for first, _, size in p.batch.stages if first < b.num_batches]
        check_divisible(sizes, self.placement)

    # -- items ----------------------------------------------------------------------------------------------------
    def _unit_rows(self) -> int:
        return self.placement.world_size * (self.placement.micro_batch_size or 0)

    def set_skips(self, skips: tuple[tuple[int, int], ...]) -> None:
        """Global batch ranges never delivered: item indices then count delivered items only (skips.py)."""
        self.skips = SkipMap(skips, self._unit_index, self.plan.phases.num_batches) if skips else None

    def _unit_index(self, batch: int, micro: int = 0) -> int:
        if not self.placement.micro_batch_size:
            return batch
        return self.plan.samples_before(batch) // self._unit_rows() + micro

    def unit_index(self, batch: int, micro: int = 0) -> int:
        """Index of (batch, micro) in the sequence of items this rank delivers."""
        unit = self._unit_index(batch, micro)
        return self.skips.to_live(unit) if self.skips else unit

    def unit_positions(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(batch, micro) of items `units`, vectorised."""
        if self.skips:
            units = self.skips.to_actual(units)
        if not self.placement.micro_batch_size:
            return units, np.zeros_like(units)
        per = self._unit_rows()
        samples = units * per
        batches = self.plan.batch_at_samples(samples)
        distinct, which = np.unique(batches, return_inverse=True)
        starts = np.array([self.plan.samples_before(b) for b in distinct.tolist()], np.int64)
        return batches, (samples - starts[which.reshape(-1)]) // per

    def unit_position(self, unit: int) -> tuple[int, int]:
        b, k = self.unit_positions(np.array([unit], dtype=np.int64))
        return int(b[0]), int(k[0])

    def iter_units(self, first: int, *, stride: int = 1, run: int = 1, stop: int | None = None,
                   fields: BatchFields | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(item index, item) for items `item_sequence(first, stride, run)` below `stop` and the end of data
        (see `items`)."""
        for u, _, _, _, item in self.items(first, stride=stride, run=run, stop=stop, fields=fields):
            yield u, item

    def items(self, first: int, *, stride: int = 1, run: int = 1, stop: int | None = None,
              fields: BatchFields | None = None) -> Iterator[tuple[int, int, int, int, dict[str, Any]]]:
        """(item index, batch, micro, micro-batches in the batch, item) for items `item_sequence(first, stride,
        run)` below `stop` and the end of data.

        stride=1: every item from `first`; stride=k: every k-th (worker w of k); run=g with stride=g·k: runs of
        g consecutive items, every k-th run (workers that ship groups of g items). `fields` overrides the
        read options' batch fields (the DataLoader adapters ship one `tokens` array per item).
        """
        fields = self.read.fields if fields is None else fields
        t, limit_rows = 0, FIRST_CHUNK_ROWS
        end = self.plan.end
        while True:
            units = item_sequence(first, stride, run, t, _UNITS_PER_CALL)
            if stop is not None:
                units = units[units < stop]
            if not units.size:
                return
            batches, micros = self.unit_positions(units)
            live = batches < end
            if not live[0]:
                return
            if not live.all():
                n = int(np.argmax(~live))
                units, batches, micros = units[:n], batches[:n], micros[:n]
            phases = self.plan.phase_of(batches)
            if phases[-1] != phases[0]:  # one phase (one seq_len) per chunk
                n = int(np.argmax(phases != phases[0]))
                units, batches, micros = units[:n], batches[:n], micros[:n]
            phase = int(phases[0])
            sizes, starts = self.plan.sizes(phase, batches)
            per = sizes // self.placement.world_size
            m = self.placement.micro_batch_size
            count = np.full_like(per, m) if m else per
            lo = starts + self.placement.rank * per + micros * (m or 0)
            p = self.plan.phases.phases[phase]
            row_bytes = (p.seq_len + 1) * self.dtype.itemsize
            rows = max(1, min(limit_rows, CHUNK_BYTES // row_bytes) * len(p.mix))
            n = max(1, int(np.searchsorted(np.cumsum(count), rows, side="right")))
            yield from self._materialise(phase, units[:n], batches[:n], micros[:n], lo[:n], lo[:n] + count[:n],
                                         sizes[:n], per[:n], fields)
            t += n
            limit_rows = CHUNK_ROWS

    def _materialise(self, phase: int, units: np.ndarray, batches: np.ndarray, micros: np.ndarray,
                     lo: np.ndarray, hi: np.ndarray, sizes: np.ndarray, per: np.ndarray, fields: BatchFields
                     ) -> Iterator[tuple[int, int, int, int, dict[str, Any]]]:
        """Rows [lo, hi) (phase positions) of each item, computed for the whole chunk, copied slab by slab."""
        p = self.plan.phases.phases[phase]
        width = p.seq_len + 1
        itemsize = self.dtype.itemsize
        row_bytes = width * itemsize
        counts = hi - lo
        bounds = np.concatenate([[0], np.cumsum(counts)])
        positions = np.arange(int(bounds[-1]), dtype=np.int64) + np.repeat(lo - bounds[:-1], counts)
        if self.balancer is not None and self.balancer.applies(phase):  # packed rows dealt by attention cost
            positions = self.balancer.remap(phase, batches, counts, positions)
        rows = self.plan.rows(phase, positions)
        verifier = self.verifier
        for j, stream in rows.streams.items():  # remote: fetch the chunk's blocks in order of first use
            gate = self._gates.get((j, p.seq_len))
            if gate is not None:
                sel = rows.rows_of(j)
                gate.upcoming(rows.gid[sel] - stream.windows.gid_base, rows.local[sel])
        # several ranks: hint this rank's own upcoming rows, about two shuffle groups' share ahead of delivery
        # (rows read from row stores: their pages in the stores' files, never the dataset's, which they do not read)
        ahead = self._rows_ahead(rows) if self.placement.world_size > 1 and self.read.readahead else 0
        stored_rows = ahead and self.packed.from_stores(rows)
        hinted_upto = 0
        def metrics_of(j: int) -> ReadMetrics:
            return self.reads[(j, p.seq_len)]
        entering, blocks = self._groups_and_blocks(rows, p.seq_len)
        first_rows = bounds[:-1]
        enter_items = np.zeros(units.size, dtype=bool)
        if entering:
            enter_items[np.searchsorted(bounds, [r for r, _, _, _ in entering], side="right") - 1] = True
        # slabs: runs of whole items of ~SLAB_BYTES, each filled by one gather when its first item is due; a
        # slab also ends where a shuffle group begins, so one read spans at most two groups
        slab_bytes = self.packed.slab_bytes(rows, fields) if is_packed(rows) else SLAB_BYTES
        slab_id = bounds[:-1] // max(1, slab_bytes // row_bytes)
        starts_slab = np.flatnonzero((np.diff(slab_id, prepend=-1) != 0) | enter_items)
        slab_bounds = bounds[np.append(starts_slab, units.size)].tolist()
        item_ends = np.append(starts_slab[1:], units.size)  # each slab's items: [starts_slab[k], item_ends[k])
        per_item = np.bincount(np.repeat(np.arange(units.size) * len(self.plan.names), counts) + rows.src,
                               minlength=units.size * len(self.plan.names)).reshape(units.size, -1)
        epochs_first = rows.epochs[first_rows] if rows.size else np.zeros(0, np.int64)
        reads = (epochs_first, bounds, micros == 0, blocks, row_bytes, self._num_blocks)
        delivered = self.metrics.open_chunk(phase, per_item, reads)  # [items handed out]: one store per item
        packed = is_packed(rows)
        files_read = store_files_read(fields) if packed else ()
        names_read = tuple(ROW_FILES[k] for k in files_read)
        plain = not packed and not fields.needs_docs and not fields.loss_mask and not fields.row_identity
        tokens_only = fields.tokens_only
        row_identity = fields.row_identity
        label = self.label_sources
        # each item's `source` rows: views made in one C-level pass when every item has the same row count
        row_sources = list(rows.src.reshape(-1, int(counts[0]))) if label and counts.size and counts[0] and \
            bool((counts == counts[0]).all()) else None
        name = p.name
        src = rows.src
        bl = bounds.tolist()
        enter_at = [(int(np.searchsorted(bounds, r, side="right")) - 1, key, e, g) for r, key, e, g in entering]
        enter_at.append((units.size, None, 0, 0))  # a sentinel: no test of the list's length per item
        next_enter = 0
        enter_item = enter_at[0][0]
        prepared = None if packed else self.gather.chunk(rows, slab_bounds, width)
        slab_first_item, slab_item_ends = starts_slab.tolist(), item_ends.tolist()
        def where(row: int) -> tuple[int, int]:  # (batch, micro) of a chunk row: where a replacement is reported
            i = int(np.searchsorted(bounds, row, side="right")) - 1
            return int(batches[i]), int(micros[i])
        # the chunk's blocks not verified yet: hashed ahead on the verifier's thread, through the mappings just held
        check = verifier.start_chunk(rows, where) if verifier is not None else None
        next_slab_of = prepared.slab if prepared is not None else (lambda a, z: self.gather.slab(rows, a, z, width))
        if packed:
            next_slab_of = lambda a, z: self.packed.slab(rows, a, z, width)  # noqa: E731
        stored = packed and check is None and self.packed.stored_fast(rows, fields)
        slab: np.ndarray | None = None
        slab_items: list[dict[str, Any]] = []
        slab_base = slab_end = slab_item = 0
        next_slab = 0
        m = self.placement.micro_batch_size
        for i, (u, b, k, size, share) in enumerate(zip(units.tolist(), batches.tolist(), micros.tolist(),
                                                       sizes.tolist(), per.tolist())):
            a, z = bl[i], bl[i + 1]
            if ahead and z + ahead > hinted_upto:
                stop = min(rows.size, z + 2 * ahead)
                if stored_rows:
                    hint_store_rows(self._worker, rows.slice(hinted_upto, stop), metrics_of, names_read)
                else:
                    hint_rows(self._worker, rows.slice(hinted_upto, stop), metrics_of, itemsize, width)
                hinted_upto = stop
            if z > slab_end:  # item i starts the next slab
                if packed:  # (set per slab: another iterator of this engine may read other fields meanwhile)
                    self.packed.store_files = files_read
                slab_base, slab_end = slab_bounds[next_slab], slab_bounds[next_slab + 1]
                slab_item = slab_first_item[next_slab]
                # rows and their boundaries straight from a row store (None: read as any slab, below)
                read = self.packed.stored_items(rows, bl, slab_item, slab_item_ends[next_slab], p.seq_len,
                                                fields) if stored else None
                if read is not None:
                    slab, slab_items = read
                else:
                    if check is not None:
                        if check.before_slab(slab_base, slab_end):  # rows reading a damaged block were replaced
                            next_slab_of = self._reader(rows, packed, width)
                        slab, replaced = self._slab_around_damage(check, rows, slab_base, slab_end, next_slab_of,
                                                                  packed, width)
                        if replaced:
                            next_slab_of = self._reader(rows, packed, width)
                    else:
                        slab = next_slab_of(slab_base, slab_end)
                    if packed:  # every item of the slab at once (views of the slab's arrays)
                        slab_items = self.packed.items(rows, bl, slab_item, slab_item_ends[next_slab], slab,
                                                       p.seq_len, fields)
                next_slab += 1
            while enter_item <= i:
                _, key, e, g = enter_at[next_enter]
                self.hints[key].enter(e, g)
                next_enter += 1
                enter_item = enter_at[next_enter][0]
            delivered[0] = i + 1
            if packed:  # the slab's items were built with it
                out = slab_items[i - slab_item]
                if row_identity:  # per piece: a packed row holds several documents
                    out.update(packed_identity(rows, a, z, self.mapper))
            else:
                tokens = slab[a - slab_base:z - slab_base]  # type: ignore[index]
                if plain:  # the common case, without a call per field
                    out = {"tokens": tokens} if tokens_only else {"input_ids": tokens[:, :-1],
                                                                   "labels": tokens[:, 1:]}
                else:
                    out = self._fields(rows, a, z, tokens, p.seq_len, fields)
            if label:
                out["source"] = src[a:z] if row_sources is None else row_sources[i]
                out["phase"], out["phase_name"] = phase, name
            nm = share // m if m else 1
            out["batch_index"], out["global_batch_size"], out["micro_index"], out["num_micro"] = b, size, k, nm
            yield u, b, k, nm, out
        self.metrics.close_chunk()

    def _reader(self, rows: Any, packed: bool, width: int) -> Any:
        """Slabs gathered from `rows` as they are now (rows replaced after a chunk was prepared)."""
        if packed:
            return lambda a, z: self.packed.slab(rows, a, z, width)
        return lambda a, z: self.gather.slab(rows, a, z, width)

    def _slab_around_damage(self, check: Any, rows: Any, a: int, z: int, read: Any, packed: bool, width: int
                            ) -> tuple[np.ndarray, bool]:
        """(a slab, whether rows were replaced): under on_corrupt='skip', a remote block found damaged by the
        read has its rows replaced and the slab is read again (each retry rules one more block out)."""
        replaced = False
        for _ in range(64):
            try:
                return read(a, z), replaced
            except IntegrityError as e:
                v = self.verifier
                if v is None or v.policy is not CorruptPolicy.SKIP or e.block is None or e.source is None:
                    raise
                d = self.mapper.dataset_of(rows.streams[e.source].windows.gid_base)
                if not check.damaged_remote(d, e.block, a, z):
                    raise
                read, replaced = self._reader(rows, packed, width), True
        raise IntegrityError("remote dataset", "more than 64 damaged blocks under one slab; verify the dataset")

    def _rows_ahead(self, rows: Any) -> int:
        """Rows of this rank to hint ahead of delivery: two shuffle groups' share (8 MiB of rows for full or
        no shuffle), so each rank reads about its own share of the data, not the whole group."""
        groups = [st.order.group_samples for st in rows.streams.values() if st.order.mode is ShuffleMode.BLOCK]
        if groups:
            return max(1, 2 * min(groups) // self.placement.world_size)
        width = next(iter(rows.streams.values())).seq_len + 1
        return max(1, (8 << 20) // (width * self.dtype.itemsize))

    def _fields(self, rows: Any, a: int, z: int, tokens: np.ndarray, seq_len: int, fields: BatchFields
                ) -> dict[str, Any]:
        streams, src, ids = rows.streams, rows.src[a:z].tolist(), rows.ids[a:z].tolist()
        out = assemble(tokens, lambda r: self.doc_starts(streams[src[r]], ids[r]), seq_len, fields)
        if fields.row_identity:
            out.update(row_identity(rows, a, z, self.mapper))
        return out

    def _groups_and_blocks(self, rows: Any, seq_len: int) -> tuple[list[tuple[int, tuple[int, int], int, int]],
                                                                   np.ndarray]:
        """(group entries (row, stream key, epoch, group) in row order, each row's global shuffle block)."""
        entries: list[tuple[int, tuple[int, int], int, int]] = []
        single = len(rows.streams) == 1
        blocks = None if single else np.empty(rows.size, dtype=np.int64)
        for j, stream in rows.streams.items():
            key = (j, seq_len)
            sel = None if single else rows.rows_of(j)
            order = stream.order
            ids = rows.ids if sel is None else rows.ids[sel]
            part = ids // order.block
            part += self._block_base[key]
            if blocks is None:
                blocks = part
            else:
                blocks[sel] = part
            if not ids.size or order.mode is ShuffleMode.FULL:
                continue
            epochs = rows.epochs if sel is None else rows.epochs[sel]
            gk = order.group_of_position(rows.within if sel is None else rows.within[sel])
            gk += epochs * order.num_groups
            cur = self.hints[key].current
            prev = cur[0] * order.num_groups + cur[1] if cur is not None else -1
            change = np.flatnonzero(np.diff(gk, prepend=prev) != 0)
            for c in change.tolist():
                g = int(gk[c])
                entries.append((c if sel is None else int(sel[c]), key, g // order.num_groups, g % order.num_groups))
        entries.sort()
        return entries, blocks if blocks is not None else np.zeros(0, np.int64)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the hint worker, release every shard mapping and remote pin; the engine can be used again after
        (packing tables and row stores stay mapped, without descriptors)."""
        _shutdown(self._worker, self.mapper)
        if self.verifier is not None:
            self.verifier.close()
        self.gather.forget()
        for gate in self._gates.values():
            gate.release()

    def wait_hints(self) -> None:
        self._worker.wait()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("the read engine holds live mappings and a thread; pickle the loader instead, which "
                        "reopens its files in the new process")


def _shutdown(worker: HintWorker, mapper: Mapper) -> None:
    """Also the finalizer of a dropped engine: must not refer to the engine itself."""
    worker.close()
    mapper.clear()
