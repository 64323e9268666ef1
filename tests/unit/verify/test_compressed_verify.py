"""`verify` on compressed shards: real bit flips in frames, the frame index, the skippable header and the footer
are each named (shard, frame, byte range); `--quick` reads only footers and indexes; `--deep` checks tokens."""

import json
import os

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verify_testutil import EOS, flip_bit, restore, snapshot, texts

from shardkit.format.manifest import Manifest
from shardkit.format.zstd_frames import FOOTER_SIZE, FramedReader, FrameEntry, FrameIndex
from shardkit.inspect import inspect_dataset
from shardkit.pack.stats import PackStats
from shardkit.tokenizers import BytesTokenizer
from shardkit.verify import Check, Verdict, verify_dataset
from shardkit.writer import Codec, CompressionConfig, ShardLimits, ShardWriter

BLOCK = 256
FRAME = 100


def build_compressed(directory, *, n_docs=40, shard_tokens=400, frame_size=FRAME, bad_eos_doc=None):
    """Byte-tokenized texts + EOS like `pack` writes them, stored as framed zstd (several frames per shard)."""
    directory.mkdir(parents=True)
    tok = BytesTokenizer()
    writer = ShardWriter(directory, dtype=np.dtype("uint16"),
                         limits=ShardLimits(max_bytes=None, max_tokens=shard_tokens, checksum_block_size=BLOCK),
                         with_ids=True, compression=CompressionConfig(codec=Codec.ZSTD, frame_size=frame_size))
    stats, entries = PackStats(), []
    for i, text in enumerate(texts(n_docs)):
        ids, _ = tok.encode_batch([text])
        doc = np.append(ids, 32 if i == bad_eos_doc else EOS).astype(np.uint16)
        length = np.array([doc.size], dtype=np.int64)
        if writer.fitting_docs(length) == 0:
            entries.append(writer.close_shard())
        writer.write_docs(doc, length, [f"doc-{i}"])
        stats.add_docs("corpus/*.txt", length, len(text))
    entries.append(writer.close_shard())
    spec = {k: v for k, v in tok.spec.to_json().items() if k != "backend"}
    Manifest(dtype="uint16", tokenizer=spec, shards=tuple(entries), checksum_block_size=BLOCK, eos_appended=True,
             bos_prepended=False, pack={"inputs": ["corpus/*.txt"]}, stats=stats.to_json()).save(directory)
    return Manifest.load(directory)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("cverify") / "ds"
    m = build_compressed(d)
    assert len(m.shards) >= 3 and all(e.compression for e in m.shards)
    return d, m, snapshot(d)


@pytest.fixture()
def ds(pristine):
    d, m, files = pristine
    restore(d, files)
    return d, m


def _frames(path):
    with FramedReader(path) as r:
        return r.index


@pytest.mark.parametrize("mode", ["quick", "full", "deep"])
def test_clean_compressed_dataset_is_ok(ds, mode, tmp_path):
    d, m = ds
    r = verify_dataset(d, mode=mode, jobs=2, cache_dir=tmp_path / "cache", decode_sample=3)
    assert r.ok, r.to_json()
    zst = sum(os.path.getsize(d / e.zst_name) for e in m.shards)
    small = sum(os.path.getsize(p) for p in d.iterdir() if p.suffix in (".idx", ".jsonl"))
    raw = sum(e.bin_bytes for e in m.shards)
    assert r.bytes_decompressed == (0 if mode == "quick" else raw)
    assert r.bytes_hashed == (small if mode == "quick" else small + zst + raw)
    assert r.bytes_scanned == (raw if mode == "deep" else 0)
    assert len(r.samples) == 3 and r.samples[0]["text"].startswith(texts(40)[0])
    # deep scans through a scratch copy; only the decoded samples' shards stay in the cache
    cached = [p for p in (tmp_path / "cache").rglob("*.bin")]
    assert len(cached) <= 3 and not list((tmp_path / "cache").rglob("*.tmp"))


