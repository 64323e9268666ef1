"""A Megatron blend over prefixes of several datasets (`Loader([...], order="megatron")`), the `order: megatron`
recipe, and `shardkit stream` over prefix paths: one stream whichever way the blend is named.

The samples themselves are checked against megatron-core in test_megatron_loader.py; these tests hold the
ways of naming a blend to each other, and check what is refused."""

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from support.mixtures import make_sources

from cli.main import cli
from shardkit import Loader
from shardkit.errors import ConfigError, IntegrityError, ResumeError
from shardkit.format import open_dataset
from shardkit.format.union import DatasetUnion
from shardkit.loader import MixtureLoader
from shardkit.megatron import MegatronPrefix
from shardkit.mixture.megatron_recipe import MegatronRecipe, read_recipe
from shardkit.stream import stream
from shardkit.writer import write_dataset

SEQ = 16


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("union")
    make_sources(root)  # web / code / math: many small shards each, all named shard-NNNNN
    rng = np.random.default_rng(3)
    write_dataset(root / "single", [rng.integers(5000, 6000, size=60, dtype=np.uint16) for _ in range(40)],
                  checksum_block_size=4096)  # one shard
    return root


def _opts(root, **over):
    opts = {"num_samples": 600, "weights": [0.5, 0.3, 0.2],
            "prefixes": [str(root / "web" / "shard-00003"), str(root / "code" / "shard-00001"), str(root / "single")]}
    return {**opts, **over}


def _loader(root, **kw):
    return Loader([root / "web", root / "code", root / "single"], seq_len=SEQ, seed=7, batch_schedule=8,
                  order="megatron", megatron=_opts(root), **kw)


def _items(loader, n):
    out = []
    for item in loader:
        out.append(np.asarray(item["input_ids"]).copy())
        if len(out) == n:
            break
    return out


def test_each_sample_comes_from_the_named_prefix(root):
    loader = _loader(root)
    union = loader.dataset
    assert isinstance(union, DatasetUnion) and union.num_shards == 12 + 8 + 1
    order = loader.megatron_order
    web3 = open_dataset(root / "web").shards[3].tokens
    code1 = open_dataset(root / "code").shards[1].tokens
    single = open_dataset(root / "single").shards[0].tokens
    seen = set()
    for b, item in enumerate(_items(loader, 40)):
        ids = loader.global_sample_ids(b)
        for i, row in zip(ids.tolist(), item):
            d, _ = order.locate_many(np.array([i]))
            src = (web3, code1, single)[int(d[0])]
            seen.add(int(d[0]))
            # the tokens of a sample are a stretch of its prefix's documents (all sources' token ranges differ)
            assert np.isin(row, src).all()
    assert seen == {0, 1, 2}


def test_the_same_prefix_is_keyed_alike_alone_and_in_a_union(root, tmp_path):
    """A prefix's index arrays depend on the shard, not on how many datasets the loader reads: the cache
    built through the union is the one a single-dataset loader opens."""
    web = open_dataset(root / "web")
    union = DatasetUnion([open_dataset(root / "code"), web])
    alone = MegatronPrefix(web, "shard-00003")
    joined = MegatronPrefix(union, str(root / "web" / "shard-00003"))
    assert joined.position == 8 + 3 and joined.identity == alone.identity
    np.testing.assert_array_equal(joined.sequence_lengths, alone.sequence_lengths)


