"""Property tests of shardkit.mixture (interleave, batch_interleave, phases): exact proportions, batch bounds, counters, phases.

Two levels: `Interleave` (one order of positions: prefixes within 1, windows within 2) and
`BatchInterleave` (what a phase uses: every batch within 1, prefixes at batch boundaries within `max_lag`).
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.mixture import (
    BatchInterleave,
    Interleave,
    Phase,
    PhasePlan,
    normalize_weights,
    token_to_sample_weights,
)
from shardkit.mixture import batch_interleave as il
from shardkit.order import Constant, Piecewise, Ramp

# -- strategies -----------------------------------------------------------------------------------------------

_weight = st.one_of(  # written like recipe weights: exact, periods of at most a few thousand positions
    st.integers(1, 1000).map(lambda x: x / 1000),
    st.sampled_from([0.001, 0.002, 0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 0.7, "1/3", "1/7"]),
    st.integers(1, 10),
)
weights = st.lists(_weight, min_size=2, max_size=6)


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(["constant", "ramp", "steps", "tokens"]))
    if kind == "constant":
        return Constant(draw(st.integers(1, 300)))
    if kind == "ramp":
        start, inc = draw(st.integers(1, 40)), draw(st.integers(1, 40))
        return Ramp(start=start, increment=inc, ramp_samples=draw(st.integers(1, 3000)),
                    final=start + inc * draw(st.integers(1, 6)))
    bounds = sorted(draw(st.sets(st.integers(1, 5000), min_size=1, max_size=4)))
    pieces = tuple((b, draw(st.integers(1, 200))) for b in bounds)
    if kind == "steps":
        return Piecewise(pieces=pieces, final=draw(st.integers(1, 200)))
    return Piecewise(pieces=pieces, final=draw(st.integers(1, 200)), unit="tokens",
                     seq_len=draw(st.integers(1, 64)))


def _cumulative(inter, n):
    """counts_before(m) for every m in [0, n], from one assign() call."""
    source, _ = inter.assign(np.arange(n))
    onehot = np.zeros((n + 1, inter.num_sources), dtype=np.int64)
    onehot[np.arange(1, n + 1), source] = 1
    return onehot.cumsum(axis=0)


def _deviation(counts, n, inter):
    """|count_j − w_j·n| per source, exactly."""
    return [abs(Fraction(int(c)) - w * n) for c, w in zip(counts, inter.weights)]


# -- proportions ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(ws=weights)
def test_every_prefix_is_within_one(ws):
    """count_j(n) ∈ {⌊w_j·n⌋, ⌈w_j·n⌉} for every n of a whole period (and so for every n at all)."""
    inter = Interleave(ws)
    assert sum(inter.weights) == 1 and all(w > 0 for w in inter.weights)
    period = inter.denominator
    n = min(period, 30_000)  # periods here are short; long ones are checked in the test below
    cum = _cumulative(inter, n)
    exact = np.arange(n + 1)[:, None] * np.array(inter.units)  # D·w_j·n, in integers
    scaled = cum * period
    assert ((scaled - exact > -period) & (scaled - exact < period)).all()  # |count − w·n| < 1, exactly
    for m in (0, 1, n // 2, n):
        assert cum[m].tolist() == inter.counts_before(m).tolist()


@settings(max_examples=8, deadline=None)
@given(ws=st.lists(st.floats(0.001, 1.0), min_size=2, max_size=6))
def test_arbitrary_floats_are_rounded_to_1e_minus_5(ws):
    inter = Interleave(ws)  # a period of 100,000 positions
    assert sum(inter.weights) == 1
    exact = [Fraction(repr(w)) / sum(Fraction(repr(x)) for x in ws) for w in ws]
    assert all(abs(w - e) <= Fraction(1, 100_000) for w, e in zip(inter.weights, exact))
    cum = _cumulative(inter, inter.denominator)
    scaled, target = cum * inter.denominator, np.arange(inter.denominator + 1)[:, None] * np.array(inter.units)
    assert (np.abs(scaled - target) < inter.denominator).all()
    assert cum[-1].tolist() == list(inter.units)


@settings(max_examples=60, deadline=None)
@given(ws=weights, n=st.integers(0, 2**62))
def test_large_prefixes_do_not_drift(ws, n):
    inter = Interleave(ws)
    counts = inter.counts_before(n)
    assert int(counts.sum()) == n
    assert all(d < 1 for d in _deviation(counts, n, inter))
    m = n // inter.denominator  # the order is periodic: exact at every multiple of the denominator
    assert inter.counts_before(m * inter.denominator).tolist() == [u * m for u in inter.units]


def test_weights_at_ten_trillion_samples():
    inter = Interleave([0.7, 0.2, 0.1])
    assert inter.weights == (Fraction(7, 10), Fraction(1, 5), Fraction(1, 10)) and inter.denominator == 10
    n = 10**13 + 7
    counts = inter.counts_before(n).tolist()
    assert counts[0] in (7 * 10**12 + 4, 7 * 10**12 + 5) and sum(counts) == n
    assert all(d < 1 for d in _deviation(counts, n, inter))
    pos = np.arange(10**13, 10**13 + 10)
    source, counter = inter.assign(pos)
    assert np.bincount(source, minlength=3).tolist() == [7, 2, 1]
    assert counter.tolist() == [int(inter.counts_before(int(p))[s]) for p, s in zip(pos, source)]


@settings(max_examples=50, deadline=None)
@given(ws=weights, sched=schedules(), first=st.integers(0, 40), seed=st.integers(0, 2**32))
def test_every_window_of_positions_is_within_two(ws, sched, first, seed):
    """Position level: each run of positions holds w_j·L ± (less than 2): the difference of two prefixes.

    Within 1 for every source in every window is impossible for k ≥ 3 with general weights (a balanced
    word; Fraenkel) — which is why phases plan whole batches (`BatchInterleave`, tested below).
    """
    inter = Interleave(ws)
    rng = np.random.default_rng(seed)
    batches = np.unique(np.concatenate([np.arange(first, first + 25), rng.integers(0, 10**6, 10)]))
    for b in batches.tolist():
        start, size = int(sched.start(b)), int(sched.size(b))
        source, _ = inter.assign(np.arange(start, start + size))
        counts = np.bincount(source, minlength=inter.num_sources)
        assert all(abs(c - w * size) < 2 for c, w in zip(counts.tolist(), inter.weights))
        before = inter.counts_before(start + size) - inter.counts_before(start)
        assert before.tolist() == counts.tolist()


def test_three_sources_cannot_all_be_within_one_in_every_window():
    """Why positions alone promise < 2: no order of 70/20/10 keeps every window within 1 (Fraenkel)."""
    source, _ = Interleave([0.7, 0.2, 0.1]).assign(np.arange(40))
    onehot = np.eye(3, dtype=np.int64)[source]
    cum = np.vstack([np.zeros(3, np.int64), onehot.cumsum(axis=0)])
    worst = max(np.abs(cum[L:] - cum[:-L] - np.array([0.7, 0.2, 0.1]) * L).max() for L in range(1, 21))
    assert 1 < worst < 2


@settings(max_examples=60, deadline=None)
@given(a=_weight, b=_weight, sched=schedules(), first=st.integers(0, 10**6))
def test_two_sources_are_within_one_in_every_batch(a, b, sched, first):
    inter = Interleave([a, b])
    for batch in range(first, first + 20):
        start, size = int(sched.start(batch)), int(sched.size(batch))
        counts = inter.counts_before(start + size) - inter.counts_before(start)
        assert all(abs(int(c) - w * size) < 1 for c, w in zip(counts, inter.weights))


# -- assign ---------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(ws=weights, base=st.sampled_from([0, 10**6, 10**12, 10**13, 2**61]), seed=st.integers(0, 2**32))
def test_assign_agrees_with_counts_before(ws, base, seed):
    inter = Interleave(ws)
    rng = np.random.default_rng(seed)
    pos = base + rng.integers(0, 10**9, size=40)
    source, counter = inter.assign(pos)
    eye = np.eye(inter.num_sources, dtype=np.int64)
    for p, s, c in zip(pos.tolist(), source.tolist(), counter.tolist()):
        before = inter.counts_before(p)
        assert c == before[s]
        assert (inter.counts_before(p + 1) - before).tolist() == eye[s].tolist()
    # a contiguous range: each source's counters are consecutive, starting at counts_before(start)
    start = base + int(rng.integers(0, 10**9))
    source, counter = inter.assign(np.arange(start, start + 500))
    first = inter.counts_before(start)
    for j in range(inter.num_sources):
        got = counter[source == j]
        assert got.tolist() == list(range(first[j], first[j] + got.size))


@settings(max_examples=30, deadline=None)
@given(ws=weights)
def test_assign_is_deterministic_and_shape_preserving(ws):
    a, b = Interleave(ws), Interleave(list(ws))
    pos = np.arange(600).reshape(20, 30)
    sa, ca = a.assign(pos)
    sb, cb = b.assign(pos)
    assert sa.shape == ca.shape == (20, 30)
    assert np.array_equal(sa, sb) and np.array_equal(ca, cb)


def test_golden_orders():
    """Pinned: changing these changes every mixture's stream — do it only deliberately."""
    seq = "".join(map(str, Interleave([0.7, 0.2, 0.1]).assign(np.arange(30))[0].tolist()))
    assert seq == "000100100200010010020001001002"
    seq = "".join(map(str, Interleave(["0.4", "0.3", "0.2", "0.1"]).assign(np.arange(30))[0].tolist()))
    assert seq == "010210102301021010230102101023"


