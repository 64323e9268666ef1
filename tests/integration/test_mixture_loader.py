"""The mixture loader on real (small) datasets: windows, phases, epochs, seq_len changes, resume, errors."""

import itertools
import json
import warnings

import numpy as np
import pytest
from support.mixtures import SEQ, make_sources, three_phase_recipe, window

from shardkit.engine import BatchFields
from shardkit.errors import ConfigError, InputError, ResumeError
from shardkit.loader import Loader, MixtureLoader
from shardkit.mixture import RecipeWarning
from shardkit.mixture.sources import stream_seed
from shardkit.order import SampleOrder, ShuffleConfig
from shardkit.writer import write_dataset


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return root, make_sources(root)


def _loader(root, r=None, **kw):
    return MixtureLoader(r or three_phase_recipe(), base_dir=root, readahead=False, **kw)


def _rows(loader, n=None):
    return [(b["batch_index"], b["input_ids"].copy(), b["labels"].copy(), b["source"].copy())
            for b in itertools.islice(loader, n)]


def test_every_row_is_the_window_of_its_source(data):
    root, flats = data
    loader = _loader(root)
    assert loader.num_batches() == loader.plan.num_batches > 30
    seen_phases = set()
    for item in loader:
        b = item["batch_index"]
        src, ids = loader.global_sample_ids(b)
        length = loader.seq_len_at(b)
        assert item["input_ids"].shape == (src.size, length) and np.array_equal(item["source"], src)
        seen_phases.add(item["phase_name"])
        for row, (j, sid) in enumerate(zip(src.tolist(), ids.tolist())):
            w = window(flats[loader.sources[j]], sid, length)
            np.testing.assert_array_equal(item["input_ids"][row], w[:-1])
            np.testing.assert_array_equal(item["labels"][row], w[1:])
            assert 1000 * (j + 1) <= int(w.min()) and int(w.max()) < 1000 * (j + 2)
    assert seen_phases == {"warmup", "main", "long"}


def test_batch_keys_are_the_loaders_plus_phase_and_source(data, tmp_path):
    root, _ = data
    item = next(iter(_loader(root)))
    single = next(iter(Loader(root / "web", seq_len=SEQ, batch_schedule=4)))
    assert set(item) == set(single) | {"phase", "phase_name", "source"}
    assert (item["phase"], item["phase_name"], item["global_batch_size"]) == (0, "warmup", 4)
    assert item["source"].dtype == np.int64 and item["input_ids"].dtype == np.uint16


def test_recipe_files_resolve_paths_next_to_them(data, tmp_path):
    root, _ = data
    yaml_text = (f"seed: 7\nseq_len: {SEQ}\nphases:\n  - {{name: a, tokens: 3000, batch: 4, mix: {{web: 0.7, "
                 f"code: 0.3}}}}\nsources:\n  web: {{path: web}}\n  code: {{path: {root / 'code'}}}\n")
    (root / "r.yaml").write_text(yaml_text)
    toml_text = (f'seed = 7\nseq_len = {SEQ}\n[[phases]]\nname = "a"\ntokens = 3000\nbatch = 4\n'
                 f'mix = {{web = 0.7, code = 0.3}}\n[sources.web]\npath = "web"\n[sources.code]\n'
                 f'path = "{root / "code"}"\n')
    (root / "r.toml").write_text(toml_text)
    a, b = MixtureLoader(root / "r.yaml", readahead=False), MixtureLoader(str(root / "r.toml"), readahead=False)
    assert a.fingerprint == b.fingerprint
    assert [x[1].tolist() for x in _rows(a)] == [x[1].tolist() for x in _rows(b)]


