"""BatchInterleave: pinned batches, the stage-change repair, the restart fallback, whole shares, tables, errors."""

from fractions import Fraction

import numpy as np
import pytest

from shardkit.errors import ConfigError
from shardkit.mixture import BatchInterleave, Phase, PhasePlan
from shardkit.mixture import batch_interleave as il
from shardkit.order import Constant, Piecewise, Ramp


def _digits(a):
    return "".join(map(str, a.tolist()))


def test_golden_batches():
    """Pinned: changing these changes every mixture's stream — do it only deliberately."""
    mixer = BatchInterleave([0.7, 0.2, 0.1], Constant(8))
    assert [_digits(mixer.counts(b)) for b in range(10)] == \
        ["611", "521", "620", "611", "521", "611", "521", "620", "611", "521"]
    assert _digits(mixer.assign(0)[0]) == "00010002" and _digits(mixer.assign(1)[0]) == "00100102"
    assert mixer.max_lag == Fraction(3, 5)
    ramp = BatchInterleave(["0.4", "0.3", "0.2", "0.1"], Ramp(start=4, increment=3, ramp_samples=40, final=13))
    assert [_digits(ramp.counts(b)) for b in range(10)] == \
        ["2110", "1111", "2110", "2200", "3211", "2221", "4321", "5431", "5431", "5422"]
    assert ramp.max_lag == Fraction(9, 10)


def test_a_change_of_batch_size_is_re_planned():
    """PD2 alone can reach a stage change in a state no choice recovers from; the search plans around it.

    10/40/10/40 at batches of 28 then 11: PD2 ends the first stage with sources 1 and 3 each 0.6 behind,
    and at batches of 11 both would need the one extra of the next batch — a dead end for *any* rule
    that only looks forward. Re-planning the batches before the change keeps every prefix within 1.
    """
    weights, schedule = [0.05, 0.2, 0.05, 0.2], Piecewise(pieces=((8, 28),), final=11)
    repaired = BatchInterleave(weights, schedule, 38)
    assert repaired.max_lag == Fraction(4, 5)
    before = il._REPAIR_MAX_SOURCES
    try:
        il._REPAIR_MAX_SOURCES = 0
        plain = BatchInterleave(weights, schedule, 38)
    finally:
        il._REPAIR_MAX_SOURCES = before
    second = plain._stages[1]
    assert second.lag == (-6, 6, -6, 6) and second.c == (1, 4, 1, 4)  # tenths: ±0.6 behind, rates 0.1/0.4
    assert il._search(10, second.lag, [second.c]) is None  # no first batch keeps both below 1
    assert plain.max_lag == 1
    for mixer in (plain, repaired):  # either way every batch is within 1 and the counters add up
        total = np.zeros(4, dtype=np.int64)
        for b in range(38):
            assert mixer.counts_before(b).tolist() == total.tolist()
            counts = mixer.counts(b)
            size = int(schedule.size(b))
            assert all(abs(int(c) - w * size) < 1 for c, w in zip(counts, mixer.weights))
            total += counts


def test_stages_that_never_cycle_restart_from_their_own_lag(monkeypatch):
    """The fallback after _MAX_PERIODS periods: counts stay exact, the table stays periodic."""
    monkeypatch.setattr(il, "_MAX_PERIODS", 1)
    il._extras_table.cache_clear()
    try:
        schedule = Ramp(start=3, increment=4, ramp_samples=200, final=23)
        mixer = BatchInterleave([0.31, 0.27, 0.22, 0.2], schedule, 300)
        assert any(len(s.main.bits) > s.main.cycle > 0 for s in mixer._stages)  # some stage restarted
        total = np.zeros(4, dtype=np.int64)
        for b in range(300):
            assert mixer.counts_before(b).tolist() == total.tolist()
            total += mixer.counts(b)
        assert mixer.counts_before(300).tolist() == total.tolist()
    finally:
        il._extras_table.cache_clear()


def test_whole_shares_get_no_extra():
    mixer = BatchInterleave([0.5, 0.25, 0.25], Piecewise(pieces=((3, 4), (5, 6)), final=8))
    assert [_digits(mixer.counts(b)) for b in range(7)] == ["211", "211", "211", "321", "312", "422", "422"]
    assert _digits(mixer.assign(0)[0]) == "0102"
    one = BatchInterleave([3], Constant(5))
    assert one.counts(10**9).tolist() == [5] and one.counts_before(10**9).tolist() == [5 * 10**9]
    assert one.assign(2)[1].tolist() == [10, 11, 12, 13, 14] and one.max_lag == 0


def test_tables_are_compact_periodic_and_exact_far_out():
    """One period of 100,000 batches, one byte a batch; at every multiple of it each share is exact."""
    mixer = BatchInterleave([0.12347, 0.21113, 0.31, 0.001, 0.35433, 0.00007], Constant(1021))
    (stage,) = mixer._stages
    assert mixer.denominator == 100_000
    assert len(stage.main.bits) == stage.main.cycle == 100_000 and stage.main.bits.shape == (100_000, 1)
    assert stage.main.bits.dtype == np.uint8 and stage.main.cum.shape == (100_000 // 64 + 1, 6)
    for m in (1, 7, 10**7):
        b = m * 100_000
        assert mixer.counts_before(b).tolist() == [u * 1021 * m for u in mixer.units]
    b = 10**12 + 12_345
    before = mixer.counts_before(b)
    assert all(abs(int(c) - w * 1021 * b) < 1 for c, w in zip(before, mixer.weights))


def test_errors():
    mixer = BatchInterleave([1, 1], Constant(4), 10)
    assert mixer.counts_before(10).tolist() == [20, 20]
    with pytest.raises(ConfigError, match="past the end"):
        mixer.counts_before(11)
    with pytest.raises(ConfigError, match="past the end"):
        mixer.assign(10)
    with pytest.raises(ConfigError, match="≥ 0"):
        mixer.counts(-1)
    with pytest.raises(ConfigError, match="positive"):
        BatchInterleave([1, 1], Constant(4), 0)
    plan = PhasePlan([Phase(name="p", tokens=40, seq_len=1, batch=Constant(4), mix={"a": 1, "b": 3})])
    assert plan.assign_positions(0, np.arange(4))[0].tolist() == [1, 1, 0, 1]
    with pytest.raises(ConfigError, match="out of range"):
        plan.assign_positions(1, np.arange(4))