def test_sources_interleave_within_a_batch():
    source, _ = Interleave([1, 1]).assign(np.arange(8))
    assert source.tolist() == [0, 1] * 4
    source, _ = Interleave([0.5, 0.3, 0.2]).assign(np.arange(10))
    assert source.tolist() == [0, 1, 0, 2, 0, 1, 0, 1, 0, 2]


def test_weights_are_exact_or_rounded_to_1e_minus_5():
    assert normalize_weights([7, 2, 1]) == (Fraction(7, 10), Fraction(1, 5), Fraction(1, 10))
    assert normalize_weights(["1/3", "1/3", "1/3"]) == (Fraction(1, 3),) * 3
    rounded = normalize_weights([0.123456789123, 0.876543210877])
    assert rounded == (Fraction(12346, 100_000), Fraction(87654, 100_000))
    with pytest.raises(ConfigError, match="resolution"):
        normalize_weights([1, 1e-6, 0.123456789])
    with pytest.raises(ConfigError, match="> 0"):
        Interleave([0.5, 0])
    with pytest.raises(ConfigError, match="number"):
        Interleave([0.5, True])
    assert token_to_sample_weights({"a": 0.5, "b": 0.5}, 4096) == {"a": Fraction(1, 2), "b": Fraction(1, 2)}
    assert token_to_sample_weights({"a": 1, "b": 1}, {"a": 1000, "b": 3000}) == {"a": Fraction(3, 4),
                                                                              "b": Fraction(1, 4)}
    one = Interleave([5])
    assert one.assign(np.arange(4))[1].tolist() == [0, 1, 2, 3] and one.denominator == 1


