"""Mixture recipes: YAML/TOML/JSON/dict loading, normalization, fingerprints, and every validation message."""

import copy
import json
import sys
import warnings
from fractions import Fraction

import pytest

from shardkit.errors import ConfigError, InputError, MissingDependencyError
from shardkit.mixture import Recipe, RecipeWarning, WeightsBy, load_recipe
from shardkit.order import Constant, Piecewise, Ramp, ShuffleMode

YAML = """\
seed: 1234
seq_len: 4096
phases:
  - name: pretrain
    tokens: 10T
    batch: {ramp: {start: 512, increment: 512, over_samples: 50M, final: 4096}}
    mix: {web: 0.7, code: 0.2, math: 0.1}
  - name: anneal
    tokens: 500B
    batch: 8192
    seq_len: 8192        # optional per-phase override
    mix: {web: 0.3, code: 0.3, math: 0.4}
sources:
  web:  {path: "s3://bucket/web/"}
  code: {path: shards/code/, shuffle: full}
  math: {path: shards/math/, epochs: auto}
shuffle: block
weights_by: tokens
"""

TOML = """\
seed = 1234
seq_len = 4096
shuffle = "block"
weights_by = "tokens"

[[phases]]
name = "pretrain"
tokens = "10T"
batch = { ramp = { start = 512, increment = 512, over_samples = "50M", final = 4096 } }
mix = { web = 0.7, code = 0.2, math = 0.1 }

[[phases]]
name = "anneal"
tokens = "500B"
batch = 8192
seq_len = 8192
mix = { web = 0.3, code = 0.3, math = 0.4 }

[sources.web]
path = "s3://bucket/web/"

[sources.code]
path = "shards/code/"
shuffle = "full"

[sources.math]
path = "shards/math/"
epochs = "auto"
"""


def _base():
    return {
        "seed": 1,
        "seq_len": 16,
        "phases": [
            {"name": "pretrain", "tokens": 1600, "batch": 8, "mix": {"web": 0.7, "code": 0.2, "math": 0.1}},
            {"name": "anneal", "tokens": "3.2K", "batch": 4, "mix": {"web": 0.3, "code": 0.3, "math": 0.4}},
        ],
        "sources": {"web": {"path": "s3://b/web/"}, "code": {"path": "code/"}, "math": {"path": "math/"}},
    }


def _edit(fn):
    data = copy.deepcopy(_base())
    fn(data)
    return data


def _error(data, *fragments, strict=False):
    with pytest.raises(ConfigError) as info:
        load_recipe(data, strict=strict)
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text
    return text


# -- reading --------------------------------------------------------------------------------------------------


def _check_example(r):
    assert r.seed == 1234 and r.shuffle is ShuffleMode.BLOCK and r.weights_by is WeightsBy.TOKENS
    pre, ann = r.phases
    assert (pre.name, pre.tokens, pre.seq_len) == ("pretrain", 10**13, 4096)
    assert pre.batch == Ramp(start=512, increment=512, ramp_samples=50_000_000, final=4096)
    assert pre.mix == (("code", Fraction(1, 5)), ("math", Fraction(1, 10)), ("web", Fraction(7, 10)))
    assert (ann.tokens, ann.seq_len, ann.batch) == (5 * 10**11, 8192, Constant(8192))
    assert [s.name for s in r.sources] == ["code", "math", "web"]
    assert r.source("web").path == "s3://bucket/web/" and r.source("math").epochs is None
    assert r.shuffle_of("code") is ShuffleMode.FULL and r.shuffle_of("web") is ShuffleMode.BLOCK


