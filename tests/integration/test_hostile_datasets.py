"""Hostile datasets, states and inputs: each is refused with a clear ShardkitError, quickly and in little memory.

Policy on symlinks (docs/reliability.md): inside a dataset directory a symlink is followed only when it
resolves inside that directory; a shard file, sidecar or manifest that resolves outside — or that is not
a regular file (FIFO, device) — is refused by `open_dataset`, the loader and `inspect`, and reported by
`verify`. `adopt` hard-links its inputs into the output (following a symlinked input to its target) and
refuses to adopt in place a file that is a symlink out of the directory.

Every case re-signs what it changes (sizes, sidecar digests, fingerprint), so the one check meant to
catch the lie is the one that has to.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
import xxhash

from shardkit.adopt import adopt
from shardkit.engine import BatchFields, stream_fingerprint
from shardkit.errors import (
    ConfigError,
    IntegrityError,
    ManifestError,
    PackError,
    ReaderError,
    ResumeError,
    ShardkitError,
)
from shardkit.format import open_dataset
from shardkit.format.checksums import ShardChecksums, digest_bytes, file_block_digests
from shardkit.format.idx import encode_index
from shardkit.format.manifest import compute_fingerprint
from shardkit.format.zstd_frames import FrameEntry, FrameIndex
from shardkit.inspect import inspect_dataset
from shardkit.loader import Loader, MixtureLoader
from shardkit.mixture import load_recipe
from shardkit.pack import OnError, PackConfig, pack
from shardkit.readers import ReaderConfig, compression, jsonl, read_records, text
from shardkit.sources import InputFile
from shardkit.verify import Check, verify_dataset
from shardkit.writer import Codec, CompressionConfig, ShardLimits, write_dataset

GIB = 1 << 30


# -- helpers ----------------------------------------------------------------------------------------------------


def _docs(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 250, size=int(rng.integers(3, 40)), dtype=np.uint16) for _ in range(n)]


@pytest.fixture()
def ds(tmp_path):
    path = tmp_path / "ds"
    write_dataset(path, _docs(), max_tokens_per_shard=200, checksum_block_size=64)
    return path


def _doc(ds):
    return json.loads((ds / "manifest.json").read_bytes())


def _save(ds, doc, *, sign=True):
    if sign:
        doc["fingerprint"] = compute_fingerprint(doc)
    (ds / "manifest.json").write_bytes((json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _resign(ds, edit=None):
    """Recompute every sidecar from the files it lists, the manifest's sizes and digests, then `edit`."""
    doc = _doc(ds)
    block = doc["checksum"]["block_size"]
    for s in doc["shards"]:
        sidecar = ds / f"{s['name']}.sum.json"
        listed = json.loads(sidecar.read_bytes())["files"]
        old = ShardChecksums.from_bytes(sidecar.read_bytes(), str(sidecar)).files
        sums = ShardChecksums(block_size=block, files={n: file_block_digests(ds / n, block) if (ds / n).exists()
                                                       else old[n] for n in listed})
        sidecar.write_bytes(sums.to_bytes())
        s["sum_xxh3"] = digest_bytes(sidecar.read_bytes())
        if "compression" in s:
            s["compression"]["file_bytes"] = os.path.getsize(ds / f"{s['name']}.bin.zst")
        else:
            s["bin_bytes"] = os.path.getsize(ds / f"{s['name']}.bin")
        s["idx_bytes"] = os.path.getsize(ds / f"{s['name']}.idx")
    if edit is not None:
        edit(doc)
    _save(ds, doc)


@contextlib.contextmanager
def bounded(seconds=20.0, peak_bytes=64 << 20):
    """Fail (not hang) past `seconds`; fail if the block allocated more than `peak_bytes` at once."""

    def alarm(*_):
        raise TimeoutError(f"took longer than {seconds}s: a hang")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < peak_bytes, f"allocated {peak:,} bytes at once (limit {peak_bytes:,})"
    finally:
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _refused_everywhere(ds, match, check=None, *, loader_reads=True):
    """open_dataset, the loader and inspect raise ManifestError(match); verify reports it without raising.

    The loader does not list every shard file when it opens (a `stat` of each on every rank does not scale):
    it checks a shard's files when it first maps them, so it is refused at construction or, at the latest,
    before it delivers anything from the bad shard. Files it never reads (`.sum.json`) are verify's.
    """
    with bounded():
        with pytest.raises(ManifestError, match=match):
            open_dataset(ds)
        if loader_reads:
            with pytest.raises(ManifestError, match=match):
                loader = Loader(ds, seq_len=8, batch_schedule=2, readahead=False, shuffle="none", max_epochs=1,
                                fields=BatchFields(position_ids=True))
                for _ in loader:
                    pass
        with pytest.raises(ManifestError, match=match):
            inspect_dataset(ds)
        report = verify_dataset(ds, mode="quick")
    assert not report.ok and report.problems
    if check is not None:
        assert check in {p.check for p in report.problems}, report.to_json()
    return report


