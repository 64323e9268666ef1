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
    if kind == "single":
        loader = Loader(where, seq_len=__SEQ__, batch_schedule=64, shuffle=shuffle, seed=7, block_samples=2,
                        group_blocks=1)
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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["single", "mixture"])
@pytest.mark.parametrize("shuffle", ["block", "full"])
def test_thousands_of_shards_stream_under_a_small_descriptor_limit(corpus, kind, shuffle):
    root, flats = corpus
    where = str(root / "big") if kind == "single" else str(root / "recipe.json")
    steps = 400 if shuffle == "full" else 1600
    out = subprocess.run([sys.executable, "-c", CHILD, kind, where, shuffle, str(steps)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["budget"] == BUDGET
    # the mapping budget, plus one shard the hint worker may hold through a madvise and a transient fadvise
    assert got["peak_fds"] <= got["base_fds"] + BUDGET + 2, got
    assert got["peak_threads"] <= got["base_threads"] + 1, got  # one hint worker, whatever the groups
    if kind == "single" and shuffle == "block":
        assert got["groups"] >= 10_000, got
    if kind == "single":
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
