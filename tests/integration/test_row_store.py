"""The packed row store (`packing_store=True`): batches identical, byte for byte and dtype for dtype, to the
rows gathered from the dataset; damaged, truncated and stale stores rebuilt with a warning, never used."""

import os
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardkit import Loader, MixtureLoader, Piecewise
from shardkit.engine import packed_rows
from shardkit.engine.packing import PackSpec
from shardkit.engine.row_store import ROW_FILES, STORE_VERSION, store_dir
from shardkit.errors import ConfigError
from shardkit.format.dataset import open_dataset
from shardkit.writer import write_dataset

SEQ = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("rowstore")
    rng = np.random.default_rng(11)
    sizes = np.concatenate([rng.integers(1, 40, 400), rng.integers(SEQ - 5, SEQ + 3, 30),
                            rng.integers(150, 400, 12)])
    rng.shuffle(sizes)
    parts = [rng.integers(1, 60000, size=int(n), dtype=np.uint16) for n in sizes]
    write_dataset(root / "ds", parts, max_tokens_per_shard=3000, checksum_block_size=4096)
    return root / "ds", root / "cache"


def _loader(corpus, cache=None, **kw):
    path, default_cache = corpus
    kw.setdefault("packing", "best_fit")
    kw.setdefault("batch_schedule", 8)
    kw.setdefault("seed", 5)
    return Loader(path, seq_len=SEQ, packing_cache_dir=cache or default_cache, block_samples=16,
                  group_blocks=2, **kw)


def assert_same_batch(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x, y), k
        else:
            assert type(x) is type(y) and x == y, k


def _batches(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strategy=st.sampled_from(["first_fit", "best_fit"]), seed=st.integers(0, 2**32),
       world=st.sampled_from([1, 2, 4]), start=st.integers(0, 40), doc=st.booleans(), tokens=st.booleans())
def test_store_batches_equal_gathered_batches(corpus, strategy, seed, world, start, doc, tokens):
    fields = {"loss_mask": True, "mask_doc_boundary": doc, "tokens_only": tokens}
    for rank in range(world):
        kw = dict(packing=strategy, seed=seed, rank=rank, world_size=world, fields=fields)
        gathered, stored = _loader(corpus, **kw), _loader(corpus, packing_store=True, **kw)
        state = gathered.state_at(start)
        gathered.load_state_dict(state)
        stored.load_state_dict(state)
        for a, b in zip(_batches(gathered, 30), _batches(stored, 30)):
            assert_same_batch(a, b)


def test_store_batches_equal_with_micro_batches_and_balance(corpus):
    kw = dict(rank=1, world_size=2, micro_batch_size=2, balance_ranks=True, batch_schedule=16)
    for a, b in zip(_batches(_loader(corpus, **kw), 40), _batches(_loader(corpus, packing_store=True, **kw), 40)):
        assert_same_batch(a, b)


# field sets a trainer names (BatchFields.for_packed_rows): boundaries only, positions only, and with the mask
FIELD_SETS = [["cu_seqlens"], ["position_ids"], ["cu_seqlens", "loss_mask"],
              {"cu_seqlens": True, "position_ids": True, "loss_mask": True, "mask_doc_boundary": True},
              {"cu_seqlens": True, "loss_mask": True, "tokens_only": True}, {"cu_seqlens": True, "tokens_only": True}]
SCHEDULES = [8, Piecewise(pieces=((5, 4), (7, 12)), final=8)]  # items of several sizes inside one slab


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, len(FIELD_SETS) - 1), seed=st.integers(0, 2**32), world=st.sampled_from([1, 2]),
       micro=st.sampled_from([None, 2]), schedule=st.sampled_from([0, 1]), start=st.integers(0, 12))
