"""Compressed shards, format and read side: the parallel framed writer, manifest records, the decompressed
cache (verified, keyed by content, shared by processes), byte-range reads, and hostile `.zst` files."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zstandard

from shardkit.errors import ConfigError, IntegrityError, ManifestError
from shardkit.format import MANIFEST_NAME, Manifest, open_dataset
from shardkit.format.checksums import file_block_digests
from shardkit.format.compressed import (
    CACHE_FORMAT,
    DecompressCache,
    FrameRanges,
    RangeFile,
    decode_span,
    decompress_range,
    default_cache_dir,
    fetch_tail,
)
from shardkit.format.manifest import compute_fingerprint
from shardkit.format.zstd_frames import FOOTER_SIZE, FramedReader, FrameEntry, FrameIndex, write_framed
from shardkit.writer import Codec, CompressionConfig, write_dataset
from shardkit.writer.compress import compress_file

ZSTD = CompressionConfig(codec=Codec.ZSTD, frame_size=1000)


def _docs(n=120, seed=5):
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, 50000, size=int(rng.integers(2, 9)), dtype=np.uint16) for _ in range(40)]
    # documents of recurring phrases: compressible like text, even in 1000-byte frames
    return [np.concatenate([phrases[i] for i in rng.integers(0, 40, size=int(rng.integers(1, 40)))])
            for _ in range(n)]


@pytest.fixture()
def pair(tmp_path):
    """The same documents written plain and compressed (several shards, several frames and blocks each)."""
    docs = _docs()
    kw = dict(max_tokens_per_shard=3000, checksum_block_size=4096)
    plain = write_dataset(tmp_path / "plain", docs, **kw)
    comp = write_dataset(tmp_path / "zst", docs, compression=ZSTD, **kw)
    return tmp_path / "plain", tmp_path / "zst", plain, comp, docs


# -- writing ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("frame_size", [1, 7, 1000, 4096, 1 << 20])
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 20_001])
def test_parallel_writer_equals_write_framed_for_any_thread_count(tmp_path, frame_size, size):
    if frame_size == 1 and size > 5000:
        pytest.skip("one frame per byte: slow and says nothing new")
    raw = tmp_path / "raw"
    raw.write_bytes(np.random.default_rng(size).integers(0, 40, size=size, dtype=np.uint8).tobytes())
    ref = tmp_path / "ref.zst"
    index = write_framed(ref, raw.read_bytes(), block_size=frame_size, level=3)
    for threads in (1, 2, 5):
        out = tmp_path / f"t{threads}.zst"
        got = compress_file(raw, out, CompressionConfig(codec=Codec.ZSTD, frame_size=frame_size),
                            checksum_block_size=4096, threads=threads)
        assert out.read_bytes() == ref.read_bytes()
        assert got.index == index
        assert got.transport == file_block_digests(out, 4096)  # transport digests: of the compressed file


def test_compression_config_validation():
    for bad in (dict(level=0), dict(level=23), dict(level=True), dict(frame_size=0), dict(frame_size=(1 << 30) + 1),
                dict(frame_size=1.5), dict(codec="zstd")):
        with pytest.raises(ConfigError):
            CompressionConfig(**{"codec": Codec.ZSTD, **bad})
    assert not CompressionConfig().enabled
    assert CompressionConfig(codec=Codec.ZSTD, level=9).to_json() == {"codec": "zstd", "level": 9,
                                                                      "frame_size": 1 << 20}


def test_compressed_dataset_files_and_manifest(pair):
    plain_dir, zst_dir, plain, comp, _ = pair
    assert plain.format_version == 1 and comp.format_version == 2
    assert len(comp.shards) == len(plain.shards) > 2
    names = sorted(p.name for p in zst_dir.iterdir())
    assert not any(n.endswith(".bin") for n in names), "a compressed shard keeps no raw .bin"
    assert not any(n.endswith(".tmp") for n in names)
    doc = json.loads((zst_dir / MANIFEST_NAME).read_text())
    assert doc["format_version"] == 2
    for p, c in zip(plain.shards, comp.shards):
        assert (c.bin_bytes, c.num_tokens, c.idx_bytes) == (p.bin_bytes, p.num_tokens, p.idx_bytes)
        assert c.compression.codec == "zstd" and c.compression.frame_size == 1000
        assert c.compression.file_bytes == (zst_dir / c.zst_name).stat().st_size < c.bin_bytes
        assert (zst_dir / c.idx_name).read_bytes() == (plain_dir / p.idx_name).read_bytes()  # Megatron .idx
        sums = json.loads((zst_dir / c.sum_name).read_text())["files"]
        plain_sums = json.loads((plain_dir / p.sum_name).read_text())["files"]
        assert sums[c.bin_name] == plain_sums[p.bin_name]  # the uncompressed digests are the plain shard's
        assert sums[c.zst_name]["size"] == c.compression.file_bytes
    plain_doc = json.loads((plain_dir / MANIFEST_NAME).read_text())
    assert "compression" not in json.dumps(plain_doc["shards"])  # plain entries unchanged by this feature


# -- manifest compatibility -------------------------------------------------------------------------

def _edit(ds, fn):
    path = ds / MANIFEST_NAME
    doc = json.loads(path.read_text())
    fn(doc)
    doc["fingerprint"] = compute_fingerprint(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.__setitem__("format_version", 1), "format version 1 does not match"),
    (lambda d: d["shards"][0]["compression"].__setitem__("codec", "lz4"), "codec 'lz4' is unknown"),
    (lambda d: d["shards"][0]["compression"].__setitem__("frame_size", 0), "frame_size"),
    (lambda d: d["shards"][0]["compression"].__setitem__("file_bytes", -3), "file_bytes"),
    (lambda d: d["shards"][0].__setitem__("compression", "zstd"), "must be an object"),
    (lambda d: d.__setitem__("format_version", 3), "format version 3 is not supported"),
])
def test_bad_compression_records_are_refused(pair, edit, match):
    _, zst_dir, *_ = pair
    _edit(zst_dir, edit)
    with pytest.raises(ManifestError, match=match):
        open_dataset(zst_dir)


def test_plain_manifest_claiming_version_2_is_refused(pair):
    plain_dir, *_ = pair
    _edit(plain_dir, lambda d: d.__setitem__("format_version", 2))
    with pytest.raises(ManifestError, match="format version 2 does not match"):
        open_dataset(plain_dir)


def test_open_checks_the_zst_size_and_presence(pair):
    _, zst_dir, _, comp, _ = pair
    zst = zst_dir / comp.shards[1].zst_name
    os.truncate(zst, zst.stat().st_size - 5)
    with pytest.raises(ManifestError, match="truncated, appended to"):
        open_dataset(zst_dir)
    zst.unlink()
    with pytest.raises(ManifestError, match="missing"):
        open_dataset(zst_dir)


# -- the decompressed view --------------------------------------------------------------------------

def _entry_dir(cache, dataset):
    """Where a dataset's decompressed shards are cached: under the cache format and the fingerprint."""
    return cache / f"v{CACHE_FORMAT}" / open_dataset(dataset).fingerprint[:32]


