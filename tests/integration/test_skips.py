"""Deterministic skips: skipped global batches vanish on every rank and nothing else moves — across resumes,
world-size changes, micro-batches, recipes (`skip:`), DataLoader workers, and a skip added to a running job."""

import itertools

import numpy as np
import pytest
from support.mixtures import make_sources

from shardkit.engine.explain import document_steps, explain
from shardkit.errors import ConfigError, ResumeError
from shardkit.loader import Loader, MixtureLoader

SEQ = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("skips")
    make_sources(root)
    return root


def _recipe(**over):
    r = {"seed": 3, "seq_len": SEQ, "sources": {n: {"path": n} for n in ("web", "code", "math")},
         "phases": [{"name": "a", "tokens": 2500, "batch": {"ramp": {"start": 4, "increment": 4, "over_samples": 40,
                                                                      "final": 8}},
                     "mix": {"web": 0.5, "code": 0.3, "math": 0.2}},
                    {"name": "b", "tokens": 2500, "batch": 4, "seq_len": 2 * SEQ, "mix": {"web": 0.5, "math": 0.5}}]}
    r.update(over)
    return r


def _mix(data, **kw):
    return MixtureLoader(kw.pop("recipe", None) or _recipe(), base_dir=data, readahead=False, **kw)


def _global(make, world, micro=None, state=None):
    """{(batch, rank, micro): tokens} of every rank, each rank resumed from `state` if given."""
    out = {}
    for rank in range(world):
        ld = make(rank=rank, world_size=world, micro_batch_size=micro)
        if state is not None:
            ld.load_state_dict(state)
        for item in ld:
            out[(item["batch_index"], rank, item["micro_index"])] = np.concatenate(
                [item["input_ids"], item["labels"][:, -1:]], axis=1).copy()
    return out


def _rows_by_batch(got):
    """Rows of each global batch in global order (ranks, then micro-batches): world-size independent."""
    out = {}
    for (b, r, k) in sorted(got):
        out.setdefault(b, []).append(got[(b, r, k)])
    return {b: np.concatenate(v) for b, v in out.items()}


@pytest.mark.parametrize("world,micro", [(1, None), (2, 1), (4, None)])
def test_skipped_batches_vanish_and_nothing_else_moves(data, world, micro):
    skip = [[3, 5], [9, 9], [4, 7]]  # overlapping ranges merge: 3..7 and 9
    ref = _rows_by_batch(_global(lambda **k: _mix(data, **k), world, micro))
    got = _rows_by_batch(_global(lambda **k: _mix(data, skip=skip, **k), world, micro))
    gone = {3, 4, 5, 6, 7, 9}
    assert set(got) == set(ref) - gone
    for b in got:
        np.testing.assert_array_equal(got[b], ref[b])


def test_recipe_skip_entry_same_fingerprint_and_same_effect(data):
    plain, skipping = _mix(data), _mix(data, recipe=_recipe(skip=[[2, 4]]))
    assert plain.fingerprint == skipping.fingerprint
    assert skipping.skips == ((2, 4),)
    assert [i["batch_index"] for i in skipping][:4] == [0, 1, 5, 6]


def test_adding_a_skip_to_a_running_job_is_an_exact_resume(data):
    """Run to batch 6 without skips, checkpoint, restart with skip [8, 10] (a new world size too)."""
    ref = _rows_by_batch(_global(lambda **k: _mix(data, **k), 2))
    first = _mix(data, rank=0, world_size=2)
    for _ in itertools.islice(first, 6):
        pass
    state = first.state_dict()
    assert state["batch"] == 6 and "skips" not in state  # a state without skips is what it always was
    after = _rows_by_batch(_global(lambda **k: _mix(data, skip=[[8, 10]], **k), 4, state=state))
    assert set(after) == {b for b in ref if b >= 6} - {8, 9, 10}
    for b in after:
        np.testing.assert_array_equal(after[b], ref[b])


