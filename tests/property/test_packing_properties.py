"""Property tests of document packing: the planner (engine/packing.py) and the packed batch fields."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.engine.fields import BatchFields
from shardkit.engine.packed_fields import block_mask, packed_fields
from shardkit.engine.packing import (
    PackingStrategy,
    PackSpec,
    build_table,
    concat_ranges,
    fill_rows,
    split_pieces,
)
from shardkit.errors import ConfigError

STRATEGIES = ("first_fit", "best_fit")


@st.composite
def corpora(draw):
    """Document lengths (some empty, some several rows long), seq_len, strategy, a small pack group."""
    seq_len = draw(st.integers(1, 24))
    lengths = draw(st.lists(st.integers(0, 3 * seq_len + 5), min_size=0, max_size=60))
    strategy = draw(st.sampled_from(STRATEGIES))
    group = draw(st.integers(seq_len + 1, 8 * (seq_len + 1)))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if lengths else np.zeros(0, np.int64)
    return starts, np.asarray(lengths, dtype=np.int64), PackSpec(strategy=strategy, seq_len=seq_len,
                                                                  group_tokens=group)


@given(st.lists(st.tuples(st.integers(-50, 10**12), st.integers(0, 30)), max_size=40))
def test_concat_ranges_is_the_concatenation_of_aranges(ranges):
    a = np.array([r[0] for r in ranges], dtype=np.int64)
    n = np.array([r[1] for r in ranges], dtype=np.int64)
    want = np.concatenate([np.arange(x, x + k, dtype=np.int64) for x, k in ranges] + [np.zeros(0, np.int64)])
    got = concat_ranges(a, n)
    assert got.dtype == np.int64 and np.array_equal(got, want)


def _doc_of(starts, lengths):
    """flat token → document index (every token belongs to one document; documents are back to back)."""
    return np.repeat(np.arange(lengths.size), lengths)


@settings(max_examples=300, deadline=None)
@given(corpora())
def test_every_pair_of_every_document_once_per_epoch(corpus):
    starts, lengths, spec = corpus
    table = build_table(starts, lengths, spec)
    width = spec.seq_len + 1
    total = int(lengths.sum())
    # rows are full, never overfull, and never empty
    used = np.add.reduceat(table.length, table.row_ptr[:-1]) if table.num_rows else np.zeros(0)
    assert (used <= width).all() and (np.diff(table.row_ptr) >= 1).all()
    # every token appears; every (token, next token) pair of a document is inside exactly one piece
    seen = np.zeros(total, dtype=np.int64)
    pairs = Counter()
    doc = _doc_of(starts, lengths)
    for s, n in zip(table.start.tolist(), table.length.tolist()):
        assert 1 <= n <= width
        assert doc[s] == doc[s + n - 1]  # a piece lies inside one document
        seen[s:s + n] += 1
        pairs.update(range(s, s + n - 1))
    assert (seen >= 1).all()
    expected = [t for t in range(total - 1) if doc[t] == doc[t + 1]]
    assert pairs == Counter(expected)
    # a token is in two pieces only where a long document was split (the one shared token, as for windows)
    assert int((seen - 1).sum()) == int(np.maximum(0, -(-(lengths - 1) // spec.seq_len) - 1)[lengths > 0].sum())
    # `first` marks exactly each non-empty document's first piece
    assert sorted(table.start[table.first].tolist()) == starts[lengths > 0].tolist()


@settings(max_examples=200, deadline=None)
@given(corpora())
def test_rows_never_leave_their_pack_group(corpus):
    starts, lengths, spec = corpus
    table = build_table(starts, lengths, spec)
    # a piece's group is its document's first token's
    doc = _doc_of(starts, lengths)
    group = starts[doc[table.start]] // spec.group_tokens
    for r in range(table.num_rows):
        g = group[table.row_ptr[r]:table.row_ptr[r + 1]]
        assert (g == g[0]).all()
    # rows are numbered group by group: row order follows the data
    firsts = group[table.row_ptr[:-1]]
    assert (np.diff(firsts) >= 0).all()


@settings(max_examples=200, deadline=None)
@given(corpora())
def test_the_table_is_a_pure_function(corpus):
    starts, lengths, spec = corpus
    a, b = build_table(starts, lengths, spec), build_table(starts.copy(), lengths.copy(), spec)
    for name in ("row_ptr", "start", "length", "first"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_best_fit_packs_tighter_than_first_fit_on_a_known_case():
    # rows of 10 tokens; first-fit in order: [6,3] [5,4] [7] [2] ... best-fit decreasing: [7,3] [6,4] [5,2]
    lengths = np.array([6, 3, 5, 4, 7, 2])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ff = build_table(starts, lengths, PackSpec(strategy="first_fit", seq_len=9))
    bf = build_table(starts, lengths, PackSpec(strategy="best_fit", seq_len=9))
    rows = lambda t: [sorted(t.length[t.row_ptr[r]:t.row_ptr[r + 1]].tolist()) for r in range(t.num_rows)]  # noqa: E731
    assert rows(ff) == [[3, 6], [4, 5], [2, 7]]
    assert rows(bf) == [[3, 7], [4, 6], [2, 5]]
    lengths = np.array([5, 6, 5, 4])  # first-fit: [5,5] [6,4]; best-fit decreasing: [6,4] [5,5]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert rows(build_table(starts, lengths, PackSpec(strategy="first_fit", seq_len=9))) == [[5, 5], [4, 6]]


def test_long_documents_split_into_row_sized_pieces_with_the_remainder_packed():
    # seq_len 4: a row is 5 tokens; a 12-token document is pieces [0,5) [4,9) [8,12): 4 + 4 + 3 pairs = 11
    start, length, first, doc = split_pieces(np.array([0, 12]), np.array([12, 2]), 4)
    assert start.tolist() == [0, 4, 8, 12] and length.tolist() == [5, 5, 4, 2]
    assert first.tolist() == [True, False, False, True] and doc.tolist() == [0, 0, 0, 1]
    table = build_table(np.array([0, 12]), np.array([12, 1]), PackSpec(strategy="best_fit", seq_len=4))
    assert table.stats()["documents_split"] == 1 and table.num_rows == 3  # the 1-token doc joins the remainder
    assert table.length[table.row_ptr[2]:].tolist() == [4, 1]


@pytest.mark.parametrize("bad, match", [
    (dict(strategy="best-fitt", seq_len=8), "unknown strategy 'best-fitt'"),
    (dict(strategy=3, seq_len=8), "packing must be one of"),
    (dict(strategy="best_fit", seq_len=0), "seq_len must be a positive integer"),
    (dict(strategy="best_fit", seq_len=8, group_tokens=4), "group_tokens"),
    (dict(strategy="window", seq_len=8), "no packing table"),
])
def test_bad_specs_are_config_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        PackSpec(**bad)


def test_strategy_parse_accepts_dashes():
    assert PackingStrategy.parse("best-fit") is PackingStrategy.BEST_FIT


# -- packed batch fields ------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(corpora(), st.booleans(), st.data())
def test_packed_fields_keep_documents_apart(corpus, mask_boundary, data):
    starts, lengths, spec = corpus
    table = build_table(starts, lengths, spec)
    if not table.num_rows:
        return
    L, total = spec.seq_len, int(lengths.sum())
    doc = _doc_of(starts, lengths)
    rows = np.asarray(data.draw(st.lists(st.integers(0, table.num_rows - 1), min_size=1, max_size=8)))
    flat = np.arange(total, dtype=np.int64) + 1  # token value = its flat position + 1; padding is 0
    tokens = fill_rows(flat, table, rows)
    _, counts, _, plen = table.pieces(rows)
    idx, _, _, _ = table.pieces(rows)
    f = packed_fields(plen, counts, table.first[idx], L,
                      BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True,
                                  mask_doc_boundary=mask_boundary))
    inp, lab = tokens[:, :-1], tokens[:, 1:]
    mask = f["loss_mask"].astype(bool)
    # loss only on real pairs: consecutive tokens of one document, or (option) end of a doc → next doc's start
    same = (inp > 0) & (lab == inp + 1) & (doc[np.maximum(inp - 1, 0)] == doc[np.maximum(lab - 1, 0)])
    assert not (mask & (inp == 0)).any() and not (mask & (lab == 0)).any()  # never on padding
    lab_is_doc_start = np.isin(lab - 1, starts[lengths > 0]) & (lab > 0)
    if mask_boundary:
        assert np.array_equal(mask, same)
    else:
        assert np.array_equal(mask, same | ((inp > 0) & lab_is_doc_start & ~same))
    # cu_seqlens: each segment of the flattened inputs holds consecutive tokens of one document, or padding
    cu, x = f["cu_seqlens"], inp.reshape(-1)
    assert cu[0] == 0 and cu[-1] == x.size and (np.diff(cu) > 0).all() and f["max_seqlen"] == np.diff(cu).max()
    assert set(range(0, x.size, L)) <= set(cu.tolist())  # rows never share a segment
    for a, z in zip(cu[:-1].tolist(), cu[1:].tolist()):
        seg = x[a:z]
        if (seg == 0).any():
            assert (seg == 0).all()
        else:
            assert (np.diff(seg) == 1).all() and doc[seg[0] - 1] == doc[seg[-1] - 1]
        # position ids restart at every segment
        assert f["position_ids"].reshape(-1)[a:z].tolist() == list(range(z - a))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.data())
def test_block_mask_is_block_diagonal_and_causal(L, data):
    rows = data.draw(st.integers(1, 3))
    cuts = sorted(set(data.draw(st.lists(st.integers(0, rows * L - 1), max_size=6))) | {L * r for r in range(rows)})
    cu = np.array(cuts + [rows * L])
    m = block_mask(cu, L)
    assert m.shape == (rows, 1, L, L)
    seg = np.searchsorted(cu, np.arange(rows * L), side="right").reshape(rows, L)
    for r in range(rows):
        for q in range(L):
            for k in range(L):
                assert m[r, 0, q, k] == (seg[r, q] == seg[r, k] and k <= q)


# -- balanced ranks -----------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 16), st.data())
def test_balanced_order_deals_every_row_once_and_evenly(world, per, data):
    from shardkit.engine.balance import balanced_order, rank_costs

    costs = np.asarray(data.draw(st.lists(st.integers(0, 10**6), min_size=world * per, max_size=world * per)),
                       dtype=np.float64)
    p = balanced_order(costs, world)
    assert sorted(p.tolist()) == list(range(costs.size))
    shares = p.reshape(world, per)
    assert (np.diff(shares, axis=1) > 0).all()  # each rank's rows in batch order
    loads = rank_costs(costs, world, p)
    # largest-first dealing: no rank exceeds the mean by more than one row's cost
    assert loads.max() <= costs.sum() / world + costs.max() + 1e-6
    assert np.array_equal(balanced_order(costs.copy(), world), p)  # a pure function