def test_bad_input_is_a_clear_error_before_any_data_is_read(data, tmp_path):
    root, _ = data
    bad_path = three_phase_recipe(sources={**three_phase_recipe()["sources"], "math": {"path": "nowhere"}})
    with pytest.raises(InputError, match="source 'math'.*no such directory"):
        _loader(root, bad_path)
    long = three_phase_recipe()
    long["phases"][2]["seq_len"] = 10**6
    with pytest.raises(ConfigError, match=r"phases\[2\] \(long\): seq_len 1,000,000 is too long for source"):
        _loader(root, long)
    with pytest.raises(ConfigError, match=r"not divisible by world_size 3 \(passed to the loader\)"):
        _loader(root, world_size=3, rank=0)
    with pytest.raises(ConfigError, match="micro_batch_size 3"):
        _loader(root, world_size=1, rank=0, micro_batch_size=3)
    for tokens in (0, -5):
        zero = three_phase_recipe()
        zero["phases"][1]["tokens"] = tokens
        with pytest.raises(ConfigError, match=r"phases\[1\].tokens"):
            _loader(root, zero)
    unknown = three_phase_recipe()
    unknown["phases"][1]["mix"] = {"web": 0.5, "cod": 0.5}
    with pytest.raises(ConfigError, match="unknown source 'cod'.*did you mean 'code'"):
        _loader(root, unknown)
    uneven = three_phase_recipe()
    uneven["phases"][1]["mix"] = {"web": 2, "code": 1}
    with pytest.warns(RecipeWarning, match="normalized"):
        _loader(root, uneven)
    with pytest.raises(ConfigError, match="sum to 1"):
        _loader(root, uneven, strict=True)
    with pytest.raises(ConfigError, match="rank=2 is not in"):
        _loader(root, world_size=2, rank=2)


def test_upsampled_source_repeats_with_a_new_permutation_per_epoch(data):
    root, _ = data
    r = three_phase_recipe(phases=[{"name": "only", "tokens": 40_000, "batch": 8, "mix": {"math": 0.75, "web": 0.25}}])
    loader = _loader(root, r)
    j = loader.sources.index("math")
    ids = np.concatenate([ids[src == j] for src, ids in map(loader.global_sample_ids, range(loader.num_batches()))])
    n = loader.streams[(j, SEQ)].num_samples
    assert ids.size > 3 * n
    epochs = [ids[e * n:(e + 1) * n] for e in range(3)]
    for e in epochs:
        assert np.array_equal(np.sort(e), np.arange(n))  # every sample exactly once per epoch
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
    assert loader.metrics.to_json(batch=loader.num_batches())["sources"]["math"]["epoch"] >= 3


def test_epoch_cap_ends_the_run_with_a_clear_message(data):
    root, _ = data
    r = three_phase_recipe(phases=[{"name": "only", "tokens": 40_000, "batch": 8, "mix": {"math": 0.75, "web": 0.25}}],
               sources={"web": {"path": "web"}, "math": {"path": "math", "epochs": 2}})
    with pytest.warns(RecipeWarning, match="source 'math' runs out of data at global batch"):
        loader = _loader(root, r)
    assert loader.num_batches() < loader.plan.num_batches
    j = loader.sources.index("math")
    limit = 2 * loader.streams[(j, SEQ)].num_samples
    last = loader.num_batches() - 1

    def math_positions(b):
        mix = loader.plan.assign_batch(b)
        return loader._cursor.positions(mix.phase, mix.source, mix.counter)[mix.source == j]

    assert math_positions(last).max() < limit <= math_positions(last + 1).max()
    with pytest.warns(RecipeWarning, match="epochs: 2"):
        got = _rows(loader)
    assert len(got) == loader.num_batches() and got[-1][0] == last
    assert loader.metrics.to_json()["exhausted"] == {"source": "math", "batch": last + 1, "phase": "only"}
    with pytest.raises(ConfigError, match="capped"):
        loader.global_sample_ids(last + 1)