# -- phases ---------------------------------------------------------------------------------------------------


@st.composite
def plans(draw):
    names = ["a", "b", "c", "d"]
    phases = []
    for i in range(draw(st.integers(1, 4))):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
        phases.append(Phase(name=f"p{i}", tokens=draw(st.integers(1, 4000)), seq_len=draw(st.integers(1, 16)),
                            batch=draw(schedules()), mix={n: draw(_weight) for n in chosen}))
    return phases


def _walk(phases):
    """The phase plan by brute force: batch by batch, each phase until its budget is reached."""
    rows = []
    for i, p in enumerate(phases):
        b = s = 0
        while s * p.seq_len < p.tokens:
            rows.append((i, b, s))
            s += int(p.batch.size(b))
            b += 1
    return rows


@settings(max_examples=60, deadline=None)
@given(phases=plans())
def test_locate_matches_a_brute_force_walk(phases):
    plan = PhasePlan(phases)
    rows = _walk(phases)
    assert plan.num_batches == len(rows)
    assert [tuple(plan.locate(g)) for g in range(len(rows))] == rows
    for p, bounds in zip(phases, plan.bounds):  # the budget is reached at the first boundary at or after it
        assert bounds.num_tokens >= p.tokens > bounds.num_tokens - int(p.batch.size(bounds.num_batches - 1)) * p.seq_len
    with pytest.raises(ConfigError, match="past the end"):
        plan.locate(len(rows))