@example(which=0, seed=1, world=1, micro=None, schedule=1, start=0)  # item sizes 4 → 12 → 8 inside one slab
@example(which=5, seed=1, world=2, micro=2, schedule=1, start=3)  # boundaries only, as the adapters' tokens
def test_named_packed_fields_are_exactly_those_of_the_full_batch(corpus, which, seed, world, micro, schedule,
                                                                   start):
    """Packed rows carry only the fields named when a boundary field is named: the same arrays as in a batch
    with every field, from the store as from the dataset, whatever the item sizes and resume point."""
    named = FIELD_SETS[which]
    flags = dict.fromkeys(named, True) if isinstance(named, list) else named
    want = {k for k in ("position_ids", "loss_mask") if flags.get(k)} | \
        ({"cu_seqlens", "max_seqlen"} if flags.get("cu_seqlens") else set())
    rank = world - 1
    kw = dict(seed=seed, rank=rank, world_size=world, micro_batch_size=micro, batch_schedule=SCHEDULES[schedule])
    full = _loader(corpus, fields={"mask_doc_boundary": bool(flags.get("mask_doc_boundary")), "loss_mask": True,
                                   "tokens_only": bool(flags.get("tokens_only"))}, **kw)
    gathered, stored = _loader(corpus, fields=named, **kw), _loader(corpus, packing_store=True, fields=named, **kw)
    state = full.state_at(start)
    for ld in (full, gathered, stored):
        ld.load_state_dict(state)
    for f, g, s in zip(_batches(full, 25), _batches(gathered, 25), _batches(stored, 25)):
        assert_same_batch(g, s)
        assert {"position_ids", "loss_mask", "cu_seqlens", "max_seqlen"} & g.keys() == want
        assert g.keys() - want == f.keys() - {"position_ids", "loss_mask", "cu_seqlens", "max_seqlen"}
        for k in g:
            assert np.array_equal(g[k], f[k]) if isinstance(g[k], np.ndarray) else g[k] == f[k], k


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slab_rows=st.integers(1, 40), run_rows=st.integers(1, 200), run_segments=st.integers(1, 400),
       seed=st.integers(0, 2**32), world=st.sampled_from([1, 2]), micro=st.sampled_from([None, 2]),
       schedule=st.sampled_from([0, 1]), start=st.integers(0, 12), compiled=st.booleans())
@example(slab_rows=3, run_rows=200, run_segments=1, seed=1, world=1, micro=None, schedule=1, start=0,
         compiled=False)
