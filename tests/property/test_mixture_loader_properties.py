"""Property tests of the mixture loader: proportions, determinism across world sizes / workers / resume
points (around phase boundaries too), elastic resume, recipe changes, and exact windows.

The reference for "where is each source's order" is a brute-force walk: batch by batch through
`PhasePlan.assign_batch`, each source's tokens given so far `T_j`; a sample of seq_len L is position ⌈T_j / L⌉
of the source's L-order (docs/mixtures.md). Recipes are drawn small so that every example runs whole.
"""

import itertools
import json
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.mixtures import make_sources, window

from shardkit.loader import MixtureLoader
from shardkit.mixture import RecipeWarning
from shardkit.mixture.assign import Assigner, AssignMode
from shardkit.mixture.cursor import phase_starts

NAMES = ("code", "math", "web")

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bounds(plan, phase):
    """What PhasePlan promises for a phase, as two checks on a deviation |count_j − w_j·x|: inside every
    global batch (x = B: ⌊w_j·B⌋ or ⌈w_j·B⌉, so < 1) and after every whole batch (x = samples of the phase
    so far: at most the exact largest lag the plan states)."""
    return (lambda d: d < 1), (lambda d: d <= plan.mixers[phase].max_lag)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixprop")
    return root, make_sources(root)


@st.composite
def phases(draw):
    out = []
    for i in range(draw(st.integers(1, 3))):
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
        mix = {n: draw(st.sampled_from([0.1, 0.2, 0.25, 0.3, 0.5, 0.7, "1/3", 1])) for n in names}
        total = sum(Fraction(str(w)) for w in mix.values())
        mix = {n: str(Fraction(str(w)) / total) for n, w in mix.items()}
        kind = draw(st.sampled_from(["constant", "ramp"]))
        batch = draw(st.sampled_from([4, 8, 12])) if kind == "constant" else \
            {"ramp": {"start": 4, "increment": 4, "over_samples": draw(st.integers(8, 60)),
                      "final": draw(st.sampled_from([8, 12]))}}
        out.append({"name": f"p{i}", "tokens": draw(st.integers(100, 2500)), "batch": batch,
                    "seq_len": draw(st.sampled_from([8, 16, 24])), "mix": mix})
    return out


@st.composite
def recipes(draw):
    return {"seed": draw(st.integers(0, 2**32)), "shuffle": draw(st.sampled_from(["none", "block", "full"])),
            "phases": draw(phases()), "sources": {n: {"path": n} for n in NAMES}}


def _loader(root, r, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecipeWarning)
        return MixtureLoader(r, base_dir=root, readahead=False, **kw)


def _global(loaders, first=0):
    """{batch: (source, input_ids) of the whole global batch} from one loader per rank, each from `first`."""
    per_rank = [{b: (x["source"].copy(), x["input_ids"].copy()) for b, _, x in ld.iter_batches(first)}
                for ld in loaders]
    return {b: (np.concatenate([r[b][0] for r in per_rank]), np.concatenate([r[b][1] for r in per_rank]))
            for b in per_rank[0]}