def test_flip_in_every_frame_names_shard_frame_and_ranges(ds):
    d, m = ds
    e = m.shards[1]
    path = d / e.zst_name
    index = _frames(path)
    pristine = path.read_bytes()
    for i, f in enumerate(index.frames):
        offset = f.offset + f.length // 2
        flip_bit(path, offset, 5)
        r = verify_dataset(d, jobs=1)
        path.write_bytes(pristine)
        assert r.verdict is Verdict.CORRUPT and r.bad_shards == [e.name]
        frames = [p for p in r.problems if p.check is Check.FRAMES]
        assert len(frames) == 1, [str(p) for p in r.problems]
        p = frames[0]
        assert p.shard == e.name and p.file == e.zst_name
        assert p.byte_range == (f.offset, f.offset + f.length)
        lo, hi = index.frame_range(i)
        assert f"frame {i} " in p.detail and f"uncompressed bytes [{lo}, {hi}) of {e.bin_name}" in p.detail
        transport = [p for p in r.problems if p.check is Check.CHECKSUM]
        assert len(transport) == 1 and transport[0].file == e.zst_name
        b0, b1 = transport[0].byte_range
        assert b0 <= offset < b1


@pytest.mark.parametrize("where", ["index", "skippable header", "footer head", "footer digest"])
def test_flip_in_index_and_footer_is_found_by_quick_too(ds, where):
    d, m = ds
    e = m.shards[0]
    path = d / e.zst_name
    size = path.stat().st_size
    index = _frames(path)
    offset = {"index": index.index_offset + 40, "skippable header": index.index_offset - 3,
              "footer head": size - FOOTER_SIZE + 10, "footer digest": size - FOOTER_SIZE + 50}[where]
    flip_bit(path, offset, 0)
    for mode in ("quick", "full"):
        r = verify_dataset(d, mode=mode, jobs=1)
        assert r.bad_shards == [e.name], [str(p) for p in r.problems]
        frames = [p for p in r.problems if p.check is Check.FRAMES]
        assert len(frames) == 1 and frames[0].file == e.zst_name
        assert any(w in frames[0].detail for w in ("index checksum", "skippable frame header", "footer checksum"))
        assert any(p.check is Check.CHECKSUM for p in r.problems) == (mode == "full")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flip_anywhere_in_a_zst_is_reported_in_full_mode(pristine, data):
    d, m, files = pristine
    restore(d, files)
    e = data.draw(st.sampled_from(m.shards), label="shard")
    path = d / e.zst_name
    offset = data.draw(st.integers(0, path.stat().st_size - 1), label="offset")
    flip_bit(path, offset, data.draw(st.integers(0, 7), label="bit"))
    try:
        r = verify_dataset(d, jobs=1)
        assert r.verdict is Verdict.CORRUPT and r.bad_shards == [e.name]
        assert any(p.check is Check.CHECKSUM and p.file == e.zst_name for p in r.problems)
    finally:
        restore(d, files)


def test_truncated_and_appended_zst(ds):
    d, m = ds
    e = m.shards[2]
    path = d / e.zst_name
    raw = path.read_bytes()
    path.write_bytes(raw[:-30])
    r = verify_dataset(d, jobs=1)
    assert {(p.check, p.shard) for p in r.problems} >= {(Check.SIZE, e.name)}
    assert "truncated: the last 30 bytes are missing" in str(next(p for p in r.problems if p.check is Check.SIZE))
    path.write_bytes(raw + b"junk")
    r = verify_dataset(d, mode="quick", jobs=1)
    assert any(p.check is Check.SIZE and "appended to" in p.detail for p in r.problems)


def test_missing_zst_and_sidecar_without_zst_digests(ds):
    d, m = ds
    (d / m.shards[0].zst_name).unlink()
    r = verify_dataset(d, jobs=1)
    assert any(p.check is Check.MISSING and p.file == m.shards[0].zst_name for p in r.problems)
    # a stray plain .bin next to it is not taken for the shard
    assert not (d / m.shards[0].bin_name).exists()