def test_a_recipe_and_the_command_line_give_the_loaders_stream(root, tmp_path):
    direct = _loader(root)
    want = stream(direct, steps=30).digest
    recipe = {"order": "megatron", "seed": 7, "seq_len": SEQ, "batch": 8,
              "megatron": {"num_samples": 600, "data_path": [0.5, "w", 0.3, "c", 0.2, "s"]},
              "sources": {"w": {"path": "web", "prefix": "shard-00003"}, "c": {"path": "code", "prefix": "shard-00001"},
                          "s": {"path": "single"}}}
    from_recipe = Loader.from_recipe(recipe, base_dir=root)
    assert stream(from_recipe, steps=30).digest == want
    assert from_recipe.stream_config() == direct.stream_config()
    # the state of one resumes the other (the definition records prefixes as positions, not paths)
    from_recipe.load_state_dict(direct.state_at(11))
    path = tmp_path / "blend.json"
    path.write_text(json.dumps({**recipe, "sources": {k: {**v, "path": str(root / v["path"])}
                                                      for k, v in recipe["sources"].items()}}))
    run = CliRunner().invoke(cli, ["stream", "--recipe", str(path), "--steps", "30", "--json"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.output)
    assert out["digest"] == want and out["fingerprint"] == read_recipe(path).fingerprint()
    data_path = " ".join(f"{w} {p}" for w, p in zip(_opts(root)["weights"], _opts(root)["prefixes"]))
    run = CliRunner().invoke(cli, ["stream", "--order", "megatron", "--megatron-samples", "600", "--megatron-data-path",
                                   data_path, "--seq-len", str(SEQ), "--seed", "7", "--steps", "30", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["digest"] == want


def test_the_recipe_round_trips_and_keeps_megatrons_weights(root):
    r = read_recipe({"order": "megatron", "seq_len": 32, "batch": {"ramp": {"start": 4, "increment": 4,
                                                                            "over_samples": 64, "final": 8}},
                     "megatron": {"num_samples": "2K", "data_path": "0.7 b 0.4 a", "split": "9,1,0",
                                  "cache_dir": "/tmp/x"},
                     "sources": {"a": {"path": "web", "prefix": "shard-00000"}, "b": {"path": "code"}}})
    assert isinstance(r, MegatronRecipe)
    assert r.blend == ((0.7, "b"), (0.4, "a")) and r.num_samples == 2000  # as written: Megatron normalizes them
    again = read_recipe(r.to_json())
    assert again.to_json() == r.to_json() and again.fingerprint() == r.fingerprint()
    swapped = read_recipe({**r.to_json(), "megatron": {**r.to_json()["megatron"], "data_path": [0.4, "a", 0.7, "b"]}})
    assert swapped.fingerprint() != r.fingerprint()  # the blend's dataset order is part of the stream
    weightless = read_recipe({**r.to_json(), "megatron": {**r.to_json()["megatron"], "data_path": "b a"}})
    assert weightless.blend == ((None, "b"), (None, "a")) and read_recipe(weightless.to_json()) == weightless
    assert weightless.loader_args(root)[1]["megatron"]["weights"] is None
    keep = read_recipe({**r.to_json(), "megatron": {**r.to_json()["megatron"], "split_name": "valid",
                                                    "drop_last_partial_validation_sequence": False}})
    assert keep.loader_args(root)[1]["megatron"]["drop_last_partial_validation_sequence"] is False
    assert keep.fingerprint() != r.fingerprint()


def test_a_weightless_blend_from_the_recipe_and_the_command_line(root):
    """Megatron's `--data-path p1 p2` (each prefix weighted by its own sample count), three ways."""
    prefixes = _opts(root)["prefixes"]
    direct = Loader([root / "web", root / "code", root / "single"], seq_len=SEQ, seed=7, batch_schedule=8,
                    order="megatron", megatron=_opts(root, weights=None))
    want = stream(direct, steps=20).digest
    recipe = {"order": "megatron", "seed": 7, "seq_len": SEQ, "batch": 8,
              "megatron": {"num_samples": 600, "data_path": ["w", "c", "s"]},
              "sources": {"w": {"path": "web", "prefix": "shard-00003"}, "c": {"path": "code", "prefix": "shard-00001"},
                          "s": {"path": "single"}}}
    assert stream(Loader.from_recipe(recipe, base_dir=root), steps=20).digest == want
    run = CliRunner().invoke(cli, ["stream", "--order", "megatron", "--megatron-samples", "600", "--megatron-data-path",
                                   " ".join(prefixes), "--seq-len", str(SEQ), "--seed", "7", "--steps", "20", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["digest"] == want
    # weights differ from the weighted blend's: another stream
    assert stream(_loader(root), steps=20).digest != want


@pytest.mark.parametrize("change,message", [
    ({"phases": []}, "phases: does not apply with order: megatron"),
    ({"packing": "best_fit"}, "packing: does not apply"),
    ({"megatron": {"num_samples": 10, "data_path": [0.5, "w", 0.5, "nope"]}}, r"data_path\[3\]: unknown source"),
    ({"megatron": {"num_samples": 10, "data_path": [0, "w", 1, "s"]}}, r"data_path\[0\]: weight must be a positive"),
    ({"megatron": {"num_samples": 10, "data_path": [1, "w"]}}, "sources.s: not in megatron.data_path"),
    ({"megatron": {"num_samples": 10}}, "data_path: missing"),
    ({"megatron": {"num_samples": 10, "data_path": "1 w 1 s", "shuffle": 1}}, "megatron.shuffle: unknown key"),
    ({"sources": {"w": {"path": "web", "epochs": 2}, "s": {"path": "single"}}}, r"sources.w.epochs: unknown key"),
    ({"order": "grain"}, "order: expected shardkit or megatron"),
])
def test_recipe_mistakes_are_named(root, change, message):
    recipe = {"order": "megatron", "seq_len": SEQ, "batch": 8,
              "megatron": {"num_samples": 10, "data_path": "1 w 1 s"},
              "sources": {"w": {"path": "web", "prefix": "shard-00000"}, "s": {"path": "single"}}, **change}
    with pytest.raises(ConfigError, match=message):
        if change.get("order") == "grain":
            MixtureLoader(recipe, base_dir=root)
        else:
            read_recipe(recipe)


def test_what_a_union_refuses(root, tmp_path):
    with pytest.raises(ConfigError, match="MixtureLoader"):
        Loader([root / "web", root / "code"], seq_len=SEQ)  # not a Megatron blend
    recipe = {"order": "megatron", "seq_len": SEQ, "batch": 8, "megatron": {"num_samples": 10},
              "sources": {"s": {"path": "single"}}}
    with pytest.raises(ConfigError, match="Loader.from_recipe"):
        MixtureLoader(recipe, base_dir=root)
    with pytest.raises(ConfigError, match="all have a shard of that name; name it as DATASET_DIR/shard-00001"):
        Loader([root / "web", root / "code"], seq_len=SEQ, order="megatron",
               megatron=_opts(root, prefixes=["shard-00001"], weights=None))
    with pytest.raises(ConfigError, match="is not one of the datasets read"):
        Loader([root / "web", root / "code"], seq_len=SEQ, order="megatron",
               megatron=_opts(root, prefixes=[str(root / "math" / "shard-00000")], weights=None))
    with pytest.raises(ConfigError, match="has 12 shards; name one"):
        Loader([root / "web", root / "code"], seq_len=SEQ, order="megatron",
               megatron=_opts(root, prefixes=[str(root / "web")], weights=None))
    with pytest.raises(ConfigError, match="given twice"):
        Loader([root / "web", root / "web"], seq_len=SEQ, order="megatron", megatron=_opts(root))
    write_dataset(tmp_path / "wide", [np.arange(70_000, 70_100, dtype=np.int32)], dtype="int32")
    with pytest.raises(ConfigError, match="different dtypes .*uint16.*int32"):
        Loader([root / "web", tmp_path / "wide"], seq_len=SEQ, order="megatron", megatron=_opts(root))
    # a state of the blend is refused by a loader of the same shards named in another order
    state = _loader(root).state_at(3)
    other = Loader([root / "code", root / "web", root / "single"], seq_len=SEQ, seed=7, batch_schedule=8,
                   order="megatron", megatron=_opts(root))
    with pytest.raises(ResumeError):
        other.load_state_dict(state)


def test_command_line_prefix_paths_need_no_dataset_argument_but_must_be_paths(root):
    run = CliRunner().invoke(cli, ["stream", "--order", "megatron", "--megatron-samples", "10",
                                   "--megatron-data-path", "1 shard-00000", "--json"])
    assert run.exit_code == 2 and "prefixes as paths" in run.output, run.output
    run = CliRunner().invoke(cli, ["stream", "--recipe", os.devnull, "--order", "megatron"])
    assert run.exit_code == 2


def test_verify_on_read_names_the_damaged_shard_of_its_own_dataset(root, tmp_path):
    """verify_on_read over a blend of two datasets: a flipped byte in the second dataset's shard stops the
    run naming that shard's file and that dataset's verify command; without the damage the same run passes."""
    for n in ("web", "code"):
        shutil.copytree(root / n, tmp_path / n)
    prefixes = [str(tmp_path / "web" / "shard-00002"), str(tmp_path / "code" / "shard-00004")]

    def run():
        loader = Loader([tmp_path / "web", tmp_path / "code"], seq_len=SEQ, seed=2, batch_schedule=8,
                        order="megatron", verify_on_read=True,
                        megatron={"num_samples": 200, "prefixes": prefixes, "weights": [0.5, 0.5]})
        return stream(loader)
    assert run().batches == 25
    f = tmp_path / "code" / "shard-00004.bin"
    raw = bytearray(f.read_bytes())
    raw[10] ^= 0x40
    f.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as e:
        run()
    assert str(f) in str(e.value) and f"shardkit verify --full {tmp_path / 'code'}" in str(e.value)