def test_yaml_file(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "recipe.yaml"
    path.write_text(YAML)
    _check_example(load_recipe(path))
    _check_example(load_recipe(str(path)))


def test_toml_file(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text(TOML)
    _check_example(load_recipe(path))


def test_yaml_toml_json_and_dict_agree(tmp_path):
    pytest.importorskip("yaml")
    (tmp_path / "r.yaml").write_text(YAML)
    (tmp_path / "r.toml").write_text(TOML)
    a, b = load_recipe(tmp_path / "r.yaml"), load_recipe(tmp_path / "r.toml")
    assert a == b and a.fingerprint() == b.fingerprint()
    (tmp_path / "r.json").write_text(json.dumps(a.to_json()))
    assert load_recipe(tmp_path / "r.json") == a


def test_to_json_round_trips_and_fingerprint_is_canonical():
    r = load_recipe(_base())
    data = r.to_json()
    json.dumps(data)  # JSON-able
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_recipe(data, strict=True) == r
    assert load_recipe(data).fingerprint() == r.fingerprint()
    assert len(r.fingerprint()) == 64
    reordered = _edit(lambda d: d["phases"][0].update(mix={"math": "1/10", "web": 7, "code": 2}))
    with pytest.warns(RecipeWarning):  # 7 + 2 + 1/10 is not 1: normalized, with a warning
        other = load_recipe(reordered)
    assert other.fingerprint() != r.fingerprint()
    same = _edit(lambda d: d["phases"][0].update(mix={"math": "1/10", "web": "7/10", "code": 0.2}))
    assert load_recipe(same).fingerprint() == r.fingerprint()  # key order and spelling do not matter
    changed = _edit(lambda d: d["phases"][0].update(mix={"web": 0.6, "code": 0.3, "math": 0.1}))
    assert load_recipe(changed).fingerprint() != r.fingerprint()
    thirds = _edit(lambda d: d["phases"][0].update(mix={"web": "1/3", "code": "1/3", "math": "1/3"}))
    r3 = load_recipe(thirds)
    assert r3.to_json()["phases"][0]["mix"]["web"] == "1/3" and load_recipe(r3.to_json()) == r3


def test_schedules_and_counts():
    def ramp(d):
        d["phases"][0]["batch"] = {"ramp": {"start": 2, "increment": 2, "ramp_samples": "1K", "final": 8}}
        d["phases"][1]["batch"] = {"piecewise": {"unit": "tokens", "pieces": [["1K", 2]], "final": 4}}

    r = load_recipe(_edit(ramp))
    assert r.phases[0].batch == Ramp(start=2, increment=2, ramp_samples=1000, final=8)
    assert r.phases[1].batch == Piecewise(pieces=((1000, 2),), final=4, unit="tokens", seq_len=16)
    assert r.phases[1].tokens == 3200
    steps = load_recipe(_edit(lambda d: d["phases"][0].update(batch={"piecewise": {"pieces": [[3, 2]],
                                                                                   "final": 8}})))
    assert steps.phases[0].batch == Piecewise(pieces=((3, 2),), final=8)
    const = load_recipe(_edit(lambda d: d["phases"][0].update(batch={"constant": {"size": 8}})))
    assert const.phases[0].batch == Constant(8)
    assert load_recipe(_edit(lambda d: d["phases"][0].update(batch=Constant(8)))).phases[0].batch == Constant(8)
    assert load_recipe(_edit(lambda d: d["phases"][0].update(tokens=1.6e3))).phases[0].tokens == 1600


def test_paths_are_not_checked_and_defaults():
    r = load_recipe(_edit(lambda d: (d.pop("seed"), d["sources"]["web"].update(path="/does/not/exist"))))
    assert r.seed == 0 and r.shuffle is ShuffleMode.BLOCK and r.source("web").path == "/does/not/exist"
    assert r.source("code").epochs is None
    assert load_recipe(_edit(lambda d: d["sources"]["code"].update(epochs=3))).source("code").epochs == 3


def test_plan_and_world_size():
    r = load_recipe(_base())
    plan = r.plan
    assert plan is r.plan and plan.sources == ("code", "math", "web")
    assert [b.num_batches for b in plan.bounds] == [13, 50]  # 100 samples → 13 batches of 8; 200 → 50 of 4
    r.validate_world_size(4)
    r.validate_world_size(2, micro_batch_size=2)
    with pytest.raises(ConfigError, match=r"phases\[0\] \(pretrain\): batch size 8 .* world size 3"):
        r.validate_world_size(3)
    with pytest.raises(ConfigError, match=r"phases\[1\] \(anneal\): batch size 4 .* world size 8"):
        r.validate_world_size(8)
    with pytest.raises(ConfigError, match=r"phases\[1\] \(anneal\).*micro_batch_size 4"):
        r.validate_world_size(2, micro_batch_size=4)
    # only the batch sizes a phase reaches count: this ramp (3, 5, 7) never gets past 3 within 20 samples
    short = load_recipe(_edit(lambda d: (d["phases"][0].update(
        tokens=20 * 16, batch={"ramp": {"start": 3, "increment": 2, "over_samples": 10**6, "final": 7}}),
        d["phases"][1].update(batch=6))))
    short.validate_world_size(3)
    with pytest.raises(ConfigError, match="world size 2"):
        short.validate_world_size(2)


# -- validation messages --------------------------------------------------------------------------------------


def test_unknown_source_in_mix():
    data = _edit(lambda d: d["phases"][1]["mix"].update(maths=0.0001))
    _error(data, "phases[1].mix.maths: unknown source 'maths' (sources: code, math, web)", "did you mean 'math'")
    _error(_edit(lambda d: d["phases"][0]["mix"].update(books=1)), "phases[0].mix.books: unknown source 'books'",
           "add it under sources")


def test_weight_below_the_resolution():
    _error(_edit(lambda d: d["phases"][0].update(mix={"web": 1, "code": 1e-7})),
           "phases[0].mix: the weight of 'code' is 1e-07 of the mix, below the resolution 1e-5")


def test_weights_not_summing_to_one():
    data = _edit(lambda d: d["phases"][1].update(mix={"web": 0.3, "code": 0.3, "math": 0.3}))
    with pytest.warns(RecipeWarning, match=r"phases\[1\]\.mix \(phase 'anneal'\): weights sum to 0.9, not 1"):
        r = load_recipe(data)
    assert r.phases[1].weights == {"code": Fraction(1, 3), "math": Fraction(1, 3), "web": Fraction(1, 3)}
    _error(data, "phases[1].mix (phase 'anneal'): weights sum to 0.9", "strict", strict=True)


@pytest.mark.parametrize("weight, fragment", [(0, "must be > 0"), (-0.2, "must be > 0"), ("abc", "finite number"),
                                              (True, "must be a number"), (None, "must be a number"),
                                              (float("nan"), "finite number")])
def test_bad_weights(weight, fragment):
    _error(_edit(lambda d: d["phases"][0]["mix"].update(code=weight)), "phases[0].mix.code: ", fragment)


@pytest.mark.parametrize("tokens, fragment", [(0, "must be ≥ 1"), (-5, "must be ≥ 1"), ("lots", "cannot read"),
                                              ("-1T", "cannot read"), (1.5, "expected an integer"),
                                              ([1], "expected an integer")])
def test_bad_budgets(tokens, fragment):
    _error(_edit(lambda d: d["phases"][1].update(tokens=tokens)), "phases[1].tokens: ", fragment)


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d.update(seeds=3), ["seeds: unknown key (did you mean 'seed'?)", "allowed keys"]),
    (lambda d: d["phases"][0].update(tokns=5), ["phases[0].tokns: unknown key (did you mean 'tokens'?)"]),
    (lambda d: d["sources"]["web"].update(paht="x"), ["sources.web.paht: unknown key (did you mean 'path'?)"]),
    (lambda d: d["phases"][0].update(batch={"ramp": {"start": 2, "increment": 2, "over_sample": 10, "final": 8}}),
     ["phases[0].batch.ramp.over_sample: unknown key (did you mean 'over_samples'?)"]),
    (lambda d: d["phases"][0].update(batch={"piecewise": {"pieces": [[2, 2]], "final": 8, "units": "steps"}}),
     ["phases[0].batch.piecewise.units: unknown key (did you mean 'unit'?)"]),
])
def test_unknown_keys(edit, fragments):
    _error(_edit(edit), *fragments)


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d.update(phases={"name": "x"}), ["phases: expected a list"]),
    (lambda d: d.update(sources=["web"]), ["sources: expected a mapping"]),
    (lambda d: d["phases"].__setitem__(0, "pretrain"), ["phases[0]: expected a mapping"]),
    (lambda d: d["phases"][0].update(mix=[["web", 1]]), ["phases[0].mix: expected a mapping"]),
    (lambda d: d["phases"][0].update(name=3), ["phases[0].name: expected a non-empty string"]),
    (lambda d: d["sources"].update(web="s3://b/"), ["sources.web: expected a mapping"]),
    (lambda d: d["sources"]["web"].update(path=5), ["sources.web.path: expected a path or URL string"]),
    (lambda d: d.update(seq_len="long"), ["seq_len: expected an integer"]),
    (lambda d: d.update(seq_len=0), ["seq_len: must be ≥ 1"]),
    (lambda d: d["phases"][1].update(seq_len=2.5), ["phases[1].seq_len: expected an integer"]),
    (lambda d: d.update(seed="x"), ["seed: expected an integer"]),
    (lambda d: d.update(seed=True), ["seed: expected an integer"]),
    (lambda d: d.update(shuffle="random"), ["shuffle: expected none, block or full, got 'random'"]),
    (lambda d: d.update(shuffle=False), ["shuffle: expected none, block or full", "YAML reads off/no/false"]),
    (lambda d: d["sources"]["code"].update(shuffle="blocks"), ["sources.code.shuffle: expected none, block or full"]),
    (lambda d: d.update(weights_by="bytes"), ["weights_by: expected one of tokens, samples, got 'bytes'"]),
    (lambda d: d["sources"]["math"].update(epochs=0), ["sources.math.epochs: must be ≥ 1"]),
    (lambda d: d["sources"]["math"].update(epochs="sometimes"), ["sources.math.epochs: expected an integer or 'auto'"]),
    (lambda d: d.update(version=2), ["version: recipe format 2 is not supported"]),
])
def test_wrong_types(edit, fragments):
    _error(_edit(edit), *fragments)


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d.pop("phases"), "phases: missing required key"),
    (lambda d: d.pop("sources"), "sources: missing required key"),
    (lambda d: d["phases"][0].pop("name"), "phases[0].name: missing required key"),
    (lambda d: d["phases"][1].pop("tokens"), "phases[1].tokens: missing required key"),
    (lambda d: d["phases"][0].pop("batch"), "phases[0].batch: missing required key"),
    (lambda d: d["phases"][0].pop("mix"), "phases[0].mix: missing required key"),
    (lambda d: d["sources"]["code"].pop("path"), "sources.code.path: missing required key"),
    (lambda d: d["phases"][0].update(batch={"ramp": {"start": 2, "increment": 2, "final": 8}}),
     "phases[0].batch.ramp: give the ramp length"),
    (lambda d: d["phases"][0].update(batch={"ramp": {"increment": 2, "over_samples": 9, "final": 8}}),
     "phases[0].batch.ramp.start: missing required key"),
    (lambda d: d.pop("seq_len"), "phases[0].seq_len: missing; set seq_len at the top level or in the phase"),
])
def test_missing_keys(edit, fragment):
    _error(_edit(edit), fragment)


