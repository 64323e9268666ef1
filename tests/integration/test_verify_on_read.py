"""verify_on_read and on_corrupt on real files with real flipped bytes: raise, refetch, skip.

The damage is a byte flipped in a shard's `.bin` on disk after the dataset was written. Expected rows are
computed independently of the verifier: from the clean dataset's token stream and the plan's sample ids.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardkit.engine.verify_read import REFETCH_ATTEMPTS
from shardkit.errors import ConfigError, IntegrityError
from shardkit.loader import Loader, MixtureLoader
from shardkit.writer import write_dataset

BLOCK = 32 << 10  # checksum block bytes: 16,384 uint16 tokens
SEQ = 64
STREAM = {"seq_len": SEQ, "batch_schedule": 8, "seed": 5, "max_epochs": 1}


def _docs(seed: int, n: int = 600) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, size=int(k), dtype=np.uint16) for k in rng.integers(50, 1200, size=n)]


@pytest.fixture
def ds(tmp_path):
    path = tmp_path / "ds"
    write_dataset(path, _docs(1), max_bytes_per_shard=150_000, checksum_block_size=BLOCK)
    return path


def _flip(path, shard: int, offset: int) -> None:
    f = path / f"shard-{shard:05d}.bin"
    raw = bytearray(f.read_bytes())
    raw[offset] ^= 0x40
    f.write_bytes(bytes(raw))


def _run(data, **kw) -> tuple[list[np.ndarray], object]:
    loader = Loader(data, **{**STREAM, **kw})
    out = [b["input_ids"].copy() for b in loader]
    return out, loader


def _flat(path) -> tuple[np.ndarray, np.ndarray]:
    """(the clean dataset's flat token stream, each shard's first token in it)."""
    loader = Loader(path, **STREAM)
    ds = loader.dataset
    return np.concatenate([np.asarray(s.tokens) for s in ds.shards]), np.asarray(ds.token_offsets)


def _global_ids(loader, batches: int) -> list[np.ndarray]:
    """The sample id of every row of each global batch, from the plan (world size 1)."""
    return [loader.engine.plan.global_rows(b).ids.copy() for b in range(batches)]


def test_clean_data_streams_identically_and_every_block_read_is_verified(ds):
    plain, _ = _run(ds)
    checked, loader = _run(ds, verify_on_read=True)
    assert len(plain) == len(checked) and all(np.array_equal(a, b) for a, b in zip(plain, checked))
    got = loader.metrics.to_json()["integrity"]
    blocks = sum(-(-s.entry.bin_bytes // BLOCK) for s in loader.dataset.shards)
    assert got["blocks_verified"] == blocks  # an epoch reads every block; each is hashed once
    assert got["bytes_verified"] == sum(s.entry.bin_bytes for s in loader.dataset.shards)
    assert got["corrupt_blocks"] == got["rows_replaced"] == 0 and got["events"] == []


def test_without_verify_on_read_a_flipped_byte_is_delivered_silently(ds):
    """What the option is for: the loader alone cannot tell (the mapping serves whatever the disk holds)."""
    plain, _ = _run(ds)
    _flip(ds, 1, 3 * BLOCK + 17)
    damaged, _ = _run(ds)
    assert sum(int((a != b).any(axis=1).sum()) for a, b in zip(plain, damaged)) > 0


def test_raise_names_the_shard_the_block_and_the_command(ds):
    _flip(ds, 1, 3 * BLOCK + 17)
    with pytest.raises(IntegrityError) as err:
        _run(ds, verify_on_read=True)
    e = err.value
    msg = str(e)
    assert "shard-00001" in msg and "checksum block 3" in msg and f"shardkit verify --full {ds}" in msg
    assert e.byte_range == (3 * BLOCK, 4 * BLOCK) and e.expected != e.actual
    assert "read 2 times" not in msg and "read 3 times" not in msg  # raise does not re-read


def test_refetch_rereads_from_the_device_then_raises_for_data_damaged_on_disk(ds):
    _flip(ds, 0, BLOCK + 3)
    loader = Loader(ds, **STREAM, verify_on_read=True, on_corrupt="refetch")
    with pytest.raises(IntegrityError) as err:
        for _ in loader:
            pass
    assert f"read {REFETCH_ATTEMPTS} times" in str(err.value) and "checksum block 1 of shard shard-00000" in str(err.value)
    got = loader.metrics.to_json()["integrity"]
    assert got["blocks_refetched"] == REFETCH_ATTEMPTS - 1 and got["corrupt_blocks"] == 1


def _reads_block(start: np.ndarray, offsets: np.ndarray, shard: int, block: int) -> np.ndarray:
    """Whether the window of SEQ + 1 tokens at each flat-stream start reads bytes of (shard, block)."""
    lo = offsets[shard] + block * BLOCK // 2
    hi = min(offsets[shard] + (block + 1) * BLOCK // 2, offsets[shard + 1])
    return (start < hi) & (start + SEQ + 1 > lo)


def test_skip_replaces_exactly_the_rows_that_read_the_block_by_the_documented_reserve(ds):
    flat, offsets = _flat(ds)
    plain, clean_loader = _run(ds)
    ids = _global_ids(clean_loader, len(plain))
    _flip(ds, 1, 2 * BLOCK + 1001)
    skipped, loader = _run(ds, verify_on_read=True, on_corrupt="skip")
    assert len(skipped) == len(plain) and all(a.shape == b.shape for a, b in zip(plain, skipped))
    per_block = BLOCK // (SEQ * 2)  # S: samples per checksum block
    n = len(flat[:-1]) // SEQ
    expected_rows = 0
    for step, (batch_ids, want, got) in enumerate(zip(ids, plain, skipped)):
        hit = _reads_block(batch_ids * SEQ, offsets, 1, 2)
        expected_rows += int(hit.sum())
        assert np.array_equal(got[~hit], want[~hit])  # every other row is untouched
        for r in np.flatnonzero(hit).tolist():
            # the reserve: sample id + k·S for k = 1, −1, 2, … — the first that reads no damaged block
            for k in (1, -1, 2, -2):
                cand = (int(batch_ids[r]) + k * per_block) % n
                if not _reads_block(np.array([cand * SEQ]), offsets, 1, 2)[0]:
                    break
            assert np.array_equal(got[r], flat[cand * SEQ:cand * SEQ + SEQ]), (step, r)
    got = loader.metrics.to_json()["integrity"]
    assert expected_rows > 0 and got["rows_replaced"] == expected_rows and got["corrupt_blocks"] == 1
    events = got["events"]
    assert sum(e["rows_replaced"] for e in events) == expected_rows
    assert {(e["shard"], e["block"], e["rank"], e["source"]) for e in events} == {("shard-00001", 2, 0, "data")}
    steps_hit = [s for s, b in enumerate(ids) if _reads_block(b * SEQ, offsets, 1, 2).any()]
    assert sorted({e["step"] for e in events}) == steps_hit


def test_skip_is_the_same_for_any_world_size_and_across_a_resume(ds):
    _flip(ds, 2, BLOCK + 5)
    whole, _ = _run(ds, verify_on_read=True, on_corrupt="skip")
    ranks = [_run(ds, verify_on_read=True, on_corrupt="skip", rank=r, world_size=2)[0] for r in range(2)]
    assert all(np.array_equal(np.concatenate([ranks[0][b], ranks[1][b]]), whole[b]) for b in range(len(whole)))
    first = Loader(ds, **STREAM, verify_on_read=True, on_corrupt="skip")
    it = iter(first)
    for _ in range(len(whole) // 2):
        next(it)
    state = first.state_dict()
    resumed = Loader(ds, **STREAM, verify_on_read=True, on_corrupt="skip")
    resumed.load_state_dict(state)
    rest = [b["input_ids"].copy() for b in resumed]
    assert all(np.array_equal(a, b) for a, b in zip(rest, whole[len(whole) // 2:]))


def test_skip_over_packed_rows_keeps_every_batch_and_replaces_whole_rows(ds, tmp_path):
    plain, _ = _run(ds, packing="best_fit", packing_cache_dir=tmp_path / "pc")
    _flip(ds, 0, 2 * BLOCK + 9)
    skipped, loader = _run(ds, packing="best_fit", packing_cache_dir=tmp_path / "pc", verify_on_read=True,
                           on_corrupt="skip")
    assert len(skipped) == len(plain) and all(a.shape == b.shape for a, b in zip(plain, skipped))
    changed = sum(int((a != b).any(axis=1).sum()) for a, b in zip(plain, skipped))
    got = loader.metrics.to_json()["integrity"]
    assert got["rows_replaced"] == changed > 0


def test_a_mixture_skips_in_the_damaged_source_only(tmp_path):
    paths = []
    for i in range(2):
        p = tmp_path / f"s{i}"
        write_dataset(p, _docs(10 + i), max_bytes_per_shard=150_000, checksum_block_size=BLOCK)
        paths.append(p)
    recipe = {"seed": 3, "seq_len": SEQ, "sources": {"a": {"path": str(paths[0])}, "b": {"path": str(paths[1])}},
              "phases": [{"name": "p", "tokens": SEQ * 8 * 150, "batch": 8, "mix": {"a": 0.5, "b": 0.5}}]}

    def run(**kw):
        loader = MixtureLoader(recipe, **kw)
        return [(b["input_ids"].copy(), b["source"].copy()) for b in loader], loader

    plain, _ = run()
    _flip(paths[1], 0, BLOCK + 77)
    skipped, loader = run(verify_on_read=True, on_corrupt="skip")
    for (a, src), (b, src2) in zip(plain, skipped):
        assert np.array_equal(src, src2)
        assert np.array_equal(a[src == 0], b[src == 0])  # the clean source is untouched
    got = loader.metrics.to_json()["integrity"]
    assert got["rows_replaced"] > 0 and {e["source"] for e in got["events"]} == {"b"}


def test_bad_options_are_refused_by_name(ds):
    with pytest.raises(ConfigError, match="on_corrupt must be 'raise', 'refetch' or 'skip'"):
        Loader(ds, seq_len=SEQ, on_corrupt="ignore")
    with pytest.raises(ConfigError, match="verify_on_read must be True or False"):
        Loader(ds, seq_len=SEQ, verify_on_read="yes")


def test_a_sidecar_edited_to_match_the_damage_is_caught_by_the_manifest(ds):
    """Trust nothing a user can edit: the sidecar is checked against the manifest's digest of it."""
    _flip(ds, 0, 5)
    sidecar = ds / "shard-00000.sum.json"
    sidecar.write_text(sidecar.read_text().replace('"blocks": [\n', '"blocks": [\n', 1) + " ")
    with pytest.raises(IntegrityError, match="checksum sidecar digest .* differs from the manifest"):
        _run(ds, verify_on_read=True)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_verify_and_skip_like_the_loader(ds, method):
    """Real worker processes (forked with the parent's verifier state, or spawned from the pickled loader)
    verify their own reads and replace the same rows as one process does."""
    torch = pytest.importorskip("torch")
    from shardkit.torch import ShardkitDataLoader

    _flip(ds, 1, 2 * BLOCK + 1001)
    want, _ = _run(ds, verify_on_read=True, on_corrupt="skip")
    parent = Loader(ds, **STREAM, verify_on_read=True, on_corrupt="skip")
    next(iter(parent))  # the parent has verified (and met the damage) before the workers start
    parent.load_state_dict(parent.state_at(0))
    dl = ShardkitDataLoader(parent, num_workers=2, multiprocessing_context=method, group=2)
    got = [b["input_ids"].numpy().copy() for b in dl]
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert torch is not None
