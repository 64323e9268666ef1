"""`pack` with zstd compression end to end: same tokens as a plain pack at any frame size, identical bytes for
any worker count, resume, the loader's batches, and `decompress` giving back the plain pack exactly."""

import hashlib
import json
import random

import numpy as np
import pytest
from support.dataset_bytes import assert_same_dataset, dataset_files
from support.paths import CORPUS, GPT2_JSON

from shardkit.errors import ResumeError
from shardkit.format import open_dataset
from shardkit.loader import Loader
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.verify import verify_dataset
from shardkit.writer import Codec, CompressionConfig, ShardLimits
from shardkit.writer.decompress import decompress_dataset


def _corpus(d, n_files=3, docs=300, seed=7):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "эпсилон", "zeta", "η", "θ", "\n", "  ", "🙂"]
    d.mkdir()
    for f in range(n_files):
        with open(d / f"part-{f}.jsonl", "w", encoding="utf-8") as fh:
            for _ in range(docs):
                fh.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(1, 120)))}) + "\n")
    return d


def _config(src, out, *, frame_size=None, level=3, workers=1, shard_bytes=30_000, **kw):
    compression = CompressionConfig() if frame_size is None else \
        CompressionConfig(codec=Codec.ZSTD, level=level, frame_size=frame_size)
    return PackConfig(inputs=(str(src),), output=str(out), workers=workers, compression=compression,
                      limits=ShardLimits(max_bytes=shard_bytes, checksum_block_size=4096), **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("cpack")
    src = _corpus(base / "in")
    plain = base / "plain"
    pack(_config(src, plain))
    return src, plain


def _tokens(path, cache):
    ds = open_dataset(path, cache_dir=cache)
    return ds.read_tokens(0, ds.num_tokens)


@pytest.mark.parametrize("frame_size, shard_bytes", [(64, 30_000), (1000, 30_000), (4096, 30_000),
                                                     (1 << 20, 30_000), (1000, 700), (333, 2_000)])
def test_same_tokens_as_plain_at_any_frame_and_shard_size(corpus, tmp_path, frame_size, shard_bytes):
    src, plain = corpus
    ref_dir = plain
    if shard_bytes != 30_000:  # tiny shards: compare with a plain pack of the same shard size
        ref_dir = tmp_path / "plain"
        pack(_config(src, ref_dir, shard_bytes=shard_bytes))
    out = tmp_path / "zst"
    result = pack(_config(src, out, frame_size=frame_size, shard_bytes=shard_bytes))
    m, ref = result.manifest, open_dataset(ref_dir).manifest
    assert m.format_version == 2 and len(m.shards) == len(ref.shards)
    assert m.pack["options"]["compression"] == {"codec": "zstd", "level": 3, "frame_size": frame_size}
    assert "compression" not in ref.pack["options"]
    assert m.fingerprint != ref.fingerprint  # compression is part of what the fingerprint covers
    np.testing.assert_array_equal(_tokens(out, tmp_path / "c"), _tokens(ref_dir, None))
    assert [s.name for s in m.shards] == [s.name for s in ref.shards]
    assert not list(out.glob("*.bin")) and not list(out.glob(".*.tmp"))
    assert verify_dataset(out, mode="full", cache_dir=tmp_path / "c2").ok


def test_identical_compressed_bytes_for_any_worker_count(corpus, tmp_path):
    src, _ = corpus
    outs = []
    for w in (1, 2):
        out = tmp_path / f"w{w}"
        pack(_config(src, out, frame_size=2048, workers=w))
        outs.append(out)
    assert_same_dataset(outs[0], outs[1])
    assert any(name.endswith(".bin.zst") for name in dataset_files(outs[0]))


def test_levels_change_bytes_not_tokens(corpus, tmp_path):
    src, plain = corpus
    sizes = {}
    for level in (1, 19):
        out = tmp_path / f"l{level}"
        m = pack(_config(src, out, frame_size=1 << 16, level=level)).manifest
        sizes[level] = sum(s.data_bytes for s in m.shards)
        np.testing.assert_array_equal(_tokens(out, tmp_path / "c"), _tokens(plain, None))
    assert sizes[19] < sizes[1] < sum(s.bin_bytes for s in open_dataset(plain).manifest.shards)


def test_resume_keeps_compressed_shards_and_refuses_a_changed_compression(corpus, tmp_path):
    src, _ = corpus
    ref = tmp_path / "ref"
    pack(_config(src, ref, frame_size=1000))
    out = tmp_path / "out"

    class Stop(Exception):
        pass

    def stop_after_some(p):
        if p.shards >= 3:
            raise Stop

    with pytest.raises(Stop):
        pack(_config(src, out, frame_size=1000), progress=stop_after_some)
    assert not (out / "manifest.json").exists()
    assert list(out.glob("*.bin.zst")), "finished shards are on disk"
    with pytest.raises(ResumeError, match="option compression was"):
        pack(_config(src, out, frame_size=2000))
    result = pack(_config(src, out, frame_size=1000, workers=2))
    assert result.resumed_shards >= 3
    assert_same_dataset(ref, out)


def test_overwrite_replaces_a_compressed_dataset(corpus, tmp_path):
    src, plain = corpus
    out = tmp_path / "out"
    pack(_config(src, out, frame_size=1000))
    pack(_config(src, out, overwrite=True))  # .bin.zst files are shardkit's own: removed, not "foreign"
    assert_same_dataset(plain, out)


def test_decompress_gives_back_the_plain_pack_exactly(corpus, tmp_path):
    src, plain = corpus
    comp = tmp_path / "zst"
    pack(_config(src, comp, frame_size=1500))
    out = tmp_path / "back"
    m = decompress_dataset(comp, out, threads=2)
    assert_same_dataset(plain, out)  # every file byte-identical, manifest equal but for `created`
    assert m.fingerprint == open_dataset(plain).fingerprint
    assert m.created["decompressed_from"] == open_dataset(comp).fingerprint
    assert verify_dataset(out, mode="full").ok


def _batch_hashes(path, shuffle, cache, n=None):
    loader = Loader(open_dataset(path, cache_dir=cache), seq_len=32, batch_schedule=8, max_epochs=2,
                    shuffle=shuffle, seed=5, block_samples=4 if shuffle == "block" else None)
    h, count = hashlib.sha256(), 0
    for b in loader:
        h.update(b["input_ids"].tobytes())
        h.update(b["labels"].tobytes())
        count += 1
    state = loader.state_dict()
    return h.hexdigest(), count, state


@pytest.mark.parametrize("shuffle", ["block", "full", "none"])
def test_loader_streams_identical_batches(corpus, tmp_path, shuffle):
    src, plain = corpus
    comp = tmp_path / "zst"
    pack(_config(src, comp, frame_size=700))
    a, n_a, state_a = _batch_hashes(plain, shuffle, None)
    b, n_b, state_b = _batch_hashes(comp, shuffle, tmp_path / "cache")
    assert (a, n_a) == (b, n_b) and n_a > 10
    assert state_a["datasets"] != state_b["datasets"]  # resuming across them needs allow_data_change=True


@pytest.mark.skipif(not GPT2_JSON.is_file(), reason="../shared (GPT-2 tokenizer, corpora) not present")
def test_real_corpus_with_gpt2(tmp_path):
    """tinyshakespeare through the GPT-2 tokenizer: the known 338,025 tokens (+ EOS), compressed and back."""
    src = CORPUS / "tinyshakespeare" / "input.txt"
    out = tmp_path / "zst"
    m = pack(PackConfig(inputs=(str(src),), output=str(out), workers=1,
                        tokenize=TokenizeOptions(tokenizer=str(GPT2_JSON)),
                        compression=CompressionConfig(codec=Codec.ZSTD, frame_size=1 << 18),
                        limits=ShardLimits(max_bytes=1 << 30, checksum_block_size=1 << 16))).manifest
    assert m.num_tokens == 338_025 + 1
    ratio = m.shards[0].bin_bytes / m.shards[0].data_bytes
    assert 1.3 < ratio < 4, ratio  # GPT-2 ids of English prose: zstd gains something, not miracles
    ds = open_dataset(out, cache_dir=tmp_path / "c")
    assert ds.doc(0)[:2].tolist() == [5962, 22307]  # "First Citizen"
    assert verify_dataset(out, mode="deep", cache_dir=tmp_path / "c").ok


@pytest.mark.parametrize("kill_after_shards", [1, 6])
def test_sigkill_during_compressed_pack_then_resume(tmp_path, kill_after_shards):
    """A real `shardkit pack --compression zstd` SIGKILLed mid-run: no partial .zst is listed, and the
    re-run finishes byte-identical to an uninterrupted run."""
    import signal
    import subprocess
    import time

    from support.cli import shardkit_cmd

    from shardkit.writer.journal import JOURNAL_NAME
    src = _corpus(tmp_path / "in", n_files=3, docs=1500, seed=3)

    def cmd(out, workers=2):
        return shardkit_cmd() + ["pack", str(src), "-o", str(out), "--shard-size", "24KB", "--checksum-block-size",
                                 "4KiB", "--workers", str(workers), "--quiet", "-t", "bytes", "--compression", "zstd",
                                 "--frame-size", "3000"]

    def journaled(out):
        try:
            return (out / JOURNAL_NAME).read_bytes().count(b"\n") - 1
        except FileNotFoundError:
            return -1

    ref = tmp_path / "ref"
    subprocess.run(cmd(ref, workers=1), check=True, capture_output=True)
    out = tmp_path / "out"
    proc = subprocess.Popen(cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while journaled(out) < kill_after_shards and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("pack finished before the kill point")
    assert not (out / "manifest.json").exists()
    listed = {json.loads(line)["shard"]["name"] for line in (out / JOURNAL_NAME).read_text().splitlines()[1:]
              if line.strip()}
    for name in listed:  # every journaled shard is whole
        assert (out / f"{name}.bin.zst").is_file() and (out / f"{name}.sum.json").is_file()
    done = subprocess.run(cmd(out, workers=1), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_same_dataset(ref, out)
