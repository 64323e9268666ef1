"""The task split: a pure function of the listing that puts every byte, row group and file in one task."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError
from shardkit.pack.tasks import FileLayout, SplitKind, TaskSpec, plan_digest, plan_tasks

G = 100  # granularity in these tests

layouts_st = st.lists(
    st.one_of(
        st.builds(FileLayout, st.integers(0, 1000)),
        st.builds(lambda n: FileLayout(n, SplitKind.BYTES), st.integers(0, 2000)),
        st.builds(lambda gs: FileLayout(sum(b for b, _ in gs) + 20, SplitKind.ROW_GROUPS, tuple(gs)),
                  st.lists(st.tuples(st.integers(0, 300), st.integers(0, 50)), min_size=2, max_size=8)),
    ),
    max_size=12,
)


def _max_unit(layouts):
    """The largest stretch the planner cannot cut: bounds how far a task may be from T/N."""
    gaps = [0]
    for lay in layouts:
        if lay.kind is SplitKind.BYTES and lay.size > G:
            gaps.append(G)
        elif lay.kind is SplitKind.ROW_GROUPS:
            pts = lay.cut_points()
            gaps.append(max(b - a for a, b in zip(pts, pts[1:])))
        else:
            gaps.append(lay.size)
    return max(gaps)


def _coverage(layouts, plans):
    """Per file: the pieces the tasks took, in task order."""
    got = {f: [] for f in range(len(layouts))}
    for p in plans:
        for s in p.slices:
            got[s.file].append((p.task_id, s))
    return got


@settings(max_examples=300, deadline=None)
@given(layouts_st, st.integers(1, 40))
def test_every_byte_row_group_and_file_in_exactly_one_task(layouts, n):
    plans = plan_tasks(layouts, n, granularity=G)
    assert len(plans) == n and [p.task_id for p in plans] == list(range(n))
    total = sum(lay.size for lay in layouts)
    # contiguous pieces of the input stream, in order, covering it
    assert plans[0].start == 0 and plans[-1].stop == total
    assert all(a.stop == b.start for a, b in zip(plans, plans[1:]))
    assert sum(s.weight for p in plans for s in p.slices) == total
    for f, pieces in _coverage(layouts, plans).items():
        lay = layouts[f]
        assert pieces, f"file {f} is in no task"
        tasks = [t for t, _ in pieces]
        assert tasks == sorted(tasks) and len(set(tasks)) == len(tasks)
        if len(pieces) == 1 and pieces[0][1].kind is SplitKind.WHOLE:
            continue
        kinds = {s.kind for _, s in pieces}
        assert kinds == {lay.kind}, (lay, pieces)
        if lay.kind is SplitKind.BYTES:  # byte ranges tile [0, size)
            assert pieces[0][1].start == 0 and pieces[-1][1].stop == lay.size
            assert all(a.stop == b.start for (_, a), (_, b) in zip(pieces, pieces[1:]))
            assert all(s.start % G == 0 for _, s in pieces)
        else:  # row groups tile [0, G), rows tile [0, rows)
            assert pieces[0][1].start == 0 and pieces[-1][1].stop == len(lay.groups)
            assert all(a.stop == b.start and a.row_stop == b.row_start for (_, a), (_, b) in zip(pieces, pieces[1:]))
            assert pieces[-1][1].row_stop == sum(r for _, r in lay.groups)
    # slices of one task are in listing order, so tasks concatenated are the single pack's order
    order = [(s.file, s.start) for p in plans for s in p.slices]
    assert order == sorted(order)


@settings(max_examples=300, deadline=None)
@given(layouts_st, st.integers(1, 40))
def test_balanced_within_one_uncuttable_unit(layouts, n):
    plans = plan_tasks(layouts, n, granularity=G)
    total = sum(lay.size for lay in layouts)
    bound = _max_unit(layouts) + 1
    for p in plans:
        assert abs(p.weight - total / n) <= bound, (p.weight, total / n, bound)


@given(layouts_st, st.integers(1, 40))
def test_deterministic(layouts, n):
    assert plan_tasks(layouts, n, granularity=G) == plan_tasks(list(layouts), n, granularity=G)
    urls = [f"/d/{i}.jsonl" for i in range(len(layouts))]
    assert plan_digest(urls, layouts, n, G) == plan_digest(list(urls), list(layouts), n, G)


def test_more_tasks_than_files_gives_empty_tasks_not_errors():
    layouts = [FileLayout(10), FileLayout(0), FileLayout(30)]
    plans = plan_tasks(layouts, 7, granularity=G)
    assert sum(bool(p.slices) for p in plans) == 2  # the empty file rides with the next non-empty one
    assert [s.file for p in plans for s in p.slices] == [0, 1, 2]


def test_all_empty_inputs_go_to_the_last_task():
    plans = plan_tasks([FileLayout(0), FileLayout(0)], 3, granularity=G)
    assert [len(p.slices) for p in plans] == [0, 0, 2]


def test_big_jsonl_is_cut_at_granularity_multiples():
    plans = plan_tasks([FileLayout(1000, SplitKind.BYTES)], 4, granularity=G)
    assert [(s.start, s.stop) for p in plans for s in p.slices] == [(0, 200), (200, 500), (500, 700), (700, 1000)]


def test_row_groups_are_never_cut_and_trailing_empty_groups_are_kept():
    lay = FileLayout(120, SplitKind.ROW_GROUPS, ((50, 10), (50, 10), (0, 5)))
    plans = plan_tasks([lay], 2, granularity=G)
    assert [(s.start, s.stop, s.row_start, s.row_stop) for p in plans for s in p.slices] == [
        (0, 1, 0, 10), (1, 3, 10, 25)]


def test_different_n_or_granularity_is_a_different_plan():
    urls, lays = ["/a.jsonl"], [FileLayout(1000, SplitKind.BYTES)]
    assert len({plan_digest(urls, lays, 2, G), plan_digest(urls, lays, 3, G), plan_digest(urls, lays, 2, 50),
                plan_digest(["/b.jsonl"], lays, 2, G)}) == 4


def test_task_spec_validation_and_shard_prefix():
    assert TaskSpec(num_tasks=8, task_id=3).shard_prefix == "task-00003-shard"
    assert TaskSpec(num_tasks=200000, task_id=7).shard_prefix == "task-000007-shard"
    for bad in ({"num_tasks": 0, "task_id": 0}, {"num_tasks": 2, "task_id": 2}, {"num_tasks": 2, "task_id": -1},
                {"num_tasks": 2, "task_id": 0, "granularity": 0}):
        with pytest.raises(ConfigError):
            TaskSpec(**bad)
