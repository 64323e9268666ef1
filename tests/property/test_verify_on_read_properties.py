"""on_corrupt='skip' over random damage: the delivered stream is one function of (data, damage, config, seed).

For random damaged blocks (one to three bytes flipped on disk), shuffle modes, world sizes and resume
points: the ranks' slices compose the one-process batches, a resume continues them exactly, every batch
keeps its shape, and exactly the rows whose windows read a damaged block differ from the clean stream.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.loader import Loader
from shardkit.writer import write_dataset

BLOCK = 8 << 10  # 4,096 uint16 tokens per checksum block
SEQ = 32
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


def _epoch(path, **kw) -> list[np.ndarray]:
    loader = Loader(path, seq_len=SEQ, batch_schedule=8, seed=2, max_epochs=1, **kw)
    return [b["input_ids"].copy() for b in loader]


def _check(path, seed: int, damaged: list[tuple[int, int, int]], shuffle: str, world: int, cut: float) -> None:
    """damaged: (shard, block, byte offset in it) to flip; cut: where to resume, as a fraction of the epoch."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 50_000, size=int(k), dtype=np.uint16) for k in rng.integers(20, 600, size=150)]
    manifest = write_dataset(path, docs, max_bytes_per_shard=24_000, checksum_block_size=BLOCK)
    kw = {"shuffle": shuffle, "block_samples": 16, "group_blocks": 2}
    clean = _epoch(path, **kw)
    real = []  # (shard, block, offset) folded onto the shards and blocks this seed's data has
    for s, b, at in damaged:
        e = manifest.shards[s % len(manifest.shards)]
        b = min(b, -(-e.bin_bytes // BLOCK) - 1)
        real.append((s % len(manifest.shards), b, min(at, e.bin_bytes - b * BLOCK - 1)))
    damaged = list({(s, b): (s, b, at) for s, b, at in real}.values())
    for s, b, at in damaged:
        f = path / manifest.shards[s].bin_name
        raw = bytearray(f.read_bytes())
        raw[b * BLOCK + at] ^= 0x01
        f.write_bytes(bytes(raw))
    opts = {**kw, "verify_on_read": True, "on_corrupt": "skip"}
    whole = _epoch(path, **opts)
    assert len(whole) == len(clean) and all(a.shape == b.shape for a, b in zip(whole, clean))
    ranks = [_epoch(path, rank=r, world_size=world, **opts) for r in range(world)]
    for b, batch in enumerate(whole):
        assert np.array_equal(np.concatenate([ranks[r][b] for r in range(world)]), batch), b
    first = int(cut * (len(whole) - 1))
    loader = Loader(path, seq_len=SEQ, batch_schedule=8, seed=2, max_epochs=1, **opts)
    loader.load_state_dict(loader.state_at(first))
    rest = [b["input_ids"].copy() for b in loader]
    assert all(np.array_equal(a, b) for a, b in zip(rest, whole[first:])) and len(rest) == len(whole) - first
    # exactly the rows reading a damaged block changed (the reserve never reads one)
    offsets = np.concatenate([[0], np.cumsum([e.num_tokens for e in manifest.shards])])
    plan = Loader(path, seq_len=SEQ, batch_schedule=8, seed=2, max_epochs=1, **kw).engine.plan
    for b in range(len(clean)):
        start = plan.global_rows(b).ids * SEQ
        hit = np.zeros(start.size, dtype=bool)
        for s, blk, _ in damaged:
            lo = offsets[s] + blk * BLOCK // 2
            hi = min(offsets[s] + (blk + 1) * BLOCK // 2, offsets[s + 1])
            hit |= (start < hi) & (start + SEQ + 1 > lo)
        assert np.array_equal((clean[b] != whole[b]).any(axis=1), hit), b


def test_a_window_whose_last_token_opens_the_damaged_block(tmp_path):
    """Found by the property below: rank 1 of 2 missed a row whose window ends on the first token of the
    damaged block, because the chunk's first reader of each block was taken in array order, not row order."""
    _check(tmp_path / "ds", 0, [(0, 1, 0)], "block", 2, 0.0)


@SETTINGS
@given(data=st.data(), shuffle=st.sampled_from(["block", "full", "none"]), world=st.sampled_from([2, 4]))
def test_skip_is_one_function_of_the_damage_for_any_world_size_and_resume(tmp_path_factory, data, shuffle, world):
    seed = data.draw(st.integers(0, 2**16), label="data seed")
    shard_block = st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, BLOCK - 1))
    damaged = data.draw(st.lists(shard_block, min_size=1, max_size=3, unique_by=lambda t: t[:2]), label="damaged")
    cut = data.draw(st.floats(0, 1), label="resume at")
    _check(tmp_path_factory.mktemp("vor") / "ds", seed, damaged, shuffle, world, cut)