def test_swapped_frames_decode_cleanly_but_fail_the_uncompressed_checksums(tmp_path):
    """A self-consistent .zst holding other data (two equal-length frames swapped, index re-signed)."""
    rng = np.random.default_rng(1)
    d = tmp_path / "ds"
    d.mkdir()
    from shardkit.writer import write_dataset
    docs = [rng.integers(0, 65535, size=200, dtype=np.uint16)]  # random: frames of equal compressed size
    m = write_dataset(d, docs, checksum_block_size=BLOCK,
                      compression=CompressionConfig(codec=Codec.ZSTD, frame_size=FRAME))
    e = m.shards[0]
    path = d / e.zst_name
    index = _frames(path)
    raw = path.read_bytes()
    f0, f1 = index.frames[0], index.frames[1]
    assert f0.length == f1.length
    body = raw[f1.offset:f1.offset + f1.length] + raw[f0.offset:f0.offset + f0.length] + raw[f1.offset + f1.length:
                                                                                              index.index_offset - 8]
    frames = (FrameEntry(0, f1.length, f1.digest), FrameEntry(f1.length, f0.length, f0.digest)) + index.frames[2:]
    path.write_bytes(body + FrameIndex(block_size=FRAME, uncompressed_size=index.uncompressed_size,
                                       frames=frames).to_bytes())
    assert path.stat().st_size == len(raw)
    r = verify_dataset(d, jobs=1)
    assert not any(p.check is Check.FRAMES for p in r.problems), [str(p) for p in r.problems]
    bad = [p for p in r.problems if p.check is Check.CHECKSUM and "decompressed block 0" in p.detail]
    assert len(bad) == 1 and bad[0].byte_range == (0, BLOCK)


def test_deep_finds_a_missing_eos_inside_compressed_data(tmp_path):
    d = tmp_path / "ds"
    build_compressed(d, bad_eos_doc=7)
    r = verify_dataset(d, mode="deep", jobs=2, cache_dir=tmp_path / "c")
    eos = [p for p in r.problems if p.check is Check.EOS]
    assert len(eos) == 1 and "1 of" in eos[0].detail
    assert not list((tmp_path / "c").rglob("*.bin")), "--deep leaves no decompressed copies behind"


def test_corrupt_frame_skips_deep_token_checks_of_that_shard(ds):
    d, m = ds
    e = m.shards[0]
    index = _frames(d / e.zst_name)
    flip_bit(d / e.zst_name, index.frames[0].offset + 5, 1)
    r = verify_dataset(d, mode="deep", jobs=1)
    assert r.bad_shards == [e.name]
    assert any("token checks skipped for 1 shard" in n for n in r.notes)


def test_frame_digest_mismatch_is_located(tmp_path):
    """A frame that decodes cleanly to other bytes than its index digest (index re-signed around it)."""
    from shardkit.writer import write_dataset
    d = tmp_path / "ds"
    m = write_dataset(d, [np.arange(300, dtype=np.uint16)], checksum_block_size=BLOCK,
                      compression=CompressionConfig(codec=Codec.ZSTD, frame_size=FRAME))
    path = d / m.shards[0].zst_name
    index = _frames(path)
    frames = list(index.frames)
    frames[2] = FrameEntry(frames[2].offset, frames[2].length, xxhash.xxh3_128_digest(b"other"))
    raw = path.read_bytes()
    path.write_bytes(raw[:index.index_offset - 8] + FrameIndex(block_size=FRAME, uncompressed_size=600,
                                                                frames=tuple(frames)).to_bytes())
    r = verify_dataset(d, jobs=1)
    [p] = [p for p in r.problems if p.check is Check.FRAMES]
    assert "frame 2 " in p.detail and "digest mismatch" in p.detail
    assert p.expected == xxhash.xxh3_128_hexdigest(b"other")


def test_inspect_shows_the_compression_ratio(ds):
    d, m = ds
    s = inspect_dataset(d)
    assert s.stored_bytes == sum(e.compression.file_bytes for e in m.shards)  # tiny frames: no gain here
    assert [c["shard"] for c in s.compression] == [e.name for e in m.shards]
    assert s.compression_ratio == pytest.approx(s.bin_bytes / s.stored_bytes)
    assert s.disk_bytes > s.stored_bytes
    json.dumps(s.to_json())