# -- manifest shard names ---------------------------------------------------------------------------------------

BAD_NAMES = ["../x", "../../etc/passwd", "/etc/passwd", "a/b", "a\\b", "a\x00b", "..", ".hidden", "", "a" * 201,
             "x..y", "shard\u2215x", "shard\uff0fx", "\uff53hard", "shard\u202e", "shard\u200b", "sh\u0430rd",
             "C:\\x", "~/x", "shard\n", "-rf", 5, None, ["shard-00000"], {"name": "x"}]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:24] for n in BAD_NAMES])
def test_unsafe_shard_names_are_refused(ds, name):
    doc = _doc(ds)
    doc["shards"][0]["name"] = name
    _save(ds, doc)
    report = _refused_everywhere(ds, "unsafe or invalid shard name")
    assert [p.check for p in report.problems] == [Check.MANIFEST]


def test_shard_name_in_a_sidecar_cannot_reach_outside(ds, tmp_path):
    """A sidecar listing `../secret` (re-signed) is a problem, and the file outside is never hashed."""
    (tmp_path / "secret").write_bytes(b"s" * 100)
    sidecar = ds / "shard-00000.sum.json"
    doc = json.loads(sidecar.read_bytes())
    doc["files"]["../secret"] = {"size": 100, "blocks": ["0" * 32, "0" * 32]}
    sidecar.write_bytes(json.dumps(doc).encode())
    m = _doc(ds)
    m["shards"][0]["sum_xxh3"] = digest_bytes(sidecar.read_bytes())
    _save(ds, m)
    report = verify_dataset(ds)
    assert any("../secret" in p.detail for p in report.problems), report.to_json()


# -- symlinks, FIFOs, devices -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fname", ["shard-00001.bin", "shard-00001.idx", "shard-00001.sum.json"])
def test_shard_file_symlinked_outside_is_refused_even_with_the_right_bytes(ds, tmp_path, fname):
    outside = tmp_path / "outside" / fname
    outside.parent.mkdir()
    os.replace(ds / fname, outside)  # the very same bytes, just moved out
    os.symlink(outside, ds / fname)
    report = _refused_everywhere(ds, "symlink pointing outside", Check.MISSING, loader_reads=fname.endswith(("bin", "idx")))
    assert any("outside the dataset" in p.detail for p in report.problems)


def test_shard_bin_symlinked_to_etc_passwd_is_refused(ds):
    (ds / "shard-00000.bin").unlink()
    os.symlink("/etc/passwd", ds / "shard-00000.bin")
    _refused_everywhere(ds, "symlink pointing outside", Check.MISSING)


def test_relative_symlink_escaping_the_directory_is_refused(ds, tmp_path):
    os.replace(ds / "shard-00000.idx", tmp_path / "shard-00000.idx")
    os.symlink("../shard-00000.idx", ds / "shard-00000.idx")
    _refused_everywhere(ds, "symlink pointing outside", Check.MISSING)


def test_manifest_symlinked_outside_is_refused(ds, tmp_path):
    os.replace(ds / "manifest.json", tmp_path / "manifest.json")
    os.symlink(tmp_path / "manifest.json", ds / "manifest.json")
    _refused_everywhere(ds, "symlink pointing outside", Check.DATASET)


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom"])
def test_manifest_linked_to_an_endless_device_is_refused_without_reading(ds, target):
    (ds / "manifest.json").unlink()
    os.symlink(target, ds / "manifest.json")
    _refused_everywhere(ds, "not a regular file|symlink pointing outside", Check.DATASET)


