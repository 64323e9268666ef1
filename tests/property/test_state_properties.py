"""The one loader state: every state the engine emits round-trips; every mutation is refused naming a field
or resumes exactly; the overrides do what their docs say; states written by the previous release (format
version 1, saved by that release's own code) still resume to the very batches that release delivered."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.mixtures import make_sources

from shardkit.engine import BatchFields, stream_fingerprint
from shardkit.engine.state import parse_state
from shardkit.errors import ResumeError
from shardkit.loader import Loader, MixtureLoader
from shardkit.order import Ramp, parse_schedule

SEQ = 16
V1 = Path(__file__).resolve().parents[1] / "data" / "states_v1" / "states.json"
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("states")
    make_sources(root)
    return root


def _recipe(tokens_b=40_000, weights=None):
    return {"seed": 5, "seq_len": SEQ, "phases": [
        {"name": "a", "tokens": 2000, "batch": 4, "mix": {"web": 0.5, "code": 0.5}},
        {"name": "b", "tokens": tokens_b, "batch": 8, "seq_len": 2 * SEQ,
         "mix": weights or {"web": 0.25, "code": 0.25, "math": 0.5}}],
        "sources": {n: {"path": n} for n in ("web", "code", "math")}}


def _loader(root, kind, **kw):
    if kind == "loader":
        args = dict(seq_len=SEQ, seed=3, batch_schedule=Ramp(start=4, increment=4, ramp_samples=64, final=16),
                    micro_batch_size=2, max_epochs=3)
        args.update(kw)
        return Loader(root / "web", **args)
    recipe = kw.pop("recipe", None) or _recipe()
    return MixtureLoader(recipe, base_dir=root, micro_batch_size=2, **kw)


def _digest(items):
    h = xxhash.xxh3_128()
    for it in items:
        h.update(np.int64(it["batch_index"]).tobytes())
        h.update(np.int64(it["micro_index"]).tobytes())
        h.update(np.ascontiguousarray(it["input_ids"]).tobytes())
        h.update(np.ascontiguousarray(it["labels"]).tobytes())
        if "position_ids" in it:
            h.update(it["position_ids"].tobytes())
        if "source" in it:
            h.update(np.asarray(it["source"]).tobytes())
    return h.hexdigest()


def _next(loader, n):
    out = []
    for item in loader:
        out.append({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in item.items()})
        if len(out) == n:
            break
    return out


@SETTINGS
@given(kind=st.sampled_from(["loader", "mixture"]), at=st.integers(0, 60))
def test_every_emitted_state_round_trips_and_resumes_exactly(root, kind, at):
    ld = _loader(root, kind)
    _next(ld, at)
    state = json.loads(json.dumps(ld.state_dict()))
    assert parse_state(state).batch == ld.step
    after = _next(ld, 5)
    again = _loader(root, kind)
    again.load_state_dict(state)
    assert again.state_dict() == state  # loads and re-emits the same state
    assert _digest(_next(again, 5)) == _digest(after)


def _mutations(state):
    """(path, mutated state) for one field at a time: wrong types, wrong ranges, unknown keys, edits."""
    out = []
    for key in state:
        for value in (None, -1, "x", 2**70, 1.5, [], {}, True):
            s = copy.deepcopy(state)
            s[key] = value
            out.append((key, s))
        s = copy.deepcopy(state)
        del s[key]
        out.append((key, s))
    for name in state["sources"]:
        for field in ("samples", "tokens"):
            s = copy.deepcopy(state)
            s["sources"][name][field] += 1
            out.append((f"sources.{name}", s))
    s = copy.deepcopy(state)
    s["extra"] = 1
    out.append(("extra", s))
    s = copy.deepcopy(state)
    s["stream"]["definition"]["seed"] = 1234567
    out.append(("stream.fingerprint", s))
    return out


@pytest.mark.parametrize("kind", ["loader", "mixture"])
def test_every_mutated_state_is_refused_by_name_or_resumes_exactly(root, kind):
    ld = _loader(root, kind)
    _next(ld, 9)
    state = ld.state_dict()
    reference = _digest(_next(ld, 4))
    for path, bad in _mutations(state):
        fresh = _loader(root, kind)
        try:
            fresh.load_state_dict(bad)
        except ResumeError as e:
            assert e.field.split(".")[0] in {*state, "state", "fingerprint", "extra"}, (path, e.field, str(e))
            continue
        # accepted: only if it changes nothing about what comes next
        assert _digest(_next(fresh, 4)) == reference, (path, bad.get(path.split(".")[0]))


def test_allow_budget_change_continues_the_same_stream_to_the_new_end(root):
    ld = _loader(root, "loader", max_epochs=2)
    _next(ld, 11)
    state = ld.state_dict()
    longer = _loader(root, "loader", max_epochs=5)
    with pytest.raises(ResumeError, match="stream.budget_samples.*allow_budget_change"):
        longer.load_state_dict(state)
    longer.load_state_dict(state, allow_budget_change=True)
    reference = _loader(root, "loader", max_epochs=5)
    reference.load_state_dict(reference.state_at(state["batch"], state["micro"]))
    assert _digest(_next(longer, 30)) == _digest(_next(reference, 30))  # exact: the same batches as a fresh run
    assert longer.num_batches() == reference.num_batches() > ld.num_batches()


def test_allow_budget_change_in_a_recipe_extends_the_last_phase_exactly(root):
    ml = _loader(root, "mixture")
    _next(ml, 20)
    state = ml.state_dict()
    longer = _loader(root, "mixture", recipe=_recipe(tokens_b=80_000))
    with pytest.raises(ResumeError, match=r"stream.phases\[1\].tokens.*allow_budget_change"):
        longer.load_state_dict(state)
    longer.load_state_dict(state, allow_budget_change=True)
    reference = _loader(root, "mixture", recipe=_recipe(tokens_b=80_000))
    reference.load_state_dict(reference.state_at(state["batch"], state["micro"]))
    assert _digest(_next(longer, 25)) == _digest(_next(reference, 25))


def test_a_budget_change_that_moves_the_past_is_refused_even_when_allowed(root):
    ml = _loader(root, "mixture")
    _next(ml, 40)  # inside phase b
    state = ml.state_dict()
    shorter_a = _recipe()
    shorter_a["phases"][0]["tokens"] = 1000  # phase a ends earlier: batch 40 is no longer where it was
    with pytest.raises(ResumeError, match="allow_recipe_change"):
        _loader(root, "mixture", recipe=shorter_a).load_state_dict(state, allow_budget_change=True)


def test_allow_recipe_change_continues_every_source_where_it_was(root):
    ml = _loader(root, "mixture")
    _next(ml, 30)
    state = ml.state_dict()
    other = _loader(root, "mixture", recipe=_recipe(weights={"web": 0.5, "code": 0.5}))
    with pytest.raises(ResumeError, match="allow_recipe_change"):
        other.load_state_dict(state)
    other.load_state_dict(state, allow_recipe_change=True)
    assert other.step == state["batch"]
    after = other.state_dict()
    for name in ("web", "code"):  # each source's position is carried over exactly
        assert after["sources"][name] == state["sources"][name]
    assert after["sources"]["math"] == state["sources"]["math"] | {"active": False}


def test_allow_data_change_keeps_positions_on_new_data(root, tmp_path):
    ld = _loader(root, "loader")
    _next(ld, 9)
    state = ld.state_dict()
    state["datasets"]["data"] = "f" * 64  # as if the dataset had been re-packed
    fresh = _loader(root, "loader")
    with pytest.raises(ResumeError, match="fingerprint.*allow_data_change"):
        fresh.load_state_dict(state)
    fresh.load_state_dict(state, allow_data_change=True)
    assert fresh.step == state["batch"] and fresh.micro == state["micro"]


def test_force_is_a_deprecated_spelling_of_every_override(root):
    ld = _loader(root, "loader")
    _next(ld, 3)
    state = ld.state_dict()
    state["datasets"]["data"] = "f" * 64
    with pytest.warns(DeprecationWarning, match=r"force=True\) is deprecated"):
        _loader(root, "loader").load_state_dict(state, force=True)


def _case_loader(root, case):
    if case["kind"] == "loader":
        args = dict(case["args"])
        if "batch_schedule" in args:
            args["batch_schedule"] = parse_schedule(args["batch_schedule"])
        if "fields" in args:
            args["fields"] = BatchFields.parse(args["fields"])
        return Loader(root / "web", **args)
    return MixtureLoader(case["recipe"], base_dir=root)


@pytest.mark.parametrize("i", range(6))
def test_version_1_states_saved_by_the_previous_release_resume_to_its_batches(root, i):
    cases = json.loads(V1.read_text())["cases"]
    case = cases[i]
    assert case["state"]["version"] == 1
    ld = _case_loader(root, case)
    ld.load_state_dict(case["state"])
    assert ld.step == case["state"]["batch"]
    assert _digest(_next(ld, case["items"])) == case["next_digest"], case["name"]
    migrated = ld.state_dict()
    assert migrated["version"] == 2 and migrated["stream"]["fingerprint"] == stream_fingerprint(
        migrated["stream"]["kind"], migrated["stream"]["definition"])


@pytest.mark.parametrize("where", ["value", "key"])
def test_a_state_with_an_unpaired_surrogate_is_refused_by_name(where):
    """"\\ud800" is valid JSON but no text: hashing the definition must not raise UnicodeEncodeError."""
    config = {"seq_len": 8, "seed": 0, "schedule": {"constant": 4}}
    if where == "value":
        config["seed"] = "\ud800"
    else:
        config["\ud800"] = 1
    state = {"format": "shardkit-loader-state", "version": 1, "fingerprint": "ab" * 32, "config": config,
             "batch": 0, "micro": 0, "samples": 0, "world_size": 1, "rank": 0}
    with pytest.raises(ResumeError, match="unpaired surrogate") as e:
        parse_state(json.loads(json.dumps(state)))
    assert "config" in str(e.value)
