import os

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format.checksums import BlockHasher, FileChecksums, ShardChecksums, file_block_digests


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=5000), block=st.integers(1, 700), cuts=st.lists(st.integers(0, 5000), max_size=8))
def test_streaming_equals_per_block_hash(data, block, cuts):
    h = BlockHasher(block)
    prev = 0
    for c in sorted(min(c, len(data)) for c in cuts) + [len(data)]:
        h.update(data[prev:c])
        prev = c
    sums = h.finish()
    expected = [xxhash.xxh3_128_hexdigest(data[i:i + block]) for i in range(0, len(data), block)] or [
        xxhash.xxh3_128_hexdigest(b"")]
    assert list(sums.blocks) == expected
    assert sums.size == len(data)


def test_file_digests_match_streaming(tmp_path):
    data = os.urandom(100_000)
    p = tmp_path / "f"
    p.write_bytes(data)
    h = BlockHasher(4096)
    h.update(data)
    assert file_block_digests(p, 4096) == h.finish()


def test_sidecar_round_trip_and_validation():
    sc = ShardChecksums(block_size=4096, files={"a.bin": FileChecksums(5000, ("0" * 32, "1" * 32))})
    assert ShardChecksums.from_bytes(sc.to_bytes(), "x") == sc
    with pytest.raises(ManifestError, match="digests"):
        ShardChecksums.from_bytes(sc.to_bytes().replace(b"5000", b"9000"), "x")
    with pytest.raises(ManifestError, match="JSON"):
        ShardChecksums.from_bytes(b"{", "x")
    with pytest.raises(ManifestError, match="not a shardkit"):
        ShardChecksums.from_bytes(b"[]", "x")