def test_tokens_identical_to_plain_and_cached_once(pair, tmp_path, monkeypatch):
    plain_dir, zst_dir, *_ = pair
    cache = tmp_path / "cache"
    a, b = open_dataset(plain_dir), open_dataset(zst_dir, cache_dir=cache)
    np.testing.assert_array_equal(a.read_tokens(0, a.num_tokens), b.read_tokens(0, b.num_tokens))
    for i in range(a.num_docs):
        np.testing.assert_array_equal(a.doc(i), b.doc(i))
    where = _entry_dir(cache, zst_dir)
    entries = sorted(p.name for p in where.iterdir() if p.suffix == ".bin")
    assert len(entries) == b.num_shards
    assert all(s.bin_path.parent == where for s in b.shards)
    assert not any(p.name.endswith(".tmp") for p in where.iterdir())
    # a second open maps the cached copies: nothing is decompressed again
    import shardkit.format.compressed as compressed
    monkeypatch.setattr(compressed, "decompress_shard", lambda *a, **k: pytest.fail("decompressed twice"))
    c = open_dataset(zst_dir, cache_dir=cache)
    np.testing.assert_array_equal(c.read_tokens(0, c.num_tokens), a.read_tokens(0, a.num_tokens))


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "decompressed"
    monkeypatch.delenv("SHARDKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "shardkit" / "decompressed"


def test_cache_entries_are_keyed_by_content(pair, tmp_path):
    _, zst_dir, _, comp, docs = pair
    other = write_dataset(tmp_path / "other", docs[::-1], max_tokens_per_shard=3000, checksum_block_size=4096,
                          compression=ZSTD)
    cache = DecompressCache(tmp_path / "cache")
    assert cache.path_for(comp.shards[0]) != cache.path_for(other.shards[0])  # same name, other bytes
    # a cache file of the wrong size (a crash of another tool, a truncation) is never used: it is re-made
    path = cache.materialize(zst_dir, comp.shards[0])
    good = path.read_bytes()
    os.truncate(path, 10)
    assert cache.materialize(zst_dir, comp.shards[0]).read_bytes() == good


def test_corrupt_frame_fails_loudly_and_leaves_no_cache_entry(pair, tmp_path):
    _, zst_dir, _, comp, _ = pair
    e = comp.shards[2]
    zst = zst_dir / e.zst_name
    with FramedReader(zst) as r:
        f3 = r.index.frames[3]
    raw = bytearray(zst.read_bytes())
    raw[f3.offset + f3.length // 2] ^= 0x10
    zst.write_bytes(bytes(raw))
    ds = open_dataset(zst_dir, cache_dir=tmp_path / "cache")
    assert ds.shards[0].tokens.size  # a sound shard still opens
    with pytest.raises(IntegrityError) as ei:
        _ = ds.shards[2].tokens
    assert "frame 3" in str(ei.value) and e.zst_name in str(ei.value)
    assert ei.value.byte_range == (3000, 4000)  # the uncompressed bytes the frame held
    leftovers = [p.name for p in _entry_dir(tmp_path / "cache", zst_dir).iterdir()]
    assert not any(e.sum_digest in n and n.endswith(".bin") for n in leftovers)
    assert not any(n.endswith(".tmp") for n in leftovers)


def test_sidecar_changed_since_manifest_is_refused(pair, tmp_path):
    _, zst_dir, _, comp, _ = pair
    p = zst_dir / comp.shards[0].sum_name
    p.write_bytes(p.read_bytes().replace(b'"version": 1', b'"version": 1 '))
    with pytest.raises(IntegrityError, match="changed since the manifest"):
        _ = open_dataset(zst_dir, cache_dir=tmp_path / "c").shards[0].tokens


def test_frame_index_must_describe_the_shard(pair, tmp_path):
    """A valid framed file of other data (right size, other frame size) is refused before decompressing."""
    _, zst_dir, _, comp, _ = pair
    e = comp.shards[0]
    data = open_dataset(zst_dir, cache_dir=tmp_path / "c").shards[0].tokens.tobytes()
    write_framed(zst_dir / e.zst_name, data, block_size=999)
    e2 = Manifest.load(zst_dir).shards[0]
    with pytest.raises(IntegrityError, match="frame size 999 differs"):
        DecompressCache(tmp_path / "c2").materialize(zst_dir, e2)


def test_concurrent_processes_share_one_decompression(pair, tmp_path):
    _, zst_dir, _, comp, _ = pair
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import sys
        from shardkit.format import open_dataset
        ds = open_dataset({str(zst_dir)!r}, cache_dir={str(cache)!r})
        print(int(sum(int(s.tokens.sum()) for s in ds.shards)))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = {p.communicate()[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(outs) == 1
    assert len([p for p in _entry_dir(cache, zst_dir).iterdir() if p.suffix == ".bin"]) == len(comp.shards)


# -- byte ranges (for the remote block cache) --------------------------------------------------------

def test_decompress_range_and_frame_ranges(pair, tmp_path):
    plain_dir, zst_dir, plain, comp, _ = pair
    e = comp.shards[1]
    zst, flat = zst_dir / e.zst_name, (plain_dir / plain.shards[1].bin_name).read_bytes()
    raw = zst.read_bytes()
    for lo, hi in [(0, 0), (0, 1), (999, 1001), (1500, 2500), (0, len(flat)), (len(flat) - 3, len(flat))]:
        assert decompress_range(zst, lo, hi) == flat[lo:hi]
        with open(zst, "rb") as f:
            assert decompress_range(f, lo, hi) == flat[lo:hi]
    with pytest.raises(ConfigError):
        decompress_range(zst, 5, len(flat) + 1)
    with FramedReader(zst) as r:
        ranges = FrameRanges(r.index)
    assert ranges.frames(999, 1001) == range(0, 2)
    assert ranges.frames(1000, 2000) == range(1, 2)
    lo, hi = ranges.compressed_span(1500, 2500)
    assert (lo, hi) == (r.index.frames[1].offset, r.index.frames[2].offset + r.index.frames[2].length)
    assert ranges.tail_span[1] == len(raw)
    # through a fetch function: only the tail and the frames' compressed spans are read
    fetched = []

    def fetch(offset, n):
        fetched.append((offset, offset + n))
        return raw[offset:offset + n]

    assert decompress_range(RangeFile(fetch, len(raw)), 1500, 2500) == flat[1500:2500]
    tail_lo = ranges.tail_span[0]
    assert all(a >= tail_lo or (lo <= a and b <= hi) for a, b in fetched)


def test_fetch_tail_and_decode_span_need_one_fetch_per_range(pair):
    """The remote-cache path: the tail once per file, then one fetch of a compressed span per range."""
    plain_dir, zst_dir, plain, comp, _ = pair
    e = comp.shards[1]
    raw, flat = (zst_dir / e.zst_name).read_bytes(), (plain_dir / plain.shards[1].bin_name).read_bytes()
    fetched = []

    def fetch(offset, n):
        fetched.append((offset, n))
        return raw[offset:offset + n]

    tail = fetch_tail(fetch, len(raw))
    assert len(fetched) == 2 and tail[0] + len(tail[1]) == len(raw)
    with FramedReader(zst_dir / e.zst_name) as r:
        ranges = FrameRanges(r.index)
    for lo, hi in [(0, 4096), (1500, 2500), (4096, len(flat)), (len(flat) - 1, len(flat))]:
        a, b = ranges.compressed_span(lo, hi)
        assert decode_span(tail, a, fetch(a, b - a), lo, hi, name=e.zst_name) == flat[lo:hi]
    assert len(fetched) == 6
    a, b = ranges.compressed_span(1500, 2500)
    with pytest.raises(ConfigError, match="span given covers"):
        decode_span(tail, a, raw[a:b - 1], 1500, 2500)
    bad = bytearray(raw[a:b])
    bad[len(bad) // 2] ^= 1
    with pytest.raises(IntegrityError, match="frame"):
        decode_span(tail, a, bytes(bad), 1500, 2500, name=e.zst_name)
    broken_tail = (tail[0], tail[1][:-FOOTER_SIZE] + bytes(FOOTER_SIZE))
    with pytest.raises(IntegrityError):
        decode_span(broken_tail, a, raw[a:b], 1500, 2500)


# -- hostile files ----------------------------------------------------------------------------------

def _with_frame(path, frames: list[bytes], digests: list[bytes], block_size: int, total: int) -> None:
    entries, off = [], 0
    for f, d in zip(frames, digests):
        entries.append(FrameEntry(off, len(f), d))
        off += len(f)
    index = FrameIndex(block_size=block_size, uncompressed_size=total, frames=tuple(entries))
    path.write_bytes(b"".join(frames) + index.to_bytes())


def test_decompression_bomb_is_refused_with_bounded_memory(tmp_path):
    """A frame declaring 2 GiB (0.1 MiB on disk) in a file whose footer is self-consistent: refused unread."""
    bomb = tmp_path / "bomb.zst"
    code = textwrap.dedent(f"""
        import resource, sys, zstandard
        from shardkit.format.zstd_frames import FrameEntry, FrameIndex
        cobj = zstandard.ZstdCompressor(level=1, write_content_size=True).compressobj(size=2 << 30)
        chunk = bytes(1 << 22)
        parts = [cobj.compress(chunk) for _ in range(512)] + [cobj.flush()]
        frame = b"".join(parts)
        index = FrameIndex(block_size=1 << 20, uncompressed_size=1 << 20,
                           frames=(FrameEntry(0, len(frame), bytes(16)),))
        open({str(bomb)!r}, "wb").write(frame + index.to_bytes())
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    assert bomb.stat().st_size < 1 << 20
    probe = textwrap.dedent(f"""
        import resource
        from shardkit.errors import IntegrityError
        from shardkit.format.compressed import decompress_range
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            decompress_range({str(bomb)!r}, 0, 1 << 20)
        except IntegrityError as e:
            print("refused:", e)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print("grew_kib", grew)
    """)
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert "refused:" in out and "declares 2147483648 bytes, more than block_size" in out
    assert int(out.split("grew_kib")[1]) < 64 * 1024  # far below the 2 GiB the frame claims


def test_frame_without_content_size_is_refused(tmp_path):
    data = b"x" * 3000
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    path = tmp_path / "nosize.zst"
    import xxhash
    _with_frame(path, [frame], [xxhash.xxh3_128_digest(data)], 4096, len(data))
    with pytest.raises(IntegrityError, match="declares no content size"):
        decompress_range(path, 0, 10)


@pytest.mark.parametrize("cut", [1, 40, 68, 76, 200])
def test_truncated_zst_is_a_clear_error(pair, cut):
    _, zst_dir, _, comp, _ = pair
    zst = zst_dir / comp.shards[0].zst_name
    os.truncate(zst, zst.stat().st_size - cut)
    with pytest.raises(IntegrityError, match="truncated|bad magic|sizes inconsistent") as ei:
        decompress_range(zst, 0, 1)
    assert str(zst) in str(ei.value)