@example(slab_rows=3, run_rows=1, run_segments=1, seed=1, world=1, micro=None, schedule=1, start=0, compiled=True)
def test_stored_boundaries_in_runs_of_any_size(corpus, slab_rows, run_rows, run_segments, seed, world, micro,
                                                schedule, start, compiled):
    """Stored rows' cu_seqlens are built for runs of items longer than a slab (`KERNEL_BOUNDARY_TOKENS` by the
    compiled loop, `BOUNDARY_TOKENS` without numba), cut short by `BOUNDARY_SEGMENTS` (down to the slab
    asking): the same batches as from the dataset whatever the run and slab sizes, item sizes and resume
    point."""
    kw = dict(seed=seed, rank=world - 1, world_size=world, micro_batch_size=micro,
              batch_schedule=SCHEDULES[schedule], fields=["cu_seqlens"])
    gathered = _loader(corpus, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(packed_rows, "STORE_SLAB_BYTES", slab_rows * (SEQ + 1) * 2)
        mp.setattr(packed_rows, "BOUNDARY_TOKENS", run_rows * SEQ)
        mp.setattr(packed_rows, "KERNEL_BOUNDARY_TOKENS", run_rows * SEQ)
        mp.setattr(packed_rows, "BOUNDARY_SEGMENTS", run_segments)
        _compiled_or_not(mp, compiled)
        stored = _loader(corpus, packing_store=True, **kw)
        state = gathered.state_at(start)
        gathered.load_state_dict(state)
        stored.load_state_dict(state)
        for g, s in zip(_batches(gathered, 40), _batches(stored, 40)):
            assert_same_batch(g, s)


def _compiled_or_not(mp, compiled):
    """Stored boundaries by the compiled loop (numba is a test dependency), or by the NumPy runs."""
    if compiled:
        assert packed_rows.row_boundaries() is not None, "numba is a test dependency: test the compiled loop"
    else:
        mp.setattr(packed_rows, "row_boundaries", lambda: None)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_stored_boundaries_in_runs_in_a_mixture(tmp_path, corpus, monkeypatch, compiled):
    """Runs of a mixture's items gather the segment lengths of both sources' stores into row order, and the
    segment cap counts both sources' segments (with the compiled loop and without it)."""
    _compiled_or_not(monkeypatch, compiled)
    monkeypatch.setattr(packed_rows, "STORE_SLAB_BYTES", 5 * (SEQ + 1) * 2)
    monkeypatch.setattr(packed_rows, "BOUNDARY_TOKENS", 37 * SEQ)
    monkeypatch.setattr(packed_rows, "KERNEL_BOUNDARY_TOKENS", 37 * SEQ)
    monkeypatch.setattr(packed_rows, "BOUNDARY_SEGMENTS", 90)  # runs cut short by the segment cap too
    recipe = _mixture_recipe(tmp_path, corpus, seed=5)
    g = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c", fields=["cu_seqlens"])
    s = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c", packing_store=True, fields=["cu_seqlens"])
    for a, b in zip(_batches(g, 40), _batches(s, 40)):
        assert_same_batch(a, b)


def _mixture_recipe(tmp_path, corpus, seed):
    """Two packed sources: the module's corpus and a second dataset of short documents."""
    path, _ = corpus
    other = tmp_path / "other"
    rng = np.random.default_rng(seed)
    write_dataset(other, [rng.integers(1, 60000, size=int(n), dtype=np.uint16) for n in rng.integers(1, 90, 300)],
                  max_tokens_per_shard=2000)
    return {"seed": 3, "packing": "best_fit", "sources": {"a": {"path": str(path)}, "b": {"path": str(other)}},
            "phases": [{"name": "p", "tokens": 10**5, "seq_len": SEQ, "batch": 8, "mix": {"a": 0.5, "b": 0.5}}]}


def test_named_fields_in_a_mixture_from_stores(tmp_path, corpus):
    recipe = _mixture_recipe(tmp_path, corpus, seed=4)
    full = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c")
    named = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c", packing_store=True, fields=["cu_seqlens"])
    for f, n in zip(_batches(full, 30), _batches(named, 30)):
        assert "loss_mask" not in n and "position_ids" not in n
        for k in n:
            assert np.array_equal(n[k], f[k]) if isinstance(n[k], np.ndarray) else n[k] == f[k], k


def test_store_in_a_mixture_equals_gathered(tmp_path, corpus):
    recipe = _mixture_recipe(tmp_path, corpus, seed=3)
    g = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c")
    s = MixtureLoader(recipe, packing_cache_dir=tmp_path / "c", packing_store=True)
    for a, b in zip(_batches(g, 30), _batches(s, 30)):
        assert_same_batch(a, b)


def _store(corpus, cache, strategy="best_fit"):
    path, _ = corpus
    return store_dir(cache, open_dataset(path).fingerprint, PackSpec(strategy=strategy, seq_len=SEQ))


# every field, and boundaries only (whose slabs take the store's fast path, `PackedReader.stored_items`)
READ_FIELDS = pytest.mark.parametrize("fields", [None, ["cu_seqlens"]], ids=["every-field", "cu_seqlens"])


@READ_FIELDS
def test_bit_flip_in_the_rows_is_found_and_the_store_rebuilt(corpus, tmp_path, fields):
    cache = tmp_path / "cache"
    want = _batches(_loader(corpus, cache, fields=fields), 60)
    _batches(_loader(corpus, cache, packing_store=True), 1)  # builds it
    tokens = _store(corpus, cache) / "tokens.bin"
    with open(tokens, "r+b") as f:
        f.seek(os.path.getsize(tokens) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.warns(RuntimeWarning, match="damaged"):
        got = _batches(_loader(corpus, cache, packing_store=True, fields=fields), 60)
    for a, b in zip(want, got):
        assert_same_batch(a, b)
    assert not _store(corpus, cache).exists()  # moved aside: the next open builds it again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a, b in zip(want, _batches(_loader(corpus, cache, packing_store=True, fields=fields), 60)):
            assert_same_batch(a, b)
    assert _store(corpus, cache).exists()


@pytest.mark.parametrize("name,fields,found", [
    ("pos.bin", None, True), ("pos.bin", ["cu_seqlens"], False), ("pos.bin", ["position_ids"], True),
    ("mask.bin", ["position_ids"], False), ("mask.bin", ["cu_seqlens", "loss_mask"], True)])
def test_a_reader_hashes_only_the_store_files_its_batches_read(corpus, tmp_path, name, fields, found):
    """Row store blocks are hashed on first read, per file: a varlen trainer (`["cu_seqlens"]`) hashes and
    reads 2 bytes a token, not 5. A damaged file the batches read is found (the store set aside, the rows
    read from the dataset); one they never read is never served, and the store stays."""
    cache = tmp_path / "cache"
    want = _batches(_loader(corpus, cache, fields=fields), 60)  # more than an epoch: every block is read
    _batches(_loader(corpus, cache, packing_store=True), 1)
    path = _store(corpus, cache) / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    loader = _loader(corpus, cache, packing_store=True, fields=fields)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _batches(loader, 60)
    assert any("damaged" in str(w.message) for w in caught) == found, [str(w.message) for w in caught]
    for a, b in zip(want, got):
        assert_same_batch(a, b)
    assert _store(corpus, cache).exists() != found
    if not found:
        verified = loader.engine.plan.streams[(0, SEQ)].windows.store.verified
        assert verified[:, 0].all() and not verified[:, ROW_FILES.index(name[:-4])].any()


@pytest.mark.parametrize("name", ["tokens.bin", "pos.bin", "mask.bin", "seg.bin", "seg_ptr.bin", "seg_max.bin"])
def test_truncated_store_is_rebuilt_with_a_warning(corpus, tmp_path, name):
    cache = tmp_path / "cache"
    want = _batches(_loader(corpus, cache), 20)
    _batches(_loader(corpus, cache, packing_store=True), 1)
    path = _store(corpus, cache) / name
    os.truncate(path, os.path.getsize(path) - 4)
    with pytest.warns(RuntimeWarning, match="building it again"):
        got = _batches(_loader(corpus, cache, packing_store=True), 20)
    for a, b in zip(want, got):
        assert_same_batch(a, b)
    assert os.path.getsize(path) > 0 and (_store(corpus, cache) / "meta.json").exists()


@pytest.mark.parametrize("name", ["seg.bin", "seg_ptr.bin", "seg_max.bin"])
def test_flip_in_segments_is_found_when_opened(corpus, tmp_path, name):
    cache = tmp_path / "cache"
    _batches(_loader(corpus, cache, packing_store=True), 1)
    seg = _store(corpus, cache) / name
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 1
    seg.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="checksum"):
        _batches(_loader(corpus, cache, packing_store=True), 2)


def test_stale_store_is_rebuilt(corpus, tmp_path):
    """A store of an older format (or one built for something else) is never read: rebuilt, with a warning."""
    cache = tmp_path / "cache"
    _batches(_loader(corpus, cache, packing_store=True), 1)
    meta = _store(corpus, cache) / "meta.json"
    old = STORE_VERSION - 1
    meta.write_text(meta.read_text().replace(f'"version": {STORE_VERSION}', f'"version": {old}'))
    with pytest.warns(RuntimeWarning, match=f"built for version {old}"):
        _batches(_loader(corpus, cache, packing_store=True), 1)


def test_packing_store_needs_packed_rows(corpus):
    with pytest.raises(ConfigError, match="packing_store"):
        _loader(corpus, packing="window", packing_store=True)
    with pytest.raises(ConfigError, match="packing_store must be True or False"):
        _loader(corpus, packing_store="yes")


def test_a_stored_stream_hints_no_dataset_pages(corpus, tmp_path):
    """Group hints (read-ahead, eviction) address the dataset's shards; rows read from the store need none of
    them (they are hinted in the store's files instead)."""
    cache = tmp_path / "cache"
    gathered = _loader(corpus, cache).engine.plan.streams[(0, SEQ)].windows
    stored = _loader(corpus, cache, packing_store=True).engine.plan.streams[(0, SEQ)].windows
    first, stop = np.array([0]), np.array([16 * SEQ + 1])
    assert gathered.token_ranges(first, stop) and stored.token_ranges(first, stop) == []


@pytest.mark.parametrize("fields,files", [(["cu_seqlens"], ("tokens",)), (None, ("tokens", "pos", "mask"))],
                         ids=["boundaries-only", "every-field"])
def test_a_stored_stream_hints_and_releases_its_own_store_rows(corpus, tmp_path, fields, files):
    """One rank, block shuffle: entering a group hints the store rows of that group and the next in the files
    the batches read (tokens; positions and masks too unless only boundaries are asked for), each block once,
    and releases the groups left behind — what windows get for the dataset's pages. The batches are those of
    a loader without hints."""
    cache = tmp_path / "cache"
    kw = {"packing_store": True} | ({"fields": fields} if fields else {})
    want = _batches(_loader(corpus, cache, readahead=False, **kw), 20)
    loader = _loader(corpus, cache, **kw)
    it = iter(loader)
    got = [next(it)]
    loader.engine.wait_hints()
    stream = loader.engine.plan.streams[(0, SEQ)]
    store, order = stream.windows.store, stream.order
    metrics = loader.engine.reads[(0, SEQ)]
    blocks = np.unique(np.concatenate([order.blocks_of_group(0, 0), order.blocks_of_group(*order.group_after(0, 0))]))
    rows = sum(min(store.rows, (b + 1) * order.block) - b * order.block for b in blocks.tolist())
    row_bytes = sum(getattr(store, name).strides[0] for name in files)
    page = os.sysconf("SC_PAGE_SIZE")
    assert rows * row_bytes <= metrics.bytes_prefetched <= rows * row_bytes + blocks.size * len(files) * page
    assert metrics.bytes_released == 0
    got += [next(it) for _ in range(19)]  # 160 rows: five groups of 32
    loader.engine.wait_hints()
    assert metrics.groups_entered >= 5 and metrics.bytes_released > 0
    for a, b in zip(want, got):
        assert_same_batch(a, b)


@READ_FIELDS
def test_store_truncated_under_a_running_loader_is_not_read(corpus, tmp_path, fields):
    cache = tmp_path / "cache"
    want = _batches(_loader(corpus, cache, fields=fields), 60)
    it = iter(_loader(corpus, cache, packing_store=True, fields=fields))
    got = [next(it) for _ in range(2)]
    tokens = _store(corpus, cache) / "tokens.bin"
    os.truncate(tokens, os.path.getsize(tokens) // 2)
    time.sleep(0.002)  # a size is checked at most CHECK_VALID_NS (0.2 ms) before a read, as the dataset's shards
    with pytest.warns(RuntimeWarning, match="changed size under the reader"):
        got += [next(it) for _ in range(58)]
    for a, b in zip(want, got):
        assert_same_batch(a, b)


def test_opening_stores_holds_no_descriptor(corpus, tmp_path):
    cache = tmp_path / "cache"
    _batches(_loader(corpus, cache, packing_store=True), 1)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        loader = _loader(corpus, cache, packing_store=True)
        _batches(loader, 1)
        loader.close()
        del loader
    import gc
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) - before < 10


def test_several_ranks_reading_the_store_hint_their_own_store_rows_never_a_dataset_page(corpus):
    """Rows from the store never read the dataset's shards: each rank prefetches the pages of its own upcoming
    rows in the store's files (the tokens; the stored positions and masks too when its batches carry them),
    never a dataset page; the same rows gathered from the dataset hint the dataset's shards."""
    def hinted(**kw):
        loader = _loader(corpus, rank=3, world_size=4, batch_schedule=16, **kw)
        worker, targets = loader.engine._worker, []
        submit = worker.submit
        worker.submit = lambda tasks: (targets.extend(t[2] for t in tasks), submit(tasks))
        _batches(loader, 40)
        loader.engine.wait_hints()
        return targets, sum(m.bytes_prefetched for m in loader.engine.reads.values())

    targets, prefetched = hinted()
    assert prefetched > 0 and targets and all(isinstance(t, int) for t in targets)  # dataset shard ids
    for fields, names in ((["cu_seqlens"], {"tokens.bin"}), (None, {"tokens.bin", "pos.bin", "mask.bin"})):
        targets, prefetched = hinted(packing_store=True, **({"fields": fields} if fields else {}))
        assert prefetched > 0 and {os.path.basename(t.path) for t in targets} == names