@settings(max_examples=40, deadline=None)
@given(phases=plans())
def test_counters_continue_across_phases(phases):
    plan = PhasePlan(phases)
    k = len(plan.sources)
    seen = [[] for _ in range(k)]
    tokens = np.zeros(k, dtype=np.int64)
    for g in range(plan.num_batches):
        mix = plan.assign_batch(g)
        assert plan.counters_at(g).tolist() == [len(s) for s in seen]
        for s, c in zip(mix.source.tolist(), mix.counter.tolist()):
            seen[s].append(c)
        tokens += np.bincount(mix.source, minlength=k) * phases[mix.phase].seq_len
        # every global batch within 1; every phase prefix within the phase's certified bound
        weights, start = dict(phases[mix.phase].mix), plan.counters_at_start(mix.phase)
        for j, name in enumerate(plan.sources):
            w = weights.get(name, Fraction(0))
            assert abs(int((mix.source == j).sum()) - w * mix.source.size) < 1
            n = plan.phases[mix.phase].batch.start(mix.batch + 1)
            assert abs(len(seen[j]) - int(start[j]) - w * n) <= plan.mixers[mix.phase].max_lag
        if g + 1 < plan.num_batches and plan.locate(g + 1).phase != mix.phase:
            assert plan.counters_at_start(mix.phase + 1).tolist() == [len(s) for s in seen]
    assert all(s == list(range(len(s))) for s in seen)  # each source: 0, 1, 2, … with no gap or repeat
    assert plan.counters_at_start(len(phases)).tolist() == [len(s) for s in seen]
    assert plan.tokens_at_start(len(phases)).tolist() == tokens.tolist()
    assert all(m.max_lag < 1 for m in plan.mixers)


def test_phase_plan_example():
    plan = PhasePlan([
        Phase(name="pretrain", tokens=10_000, seq_len=10, batch=Constant(64), mix={"web": 0.7, "code": 0.3}),
        Phase(name="anneal", tokens=1_000, seq_len=20, batch=Constant(16), mix={"code": 0.5, "math": 0.5}),
    ])
    assert plan.sources == ("code", "math", "web")
    # pretrain: 1000 samples → 16 batches of 64 = 1024 samples; anneal: 50 samples → 4 batches of 16
    assert plan.bounds[0][:4] == (0, 16, 0, 1024) and plan.bounds[1][:4] == (16, 4, 1024, 64)
    assert tuple(plan.locate(16)) == (1, 0, 0) and tuple(plan.locate(19)) == (1, 3, 48)
    code, math_, web = plan.counters_at_start(1).tolist()
    assert code in (307, 308) and math_ == 0 and code + web == 1024
    assert plan.phase_index("anneal") == 1
    with pytest.raises(ConfigError, match="repeats the name"):
        PhasePlan([plan.phases[0], plan.phases[0]])


# -- batches --------------------------------------------------------------------------------------------------

batch_weights = st.lists(_weight, min_size=2, max_size=8)


def _within_one(counts, size, weights):
    return all(abs(Fraction(int(c)) - w * size) < 1 for c, w in zip(counts, weights))