def test_fifos_never_hang(ds):
    """A FIFO as manifest or shard file: opening one for reading would block until a writer comes."""
    (ds / "shard-00002.bin").unlink()
    os.mkfifo(ds / "shard-00002.bin")
    _refused_everywhere(ds, "not a regular file", Check.MISSING)
    (ds / "manifest.json").unlink()
    os.mkfifo(ds / "manifest.json")
    _refused_everywhere(ds, "not a regular file", Check.DATASET)


def test_dangling_and_looping_symlinks_are_missing_files(ds):
    (ds / "shard-00000.bin").unlink()
    os.symlink(ds / "nowhere.bin", ds / "shard-00000.bin")
    (ds / "shard-00001.idx").unlink()
    os.symlink("shard-00001.idx", ds / "shard-00001.idx")  # a link to itself
    _refused_everywhere(ds, "not a regular file", Check.MISSING)


def test_symlinks_that_stay_inside_are_followed(ds, tmp_path):
    """Links inside the directory (deduplicated files) and a symlinked dataset directory both open."""
    expected = [open_dataset(ds).doc(i).tolist() for i in range(24)]
    os.replace(ds / "shard-00000.bin", ds / "blob")
    os.symlink("blob", ds / "shard-00000.bin")
    os.symlink(ds, tmp_path / "alias")
    for path in (ds, tmp_path / "alias"):
        assert [open_dataset(path).doc(i).tolist() for i in range(24)] == expected
        assert verify_dataset(path).ok


def _megatron(prefix: Path, docs):
    flat = np.concatenate(docs).astype(np.uint16)
    prefix.with_suffix(".bin").write_bytes(flat.tobytes())
    prefix.with_suffix(".idx").write_bytes(encode_index(np.array([d.size for d in docs]), np.dtype("uint16")))