def test_state_records_skips_and_every_later_resume_keeps_them(data):
    """A loader whose configuration has no skips, resumed from a state that has them, still skips them —
    on another world size and with micro-batches."""
    ld = _mix(data, skip=[[12, 14]], rank=0, world_size=2)
    for _ in itertools.islice(ld, 5):
        pass
    state = ld.state_dict()
    assert state["skips"] == [[12, 14]]
    ref = _rows_by_batch(_global(lambda **k: _mix(data, **k), 1))
    resumed = _global(lambda **k: _mix(data, **k), 4, micro=1, state=state)
    got = _rows_by_batch(resumed)
    assert set(got) == {b for b in ref if b >= 5} - {12, 13, 14}
    for b in got:
        np.testing.assert_array_equal(got[b], ref[b])
    again = _mix(data, skip=[[20, 20]], rank=1, world_size=4)  # configured ∪ recorded
    again.load_state_dict(state)
    assert again.skips == ((12, 14), (20, 20))
    assert again.state_dict()["skips"] == [[12, 14], [20, 20]]


def test_resume_at_a_skipped_batch_continues_after_it(data):
    ld = Loader(data / "web", seq_len=SEQ, batch_schedule=4, seed=2, readahead=False, max_epochs=1, skip=[[3, 6]])
    for _ in itertools.islice(ld, 3):
        pass
    assert ld.step == 3  # the next batch index, inside the skip
    again = Loader(data / "web", seq_len=SEQ, batch_schedule=4, seed=2, readahead=False, max_epochs=1)
    again.load_state_dict(ld.state_dict())
    assert next(iter(again))["batch_index"] == 7


def test_skips_through_dataloader_workers(data):
    pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader
    kw = dict(seq_len=SEQ, batch_schedule=4, seed=4, readahead=False, max_epochs=1, skip=[[2, 5], [11, 30]])
    want = [b["batch_index"] for b in Loader(data / "code", **kw)]
    assert 2 not in want and 11 not in want and want[:3] == [0, 1, 6]
    for workers in (0, 2):
        got = [int(b["batch_index"]) for b in ShardkitDataLoader(Loader(data / "code", **kw), num_workers=workers,
                                                                   group=2)]
        assert got == want


def test_explain_shows_skips(data):
    ld = _mix(data, skip=[[4, 6]], world_size=2, rank=0)
    assert explain(ld, 5, 0, decode=False).skipped == (4, 6)
    assert explain(ld, 7, 0, decode=False).skipped is None
    row = explain(ld, 5, 0, 0, decode=False).rows[0]
    seen = document_steps(ld, row.docs[0].doc, source=row.source, epoch=row.epoch)
    assert any(s.step == 5 and s.skipped for s in seen)


@pytest.mark.parametrize("bad,match", [
    ("1-3", "list of"), ([[5, 2]], r"skip\[0\] = \[5, 2\]"), ([[1]], r"skip\[0\] must be"),
    ([[True, 3]], r"skip\[0\] must be"), ([[-1, 3]], "0 ≤ first"),
])
def test_bad_skips_are_clear(data, bad, match):
    with pytest.raises(ConfigError, match=match):
        _mix(data, skip=bad)
    with pytest.raises(ConfigError, match=match):
        _mix(data, recipe=_recipe(skip=bad))


def test_corrupt_skips_in_a_state_name_the_field(data):
    state = _mix(data, skip=[[2, 3]]).state_dict()
    state["skips"] = [[3, "x"]]
    with pytest.raises(ResumeError, match="skips"):
        _mix(data).load_state_dict(state)


def test_skips_hold_across_a_recipe_change(data):
    """A resume into a changed recipe (allow_recipe_change) with a skip: the new stream from the saved batch,
    minus the skipped batches, with micro-batches."""
    ld = _mix(data, world_size=2, rank=0)
    for _ in itertools.islice(ld, 5):
        pass
    state = ld.state_dict()
    changed = _recipe()
    changed["phases"][0]["mix"] = {"web": 0.2, "code": 0.4, "math": 0.4}
    plain = _mix(data, recipe=changed, world_size=2, rank=1, micro_batch_size=1, allow_recipe_change=True)
    plain.load_state_dict(state)
    ref = [(i["batch_index"], i["micro_index"], i["input_ids"].copy()) for i in plain]
    skipping = _mix(data, recipe=dict(changed, skip=[[7, 8]]), world_size=2, rank=1, micro_batch_size=1,
                    allow_recipe_change=True)
    skipping.load_state_dict(state)
    got = [(i["batch_index"], i["micro_index"], i["input_ids"].copy()) for i in skipping]
    want = [r for r in ref if r[0] not in (7, 8)]
    assert [g[:2] for g in got] == [w[:2] for w in want] and got[0][0] == 5
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g[2], w[2])