@settings(max_examples=40, deadline=None)
@given(ws=batch_weights, sched=schedules(), first=st.integers(0, 400), seed=st.integers(0, 2**32))
def test_every_batch_is_within_one(ws, sched, first, seed):
    """⌊w_j·B⌋ or ⌈w_j·B⌉ rows of source j in every batch — early, late, and at indices near 10**9."""
    mixer = BatchInterleave(ws, sched)  # open-ended: the last stage repeats its cycle for ever
    rng = np.random.default_rng(seed)
    batches = np.unique(np.concatenate([np.arange(first, first + 12), rng.integers(0, 10**9, 12)]))
    for b in batches.tolist():
        size, start = int(sched.size(b)), int(sched.start(b))
        counts, before = mixer.counts(b), mixer.counts_before(b)
        assert int(counts.sum()) == size and _within_one(counts, size, mixer.weights)
        assert (mixer.counts_before(b + 1) - before).tolist() == counts.tolist()
        assert all(abs(int(c) - w * start) <= mixer.max_lag for c, w in zip(before, mixer.weights))
        source, counter = mixer.assign(b)
        assert np.bincount(source, minlength=mixer.num_sources).tolist() == counts.tolist()
        for j in range(mixer.num_sources):  # each source's counters continue where the last batch left off
            assert counter[source == j].tolist() == list(range(before[j], before[j] + counts[j]))
    assert mixer.max_lag < 1


@settings(max_examples=50, deadline=None)
@given(ws=batch_weights, sched=schedules(), n=st.integers(1, 300))
def test_counts_before_is_the_sum_of_the_batches(ws, sched, n):
    """counts_before agrees with a batch-by-batch walk, and max_lag is that walk's largest deviation."""
    mixer = BatchInterleave(ws, sched, n)
    total, samples, worst = np.zeros(mixer.num_sources, dtype=np.int64), 0, Fraction(0)
    for b in range(n):
        assert mixer.counts_before(b).tolist() == total.tolist()
        counts = mixer.counts(b)
        assert _within_one(counts, int(sched.size(b)), mixer.weights)
        total += counts
        samples += int(sched.size(b))
        worst = max(worst, *(abs(int(c) - w * samples) for c, w in zip(total, mixer.weights)))
    assert mixer.counts_before(n).tolist() == total.tolist()
    assert worst == mixer.max_lag < 1
    with pytest.raises(ConfigError, match="past the end"):
        mixer.counts(n)


@settings(max_examples=30, deadline=None)
@given(ws=batch_weights, sched=schedules(), b=st.integers(0, 2**40))
def test_long_run_error_stays_bounded(ws, sched, b):
    mixer = BatchInterleave(ws, sched)
    start = int(sched.start(b))
    before = mixer.counts_before(b)
    assert int(before.sum()) == start
    assert all(abs(int(c) - w * start) <= mixer.max_lag < 1 for c, w in zip(before, mixer.weights))


@settings(max_examples=15, deadline=None)
@given(ws=batch_weights, sched=schedules(), seed=st.integers(0, 2**32))
def test_batches_are_deterministic(ws, sched, seed):
    """Rebuilt from nothing (caches cleared) every batch comes out the same."""
    batches = np.random.default_rng(seed).integers(0, 10**6, 8).tolist()
    first = [BatchInterleave(ws, sched).assign(b) for b in batches]
    il._extras_table.cache_clear()
    il._batch_rows.cache_clear()
    again = BatchInterleave(list(ws), sched)
    for b, (source, counter) in zip(batches, first):
        s, c = again.assign(b)
        assert np.array_equal(s, source) and np.array_equal(c, counter)


@settings(max_examples=20, deadline=None)
@given(ws=batch_weights, sched=schedules(), b=st.integers(0, 10**6))
def test_rows_interleave_sources_within_a_batch(ws, sched, b):
    """Every prefix of a batch holds each source within 1 of its share of the batch (so do ranks' slices, ±2)."""
    mixer = BatchInterleave(ws, sched)
    source, _ = mixer.assign(b)
    counts = mixer.counts(b)
    onehot = np.eye(mixer.num_sources, dtype=np.int64)[source].cumsum(axis=0)
    ideal = np.arange(1, source.size + 1)[:, None] * counts[None, :]
    assert (np.abs(onehot * source.size - ideal) < source.size).all()