def test_adopt_in_place_refuses_a_symlink_out(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _megatron(tmp_path / "real", _docs(5))
    os.symlink(tmp_path / "real.bin", data / "m.bin")
    os.replace(tmp_path / "real.idx", data / "m.idx")
    with pytest.raises(ManifestError, match="symlink pointing outside the output directory"):
        adopt([data / "m"], data)
    assert not (data / "manifest.json").exists()


def test_adopt_into_another_directory_links_the_target_not_the_symlink(tmp_path):
    (tmp_path / "src").mkdir()
    _megatron(tmp_path / "real", _docs(5))
    os.symlink(tmp_path / "real.bin", tmp_path / "src" / "m.bin")
    os.symlink(tmp_path / "real.idx", tmp_path / "src" / "m.idx")
    result = adopt([tmp_path / "src" / "m"], tmp_path / "out")
    assert not (tmp_path / "out" / "m.bin").is_symlink()  # a hard link of the target: inside the dataset
    assert open_dataset(tmp_path / "out").num_docs == 5 and verify_dataset(result.path).ok


def test_adopt_refuses_a_device_as_index(tmp_path):
    _megatron(tmp_path / "m", _docs(5))
    (tmp_path / "m.idx").unlink()
    os.symlink("/dev/zero", tmp_path / "m.idx")
    with bounded(), pytest.raises(ManifestError, match="missing"):
        adopt([tmp_path / "m"], tmp_path / "out")


# -- absurd counts in the manifest and the index ----------------------------------------------------------------


def test_manifest_claiming_a_trillion_shards_is_refused(ds):
    _resign(ds, lambda d: d["totals"].__setitem__("shards", 10**12))
    _refused_everywhere(ds, r"totals.shards is 1000000000000")


def test_manifest_claiming_a_trillion_tokens_is_refused_before_mapping(ds):
    def edit(d):
        d["shards"][0].update(tokens=10**12, bin_bytes=2 * 10**12)
        d["totals"]["tokens"] = sum(s["tokens"] for s in d["shards"])
    _resign(ds, edit)
    _refused_everywhere(ds, "manifest records 2,000,000,000,000", Check.SIZE)


def test_manifest_claiming_a_trillion_documents_never_allocates_for_them(ds):
    """Shard.doc_offsets sized its array by the manifest's count before checking it against the index."""
    def edit(d):
        d["shards"][0]["docs"] = 10**12
        d["totals"]["docs"] = sum(s["docs"] for s in d["shards"])
    _resign(ds, edit)
    with bounded():
        shard = open_dataset(ds).shards[0]  # opening is cheap: the lie is found on first use
        for use in (lambda: shard.doc_offsets, lambda: shard.doc(0)):
            with pytest.raises(ManifestError, match="sequences, manifest says 1,000,000,000,000"):
                use()
    report = verify_dataset(ds, mode="quick")
    assert Check.INDEX in {p.check for p in report.problems}


@pytest.mark.parametrize("count", [2**60, 2**63, 2**64 - 1])
def test_index_claiming_2_60_documents_in_a_tiny_file(ds, count):
    idx = ds / "shard-00000.idx"
    raw = bytearray(idx.read_bytes())
    raw[18:34] = struct.pack("<QQ", count, count + 1 if count < 2**64 - 1 else count)
    idx.write_bytes(bytes(raw))
    _resign(ds)
    with bounded():
        dataset = open_dataset(ds)
        with pytest.raises(ManifestError, match="impossible in a"):
            dataset.doc(0)
        with pytest.raises(ManifestError, match="impossible in a"):
            inspect_dataset(ds)
    [p] = verify_dataset(ds, mode="quick").problems
    assert p.check is Check.INDEX and "impossible" in p.detail


def test_sparse_shard_of_a_trillion_tokens_reads_without_allocating(tmp_path):
    """A real (sparse) 2 TB shard: open, index, read the last tokens and inspect in constant memory."""
    ds = tmp_path / "big"
    write_dataset(ds, _docs(3), checksum_block_size=64)
    lengths = np.full(465, 2**31 - 1, dtype=np.int64)
    lengths = np.append(lengths, 10**12 - int(lengths.sum()))
    (ds / "shard-00000.idx").write_bytes(encode_index(lengths, np.dtype("uint16")))
    try:
        os.truncate(ds / "shard-00000.bin", 2 * 10**12)
    except OSError as e:
        pytest.skip(f"no sparse 2 TB file here ({e.strerror})")

    def edit(d):
        d["shards"][0].update(tokens=10**12, docs=lengths.size)
        d["totals"].update(tokens=10**12, docs=lengths.size, bytes=2 * 10**12)
        d["stats"] = {}
    doc = _doc(ds)  # the sidecar is not re-hashed over 2 TB (verify's job); open_dataset does not read it
    doc["shards"][0]["idx_bytes"] = os.path.getsize(ds / "shard-00000.idx")
    doc["shards"][0]["bin_bytes"] = 2 * 10**12
    edit(doc)
    _save(ds, doc)
    with bounded(peak_bytes=16 << 20):
        dataset = open_dataset(ds)
        assert dataset.num_tokens == 10**12
        assert dataset.read_tokens(10**12 - 5, 10**12).tolist() == [0] * 5
        assert int(dataset.shards[0].doc_offsets[-1]) == 10**12
        summary = inspect_dataset(ds)
        assert summary.to_json()["tokens"] == 10**12


# -- state dicts with absurd values -----------------------------------------------------------------------------


def _nested(depth):
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


DEEP = _nested(100_000)
ABSURD = [10**30, -1, -(2**63), 2**62, float("nan"), float("inf"), "5", True, None, [], {}, "x" * 10**7, DEEP,
          10**5000]
ABSURD_IDS = ["1e30", "neg", "-2**63", "2**62", "nan", "inf", "str", "bool", "none", "list", "dict", "huge-str",
              "deep", "huge-int"]


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    path = tmp_path_factory.mktemp("state") / "ds"
    write_dataset(path, _docs(), max_tokens_per_shard=200, checksum_block_size=64)
    return Loader(path, seq_len=8, batch_schedule=4, readahead=False)


def _refused(load, state, field):
    with bounded(seconds=10, peak_bytes=8 << 20), pytest.raises(ResumeError) as e:
        load(state)
    assert e.value.field == field
    assert len(str(e.value)) < 600, str(e.value)[:300]


@pytest.mark.parametrize("key", ["batch", "samples", "micro"])
@pytest.mark.parametrize("value", ABSURD, ids=ABSURD_IDS)
def test_loader_state_with_absurd_positions(loader, key, value):
    _refused(loader.load_state_dict, {**loader.state_at(1), key: value}, key)


@pytest.mark.parametrize("key", ["format", "version", "fingerprint", "config"])
@pytest.mark.parametrize("value", [DEEP, "x" * 10**7, 10**5000, float("nan"), None],
                         ids=["deep", "huge-str", "huge-int", "nan", "none"])
def test_loader_state_with_absurd_fields(loader, key, value):
    _refused(loader.load_state_dict, {**loader.state_at(1), key: value}, key)


@pytest.mark.parametrize("value", [DEEP, "x" * 10**7, 10**5000, float("nan")], ids=["deep", "huge-str",
                                                                                  "huge-int", "nan"])
def test_loader_state_config_values_and_keys(loader, value):
    state = loader.state_at(1)
    stream = state["stream"]
    for definition in ({**stream["definition"], "seq_len": value}, {**stream["definition"], 7: value}):
        _refused(loader.load_state_dict, {**state, "stream": {**stream, "definition": definition}},
                 "stream.definition")


def test_loader_state_definition_edited_without_its_fingerprint(loader):
    state = loader.state_at(1)
    stream = state["stream"]
    edited = {**stream, "definition": {**stream["definition"], "seq_len": 17}}
    _refused(loader.load_state_dict, {**state, "stream": edited}, "stream.fingerprint")
    edited["fingerprint"] = stream_fingerprint("dataset", edited["definition"])  # re-signed: a real other stream
    _refused(loader.load_state_dict, {**state, "stream": edited}, "stream.seq_len")


@pytest.mark.parametrize("state", [DEEP, "x" * 10**7, 42, None, [1, 2]], ids=["deep", "str", "int", "none",
                                                                                 "list"])
def test_loader_state_that_is_not_a_dict(loader, state):
    _refused(loader.load_state_dict, state, "state")


def test_a_resume_far_past_any_batch_is_a_shardkit_error(loader):
    """Even with every override, a batch index near 2**62 fails as a ShardkitError, never a hang or overflow."""
    before = loader.state_dict()
    with bounded(seconds=10), pytest.raises(ShardkitError):
        loader.load_state_dict({**loader.state_at(0), "batch": 2**62 - 1}, allow_budget_change=True,
                               allow_recipe_change=True, allow_data_change=True)
        next(iter(loader))
    loader.load_state_dict(before)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    for i, name in enumerate(("a", "b")):
        write_dataset(root / name, _docs(30, i), max_tokens_per_shard=200, checksum_block_size=64)
    recipe = {"seed": 1, "seq_len": 8, "sources": {"a": {"path": "a"}, "b": {"path": "b"}},
              "phases": [{"name": "p", "tokens": 800, "batch": 4, "mix": {"a": 0.5, "b": 0.5}}]}
    return MixtureLoader(recipe, base_dir=root, readahead=False)


@pytest.mark.parametrize("path,field", [
    (("format",), "format"), (("version",), "version"), (("recipe",), "recipe"), (("datasets",), "datasets"),
    (("batch",), "batch"), (("micro",), "micro"), (("samples",), "samples"), (("anchor",), "anchor"),
    (("sources",), "sources"), (("sources", "a"), "sources.a"), (("sources", "a", "samples"), "sources.a.samples"),
    (("offsets",), "offsets"), (("offsets", "a"), "offsets.a"),
])
@pytest.mark.parametrize("value", [DEEP, "x" * 10**7, 10**5000, float("nan"), -(10**30)],
                         ids=["deep", "huge-str", "huge-int", "nan", "neg"])
def test_mixture_state_with_absurd_values(mixture, path, field, value):
    state = json.loads(json.dumps(mixture.state_at(2)))
    if path[0] == "offsets" and len(path) > 1:
        state["offsets"] = {"a": {"samples": 0, "tokens": 0}}
    target = state
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    _refused(mixture.load_state_dict, state, field)


# -- decompression bombs ----------------------------------------------------------------------------------------


def _zstd_rle_bomb(total: int, byte: bytes = b"\0", declared: int | None = None) -> bytes:
    """One zstd frame of RLE blocks (4 bytes per 128 KiB): 10 GiB of `byte` in 320 KiB.

    `declared` puts a content size in the frame header (8 bytes); None leaves it out.
    """
    block = 128 << 10
    if declared is None:
        header = struct.pack("<IBB", 0xFD2FB528, 0x00, 0x38)  # no content size, 128 KiB window
    else:
        header = struct.pack("<IBBQ", 0xFD2FB528, 0xC0, 0x38, declared)
    n, last = divmod(total, block)
    sizes = [block] * n + ([last] if last else [])

    def rle(size: int, is_last: bool) -> bytes:
        return struct.pack("<I", (size << 3) | (1 << 1) | int(is_last))[:3] + byte

    return header + rle(block, False) * (len(sizes) - 1) + rle(sizes[-1], True)


def _gzip_bomb(total: int) -> bytes:
    """Identical gzip members of 64 MiB of zeros (~65 KiB each): `total` bytes from ~1/1000 of that."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9, mtime=0)
    return member * (total // (64 << 20))


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    (d / "bomb.jsonl.zst").write_bytes(_zstd_rle_bomb(10 * GIB))
    (d / "bomb.txt.zst").write_bytes(_zstd_rle_bomb(10 * GIB, b"a"))
    (d / "bomb.jsonl.gz").write_bytes(_gzip_bomb(10 * GIB))
    return d


def _read(path, cfg=None):
    return list(read_records(InputFile(url=str(path), size=path.stat().st_size, source="t"), cfg or ReaderConfig()))


def test_zstd_bomb_really_expands(bombs):
    """The bomb is real: its first megabytes decompress at ~32,000x."""
    import zstandard
    d = zstandard.ZstdDecompressor().decompressobj()
    out = d.decompress(_zstd_rle_bomb(10 * GIB)[:2048])
    assert len(out) > 60 << 20 and os.path.getsize(bombs / "bomb.jsonl.zst") < 400 << 10


@pytest.mark.parametrize("name", ["bomb.jsonl.zst", "bomb.jsonl.gz"])
def test_jsonl_bomb_stops_at_the_line_limit(bombs, monkeypatch, name):
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 32 << 20)  # the shipped 256 MiB, scaled down for CI
    t0 = time.monotonic()
    # one decompressor call may give up to ~256 MiB (zstd RLE; see readers/compression.py), then the limit hits
    with bounded(seconds=30, peak_bytes=640 << 20), pytest.raises(ReaderError, match="line is longer than 32 MiB"):
        _read(bombs / name)
    assert time.monotonic() - t0 < 30


def test_text_bomb_stops_at_the_document_limit(bombs, monkeypatch):
    monkeypatch.setattr(text, "MAX_TEXT_BYTES", 32 << 20)  # the shipped 64 MiB, scaled down for CI
    with bounded(seconds=30, peak_bytes=900 << 20), pytest.raises(ReaderError, match="is refused"):
        _read(bombs / "bomb.txt.zst")


def test_each_decompressor_call_is_bounded():
    """The reader feeds the decompressor 8 KiB at a time: one call can produce at most ~256 MiB."""
    import zstandard
    d = zstandard.ZstdDecompressor().decompressobj()
    out = d.decompress(_zstd_rle_bomb(10 * GIB)[:compression._ZSTD_FEED])
    assert len(out) <= 256 << 20
    z = zlib.decompressobj(wbits=31)
    assert len(z.decompress(_gzip_bomb(64 << 20)[:compression._GZIP_FEED])) <= 70 << 20


@pytest.mark.parametrize("on_error", [OnError.SKIP, OnError.FAIL])
def test_pack_with_a_bomb_among_its_inputs(bombs, tmp_path, monkeypatch, on_error):
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 16 << 20)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a-good.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    os.link(bombs / "bomb.jsonl.zst", src / "b-bomb.jsonl.zst")
    config = PackConfig(inputs=(str(src),), output=str(tmp_path / "out"), workers=1, on_error=on_error,
                        limits=ShardLimits(max_bytes=None, max_tokens=4096, checksum_block_size=4096),
                        max_skip_fraction=1.0)  # the bomb is most of the input bytes; skipping it is the point
    if on_error is OnError.FAIL:
        with pytest.raises(PackError, match="line is longer than 16 MiB"):
            pack(config)
        return
    pack(config)
    m = json.loads((tmp_path / "out" / "manifest.json").read_bytes())
    assert m["totals"]["docs"] == 20
    skipped = m["stats"]["skipped"]
    assert skipped["count"] == 1 and "line is longer" in json.dumps(skipped["examples"])


def _compressed_dataset(path):
    write_dataset(path, _docs(), max_tokens_per_shard=200, checksum_block_size=64,
                  compression=CompressionConfig(codec=Codec.ZSTD, frame_size=64))
    return path


@pytest.mark.parametrize("declared", [None, 10 * GIB, 65])
def test_compressed_shard_with_a_bomb_frame(tmp_path, declared):
    """A .bin.zst whose frame 0 is a bomb (no declared size, 10 GiB, or one byte too many), re-signed."""
    ds = _compressed_dataset(tmp_path / "z")
    zst = ds / "shard-00000.bin.zst"
    raw = zst.read_bytes()
    from shardkit.format.zstd_frames import FramedReader
    with FramedReader(zst) as r:
        index = r.index
    bomb = _zstd_rle_bomb(10 * GIB, declared=declared)
    frames = [FrameEntry(0, len(bomb), xxhash.xxh3_128_digest(b"\0" * index.block_size))]
    off = len(bomb)
    for e in index.frames[1:]:
        frames.append(FrameEntry(off, e.length, e.digest))
        off += e.length
    rest = raw[index.frames[1].offset:index.frames[-1].offset + index.frames[-1].length] if len(index.frames) > 1 \
        else b""
    zst.write_bytes(bomb + rest + FrameIndex(index.block_size, index.uncompressed_size, tuple(frames)).to_bytes())
    _resign(ds)
    with bounded(seconds=20, peak_bytes=32 << 20):
        dataset = open_dataset(ds, cache_dir=tmp_path / "cache")
        with pytest.raises(IntegrityError):
            dataset.doc(0)
    report = verify_dataset(ds)
    assert not report.ok


# -- deep nesting in JSON ---------------------------------------------------------------------------------------


def test_manifest_nested_too_deeply(ds):
    (ds / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    _refused_everywhere(ds, "not valid JSON", Check.MANIFEST)


@pytest.mark.parametrize("where", [("tokenizer",), ("pack",), ("stats",), ("shards", 0, "compression"),
                                   ("shards", 0, "docs"), ("checksum", "block_size"), ("totals", "docs"),
                                   ("eos_appended",)])
def test_manifest_values_nested_900_deep(ds, where):
    """Deep enough to pass json.loads, deep enough to break a recursive repr() in an error message."""
    doc = _doc(ds)
    target = doc
    for k in where[:-1]:
        target = target[k]
    target[where[-1]] = "__nest__"
    doc["fingerprint"] = compute_fingerprint(doc)
    raw = json.dumps(doc, indent=1, sort_keys=True).replace('"__nest__"', "[" * 900 + "]" * 900)
    doc = json.loads(raw)  # (re-sign over the real nesting)
    doc["fingerprint"] = compute_fingerprint(doc)
    (ds / "manifest.json").write_text(json.dumps(doc, sort_keys=True))
    with bounded():
        try:
            dataset = open_dataset(ds)
        except ManifestError as e:
            assert len(str(e)) < 1000
        else:
            dataset.doc(0)  # an unknown-shape value in a free-form field is kept, and harmless
        verify_dataset(ds, mode="quick")


def test_sidecar_nested_too_deeply(ds):
    sidecar = ds / "shard-00000.sum.json"
    sidecar.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    doc = _doc(ds)
    doc["shards"][0]["sum_xxh3"] = digest_bytes(sidecar.read_bytes())
    _save(ds, doc)
    report = verify_dataset(ds)
    assert any(p.check is Check.SIDECAR and "not valid JSON" in p.detail for p in report.problems), report.to_json()


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".toml"])
def test_recipe_nested_too_deeply(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    path.write_text(("a = " if suffix == ".toml" else "") + "[" * 100_000 + "]" * 100_000)
    with bounded(), pytest.raises(ConfigError, match="not valid"):
        load_recipe(path)
    with pytest.raises(ConfigError, match="not valid"):
        MixtureLoader(path, readahead=False)


def test_jsonl_record_nested_too_deeply_is_a_bad_record(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "a", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
                    '{"text": "after"}\n')
    with bounded():
        records = _read(path)
    assert [(r.text, r.error) for r in records] == [("ok", None), (None, "invalid JSON: nested too deeply"),
                                                     ("after", None)]
