"""Many shards under a small `ulimit -n`, in a real subprocess: 20,000 shards and a 3-source mixture of 5,000
shards each stream with block and full shuffle under RLIMIT_NOFILE = 256 — no EMFILE, open descriptors
within the mapping budget throughout, one hint thread over more than 10,000 shuffle groups, and exactly
the batches the plan names (checked against the shards' bytes read directly by this process)."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xxhash

from shardkit.loader import Loader, MixtureLoader
from shardkit.writer import write_dataset

SEQ = 8
LIMIT = 256
BUDGET = LIMIT // 4  # the default: a quarter of the soft limit


def _write(path, num_shards, seed, tokens_per_shard=20):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 60000, size=tokens_per_shard, dtype=np.uint16) for _ in range(num_shards)]
    write_dataset(path, docs, max_tokens_per_shard=tokens_per_shard, checksum_block_size=4096)
    return np.concatenate(docs)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("nofile")
    with pytest.MonkeyPatch.context() as mp:  # test data: 105,000 files need no fsync each
        mp.setattr("os.fsync", lambda fd: None)
        flats = {"big": _write(root / "big", 20_000, 1)}
        for i, name in enumerate(("a", "b", "c")):
            flats[name] = _write(root / name, 5_000, 10 + i)
    recipe = {"seed": 3, "seq_len": SEQ, "shuffle": "block", "phases": [
        {"name": "p", "tokens": 10**6, "batch": 64, "mix": {"a": 0.5, "b": 0.25, "c": 0.25}}],
        "sources": {n: {"path": str(root / n)} for n in ("a", "b", "c")}}
    (root / "recipe.json").write_text(json.dumps(recipe))
    return root, flats


CHILD = textwrap.dedent("""
    import json, os, resource, sys, threading
    import xxhash
    resource.setrlimit(resource.RLIMIT_NOFILE, (__LIMIT__, __LIMIT__))
    from shardkit.loader import Loader, MixtureLoader
    kind, where, shuffle, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    base_fds = len(os.listdir("/proc/self/fd"))
    base_threads = threading.active_count()
    if kind in ("single", "verify"):
        loader = Loader(where, seq_len=__SEQ__, batch_schedule=64, shuffle=shuffle, seed=7, block_samples=2,
                        group_blocks=1, verify_on_read=kind == "verify")
    elif kind == "megatron":
        loader = Loader(**json.load(open(where)))
    else:
        recipe = json.load(open(where))
        recipe["shuffle"] = shuffle
        loader = MixtureLoader(recipe)
    h = xxhash.xxh3_128()
    peak_fds = peak_threads = 0
    for i, batch in enumerate(loader):
        h.update(batch["input_ids"].tobytes()); h.update(batch["labels"][:, -1].tobytes())
        if i % 7 == 0:
            peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")))
            peak_threads = max(peak_threads, threading.active_count())
        if i + 1 == steps:
            break
    m = loader.metrics.to_json()
    print(json.dumps({"digest": h.hexdigest(), "peak_fds": peak_fds, "base_fds": base_fds,
                      "peak_threads": peak_threads, "base_threads": base_threads,
                      "budget": loader.engine.mapper.budget, "groups": m["groups_entered"],
                      "maps_made": loader.engine.mapper.maps_made}))
