"""Checksum blocks verified on first read (`verify_on_read`), and what a block that fails costs (`on_corrupt`).

`shardkit verify` checks a dataset before a run; bits can still rot (or a node's disk can go bad) during a
months-long run, and a token read from a damaged block is trained on silently. With `verify_on_read`, the
first time this loader reads any byte of a local shard's checksum block (16 MiB by default) it hashes the
whole block (xxh3-128, through the loader's own mapping, so the page faults are the ones the copy would
take anyway) and compares it with the shard's sidecar, whose own digest is checked against the manifest.
A block is verified once per loader and process; a chunk whose blocks are all verified costs two array
lookups per row. Remote datasets need no flag: their cache verifies every block it serves.

A block that fails is handled by the `on_corrupt` policy:

* ``raise`` — `IntegrityError` naming the shard, the block, its byte range and the command to run.
* ``refetch`` — read the block again, up to `REFETCH_ATTEMPTS` times: a local block's pages are dropped from
  the page cache first, so the bytes come from the device again (a transient read fault or a bad cached
  page heals; a block damaged on disk does not, and then it raises); a remote block is downloaded again
  through the cache (`RemoteConfig.mismatch_retries`), which also heals a damaged cache entry.
* ``skip`` — the rows that would read the block are **replaced**, so the rank keeps its batch size: a row
  of sample id `i` is replaced by the first sample `i + k·S` (k = 1, −1, 2, −2, …; S the samples of one
  checksum block; modulo the source's samples) whose blocks all verify. The replacement is a pure function
  of the sample and of which blocks are damaged, so every world size, worker count and resume makes the
  same one; it reads a neighbouring block (the same offset one block on), which block shuffle has in the
  page cache. Each replacement is counted and reported with its step, rank, source, shard and block in
  the loader's metrics (`metrics.to_json()["integrity"]`). A local block is re-read once before it is
  declared damaged (as ``refetch`` would).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np

from ..errors import ConfigError, IntegrityError
from ..format.dataset import Dataset
from ..remote.blocks import BlockMap
from .mapper import Mapper
from .packed_rows import PackedWindows
from .plan import Rows, Stream
from .verify_worker import DAMAGED, GOOD, LocalBlocks, VerifyWorker, stop_worker

__all__ = ["CorruptPolicy", "ReadVerifier", "REFETCH_ATTEMPTS", "RESERVE_TRIES"]

REFETCH_ATTEMPTS = 3  # reads of a failing block under "refetch" (the first included)
RESERVE_TRIES = 16  # candidate replacements of one row under "skip" before giving up
_EVENTS_KEPT = 1024  # the most recent corruption events kept for the metrics (the counters are exact)


class CorruptPolicy(str, Enum):
    RAISE = "raise"
    REFETCH = "refetch"
    SKIP = "skip"

    @classmethod
    def parse(cls, value: Any) -> CorruptPolicy:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"on_corrupt must be 'raise', 'refetch' or 'skip', got {value!r}") from None


class ReadVerifier:
    """The blocks under a loader's rows, verified before the rows are copied; `on_corrupt` for those that fail."""

    def __init__(self, datasets: Sequence[Dataset], mapper: Mapper, policy: CorruptPolicy, *, local: bool,
                 rank: int) -> None:
        self.mapper = mapper
        self.policy = policy
        self.rank = rank
        self.local = local
        self._blocks: dict[int, LocalBlocks] = {}  # dataset index → its blocks (local datasets, when `local`)
        if local:
            for d, ds in enumerate(datasets):
                if not hasattr(ds, "read_gate"):
                    self._blocks[d] = LocalBlocks(ds, int(mapper.base[d]))
        self.worker = VerifyWorker(mapper, self._blocks)
        self._finalizer = weakref.finalize(self, stop_worker, self.worker)
        self._remote_maps: dict[int, BlockMap] = {}  # remote datasets' block maps (skip: rows around damage)
        self._remote_bad: dict[tuple[int, int], None] = {}  # (dataset, block) a remote read found damaged
        self.counts = {"corrupt_blocks": 0, "blocks_refetched": 0, "rows_replaced": 0}
        self.events: deque[dict[str, Any]] = deque(maxlen=_EVENTS_KEPT)
        self._reported: set[tuple[int, int]] = set()  # (dataset, block) already counted as corrupt

    @property
    def checks_local(self) -> bool:
        return bool(self._blocks)

    def to_json(self) -> dict[str, Any]:
        blocks, nbytes = self.worker.hashed
        return {"policy": self.policy.value, "verify_on_read": self.local, "blocks_verified": blocks,
                "bytes_verified": nbytes, **self.counts, "events": list(self.events)}

    def close(self) -> None:
        self.worker.close()

    # -- the blocks under rows -------------------------------------------------------------------------------
    @staticmethod
    def _row_blocks(stream: Stream, bm: BlockMap, ids: np.ndarray, shard: np.ndarray, local: np.ndarray,
                    inside: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, block) pairs: every checksum block each row reads (rows index `ids`)."""
        w = stream.windows
        if isinstance(w, PackedWindows):
            _, counts, starts, lengths = w.table.pieces(ids)
            row = np.repeat(np.arange(ids.size, dtype=np.int64), counts)
            return _spread(row, bm._gid_of_token(starts), bm._gid_of_token(starts + lengths - 1))
        item, size = bm.itemsize, bm.block_size
        first = bm.base[shard] + local * item // size
        if bool(inside.all()):
            last = bm.base[shard] + ((local + w.width) * item - 1) // size
        else:
            start = bm.token_offsets[shard] + local
            last = bm._gid_of_token(np.minimum(start + w.width, bm.token_offsets[-1]) - 1)
        return _spread(np.arange(ids.size, dtype=np.int64), first, last)

    def plan(self, rows: Rows) -> _Pending | None:
        """The blocks this chunk reads that this loader has not verified, by the first row reading each."""
        if not self._blocks:
            return None
        rows_l, blocks_l, ds_l = [], [], []
        for j, stream in rows.streams.items():
            d = self.mapper.dataset_of(stream.windows.gid_base)
            b = self._blocks.get(d)
            if b is None:
                continue
            sel = rows.rows_of(j)
            idx = np.arange(rows.size, dtype=np.int64)[sel]
            r, g = self._row_blocks(stream, b.map, rows.ids[sel], rows.gid[sel] - b.gid_base, rows.local[sel],
                                    rows.inside[sel])
            need = b.state[g] != GOOD
            if need.any():
                rows_l.append(idx[r[need]])
                blocks_l.append(g[need])
                ds_l.append(np.full(int(need.sum()), d, dtype=np.int64))
        if not rows_l:
            return None
        row, block, ds = np.concatenate(rows_l), np.concatenate(blocks_l), np.concatenate(ds_l)
        key = ds * (1 << 40) + block
        by_key = np.lexsort((row, key))  # (block, row) order: a block's first entry is its first reading row
        _, at = np.unique(key[by_key], return_index=True)
        first = by_key[at]
        first = first[np.argsort(row[first], kind="stable")]
        pending = _Pending(row[first], ds[first], block[first])
        self.worker.submit(list(zip(pending.ds.tolist(), pending.blocks.tolist())))  # hashed ahead, in this order
        return pending

    def lookahead(self, stream: Stream, sample_blocks: np.ndarray) -> None:
        """Delivery entered a shuffle group: queue the checksum blocks of the next one (`sample_blocks`), so
        they are hashed while this group is read (block shuffle reads each group whole)."""
        if isinstance(stream.windows, PackedWindows) or not len(sample_blocks):
            return
        d = self.mapper.dataset_of(stream.windows.gid_base)
        b = self._blocks.get(d)
        if b is None:
            return
        lo = np.asarray(sample_blocks, dtype=np.int64) * (stream.order.block * stream.seq_len)
        gids = b.map.token_ranges(lo, lo + stream.order.block * stream.seq_len + 1, ordered=True)
        self.worker.submit([(d, g) for g in gids.tolist()], urgent=False)

    # -- verification ----------------------------------------------------------------------------------------
    def _verify(self, d: int, g: int) -> bool:
        """Block g of dataset d, verified (policy applied): True if good; False (skip) if damaged; else raises."""
        b = self._blocks[d]
        state = self.worker.wait(d, g)
        if state == GOOD:
            return True
        if b.state[g] == DAMAGED:
            return False
        check, attempts = None, 1
        if self.policy is not CorruptPolicy.RAISE:  # read it again from the device before giving up on it
            tries = REFETCH_ATTEMPTS if self.policy is CorruptPolicy.REFETCH else 2
            while attempts < tries:
                self.counts["blocks_refetched"] += 1
                check = b.check(g, self.mapper, own_thread=True, reread=True)
                self.worker.count_hashed(check)
                attempts += 1
                if check.ok:
                    b.state[g] = GOOD
                    return True
        if check is None:
            check = b.check(g, self.mapper, own_thread=True)  # the digests and place, for the message
            self.worker.count_hashed(check)
            if check.ok:  # the block changed since the worker read it (rewritten in place): take the new bytes
                b.state[g] = GOOD
                return True
        b.state[g] = DAMAGED
        self.counts["corrupt_blocks"] += 1
        shard = b.dataset.shards[check.shard]
        if self.policy is not CorruptPolicy.SKIP:
            again = f" (read {attempts} times, the page cache dropped before each re-read)" if attempts > 1 else ""
            raise IntegrityError(
                f"{shard.directory}/{shard.entry.bin_name}",
                f"checksum block {check.block} of shard {shard.name} does not match its sidecar digest{again}: the "
                f"data is damaged on this machine. Run `shardkit verify --full {shard.directory}` to list every "
                "damaged block, restore the shard from a good copy, or stream on with on_corrupt='skip'",
                byte_range=check.byte_range, expected=check.expected, actual=check.actual)
        return False

    def verify_upto(self, pending: _Pending, stop_row: int) -> list[tuple[int, int]]:
        """Verify the pending blocks first read before row `stop_row`; the (dataset, block) pairs found damaged."""
        bad = []
        while pending.next < pending.rows.size and pending.rows[pending.next] < stop_row:
            k = pending.next
            pending.next += 1
            d, g = int(pending.ds[k]), int(pending.blocks[k])
            if not self._verify(d, g):
                bad.append((d, g))
        return bad

    # -- skip: replacement rows ---------------------------------------------------------------------------------
    def note_remote_bad(self, d: int, g: int) -> None:
        self._remote_bad[(d, g)] = None

    def _doomed(self, rows: Rows, first_row: int, damaged: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """(rows ≥ `first_row` that read a damaged block, the damaged block each reads)."""
        out_rows, out_blocks = [], []
        for j, stream in rows.streams.items():
            d = self.mapper.dataset_of(stream.windows.gid_base)
            bad = np.array([g for dd, g in damaged if dd == d], dtype=np.int64)
            if not bad.size:
                continue
            sel = np.arange(rows.size, dtype=np.int64)[rows.rows_of(j)]
            sel = sel[sel >= first_row]
            if not sel.size:
                continue
            r, g = self._row_blocks(stream, self._map_of(d), rows.ids[sel], rows.gid[sel] - stream.windows.gid_base,
                                    rows.local[sel], rows.inside[sel])
            hit = np.isin(g, bad)
            out_rows.append(sel[r[hit]])
            out_blocks.append(g[hit])
        if not out_rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(out_rows), np.concatenate(out_blocks)

    def start_chunk(self, rows: Rows, where: Callable[[int], tuple[int, int]]) -> ChunkCheck:
        """The checks of one planned chunk; `where(row)` → (batch, micro) of a chunk row, for the events."""
        return ChunkCheck(self, rows, self.plan(rows), where)

    def _map_of(self, d: int) -> BlockMap:
        b = self._blocks.get(d)
        if b is not None:
            return b.map
        got = self._remote_maps.get(d)
        if got is None:
            ds = self.mapper.datasets[d]
            got = self._remote_maps[d] = BlockMap.build((s.entry.bin_bytes for s in ds.shards),
                                                        ds.checksum_block_size, ds.dtype.itemsize)
        return got

    def _good(self, d: int, blocks: np.ndarray) -> bool:
        if any((d, int(g)) in self._remote_bad for g in blocks.tolist()):
            return False
        if d not in self._blocks:
            return True  # a remote block not known damaged: its read verifies it
        uniq = np.unique(blocks).tolist()
        self.worker.submit([(d, g) for g in uniq])
        return all(self._verify(d, g) for g in uniq)

    def _replace_row(self, rows: Rows, row: int, sid: int, stream: Stream, d: int, bm: BlockMap) -> None:
        """Row `row` (planned as sample `sid`) becomes the first reserve sample whose blocks are not damaged."""
        w = stream.windows
        n = w.num_samples
        step = max(1, bm.block_size // (w.seq_len * bm.itemsize))
        for t in range(RESERVE_TRIES):
            k = (t // 2 + 1) * (1 if t % 2 == 0 else -1)
            cand = np.array([(sid + k * step) % n], dtype=np.int64)
            shard, local = w.locate(cand)
            inside = w.inside(shard, local)
            _, blocks = self._row_blocks(stream, bm, cand, shard, local, np.atleast_1d(inside))
            if self._good(d, blocks):
                rows.ids[row] = cand[0]
                rows.gid[row] = int(shard[0]) + w.gid_base
                rows.local[row] = int(local[0])
                rows.inside[row] = bool(np.atleast_1d(inside)[0])
                return
        raise IntegrityError(f"{w.dataset.path}", f"sample {sid} of source {stream.name!r} reads a damaged block and "
                                                  f"none of its {RESERVE_TRIES} replacement candidates verifies: "
                                                  f"too much of the data is damaged to skip; run `shardkit verify "
                                                  f"--full {w.dataset.path}` and restore it")

    def _event(self, d: int, g: int, batch: int, micro: int, source: str) -> None:
        bm = self._map_of(d)
        s, lo, hi = bm.byte_range(g)
        ds = self.mapper.datasets[d]
        key = (d, g)
        if key not in self._reported and d not in self._blocks:
            self.counts["corrupt_blocks"] += 1  # a remote block (local ones are counted when verified)
        self._reported.add(key)
        last = self.events[-1] if self.events else None
        ev = {"step": batch, "micro": micro, "rank": self.rank, "source": source, "shard": ds.shards[s].name,
              "block": g - int(bm.base[s]), "byte_range": [lo, hi], "rows_replaced": 1}
        if last is not None and all(last[k] == ev[k] for k in ("step", "micro", "source", "shard", "block")):
            last["rows_replaced"] += 1
        else:
            self.events.append(ev)


class ChunkCheck:
    """One chunk's verification as its slabs are read: blocks verified before the slab that first reads them,
    and (skip) the rows reading a damaged block replaced slab by slab, so each replacement is counted when
    its slab is read (at most one slab, 256 KiB of rows, ahead of delivery)."""

    def __init__(self, verifier: ReadVerifier, rows: Rows, pending: _Pending | None,
                 where: Callable[[int], tuple[int, int]]) -> None:
        self.v, self.rows, self.pending, self.where = verifier, rows, pending, where
        self._doom: np.ndarray | None = None  # per chunk row: the damaged block it reads, or -1
        self._planned: dict[int, int] = {}  # row → its planned sample id (a replacement found damaged is redone)

    def before_slab(self, a: int, z: int) -> bool:
        """Verify the blocks slab [a, z) reads first; under skip, replace its rows that read damaged blocks.
        True if rows were replaced (the chunk's prepared gather no longer applies)."""
        if self.pending is not None and self.pending.due(z):
            damaged = self.v.verify_upto(self.pending, z)
            if damaged:
                self._mark(a, damaged)
        return self._replace(a, z)

    def damaged_remote(self, d: int, g: int, a: int, z: int) -> bool:
        """A read of slab [a, z) found remote block g of dataset d damaged (skip): replace what reads it."""
        self.v.note_remote_bad(d, g)
        self._mark(a, [(d, g)])
        return self._replace(a, z)

    def _mark(self, a: int, damaged: list[tuple[int, int]]) -> None:
        rows, blocks = self.v._doomed(self.rows, a, damaged)
        if rows.size:
            if self._doom is None:
                self._doom = np.full(self.rows.size, -1, dtype=np.int64)
            self._doom[rows] = blocks

    def _replace(self, a: int, z: int) -> bool:
        if self._doom is None:
            return False
        todo = np.flatnonzero(self._doom[a:z] >= 0) + a
        for row in todo.tolist():
            j = int(self.rows.src[row])
            stream = self.rows.streams[j]
            d = self.v.mapper.dataset_of(stream.windows.gid_base)
            again = row in self._planned  # its replacement was damaged too: counted once, as the first time
            sid = self._planned.setdefault(row, int(self.rows.ids[row]))
            self.v._replace_row(self.rows, row, sid, stream, d, self.v._map_of(d))
            if not again:
                batch, micro = self.where(row)
                self.v._event(d, int(self._doom[row]), batch, micro, stream.name)
                self.v.counts["rows_replaced"] += 1
            self._doom[row] = -1
        return bool(todo.size)


class _Pending:
    """A chunk's unverified blocks, in order of first use: verified just before the slab that first reads each."""

    __slots__ = ("rows", "ds", "blocks", "next")

    def __init__(self, rows: np.ndarray, ds: np.ndarray, blocks: np.ndarray) -> None:
        self.rows, self.ds, self.blocks, self.next = rows, ds, blocks, 0

    def due(self, stop_row: int) -> bool:
        return self.next < self.rows.size and int(self.rows[self.next]) < stop_row


def _spread(row: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, block) for every block in [first, last] of each row (a row reads one or two blocks, unless blocks
    are smaller than a row)."""
    span = last - first
    if not span.size or int(span.max()) <= 1:
        two = span == 1
        if not two.any():
            return row, first
        return np.concatenate([row, row[two]]), np.concatenate([first, last[two]])
    n = span + 1
    rows = np.repeat(row, n)
    blocks = np.repeat(first - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
    return rows, blocks



