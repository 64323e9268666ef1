"""Packed rows keep the block shuffle's locality: the pages each shuffle block's rows read barely overlap
the pages of the other blocks, so an epoch reads about the data once, as windows do."""

import numpy as np
import pytest

from shardkit.engine.packing import PackSpec, build_table
from shardkit.order.shuffle import ShuffleConfig

PAGE_TOKENS = 4096 // 2  # uint16


def _pages_read_per_page(table, block_samples: int) -> float:
    """Σ over shuffle blocks of the distinct pages their rows' pieces touch, ÷ the pages of the data: the
    bytes an epoch reads (each block read once, nothing kept between blocks) over the data's bytes."""
    rows = np.repeat(np.arange(table.num_rows, dtype=np.int64), np.diff(table.row_ptr))
    block = rows // block_samples
    first = table.start // PAGE_TOKENS
    last = (table.start + table.length - 1) // PAGE_TOKENS  # documents are shorter than a page: ≤ 2 pages
    pages = int(last.max()) + 1
    return np.unique(np.concatenate([block * pages + first, block * pages + last])).size / pages


def _worst(lengths, spec, block_samples):
    """The worst over where the documents begin in the flat stream (where pack groups fall against blocks)."""
    out = 0.0
    for shift in (0.0, 0.3, 0.6):
        starts = int(shift * spec.group_tokens) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        out = max(out, _pages_read_per_page(build_table(starts, lengths, spec), block_samples))
    return out


@pytest.mark.parametrize("seq_len", [2048, 8192])
def test_an_epoch_of_packed_rows_reads_each_page_about_once(seq_len):
    blocks = ShuffleConfig.default("block", seq_len, 2).block_samples
    lengths = np.random.default_rng(3).integers(1, 200, size=int(2.5 * blocks * seq_len / 100))  # 2.5 blocks
    default = PackSpec(strategy="best_fit", seq_len=seq_len)
    assert _worst(lengths, default, blocks) <= 1.08  # a boundary group (1/16 of a block) read twice at most
    # pack groups of 1/4 of a block (the shape to avoid): the group a block boundary cuts is read by both
    wide = PackSpec(strategy="best_fit", seq_len=seq_len, group_tokens=blocks * seq_len // 4)
    assert _worst(lengths, wide, blocks) > 1.15