""").replace("__LIMIT__", str(LIMIT)).replace("__SEQ__", str(SEQ))


def _expected(loader, flats, steps):
    """The digest of the first `steps` batches, from the plan's sample ids and the shards' own bytes."""
    h = xxhash.xxh3_128()
    for b in range(steps):
        ids = loader.global_sample_ids(b)
        src, ids = ids if isinstance(ids, tuple) else (np.zeros_like(ids), ids)
        names = loader.sources if isinstance(loader, MixtureLoader) else ("big",)
        rows = np.stack([flats[names[j]][i * SEQ:i * SEQ + SEQ + 1] for j, i in zip(src.tolist(), ids.tolist())])
        h.update(np.ascontiguousarray(rows[:, :-1]).tobytes())
        h.update(np.ascontiguousarray(rows[:, -1]).tobytes())
    return h.hexdigest()


def _megatron_args(root):
    """Megatron's order over 900 prefixes — 300 shards of each of three datasets, named by path, their index
    arrays mapped from a cache — as `Loader` keyword arguments (JSON, for the child)."""
    names = ("a", "b", "c")
    prefixes = [str(root / n / f"shard-{i:05d}") for n in names for i in range(0, 4500, 15)]
    return {"data": [str(root / n) for n in names], "seq_len": SEQ, "seed": 5, "batch_schedule": 64,
            "order": "megatron", "megatron": {"num_samples": 64 * 300, "prefixes": prefixes,
                                              "weights": [1.0 + (i % 3) for i in range(len(prefixes))],
                                              "path_to_cache": str(root / "megatron-cache")}}


@pytest.mark.slow
@pytest.mark.parametrize("kind,shuffle", [("single", "block"), ("single", "full"), ("mixture", "block"),
                                          ("mixture", "full"), ("verify", "block"), ("megatron", "none")])
def test_thousands_of_shards_stream_under_a_small_descriptor_limit(corpus, kind, shuffle):
    """Also with verify_on_read (its hashing thread reads through the same mapping budget) and in
    Megatron's order over hundreds of prefixes of three datasets."""
    root, flats = corpus
    where = {"single": str(root / "big"), "verify": str(root / "big"), "mixture": str(root / "recipe.json"),
             "megatron": str(root / "megatron.json")}[kind]
    if kind == "megatron":
        (root / "megatron.json").write_text(json.dumps(_megatron_args(root)))
    # block shuffle: one epoch (49,999 samples of 20,000 shards in 25,000 groups) and into the next
    steps = 400 if shuffle == "full" else 300 if kind == "megatron" else 800
    out = subprocess.run([sys.executable, "-c", CHILD, kind, where, shuffle, str(steps)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["budget"] == BUDGET
    # the mapping budget, plus one shard the hint worker may hold through a madvise and a transient fadvise
    # (and the one file verify_on_read's thread has open while it hashes a block it does not find mapped,
    # and Megatron's prefix indexes: a sixteenth of the limit, shardkit.megatron.open_maps)
    extra = {"verify": 1, "megatron": LIMIT // 16}.get(kind, 0)
    assert got["peak_fds"] <= got["base_fds"] + BUDGET + 2 + extra, got
    # one hint worker, whatever the groups (and verify_on_read's one hashing thread)
    assert got["peak_threads"] <= got["base_threads"] + 1 + (kind == "verify"), got
    if kind in ("single", "verify") and shuffle == "block":
        assert got["groups"] >= 10_000, got
    if kind == "megatron":  # the same batches as a loader without the limit
        args = _megatron_args(root)
        h = xxhash.xxh3_128()
        for i, batch in enumerate(Loader(args.pop("data"), **args)):
            h.update(batch["input_ids"].tobytes())
            h.update(batch["labels"][:, -1].tobytes())
            if i + 1 == steps:
                break
        assert got["digest"] == h.hexdigest()
        return
    if kind in ("single", "verify"):
        reference = Loader(where, seq_len=SEQ, batch_schedule=64, shuffle=shuffle, seed=7, block_samples=2,
                           group_blocks=1)
    else:
        recipe = json.loads((root / "recipe.json").read_text())
        recipe["shuffle"] = shuffle
        reference = MixtureLoader(recipe)
    assert got["digest"] == _expected(reference, flats, steps)


def test_stream_cli_full_shuffle_over_thousands_of_shards_under_a_small_limit(corpus):
    """`shardkit stream --shuffle full --seq-len 64` over 20,000 shards under `ulimit -n 256`: exit 0."""
    root, _ = corpus
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
            "from cli.main import main; sys.exit(main())")
    out = subprocess.run([sys.executable, "-c", code, "stream", str(root / "big"), "--seq-len", "64", "--batch",
                          "32", "--shuffle", "full", "--steps", "200", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["batches"] == 200


PACKED_CHILD = textwrap.dedent("""
    import json, os, resource, sys
    import xxhash
    resource.setrlimit(resource.RLIMIT_NOFILE, (__LIMIT__, __LIMIT__))
    from shardkit.loader import MixtureLoader
    recipe, cache, store = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "store"
    base_fds = len(os.listdir("/proc/self/fd"))
    loader = MixtureLoader(recipe, packing_cache_dir=cache, packing_store=store)
    h = xxhash.xxh3_128()
    peak, batches, seq_lens = 0, 0, set()
    for batch in loader:
        h.update(batch["input_ids"].tobytes()); h.update(batch["cu_seqlens"].tobytes())
        peak = max(peak, len(os.listdir("/proc/self/fd")))
        batches += 1
        seq_lens.add(batch["input_ids"].shape[1])
    print(json.dumps({"digest": h.hexdigest(), "peak_fds": peak, "base_fds": base_fds, "batches": batches,
                      "seq_lens": sorted(seq_lens), "budget": loader.engine.mapper.budget}))
""").replace("__LIMIT__", "128")


@pytest.mark.parametrize("store", [False, True], ids=["tables", "row-stores"])
def test_a_packed_mixture_of_many_sources_streams_under_a_small_descriptor_limit(tmp_path, store):
    """A packed loader keeps a packing table (and a row store) mapped per source and seq_len: 40 sources
    over two phases' seq_lens are 80 tables and 80 stores, 880 files. Under RLIMIT_NOFILE = 128 the mixture
    streams both phases (tables and stores built by the child, then opened), holding descriptors only
    within the shards' mapping budget, and gives the batches of the same loader without the limit."""
    rng = np.random.default_rng(8)
    names = [f"s{i:02d}" for i in range(40)]
    for name in names:
        write_dataset(tmp_path / name, [rng.integers(1, 60000, size=int(n), dtype=np.uint16)
                                        for n in rng.integers(1, 50, 60)], max_tokens_per_shard=400)
    mix = {n: 1 / len(names) for n in names}
    recipe = {"seed": 2, "packing": "best_fit", "sources": {n: {"path": str(tmp_path / n)} for n in names},
              "phases": [{"name": "short", "tokens": 20_000, "seq_len": 16, "batch": 8, "mix": mix},
                         {"name": "long", "tokens": 20_000, "seq_len": 32, "batch": 8, "mix": mix}]}
    cache = tmp_path / "cache"
    runs = []
    for _ in range(2):  # the first run builds every table and store, the second opens them
        out = subprocess.run([sys.executable, "-c", PACKED_CHILD, json.dumps(recipe), str(cache),
                              "store" if store else "gather"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout))
    h = xxhash.xxh3_128()
    for batch in MixtureLoader(recipe, packing_cache_dir=cache, packing_store=store):
        h.update(batch["input_ids"].tobytes())
        h.update(batch["cu_seqlens"].tobytes())
    for got in runs:
        assert got["seq_lens"] == [16, 32] and got["digest"] == h.hexdigest(), got
        assert got["peak_fds"] <= got["base_fds"] + got["budget"] + 2, got