def test_seq_len_change_continues_each_source_by_tokens(data):
    """Phase `long` doubles seq_len: each source's first position there is ⌈tokens given / 2L⌉ (shuffle none)."""
    root, flats = data
    loader = _loader(root, three_phase_recipe(shuffle="none"))
    first = loader.plan.bounds[2].first_batch
    tokens = loader._cursor.tokens_before(first)
    seen = {}
    for b in range(first, loader.num_batches()):
        src, ids = loader.global_sample_ids(b)
        for j, sid in zip(src.tolist(), ids.tolist()):
            seen.setdefault(j, []).append(sid)
    for j, ids in seen.items():
        n = loader.streams[(j, 2 * SEQ)].num_samples
        start = -(-int(tokens[j]) // (2 * SEQ))
        assert ids == [(start + t) % n for t in range(len(ids))]
    web = loader.sources.index("web")
    assert tokens[web] % (2 * SEQ) and seen[web][0] * 2 * SEQ >= tokens[web]  # no window of the web data twice


def test_state_dict_is_small_json_and_resume_is_exact(data):
    root, _ = data
    reference = _rows(_loader(root))
    for at in (0, 5, 9, 10, 11, len(reference) - 1, len(reference)):
        first = _loader(root)
        _rows(first, at)
        state = json.loads(json.dumps(first.state_dict()))
        assert len(json.dumps(state)) < 4096 and state["batch"] == at  # with the recipe itself
        again = _loader(root)
        again.load_state_dict(state)
        rest = _rows(again)
        assert [r[0] for r in rest] == [r[0] for r in reference[at:]]
        for got, ref in zip(rest, reference[at:]):
            np.testing.assert_array_equal(got[1], ref[1])
    huge = _loader(root, three_phase_recipe(phases=[{"name": "p", "tokens": "1T", "batch": 8, "mix": {"web": 0.5, "math": 0.5}}]))
    huge.load_state_dict(huge.state_at(10**9))
    item = next(iter(huge))
    assert item["batch_index"] == 10**9 and huge.state_dict()["sources"]["web"]["samples"] == 4 * (10**9 + 1)


def test_resume_refusals(data, tmp_path):
    root, flats = data
    loader = _loader(root)
    _rows(loader, 4)
    state = loader.state_dict()
    other = three_phase_recipe()
    other["phases"][0]["mix"] = {"web": 0.5, "code": 0.4, "math": 0.1}
    with pytest.raises(ResumeError, match=r"stream.phases\[0\].mix.code: saved 0.3, now 0.4.*allow_recipe_change=True"):
        _loader(root, other).load_state_dict(state)
    changed = {**state, "datasets": {**state["datasets"], "web": "0" * 64}}
    with pytest.raises(ResumeError, match="datasets.web.*allow_data_change=True"):
        _loader(root).load_state_dict(changed)
    _loader(root).load_state_dict(changed, allow_data_change=True)
    single = Loader(root / "web", seq_len=SEQ, batch_schedule=4).state_dict()
    with pytest.raises(ResumeError, match=r"stream.kind: .*single dataset \(Loader\)"):
        _loader(root).load_state_dict(single)
    edited = json.loads(json.dumps(state))
    edited["sources"]["web"]["tokens"] += 1
    for bad, field in ((None, "state"), ({**state, "version": 9}, "version"), ({**state, "batch": -1}, "batch"),
                       ({**state, "samples": 3}, "samples"), (edited, "sources.web"),
                       ({**state, "sources": []}, "sources"), ({**state, "anchor": 99}, "anchor"),
                       ({**state, "batch": 10**6}, "batch"), ({**state, "micro": 1}, "micro")):
        with pytest.raises(ResumeError, match=field):
            _loader(root).load_state_dict(bad)


def _source_ids(loader, first, stop):
    """{source name: sample ids in stream order} over global batches [first, stop)."""
    out = {}
    for b in range(first, stop):
        src, ids = loader.global_sample_ids(b)
        for j, sid in zip(src.tolist(), ids.tolist()):
            out.setdefault(loader.sources[j], []).append(sid)
    return out


def test_recipe_change_mid_run_continues_each_sources_order(data):
    root, _ = data
    one = {"name": "p", "tokens": 8000, "batch": 8}
    a = three_phase_recipe(phases=[{**one, "mix": {"web": 0.5, "code": 0.25, "math": 0.25}}])
    b = three_phase_recipe(phases=[{**one, "tokens": 16000, "mix": {"web": 0.25, "code": 0.75}}])
    c = three_phase_recipe(phases=[{**one, "tokens": 24000, "mix": {"web": 0.5, "math": 0.5}}])
    first = _loader(root, a)
    _rows(first, 20)
    state_a = first.state_dict()
    second = _loader(root, b)
    with pytest.raises(ResumeError, match="recipe"):
        second.load_state_dict(state_a)
    second.load_state_dict(state_a, allow_recipe_change=True)
    assert second.step == 20 and second.state_dict()["anchor"] == 20
    with pytest.raises(ConfigError, match="took over"):
        second.global_sample_ids(19)
    # each source continues its own order exactly where run `a` left it
    full_a = _loader(root, a)
    ref = _source_ids(full_a, 0, full_a.num_batches())
    done = {n: s for n, (s, _) in ((n, (v["samples"], v["tokens"])) for n, v in state_a["sources"].items())}
    got = _source_ids(second, 20, 60)
    order = {n: full_a.streams[(full_a.sources.index(n), SEQ)].order for n in ("web", "code")}
    num = {n: full_a.streams[(full_a.sources.index(n), SEQ)].num_samples for n in ("web", "code")}
    for n in ("web", "code"):
        pos = done[n] + np.arange(len(got[n]))
        expect = [int(order[n].sample_ids(int(p // num[n]), np.array([p % num[n]]))[0]) for p in pos]
        assert got[n] == expect
        assert ref[n][:done[n]] == [int(order[n].sample_ids(int(p // num[n]), np.array([p % num[n]]))[0])
                                    for p in range(done[n])]
    # the new run's own state resumes exactly (its offsets are in the state) and carries the retired source
    _rows(second, 10)
    state_b = json.loads(json.dumps(second.state_dict()))
    assert state_b["sources"]["math"] == {**state_a["sources"]["math"], "active": False}
    assert set(state_b["offsets"]) <= {"web", "code"}
    resumed = _loader(root, b)
    resumed.load_state_dict(state_b)
    uninterrupted = _rows(second)
    again = _rows(resumed)
    assert [x[0] for x in again] == [x[0] for x in uninterrupted]
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(again, uninterrupted))
    # a third recipe brings `math` back: it continues where run `a` left it
    third = _loader(root, c)
    third.load_state_dict(state_b, allow_recipe_change=True)
    math = _source_ids(third, 30, 40)["math"]
    m = full_a.sources.index("math")
    n_m = full_a.streams[(m, SEQ)].num_samples
    p0 = state_a["sources"]["math"]["samples"]
    assert math == [int(full_a.streams[(m, SEQ)].order.sample_ids((p0 + t) // n_m, np.array([(p0 + t) % n_m]))[0])
                    for t in range(len(math))]


def test_metrics_name_the_phase_and_each_sources_consumption(data):
    root, _ = data
    loader = _loader(root)
    rows = _rows(loader, 12)
    m = loader.metrics.to_json()
    assert m["batch"] == 12 and m["phase_name"] == loader.plan.phases[loader.phase].name
    assert m["samples"] == sum(r[1].shape[0] for r in rows) == sum(s["samples"] for s in m["sources"].values())
    for j, name in enumerate(loader.sources):
        delivered = sum(int((r[3] == j).sum()) for r in rows)
        assert m["sources"][name]["rows_delivered"] == delivered == m["sources"][name]["samples"]
        assert m["sources"][name]["tokens"] == delivered * SEQ
    assert m["steps"] == 12 and m["bytes_copied"] == m["samples"] * (SEQ + 1) * 2
    assert json.loads(json.dumps(m)) == m


def test_position_ids_and_cu_seqlens_follow_each_rows_own_source(data):
    root, _ = data
    fields = BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True, mask_doc_boundary=True)
    loader = _loader(root, fields=fields)
    def doc_starts(ds, sid):  # the oracle: every document start of the flat stream, from the index alone
        docs = np.concatenate([s.doc_offsets[:-1] + ds.token_offsets[i] for i, s in enumerate(ds.shards)])
        g0 = sid * SEQ
        return docs[(docs > g0) & (docs <= g0 + SEQ)] - g0

    for item in (x for _, x in zip(range(12), loader)):
        src, ids = loader.global_sample_ids(item["batch_index"])
        for row, (j, sid) in enumerate(zip(src.tolist(), ids.tolist())):
            starts = doc_starts(loader.datasets[loader.sources[j]], sid)
            inner = starts[starts < SEQ]
            expect = np.arange(SEQ) - np.maximum.accumulate(np.where(np.isin(np.arange(SEQ), inner),
                                                                     np.arange(SEQ), 0))
            np.testing.assert_array_equal(item["position_ids"][row], expect)
        assert item["cu_seqlens"][-1] == src.size * SEQ


def test_micro_batches_and_worker_units_give_the_same_stream(data):
    root, _ = data
    whole = {b: x for b, x, _, _ in _rows(_loader(root))}
    loader = _loader(root, micro_batch_size=2, world_size=2, rank=1)
    per = {}
    for item in loader:
        per.setdefault(item["batch_index"], []).append(item["input_ids"])
    for b, parts in per.items():
        np.testing.assert_array_equal(np.concatenate(parts), whole[b][whole[b].shape[0] // 2:])
    sequence = {u: item["input_ids"] for u, item in loader.iter_units(5, stop=40)}
    split = {}
    for w in range(3):  # DataLoader workers: worker w takes units 5 + w, 8 + w, ...
        worker = _loader(root, micro_batch_size=2, world_size=2, rank=1)
        split.update({u: item["input_ids"] for u, item in worker.iter_units(5 + w, stride=3, stop=40)})
    assert sorted(split) == sorted(sequence) == list(range(5, 40))
    assert all(np.array_equal(split[u], sequence[u]) for u in sequence)
    b, q = loader.unit_position(17)
    assert loader.unit_index(b, q) == 17


def test_torch_dataloader_workers_see_the_same_stream(data):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardkit.torch import ShardkitIterableDataset

    root, _ = data
    ref = [x for _, x, _, _ in _rows(_loader(root))]
    ds = ShardkitIterableDataset(_loader(root))
    got = [item["input_ids"].numpy() for item in DataLoader(ds, batch_size=None, num_workers=2)]
    assert len(got) == len(ref) and all(np.array_equal(a, b) for a, b in zip(got, ref))


def test_sources_of_different_dtypes_are_copied_per_source(data, tmp_path):
    root, flats = data
    wide = [np.arange(i * 40, i * 40 + 37, dtype=np.int32) + 70_000 for i in range(60)]
    write_dataset(tmp_path / "wide", wide, dtype="int32", max_tokens_per_shard=500, checksum_block_size=4096)
    r = three_phase_recipe(phases=[{"name": "p", "tokens": 3000, "batch": 4, "mix": {"web": 0.5, "wide": 0.5}}],
               sources={"web": {"path": str(root / "web")}, "wide": {"path": "wide"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecipeWarning)
        loader = MixtureLoader(r, base_dir=tmp_path, readahead=False)
    assert loader.dtype == np.int32
    flat = {"web": flats["web"], "wide": np.concatenate(wide)}
    for item in loader:
        src, ids = loader.global_sample_ids(item["batch_index"])
        for row, (j, sid) in enumerate(zip(src.tolist(), ids.tolist())):
            np.testing.assert_array_equal(item["input_ids"][row], window(flat[loader.sources[j]], sid, SEQ)[:-1])


def test_source_orders_are_pinned_and_independent_of_other_sources(data):
    """Golden values: change only deliberately (it changes every user's sample stream)."""
    assert stream_seed(0, "web", 2048) == 0x36A1781B06188EE9
    assert stream_seed(1234, "code", 4096) == 0x56AA1842420C8602
    assert stream_seed(7, "web", 16) != stream_seed(7, "web", 32)
    order = SampleOrder(1000, ShuffleConfig(mode="block", block_samples=64, group_blocks=4), stream_seed(7, "web", 16))
    assert order.sample_ids(0, np.arange(8)).tolist() == [328, 825, 4, 336, 808, 239, 19, 355]
    assert order.sample_ids(1, np.arange(8)).tolist() == [776, 17, 660, 3, 782, 693, 666, 779]
    root, _ = data
    two = _loader(root, three_phase_recipe(phases=[{"name": "p", "tokens": 4000, "batch": 8, "mix": {"web": 1}}]))
    three = _loader(root, three_phase_recipe(phases=[{"name": "p", "tokens": 4000, "batch": 8, "mix": {"web": 0.5, "code": 0.5}}]))
    w2, w3 = two.sources.index("web"), three.sources.index("web")
    a = two.streams[(w2, SEQ)].order.sample_ids(0, np.arange(50))
    b = three.streams[(w3, SEQ)].order.sample_ids(0, np.arange(50))
    assert np.array_equal(a, b)  # adding a source does not change another source's order


def test_sources_naming_the_same_directory_share_one_mapping(data):
    root, flats = data
    r = three_phase_recipe(phases=[{"name": "p", "tokens": 3000, "batch": 8, "mix": {"web": 0.5, "again": 0.5}}],
               sources={"web": {"path": "web"}, "again": {"path": str(root / "web")}})
    loader = MixtureLoader(r, base_dir=root)  # readahead on: eviction stays off for shared files
    assert loader.datasets["web"] is loader.datasets["again"]
    assert all(h.release_kind == "release" for h in loader.engine.hints.values())  # never evicted
    a, w = loader.sources.index("again"), loader.sources.index("web")
    assert not np.array_equal(loader.streams[(a, SEQ)].order.sample_ids(0, np.arange(20)),
                              loader.streams[(w, SEQ)].order.sample_ids(0, np.arange(20)))  # own orders
    for item in loader:
        _, ids = loader.global_sample_ids(item["batch_index"])
        for row, sid in enumerate(ids.tolist()):
            np.testing.assert_array_equal(item["input_ids"][row], window(flats["web"], sid, SEQ)[:-1])


def test_loader_from_recipe_is_the_mixture_loader(data, tmp_path):
    import shardkit

    root, _ = data
    path = tmp_path / "recipe.json"
    r = three_phase_recipe(sources={k: {"path": str(root / k)} for k in ("web", "code", "math")})
    path.write_text(json.dumps(r))
    via_loader = shardkit.Loader.from_recipe(str(path), readahead=False)
    assert isinstance(via_loader, MixtureLoader)
    got = _rows(via_loader, 12)
    ref = _rows(_loader(root), 12)
    assert all(a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[3], b[3]) for a, b in zip(got, ref))


def test_a_mid_step_state_needs_the_same_world_size(data):
    root, _ = data
    ld = _loader(root, micro_batch_size=1, world_size=2, rank=0)
    next(iter(ld))
    state = ld.state_dict()
    assert state["micro"] == 1 and state["micro_batch_size"] == 1
    with pytest.raises(ResumeError, match="inside a step"):
        _loader(root, micro_batch_size=1, world_size=1).load_state_dict(state)
    _loader(root, micro_batch_size=1, world_size=2, rank=0).load_state_dict(state)