@settings(max_examples=20, deadline=None)
@given(ws=batch_weights, sched=schedules(), seed=st.integers(0, 2**32))
def test_assign_positions_agrees_with_assign(ws, sched, seed):
    mixer = BatchInterleave(ws, sched)
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 10**7, size=(3, 7))
    source, counter = mixer.assign_positions(pos)
    assert source.shape == counter.shape == (3, 7)
    for p, s, c in zip(pos.ravel().tolist(), source.ravel().tolist(), counter.ravel().tolist()):
        b = int(sched.batch_at_sample(p))
        rows, counters = mixer.assign(b)
        assert (s, c) == (int(rows[p - int(sched.start(b))]), int(counters[p - int(sched.start(b))]))


@settings(max_examples=30, deadline=None)
@given(ws=batch_weights, sched=schedules(), first=st.integers(0, 6000) | st.integers(0, 10**6),
       n=st.integers(2, 3000))
def test_assign_positions_of_a_run_agrees_with_assign(ws, sched, first, n):
    """A run of consecutive positions (the loader's case: sliced from whole stage rows, or split at a change
    of batch size) gives what `assign` gives for each position's batch."""
    mixer = BatchInterleave(ws, sched)
    source, counter = mixer.assign_positions(np.arange(first, first + n))
    b0, b1 = int(sched.batch_at_sample(first)), int(sched.batch_at_sample(first + n - 1))
    rows = [mixer.assign(b) for b in range(b0, b1 + 1)]
    lo = first - int(sched.start(b0))
    assert source.tolist() == np.concatenate([r for r, _ in rows])[lo:lo + n].tolist()
    assert counter.tolist() == np.concatenate([c for _, c in rows])[lo:lo + n].tolist()


@settings(max_examples=25, deadline=None)
@given(phases=plans(), seed=st.integers(0, 2**32))
def test_plan_assign_positions_agrees_with_assign_batch(phases, seed):
    plan = PhasePlan(phases)
    rng = np.random.default_rng(seed)
    for g in sorted(set(rng.integers(0, plan.num_batches, 5).tolist())):
        loc, mix = plan.locate(g), plan.assign_batch(g)
        pos = np.arange(loc.sample, loc.sample + mix.source.size)
        source, counter = plan.assign_positions(loc.phase, pos)
        assert np.array_equal(source, mix.source) and np.array_equal(counter, mix.counter)


@settings(max_examples=40, deadline=None)
@given(phases=plans(), seed=st.integers(0, 2**32))
def test_assign_runs_numbers_rows_like_assign_positions(phases, seed):
    """Runs of positions (a rank's slices of consecutive batches, or one run for one rank): each row's source
    and, numbered from each run's first counter, each row's counter equal `assign_positions`."""
    plan = PhasePlan(phases)
    rng = np.random.default_rng(seed)
    phase = int(rng.integers(0, len(plan.phases)))
    total = plan.bounds[phase].num_samples
    lo = int(rng.integers(0, total))
    ends = np.sort(rng.choice(np.arange(lo, total + 1), size=min(2 * int(rng.integers(1, 6)), total + 1 - lo),
                              replace=False))
    pairs = ends[: ends.size // 2 * 2].reshape(-1, 2)
    pairs = pairs[pairs[:, 1] > pairs[:, 0]]
    if not pairs.size:
        return
    starts, lengths = pairs[:, 0], pairs[:, 1] - pairs[:, 0]
    positions = np.concatenate([np.arange(a, b) for a, b in pairs])
    got = plan.assign_runs(phase, starts, lengths)
    want_src, want_counter = plan.assign_positions(phase, positions)
    if got is None:  # the runs span a change of batch size: the caller uses assign_positions
        stages = {plan.mixers[phase]._stage(int(plan.phases[phase].batch.batch_at_sample(int(p))))[0].first
                  for p in (positions[0], positions[-1])}
        assert len(stages) == 2
        return
    src, first, sources = got
    assert src.tolist() == want_src.tolist()
    run = np.repeat(np.arange(starts.size), lengths)
    for c, j in enumerate(sources.tolist()):
        for i in range(starts.size):
            mine = np.flatnonzero((run == i) & (src == j))
            assert want_counter[mine].tolist() == (first[i, c] + np.arange(mine.size)).tolist()
