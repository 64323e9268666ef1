"""Compressed inputs: multi-member/multi-frame streams read to the end; truncation and corruption raise."""

from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path

import pytest
import zstandard
from reader_testutil import read_all, texts

from shardkit.errors import ReaderError
from shardkit.readers import ReaderConfig, read_records
from shardkit.readers.compression import iter_blocks
from shardkit.sources import Compression


def corpus(n: int = 2000) -> bytes:
    # incompressible-ish text so a cut near the end really loses records
    return b"".join(json.dumps({"text": os.urandom(40).hex()}).encode() + b"\n" for _ in range(n))


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.jsonl.zst"])
@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_truncated_stream_raises_after_good_records(make_file, name, keep):
    data = corpus()
    whole = make_file(data, name=name)
    blob = Path(whole.url).read_bytes()
    cut = make_file(blob[: int(len(blob) * keep)], name=name, raw=True)
    got = []
    with pytest.raises(ReaderError, match="truncated") as e:
        got.extend(read_records(cut, ReaderConfig()))
    assert e.value.path == cut.url and cut.url in str(e.value)
    expected = read_all(whole)
    pairs = [(r.index, r.text) for r in expected]
    assert [(r.index, r.text) for r in got] == pairs[: len(got)]  # what came before the failure is right
    assert len(got) < len(expected)
    assert e.value.line == len(got) + 1


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.jsonl.zst", "t.txt.gz", "t.txt.zst"])
def test_corrupt_stream_raises(make_file, name):
    blob = bytearray(Path(make_file(corpus(200), name=name).url).read_bytes())
    for k in range(len(blob) // 3, len(blob) // 3 + 40):  # smash a run in the middle of the data
        blob[k] ^= 0x5A
    bad = make_file(bytes(blob), name=name, raw=True)
    with pytest.raises(ReaderError) as e:
        read_all(bad)
    assert e.value.path == bad.url and ("corrupt" in e.value.problem or "truncated" in e.value.problem)


def test_not_compressed_at_all(make_file):
    f = make_file(b'{"text": "a"}\n', name="plain.jsonl.gz", raw=True)
    with pytest.raises(ReaderError, match="corrupt gzip"):
        read_all(f)


@pytest.mark.parametrize("name", ["e.jsonl.gz", "e.jsonl.zst"])
def test_zero_byte_compressed_file_is_an_error(make_file, name):
    with pytest.raises(ReaderError, match="empty file"):
        read_all(make_file(b"", name=name, raw=True))


def test_multi_member_gzip_and_zero_padding(make_file):
    blob = gzip.compress(b'{"text": "a"}\n') + gzip.compress(b'{"text": "b"}\n') + b"\0" * 1000
    assert texts(read_all(make_file(blob, name="m.jsonl.gz", raw=True))) == ["a", "b"]


def test_gzip_trailing_garbage_is_an_error(make_file):
    blob = gzip.compress(b'{"text": "a"}\n') + b"garbage"
    with pytest.raises(ReaderError, match="corrupt gzip"):
        read_all(make_file(blob, name="g.jsonl.gz", raw=True))


def test_multi_frame_and_skippable_zstd(make_file):
    c = zstandard.ZstdCompressor()
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    blob = c.compress(b'{"text": "a"}\n{"te') + skippable + c.compress(b'xt": "b"}\n')
    assert texts(read_all(make_file(blob, name="m.jsonl.zst", raw=True))) == ["a", "b"]


@pytest.mark.parametrize("name,comp", [("b.gz", Compression.GZIP), ("b.zst", Compression.ZSTD)])
def test_blocks_are_bounded_and_complete(make_file, name, comp):
    data = b"0123456789abcdef" * 200_000 + os.urandom(100_000)
    f = make_file(data, name=name)
    blocks = list(iter_blocks(f.url, comp, block_size=1 << 16))
    assert b"".join(blocks) == data
    assert max(map(len, blocks)) < 64 << 20  # one decompressor call's output at most, never the whole file
