"""Document-aware rows: whole documents packed into rows of `seq_len + 1` tokens, as a pure function.

A *row* holds `seq_len + 1` token slots (inputs are slots 0..L-1, labels slots 1..L, as for windows). Its
content is a list of *pieces*: contiguous token ranges of one document each, back to back, the rest of the
row padding. A document of at most L + 1 tokens is one piece; a longer one is cut into pieces of L + 1
tokens that advance by L (consecutive pieces share one token, exactly as consecutive windows do), so every
(token → next token) pair of every document is a pair inside exactly one piece; the remainder (≥ 2 tokens)
is packed like a document. Nothing is dropped or truncated.

**Locality.** Documents are packed only with documents of the same *pack group*: those whose first token
lies in the same `group_tokens`-token stretch of the dataset's flat stream. Rows are numbered group by group,
so consecutive row ids cover a contiguous stretch of data and the block shuffle over row ids keeps the page
cache working set it has over windows. A row's pieces come from all over its group, so the group a shuffle
block boundary cuts is read by both blocks: groups are kept small against blocks (`DEFAULT_GROUP_ROWS`).

**Strategies** (`PackingStrategy`): `first_fit` puts each piece, in document order, into the first open row
of its group with room (torchtitan's and Grain's first-fit); `best_fit` takes a group's pieces longest first
and puts each into the open row with the least room that still fits (best-fit decreasing, OLMo-core's
offline packing). A piece of exactly L + 1 tokens is a row of its own in both.

The table depends on (documents, seq_len, strategy, group_tokens) only; the seed shuffles row ids (the
loader's `SampleOrder`), so the rows a step delivers are a pure function of (data, seq_len, strategy,
seed) and are found in O(1) at any step.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..order.packing import PackingStrategy

__all__ = ["DEFAULT_GROUP_ROWS", "DEFAULT_GROUP_TOKENS", "PackSpec", "PackTable", "PackingStrategy", "TablePart",
           "build_table", "concat_ranges", "fill_rows", "split_pieces", "table_parts"]

# documents starting in the same 1 Mi-token stretch are packed together (2 MiB of uint16; at least 64 rows'
# worth at long seq_lens): enough for best-fit to leave well under 1 % padding on real corpora, and 1/16 of a
# default shuffle block (≈ 32 MiB), because a pack group cut by a block boundary is read by both blocks — the
# read amplification of an epoch grows with the group's share of a block (measured at 4 Mi tokens, 1/4 of a
# block: 1.35× the data where windows read 1.22×; at 1 Mi: 1.20×; docs/benchmarks.md)
DEFAULT_GROUP_TOKENS = 1 << 20
DEFAULT_GROUP_ROWS = 64


@dataclass(frozen=True, kw_only=True)
class PackSpec:
    """What a packing table is a function of, besides the documents. `group_tokens` is the stretch of the
    flat stream whose documents are packed together (None: `DEFAULT_GROUP_TOKENS`, or `DEFAULT_GROUP_ROWS`
    rows of `seq_len + 1` tokens if that is more)."""

    strategy: PackingStrategy
    seq_len: int
    group_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", PackingStrategy.parse(self.strategy))
        if self.strategy is PackingStrategy.WINDOW:
            raise ConfigError("packing='window' has no packing table: windows are cut from the token stream")
        if self.group_tokens is None and isinstance(self.seq_len, int) and not isinstance(self.seq_len, bool) \
                and self.seq_len >= 1:
            object.__setattr__(self, "group_tokens", max(DEFAULT_GROUP_TOKENS, DEFAULT_GROUP_ROWS * (self.seq_len + 1)))
        for name in ("seq_len", "group_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"packing: {name} must be a positive integer, got {v!r}")
        if self.group_tokens < self.seq_len + 1:  # type: ignore[operator]
            raise ConfigError(f"packing: group_tokens ({self.group_tokens:,}) must hold at least one row of "
                              f"seq_len + 1 = {self.seq_len + 1:,} tokens")

    @property
    def width(self) -> int:
        return self.seq_len + 1

    def to_json(self) -> dict[str, object]:
        return {"strategy": self.strategy.value, "seq_len": self.seq_len, "group_tokens": self.group_tokens}


@dataclass(frozen=True)
class PackTable:
    """Rows as pieces: row r is pieces `row_ptr[r]:row_ptr[r+1]`, each `length` tokens of the flat stream
    from `start`; `first` marks a piece that begins its document (a continuation piece does not)."""

    seq_len: int
    row_ptr: np.ndarray  # int64[rows + 1]
    start: np.ndarray  # int64[pieces]: first token of the piece in the dataset's flat token stream
    length: np.ndarray  # int64[pieces]
    first: np.ndarray  # bool[pieces]
    # the statistics recorded when the table was written (`stats()` without a pass over every piece)
    recorded: dict[str, float | int] | None = field(default=None, compare=False, repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.row_ptr.size - 1)

    @property
    def width(self) -> int:
        return self.seq_len + 1

    def row_lengths(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(piece lengths of `rows`, concatenated; pieces per row)."""
        rows = np.asarray(rows, dtype=np.int64)
        a, z = self.row_ptr[rows], self.row_ptr[rows + 1]
        counts = z - a
        idx = concat_ranges(a, counts)
        return self.length[idx], counts

    def pieces(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(piece indices of `rows` concatenated in row order, pieces per row, starts, lengths)."""
        rows = np.asarray(rows, dtype=np.int64)
        a = self.row_ptr[rows]
        counts = self.row_ptr[rows + 1] - a
        idx = concat_ranges(a, counts)
        return idx, counts, self.start[idx], self.length[idx]

    def cost(self, rows: np.ndarray) -> np.ndarray:
        """Σ len² of each row's pieces: its attention cost with document masking (float64)."""
        lengths, counts = self.row_lengths(rows)
        sq = lengths.astype(np.float64) ** 2
        out = np.zeros(counts.size, dtype=np.float64)
        np.add.at(out, np.repeat(np.arange(counts.size), counts), sq)
        return out

    def stats(self) -> dict[str, float | int]:
        """Rows, pieces, padding fraction and documents split: what `inspect` and the benchmark report (as
        recorded when the table was written, for a table read from the cache)."""
        if self.recorded is not None:
            return dict(self.recorded)
        slots = self.num_rows * self.width
        used = int(self.length.sum())
        docs = int(self.first.sum())
        # a split document's second piece starts seq_len after its first piece
        split = int(np.count_nonzero(np.isin(self.start[~self.first] - self.seq_len, self.start[self.first])))
        return {"rows": self.num_rows, "pieces": int(self.length.size), "documents": docs, "documents_split": split,
                "tokens": used, "padding_fraction": (slots - used) / slots if slots else 0.0}


def concat_ranges(a: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated aranges [a_i, a_i + counts_i).

    One running sum of steps (1 inside a range, a jump where the next range begins): a fill, a scatter
    of one value per range and a cumsum, several times faster than `repeat` + `arange` on many short
    ranges (the pieces of packed rows)."""
    a = np.asarray(a, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size and int(counts.min()) == 0:
        keep = counts > 0
        a, counts = a[keep], counts[keep]
    if not counts.size:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    steps[0] = a[0]
    steps[ends[:-1]] = a[1:] - (a[:-1] + counts[:-1]) + 1
    return np.cumsum(steps, out=steps)


def split_pieces(doc_starts: np.ndarray, doc_lengths: np.ndarray, seq_len: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of documents (first token in the flat stream, length): (start, length, first, document index),
    in document order. Empty documents have no piece."""
    starts = np.asarray(doc_starts, dtype=np.int64)
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if starts.shape != lengths.shape or (lengths.size and int(lengths.min()) < 0):
        raise ConfigError("packing: documents need one start and one non-negative length each")
    width = seq_len + 1
    # a document of n tokens holds n - 1 pairs; a piece of width tokens holds seq_len of them
    npieces = np.where(lengths > 0, np.maximum(1, -(-(lengths - 1) // seq_len)), 0)
    doc = np.repeat(np.arange(lengths.size, dtype=np.int64), npieces)
    k = np.arange(doc.size, dtype=np.int64) - np.repeat(np.cumsum(npieces) - npieces, npieces)
    start = starts[doc] + k * seq_len
    length = np.minimum(width, starts[doc] + lengths[doc] - start)
    return start, length, k == 0, doc


def build_table(doc_starts: np.ndarray, doc_lengths: np.ndarray, spec: PackSpec) -> PackTable:
    """The packing table of documents given by their first token in the flat stream and their length, built
    in memory (about 90 bytes per document at its peak; `pack_table.cached_table` writes a table part by
    part instead, in memory bounded by a shard's documents)."""
    parts = list(table_parts([(np.asarray(doc_starts, np.int64), np.asarray(doc_lengths, np.int64))], spec))
    sizes = np.concatenate([p.sizes for p in parts]) if parts else np.zeros(0, np.int64)
    row_ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=row_ptr[1:])
    def joined(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0, dtype)
    return PackTable(seq_len=spec.seq_len, row_ptr=row_ptr, start=joined("start", np.int64),
                     length=joined("length", np.int64), first=joined("first", bool))


@dataclass(frozen=True)
class TablePart:
    """The rows of whole pack groups, in row order: pieces per row, and the pieces (`PackTable`'s arrays);
    `split` counts the documents cut into several pieces."""

    sizes: np.ndarray
    start: np.ndarray
    length: np.ndarray
    first: np.ndarray
    split: int


def table_parts(spans: Iterable[tuple[np.ndarray, np.ndarray]], spec: PackSpec) -> Iterator[TablePart]:
    """The table of documents given in consecutive runs (first token in the flat stream and length of each,
    e.g. a shard at a time), as parts of whole pack groups: their concatenation is the table of all the
    documents. A group can continue in the next run, so the last group of a run waits for it: memory is
    bounded by a run's documents and one group, whatever the number of documents."""
    carry_s = carry_l = np.zeros(0, np.int64)
    for starts, lengths in spans:
        s = np.concatenate([carry_s, np.asarray(starts, np.int64)])
        n = np.concatenate([carry_l, np.asarray(lengths, np.int64)])
        if not s.size:
            continue
        group = s // spec.group_tokens
        cut = int(np.searchsorted(group, group[-1], side="left"))  # the last group may go on in the next run
        carry_s, carry_l = s[cut:], n[cut:]
        if cut:
            yield _part(s[:cut], n[:cut], spec)
    if carry_s.size:
        yield _part(carry_s, carry_l, spec)


def _part(doc_starts: np.ndarray, doc_lengths: np.ndarray, spec: PackSpec) -> TablePart:
    """The rows of the documents of whole pack groups, group by group."""
    start, length, first, doc = split_pieces(doc_starts, doc_lengths, spec.seq_len)
    width = spec.width
    group = doc_starts[doc] // spec.group_tokens  # its document's first token's
    cuts = np.flatnonzero(np.diff(group)) + 1 if group.size else np.zeros(0, np.int64)
    order_parts: list[np.ndarray] = []  # piece indices in row order
    sizes_parts: list[np.ndarray] = []  # pieces per row
    pack = _best_fit if spec.strategy is PackingStrategy.BEST_FIT else _first_fit
    for a, z in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [start.size]]).tolist()):
        if a == z:
            continue
        lens = length[a:z]
        full = np.flatnonzero(lens == width)
        if full.size:
            order_parts.append(full + a)
            sizes_parts.append(np.ones(full.size, dtype=np.int64))
        rest = np.flatnonzero(lens < width)
        if rest.size:
            rows = pack(lens[rest].tolist(), width)
            order_parts.append(np.fromiter((int(rest[i]) + a for row in rows for i in row), np.int64))
            sizes_parts.append(np.fromiter((len(row) for row in rows), np.int64, len(rows)))
    order = np.concatenate(order_parts) if order_parts else np.zeros(0, np.int64)
    sizes = np.concatenate(sizes_parts) if sizes_parts else np.zeros(0, np.int64)
    # a document is split when it holds more than one piece: more than seq_len + 1 tokens
    return TablePart(sizes=sizes, start=start[order], length=length[order], first=first[order],
                     split=int(np.count_nonzero(doc_lengths > width)))


def _first_fit(lengths: list[int], width: int) -> list[list[int]]:
    """Rows (lists of indices into `lengths`), each piece into the first row with room, in input order."""
    room = np.zeros(max(1, len(lengths)), dtype=np.int64)
    rows: list[list[int]] = []
    n = 0
    lo = 0  # rows before lo are full: never searched again
    for i, size in enumerate(lengths):
        hit = np.flatnonzero(room[lo:n] >= size)
        if hit.size:
            r = lo + int(hit[0])
            rows[r].append(i)
            room[r] -= size
        else:
            rows.append([i])
            room[n] = width - size
            n += 1
        while lo < n and room[lo] == 0:
            lo += 1
    return rows


def _best_fit(lengths: list[int], width: int) -> list[list[int]]:
    """Rows (lists of indices into `lengths`): longest piece first, each into the row with the least room
    that fits it (ties: the row opened first). Rows are numbered in the order they were opened."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    rooms: list[int] = []  # distinct room values of open rows, ascending
    by_room: dict[int, list[int]] = {}  # room → rows with that room (a stack, lowest row id on top)
    for i in order:
        size = lengths[i]
        k = bisect.bisect_left(rooms, size)
        if k < len(rooms):
            room = rooms[k]
            stack = by_room[room]
            r = stack.pop()
            if not stack:
                del by_room[room]
                rooms.pop(k)
            rows[r].append(i)
            left = room - size
        else:
            r = len(rows)
            rows.append([i])
            left = width - size
        if left > 0:
            stack = by_room.get(left)
            if stack is None:
                by_room[left] = [r]
                bisect.insort(rooms, left)
            else:  # keep the lowest row id on top: rows of equal room are filled in opening order
                bisect.insort(stack, r, key=lambda x: -x)
    return rows


def fill_rows(tokens: np.ndarray, table: PackTable, rows: np.ndarray, pad: int = 0) -> np.ndarray:
    """(len(rows), seq_len + 1) token rows of `rows` read from the flat token array `tokens` (tests, small
    data; the engine copies from its shard mappings instead)."""
    rows = np.asarray(rows, dtype=np.int64)
    _, counts, starts, lengths = table.pieces(rows)
    width = table.width
    out = np.full((rows.size, width), pad, dtype=np.asarray(tokens).dtype)
    ends = np.cumsum(lengths)
    first_piece = np.cumsum(counts) - counts
    row_of = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
    base = np.zeros(rows.size, dtype=np.int64)
    base[counts > 0] = (ends - lengths)[first_piece[counts > 0]]
    slot = row_of * width + (ends - lengths) - base[row_of]
    out.reshape(-1)[concat_ranges(slot, lengths)] = np.asarray(tokens)[concat_ranges(starts, lengths)]
    return out