def test_empty_things():
    _error(_edit(lambda d: d.update(phases=[])), "phases: empty; a recipe needs at least one phase")
    _error(_edit(lambda d: d.update(sources={})), "sources: empty")
    _error(_edit(lambda d: d["phases"][0].update(mix={})), "phases[0].mix: empty")
    _error([], "recipe: expected a mapping")


@pytest.mark.parametrize("batch, fragments", [
    ({"linear": {"start": 2}}, ["phases[0].batch.linear: unknown batch schedule 'linear'"]),
    ({"rmap": {"start": 2}}, ["phases[0].batch.rmap: unknown batch schedule", "did you mean 'ramp'"]),
    (0, ["phases[0].batch: must be ≥ 1"]),
    ("big", ["phases[0].batch: expected an integer"]),
    (True, ["phases[0].batch: expected a batch size"]),
    ({"ramp": {"start": 8, "increment": 2, "over_samples": 10, "final": 4}},
     ["phases[0].batch.ramp: ", "positive multiple of the increment"]),
    ({"ramp": {"start": 2, "increment": 2, "over_samples": "lots", "final": 8}},
     ["phases[0].batch.ramp.over_samples: cannot read"]),
    ({"ramp": {"start": 2, "increment": 2, "over_samples": 10, "ramp_samples": 10, "final": 8}},
     ["phases[0].batch.ramp: give the ramp length as over_samples"]),
    ({"piecewise": {"pieces": [[5, 2], [3, 4]], "final": 8}}, ["phases[0].batch.piecewise: ", "must increase"]),
    ({"piecewise": {"pieces": [5, 2], "final": 8}}, ["phases[0].batch.piecewise.pieces: expected a list of"]),
    ({"piecewise": {"pieces": [[5, 0]], "final": 8}}, ["phases[0].batch.piecewise.pieces[0][1]: must be ≥ 1"]),
    ({"piecewise": {"pieces": [[5, 2]], "final": 8, "unit": "epochs"}}, ["phases[0].batch.piecewise: ", "unit"]),
    ({"constant": -3}, ["phases[0].batch.constant: must be ≥ 1"]),
    ({"constant": 2, "ramp": {}}, ["phases[0].batch: expected a batch size"]),
])
def test_bad_batch_schedules(batch, fragments):
    _error(_edit(lambda d: d["phases"][0].update(batch=batch)), *fragments)


