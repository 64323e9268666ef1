import io
import os
import struct

import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import ConfigError, IntegrityError, ManifestError
from shardkit.format.atomic import temp_path
from shardkit.format.zstd_frames import (
    FOOTER_SIZE,
    MAGIC,
    FramedReader,
    FrameEntry,
    FrameIndex,
    write_framed,
)

BS = 256
TAIL_FIXED = 8 + FOOTER_SIZE  # skippable header + footer


def _sample() -> bytes:
    """Three-and-a-bit frames mixing incompressible and compressible bytes (raw and compressed zstd blocks)."""
    rng = np.random.default_rng(7)
    text = b"the quick brown fox jumps over the lazy dog. " * 8
    return rng.bytes(BS) + text[:BS] + rng.bytes(BS // 2) + text[: BS // 2] + b"tail!"


@pytest.fixture()
def sample_file(tmp_path):
    data = _sample()
    path = tmp_path / "s.zst"
    index = write_framed(path, data, block_size=BS)
    return path, data, index


def _reopen_fails(path, raw: bytes, errors=(IntegrityError, ManifestError)):
    path.write_bytes(raw)
    with pytest.raises(errors) as ei:
        FramedReader(path)
    assert str(path) in str(ei.value)
    return ei.value


# -- round trips ---------------------------------------------------------------------------------

_fixture_ok = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_fixture_ok
@given(data=st.binary(max_size=2500), block=st.integers(8, 600), draw=st.data())
def test_round_trip_and_random_reads_equal_slicing(tmp_path, data, block, draw):
    path = tmp_path / "h.zst"
    index = write_framed(path, data, block_size=block, level=1)
    assert index.num_frames == -(-len(data) // block)
    assert path.stat().st_size == index.file_size
    with FramedReader(path, cache_frames=draw.draw(st.integers(0, 3))) as r:
        assert (r.uncompressed_size, r.num_frames, r.block_size) == (len(data), index.num_frames, block)
        assert r.index == index
        assert r.read(0, len(data)) == data
        for _ in range(5):
            off = draw.draw(st.integers(0, len(data)))
            length = draw.draw(st.integers(0, len(data) - off))
            assert r.read(off, length) == data[off:off + length]
        r.verify_all()


@pytest.mark.parametrize("size", [0, 1, BS - 1, BS, BS + 1, 2 * BS - 1, 2 * BS, 2 * BS + 1])
def test_sizes_around_block_boundaries(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "b.zst"
    index = write_framed(path, data, block_size=BS)
    assert index.num_frames == -(-size // BS)
    with FramedReader(path) as r:
        assert r.read(0, size) == data
        for off in {0, max(0, size - 1), min(size, BS - 1), min(size, BS)}:
            for length in (0, 1, 2, BS + 1):
                length = min(length, size - off)
                assert r.read(off, length) == data[off:off + length]
        r.verify_all()


def test_whole_file_is_a_plain_zstd_stream(sample_file):
    path, data, _ = sample_file
    with open(path, "rb") as f:
        out = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    assert out == data


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_token_arrays(tmp_path, dtype):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=30_000).astype(dtype)
    path = tmp_path / "t.zst"
    write_framed(path, tokens, block_size=4096)
    item = tokens.itemsize
    with FramedReader(path) as r:
        assert r.uncompressed_size == tokens.nbytes
        for start, stop in [(0, 1), (100, 2100), (2047, 2049), (29_000, 30_000), (0, 30_000)]:
            got = np.frombuffer(r.read(start * item, (stop - start) * item), dtype=dtype)
            np.testing.assert_array_equal(got, tokens[start:stop])


def test_non_contiguous_array_is_written_as_its_values(tmp_path):
    tokens = np.arange(10_000, dtype=np.uint16)[::3]
    path = tmp_path / "nc.zst"
    write_framed(path, tokens, block_size=1000)
    with FramedReader(path) as r:
        np.testing.assert_array_equal(np.frombuffer(r.read(0, r.uncompressed_size), np.uint16), tokens)


def test_file_like_sources_are_not_closed(sample_file):
    path, data, _ = sample_file
    buf = io.BytesIO(path.read_bytes())
    with FramedReader(buf, name="mem://s.zst") as r:
        assert r.read(10, 500) == data[10:510]
    assert not buf.closed
    with open(path, "rb") as f:
        r = FramedReader(f)
        assert r.name == str(path)
        assert r.read(0, len(data)) == data
        r.close()
        assert not f.closed


def test_lru_keeps_at_most_cache_frames(sample_file):
    path, data, index = sample_file
    with FramedReader(path, cache_frames=2) as r:
        for i in range(index.num_frames):
            r.read(i * BS, 1)
        assert list(r._cache) == [index.num_frames - 2, index.num_frames - 1]
        r.read(index.num_frames * BS - BS, 1)  # a hit moves the frame to the newest end
        assert list(r._cache)[-1] == index.num_frames - 1
    with FramedReader(path, cache_frames=0) as r:
        assert r.read(0, len(data)) == data
        assert not r._cache


def test_write_is_atomic_and_replaces(tmp_path):
    path = tmp_path / "a.zst"
    write_framed(path, b"old" * 100, block_size=BS)
    write_framed(path, b"new", block_size=BS)
    assert not temp_path(path).exists()
    with FramedReader(path) as r:
        assert r.read(0, 3) == b"new"


def test_bad_arguments(tmp_path, sample_file):
    for bad in (0, -1, (1 << 30) + 1, 2.0):
        with pytest.raises(ConfigError, match="block_size"):
            write_framed(tmp_path / "x.zst", b"abc", block_size=bad)
    with pytest.raises(ConfigError, match="level"):
        write_framed(tmp_path / "x.zst", b"abc", level=99)
    assert not (tmp_path / "x.zst").exists()
    path, data, _ = sample_file
    with pytest.raises(ConfigError, match="cache_frames"):
        FramedReader(path, cache_frames=-1)
    with FramedReader(path) as r:
        for off, length in [(-1, 1), (0, len(data) + 1), (len(data), 1), (0, -1)]:
            with pytest.raises(ConfigError, match="outside"):
                r.read(off, length)


# -- corruption of footer and index ---------------------------------------------------------------

def test_every_byte_flip_in_index_and_footer_is_refused_on_open(sample_file):
    path, _, index = sample_file
    raw = path.read_bytes()
    tail_start = index.index_offset - 8
    assert len(raw) - tail_start == TAIL_FIXED + 32 * index.num_frames
    for pos in range(tail_start, len(raw)):
        for mask in (0x01, 0x80):
            bad = bytearray(raw)
            bad[pos] ^= mask
            _reopen_fails(path, bytes(bad))


def test_named_footer_problems(sample_file):
    path, _, index = sample_file
    raw = path.read_bytes()
    end = len(raw)
    assert "bad magic" in str(_reopen_fails(path, raw[:-1] + b"X"))
    version_at = end - 8 - 4
    err = _reopen_fails(path, raw[:version_at] + struct.pack("<I", 2) + raw[version_at + 4:], ManifestError)
    assert "version 2 is unknown" in str(err)
    assert "footer checksum mismatch" in str(_reopen_fails(path, raw[:end - 60] + b"\xff" + raw[end - 59:]))
    index_byte = index.index_offset + 20
    err = _reopen_fails(path, raw[:index_byte] + bytes([raw[index_byte] ^ 1]) + raw[index_byte + 1:])
    assert "index checksum mismatch" in str(err)


def test_consistent_digests_but_inconsistent_sizes_are_refused(tmp_path):
    frame = zstandard.ZstdCompressor().compress(b"x" * 100)
    entry = FrameEntry(0, len(frame), xxhash.xxh3_128_digest(b"x" * 100))
    path = tmp_path / "c.zst"
    cases = [
        FrameIndex(block_size=100, uncompressed_size=500, frames=(entry,)),  # 1 frame for 5 blocks
        FrameIndex(block_size=100, uncompressed_size=100, frames=(FrameEntry(3, len(frame) - 3, entry.digest),)),
        FrameIndex(block_size=100, uncompressed_size=200, frames=(entry, FrameEntry(len(frame), 0, b"\0" * 16))),
    ]
    for case in cases:
        assert "sizes inconsistent" in str(_reopen_fails(path, frame + case.to_bytes(), IntegrityError))


# -- truncation and garbage ------------------------------------------------------------------------

def test_truncation_is_refused(sample_file):
    path, _, index = sample_file
    raw = path.read_bytes()
    for cut in [0, 1, 10, TAIL_FIXED - 1, index.frames[1].offset, index.index_offset, len(raw) - FOOTER_SIZE,
                len(raw) - 9, len(raw) - 1]:
        _reopen_fails(path, raw[:cut], IntegrityError)


def test_removing_a_frame_byte_is_refused(sample_file):
    path, _, index = sample_file
    raw = path.read_bytes()
    at = index.frames[1].offset + 5
    assert "sizes inconsistent" in str(_reopen_fails(path, raw[:at] + raw[at + 1:], IntegrityError))


def test_trailing_garbage_is_refused(sample_file):
    path, _, _ = sample_file
    raw = path.read_bytes()
    assert "1 unexpected byte(s) after the footer" in str(_reopen_fails(path, raw + b"\0", IntegrityError))
    _reopen_fails(path, raw + MAGIC[:3], IntegrityError)


# -- corruption inside frames ----------------------------------------------------------------------

def test_every_byte_flip_inside_frames_is_an_integrity_error_naming_the_frame(sample_file):
    path, data, index = sample_file
    raw = path.read_bytes()
    for i, entry in enumerate(index.frames):
        start, end = index.frame_range(i)
        for pos in range(entry.offset, entry.offset + entry.length):
            bad = bytearray(raw)
            bad[pos] ^= 0x04
            path.write_bytes(bytes(bad))
            with FramedReader(path) as r:  # the index is intact, so open succeeds
                with pytest.raises(IntegrityError, match=rf"frame {i} ") as ei:
                    r.read(start, end - start)
                assert ei.value.byte_range == (start, end)
                with pytest.raises(IntegrityError, match=rf"frame {i} "):
                    r.verify_all()
                other = 0 if i else 1  # other frames still read fine
                o_start, o_end = index.frame_range(other)
                assert r.read(o_start, o_end - o_start) == data[o_start:o_end]


def _container(tmp_path, frames: list[bytes], block_size: int, size: int, digests: list[bytes]):
    entries, off = [], 0
    for frame, digest in zip(frames, digests):
        entries.append(FrameEntry(off, len(frame), digest))
        off += len(frame)
    path = tmp_path / "hand.zst"
    path.write_bytes(b"".join(frames) + FrameIndex(block_size, size, tuple(entries)).to_bytes())
    return path


@pytest.mark.parametrize("compressor, message", [
    (zstandard.ZstdCompressor(), "more than block_size"),
    (zstandard.ZstdCompressor(write_content_size=False), "declares no content size"),
])
def test_decompression_bomb_is_refused(tmp_path, compressor, message):
    block = 1024
    bomb = compressor.compress(b"\0" * (block * 1024))  # 1 MiB from a few dozen bytes
    path = _container(tmp_path, [bomb], block, block, [xxhash.xxh3_128_digest(b"\0" * block)])
    with FramedReader(path) as r:
        with pytest.raises(IntegrityError, match=message):
            r.read(0, 1)
        with pytest.raises(IntegrityError, match=message):
            r.verify_all()


def test_hand_made_frames_that_do_not_fit_are_refused(tmp_path):
    cctx = zstandard.ZstdCompressor()
    good = b"y" * 100
    d = xxhash.xxh3_128_digest(good)
    cases = [
        ([cctx.compress(b"y" * 50)], 100, d, "declares 50 bytes, expected 100"),
        ([cctx.compress(good) + cctx.compress(b"z")], 100, d, "followed by extra bytes"),
        ([cctx.compress(good)], 100, xxhash.xxh3_128_digest(b"other"), "digest mismatch"),
        ([b"\0" * 20], 100, d, "not a zstd frame"),
    ]
    for frames, size, digest, message in cases:
        path = _container(tmp_path, frames, 100, size, [digest])
        with FramedReader(path) as r:
            with pytest.raises(IntegrityError, match=message) as ei:
                r.read(0, size)
            assert "frame 0" in str(ei.value) and str(path) in str(ei.value)


class _Trickle(io.RawIOBase):
    """A file object that returns at most 7 bytes per read, like some network streams."""

    def __init__(self, raw: bytes) -> None:
        self._b = io.BytesIO(raw)

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, pos, whence=0):
        return self._b.seek(pos, whence)

    def read(self, n=-1):
        return self._b.read(min(n, 7) if n >= 0 else 7)


def test_short_reads_are_completed(sample_file):
    path, data, _ = sample_file
    with FramedReader(_Trickle(path.read_bytes())) as r:
        assert r.name == "<stream>"
        assert r.read(3, len(data) - 3) == data[3:]


def test_missing_file_is_a_manifest_error(tmp_path):
    with pytest.raises(ManifestError, match="cannot open"):
        FramedReader(tmp_path / "nope.zst")