def _brute_positions(loader, first=0, tokens=None):
    """[(batch, source per row, position per row)] by walking every batch from `first`, per-source tokens."""
    plan = loader.plan
    t = np.zeros(len(plan.sources), np.int64) if tokens is None else tokens.copy()
    out = []
    for b in range(first, loader.num_batches()):
        mix = plan.assign_batch(b)
        length = plan.phases[mix.phase].seq_len
        pos = np.empty(mix.source.size, np.int64)
        for r, j in enumerate(mix.source.tolist()):
            pos[r] = -(-int(t[j]) // length)
            t[j] += length
        out.append((b, mix.source, pos))
    return out


@SETTINGS
@given(r=recipes())
def test_proportions_per_batch_and_cumulative(data, r):
    root, _ = data
    loader = _loader(root, r)
    plan = loader.plan
    counters, tokens = phase_starts(plan)  # from counters_at/assign_batch alone; equal to the plan's own
    for i in range(len(plan.phases) + 1):
        np.testing.assert_array_equal(counters[i], plan.counters_at_start(i))
        np.testing.assert_array_equal(tokens[i], plan.tokens_at_start(i))
    for i, (p, bounds) in enumerate(zip(plan.phases, plan.bounds)):
        in_batch, in_prefix = _bounds(plan, i)
        weights = {plan.sources.index(n): w for n, w in p.mix}
        so_far = np.zeros(len(plan.sources), np.int64)
        n = 0
        for b in range(bounds.first_batch, bounds.first_batch + bounds.num_batches):
            src, _ = loader.global_sample_ids(b)
            np.testing.assert_array_equal(src, plan.assign_batch(b).source)
            counts = np.bincount(src, minlength=len(plan.sources))
            assert set(np.flatnonzero(counts).tolist()) <= set(weights)
            for j, w in weights.items():
                assert in_batch(abs(int(counts[j]) - w * src.size))
            so_far += counts
            n += src.size
            for j, w in weights.items():
                assert in_prefix(abs(int(so_far[j]) - w * n))


def _assert_walk(loader, walk):
    """Every batch of a brute-force walk: the loader's row sources, and each source's sample ids at the
    walked positions of its own order."""
    for b, src, pos in walk:
        got_src, ids = loader.global_sample_ids(b)
        np.testing.assert_array_equal(got_src, src)
        length = loader.seq_len_at(b)
        for j in np.unique(src).tolist():
            stream = loader.streams[(j, length)]
            p = pos[src == j]
            expect = np.concatenate([stream.order.sample_ids(int(e), [int(k)]) for e, k in
                                     zip(p // stream.num_samples, p % stream.num_samples)])
            np.testing.assert_array_equal(ids[src == j], expect)


@SETTINGS
@given(r=recipes(), data_draw=st.data())
def test_positions_continue_each_sources_tokens_and_rows_are_exact_windows(data, r, data_draw):
    root, flats = data
    loader = _loader(root, r)
    walk = _brute_positions(loader)
    _assert_walk(loader, walk)
    b = data_draw.draw(st.integers(0, loader.num_batches() - 1))
    loader.load_state_dict(loader.state_at(b))
    item = next(iter(loader))
    _, src, pos = walk[b]
    _, ids = loader.global_sample_ids(b)
    for row, (j, sid) in enumerate(zip(src.tolist(), ids.tolist())):
        w = window(flats[loader.sources[j]], sid, loader.seq_len_at(b))
        np.testing.assert_array_equal(item["input_ids"][row], w[:-1])
        np.testing.assert_array_equal(item["labels"][row], w[1:])


def _resume_points(loader, draw):
    """A resume batch exactly at, just before or just after a phase boundary, or anywhere."""
    firsts = [bd.first_batch for bd in loader.plan.bounds] + [loader.num_batches()]
    kind = draw(st.sampled_from(["at", "before", "after", "any"]))
    if kind == "any":
        return draw(st.integers(0, loader.num_batches()))
    edge = draw(st.sampled_from(firsts))
    return min(max(0, edge + {"at": 0, "before": -1, "after": 1}[kind]), loader.num_batches())


@SETTINGS
@given(r=recipes(), world=st.sampled_from([1, 2, 4]), micro=st.sampled_from([None, 1]), data_draw=st.data())
def test_global_stream_is_independent_of_world_size_micro_batches_and_resume_point(data, r, world, micro, data_draw):
    root, _ = data
    reference = _global([_loader(root, r)])
    first = _loader(root, r)
    at = _resume_points(first, data_draw.draw)
    for _ in itertools.islice(first, at):
        pass
    state = json.loads(json.dumps(first.state_dict()))
    assert state["batch"] == at
    loaders = [_loader(root, r, rank=k, world_size=world, micro_batch_size=micro) for k in range(world)]
    for ld in loaders:
        ld.load_state_dict(state)
    if micro:  # micro-batches of a rank concatenate to its slice
        per = [{} for _ in loaders]
        for k, ld in enumerate(loaders):
            for item in ld:
                per[k].setdefault(item["batch_index"], []).append(item["input_ids"])
        got = {b: np.concatenate([np.concatenate(per[k][b]) for k in range(world)]) for b in per[0]}
    else:
        got = {b: ids for b, (_, ids) in _global(loaders, at).items()}
    assert sorted(got) == [b for b in sorted(reference) if b >= at]
    for b, ids in got.items():
        np.testing.assert_array_equal(ids, reference[b][1])


@SETTINGS
@given(r=recipes(), workers=st.integers(1, 4), run=st.integers(1, 3), data_draw=st.data())
def test_workers_split_a_ranks_batches_without_changing_them(data, r, workers, run, data_draw):
    """Worker w of k, shipping runs of g batches: batches first + w·g + i·k·g + (0..g−1) — together, all."""
    root, _ = data
    loader = _loader(root, r, rank=1, world_size=2)
    first = data_draw.draw(st.integers(0, loader.num_batches() - 1))
    whole = {b: x["input_ids"].copy() for b, _, x in loader.iter_batches(first)}
    split = {}
    for w in range(workers):
        worker = _loader(root, r, rank=1, world_size=2)
        for b, x in worker.iter_units(first + w * run, stride=workers * run, run=run):  # a unit is a batch here
            assert b not in split
            split[b] = x["input_ids"].copy()
    assert sorted(split) == sorted(whole)
    for b, ids in split.items():
        np.testing.assert_array_equal(ids, whole[b])


@SETTINGS
@given(r=recipes(), data_draw=st.data())
def test_elastic_resume_across_world_sizes(data, r, data_draw):
    root, _ = data
    saver = _loader(root, r, rank=1, world_size=2)
    at = _resume_points(saver, data_draw.draw)
    state = json.loads(json.dumps(saver.state_at(at)))
    reference = _global([_loader(root, r, rank=k, world_size=2) for k in range(2)], at)
    for world in (1, 4):
        loaders = [_loader(root, r, rank=k, world_size=world) for k in range(world)]
        for ld in loaders:
            ld.load_state_dict(state)
        got = _global(loaders, at)
        assert sorted(got) == sorted(reference)
        assert all(np.array_equal(got[b][1], reference[b][1]) for b in got)


@SETTINGS
@given(a=recipes(), b=recipes(), data_draw=st.data())
def test_recipe_change_mid_run_continues_each_sources_order(data, a, b, data_draw):
    """After the change each source continues from the tokens it had given in the old run (brute force)."""
    root, _ = data
    first = _loader(root, a)
    at = data_draw.draw(st.integers(0, first.num_batches()))
    old = _brute_positions(first)
    tokens = np.zeros(len(first.sources), np.int64)
    for batch, src, _ in old[:at]:
        tokens += np.bincount(src, minlength=len(first.sources)) * first.seq_len_at(batch)
    state = json.loads(json.dumps(first.state_at(at)))
    second = _loader(root, b)
    changed = second.fingerprint != first.fingerprint
    if at > second.num_batches() or (changed and at == second.num_batches()):
        # nothing of the new recipe left to continue with (the same recipe's end state is a valid,
        # finished run: loading it below gives an empty stream)
        with pytest.raises(Exception, match="batch"):
            second.load_state_dict(state, allow_recipe_change=True)
        return
    second.load_state_dict(state, allow_recipe_change=True)
    carried = np.array([int(tokens[first.sources.index(n)]) if n in first.sources else 0 for n in second.sources])
    np.testing.assert_array_equal(second._cursor.tokens_before(at), carried)
    walk = _brute_positions(second, at, carried)
    _assert_walk(second, walk[:12])
    # and the new run's own state resumes it exactly
    later = min(at + 3, second.num_batches())
    again = _loader(root, b)
    again.load_state_dict(json.loads(json.dumps(second.state_at(later))))
    assert np.array_equal(again._cursor.tokens_before(later), second._cursor.tokens_before(later))


class _VectorPlan:
    """A plan offering assign_positions (the hook Assigner prefers), computed per batch from assign_batch."""

    def __init__(self, plan):
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._plan, name)

    def assign_positions(self, phase, positions):
        p, first = self._plan.phases[phase], self._plan.bounds[phase].first_batch
        src, cnt = np.empty_like(positions), np.empty_like(positions)
        for i, pos in enumerate(positions.tolist()):
            local = int(p.batch.batch_at_sample(pos))
            mix = self._plan.assign_batch(first + local)
            k = pos - int(p.batch.start(local))
            src[i], cnt[i] = mix.source[k], mix.counter[k]
        return src, cnt


@SETTINGS
@given(r=recipes(), data_draw=st.data())
def test_every_assignment_mode_equals_assign_batch(data, r, data_draw):
    root, _ = data
    plan = _loader(root, r).plan
    modes = [Assigner(plan), Assigner(plan, AssignMode.PER_BATCH), Assigner(_VectorPlan(plan))]
    assert modes[0].mode is not AssignMode.PER_BATCH, (
        "the loader fell back to one assign_batch call per batch (~3x slower at batch 8): give PhasePlan a "
        "vectorised assign_positions(phase, positions) (see shardkit/mixture/assign.py)")
    assert modes[2].mode is AssignMode.PLAN
    batches = np.array(sorted(data_draw.draw(st.sets(st.integers(0, plan.num_batches - 1), min_size=1,
                                                       max_size=6))), dtype=np.int64)
    phase = plan.locate(int(batches[0])).phase
    batches = batches[[plan.locate(int(x)).phase == phase for x in batches]]
    first = plan.bounds[phase].first_batch
    starts = plan.phases[phase].batch.start(batches - first)
    sizes = plan.phases[phase].batch.size(batches - first)
    lo = starts + sizes // 4
    hi = starts + sizes
    expect_src = np.concatenate([plan.assign_batch(int(x)).source[s // 4:] for x, s in zip(batches, sizes)])
    expect_cnt = np.concatenate([plan.assign_batch(int(x)).counter[s // 4:] for x, s in zip(batches, sizes)])
    for a in modes:
        src, cnt = a.rows(phase, batches, lo, hi)
        np.testing.assert_array_equal(src, expect_src)
        np.testing.assert_array_equal(cnt, expect_cnt)