def test_duplicate_phase_names():
    _error(_edit(lambda d: d["phases"][1].update(name="pretrain")),
           "phases[1].name: duplicate phase name 'pretrain' (also phases[0])")


def test_recipe_constructor_checks_sources():
    r = load_recipe(_base())
    with pytest.raises(ConfigError, match=r"phases\[0\]\.mix\.code: unknown source 'code'"):
        Recipe(seed=0, phases=r.phases, sources=tuple(s for s in r.sources if s.name != "code"))
    with pytest.raises(ConfigError, match="no source named 'books'"):
        r.source("books")


# -- files ----------------------------------------------------------------------------------------------------


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown recipe format '.ini'"):
        load_recipe(tmp_path / "r.ini")
    with pytest.raises(InputError, match="cannot read the recipe"):
        load_recipe(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("seed = = 1\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_recipe(tmp_path / "bad.toml")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        load_recipe(tmp_path / "bad.json")
    (tmp_path / "typo.toml").write_text(TOML.replace('tokens = "500B"', 'tokns = "500B"'))
    with pytest.raises(ConfigError, match=r"phases\[1\]\.tokns: unknown key"):
        load_recipe(tmp_path / "typo.toml")


def test_yaml_errors(tmp_path):
    pytest.importorskip("yaml")
    (tmp_path / "bad.yaml").write_text("seed: 1\nphases: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")
    (tmp_path / "off.yaml").write_text(YAML.replace("shuffle: block", "shuffle: off"))
    with pytest.raises(ConfigError, match="YAML reads off/no/false as a boolean"):
        load_recipe(tmp_path / "off.yaml")
    (tmp_path / "unknown.yml").write_text(YAML.replace("web: 0.3", "wbe: 0.3"))
    with pytest.raises(ConfigError, match=r"phases\[1\]\.mix\.wbe: unknown source 'wbe'"):
        load_recipe(tmp_path / "unknown.yml")


def test_missing_pyyaml_names_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now raises ImportError
    (tmp_path / "r.yaml").write_text(YAML)
    with pytest.raises(MissingDependencyError, match="pip install pyyaml"):
        load_recipe(tmp_path / "r.yaml")
