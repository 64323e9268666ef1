"""A loader's lifecycle and configuration: `close()` and `with` release its thread and mappings, a dropped
loader leaves nothing behind, torch's checkpointing saves the data position through the `Stateful`
protocol, and every parameter is checked at construction with an error that names it."""

import contextlib
import gc
import os
import threading

import numpy as np
import pytest
from support.mixtures import make_sources

from shardkit.engine import BatchFields
from shardkit.errors import ConfigError
from shardkit.loader import Loader, MixtureLoader
from shardkit.order import Piecewise, Ramp

SEQ = 16


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("life")
    make_sources(root)
    return root


def _mapped(path) -> int:
    """Mappings of this process onto files under `path` (from /proc/self/maps)."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sum(str(path) in line for line in f)


def _fds(path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
    return n


def _hint_threads() -> int:
    return sum(t.name == "shardkit-hints" for t in threading.enumerate())


def _recipe(root):
    return {"seed": 1, "seq_len": SEQ, "phases": [{"name": "p", "tokens": 20_000, "batch": 8,
                                                   "mix": {"web": 0.5, "code": 0.5}}],
            "sources": {n: {"path": str(root / n)} for n in ("web", "code")}}


def _make(kind, root, **kw):
    if kind == "loader":
        return Loader(root / "web", seq_len=SEQ, batch_schedule=8, block_samples=4, group_blocks=1, **kw)
    return MixtureLoader(_recipe(root), **kw)


@pytest.mark.parametrize("kind", ["loader", "mixture"])
def test_close_and_with_release_the_thread_and_every_mapping(root, kind):
    gc.collect()
    before = _hint_threads()
    with _make(kind, root, fields=BatchFields(position_ids=True)) as ld:
        for _, _ in zip(range(40), ld):
            pass
        ld.engine.wait_hints()
        assert _mapped(root) > 0 and _hint_threads() <= before + 1
    assert _hint_threads() == before and _mapped(root) == 0 and _fds(root) == 0
    first = next(iter(ld))  # a closed loader reopens what it needs when it is used again
    assert first["batch_index"] == 40
    ld.close()


@pytest.mark.parametrize("kind", ["loader", "mixture"])
def test_a_dropped_loader_leaves_no_thread_mapping_or_descriptor(root, kind):
    gc.collect()
    before = _hint_threads()
    ld = _make(kind, root)
    for _, _ in zip(range(40), ld):
        pass
    del ld
    gc.collect()
    for _ in range(100):  # the hint thread exits once it sees the stop; give it a moment
        if _hint_threads() <= before:
            break
        threading.Event().wait(0.02)
    assert _hint_threads() <= before and _mapped(root) == 0 and _fds(root) == 0


def test_torch_distributed_checkpoint_saves_and_restores_the_data_position(root, tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.stateful import Stateful

    ld = _make("mixture", root)
    assert isinstance(ld, Stateful)
    for _, _ in zip(range(7), ld):
        pass
    expected = next(iter(_resumed_at(root, ld.state_dict())))
    dcp.save({"data": ld, "w": torch.zeros(3)}, checkpoint_id=str(tmp_path / "ckpt"))
    fresh = _make("mixture", root)
    dcp.load({"data": fresh, "w": torch.zeros(3)}, checkpoint_id=str(tmp_path / "ckpt"))
    assert fresh.step == 7
    np.testing.assert_array_equal(next(iter(fresh))["input_ids"], expected["input_ids"])


def _resumed_at(root, state):
    ld = _make("mixture", root)
    ld.load_state_dict(state)
    return ld


BAD = [
    (dict(seq_len=0), "seq_len"), (dict(seq_len=8.0), "seq_len"), (dict(seq_len=True), "seq_len"),
    (dict(seq_len=SEQ, seed=-1), "seed"), (dict(seq_len=SEQ, seed="1"), "seed"),
    (dict(seq_len=SEQ, batch_schedule=8.0), "batch_schedule"), (dict(seq_len=SEQ, batch_schedule="8"), "batch_schedule"),
    (dict(seq_len=SEQ, batch_schedule=0), "batch_schedule"), (dict(seq_len=SEQ, batch_schedule=True), "batch_schedule"),
    (dict(seq_len=SEQ, shuffle="blocks"), "shuffle"), (dict(seq_len=SEQ, block_samples=0), "block_samples"),
    (dict(seq_len=SEQ, group_blocks=-2), "group_blocks"), (dict(seq_len=SEQ, max_tokens=0), "max_tokens"),
    (dict(seq_len=SEQ, max_epochs=True), "max_epochs"), (dict(seq_len=SEQ, micro_batch_size=0), "micro_batch_size"),
    (dict(seq_len=SEQ, fields="bogus"), "fields"), (dict(seq_len=SEQ, fields=["position_ids", "bogus"]), "bogus"),
    (dict(seq_len=SEQ, fields={"loss_mask": "yes"}), "fields.loss_mask"), (dict(seq_len=SEQ, readahead=1), "readahead"),
    (dict(seq_len=SEQ, release="drop"), "release"), (dict(seq_len=SEQ, max_open_shards=2), "max_open_shards"),
    (dict(seq_len=SEQ, cache_limit="lots"), "lots"), (dict(seq_len=SEQ, storage_options=[1]), "storage_options"),
    (dict(seq_len=SEQ, rank="0", world_size=2), "rank"), (dict(seq_len=SEQ, world_size=2.0), "world_size"),
    (dict(seq_len=SEQ, allow_recipe_change="yes"), "allow_recipe_change"),
    (dict(seq_len=SEQ, batch_size=8), "batch_schedule=8"), (dict(seq_len=SEQ, sead=1), "did you mean 'seed'"),
    (dict(batch_schedule=8), "seq_len is required"),
]


@pytest.mark.parametrize("kwargs,names", BAD, ids=[f"{i}-{n}" for i, (_, n) in enumerate(BAD)])
def test_every_parameter_is_checked_by_name(root, kwargs, names):
    with pytest.raises(ConfigError, match=names.replace("(", r"\(").replace(")", r"\)")):
        Loader(root / "web", **kwargs)


def test_every_stage_of_a_schedule_is_checked_before_the_first_batch(root, monkeypatch):
    """A ramp whose later stage does not divide over the ranks is refused at construction, not hundreds of
    batches in; the message says where the world size came from."""
    ramp = Ramp(start=4, increment=2, ramp_samples=100, final=8)  # 4, 6, 8: 6 does not divide over 4
    with pytest.raises(ConfigError, match=r"batch_schedule, batch 13: a global batch of 6 samples is not divisible by world_size 4 \(passed"):
        Loader(root / "web", seq_len=SEQ, batch_schedule=ramp, rank=0, world_size=4)
    pieces = Piecewise(pieces=((10, 8),), final=12)
    with pytest.raises(ConfigError, match=r"12 samples over world_size 2 .* are 6 per rank, not a multiple of "
                                          r"micro_batch_size 4"):
        Loader(root / "web", seq_len=SEQ, batch_schedule=pieces, rank=0, world_size=2, micro_batch_size=4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match=r"world_size 3 \(from RANK/WORLD_SIZE\)"):
        Loader(root / "web", seq_len=SEQ, batch_schedule=8)


def test_global_batch_size_and_the_end_are_the_same_for_both_loaders(root):
    ld = Loader(root / "web", seq_len=SEQ, batch_schedule=8, max_epochs=1)
    ml = MixtureLoader(_recipe(root))
    for loader in (ld, ml):
        assert loader.global_batch_size == 8
        for _ in loader:
            pass
        assert loader.step == loader.num_batches() and loader.global_batch_size is None
        assert list(loader) == []
