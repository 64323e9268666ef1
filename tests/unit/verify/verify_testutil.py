"""Small datasets like `pack` writes them (bytes tokenizer, EOS, ids sidecar, stats), built in milliseconds."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from shardkit.format.manifest import Manifest
from shardkit.pack.stats import PackStats
from shardkit.tokenizers import BytesTokenizer
from shardkit.writer import ShardLimits, ShardWriter

EOS = 256


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "eta ✓", "theta"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 12)))) for _ in range(n)]


def build_dataset(directory: Path, *, n_docs: int = 30, shard_tokens: int = 120, block_size: int = 64,
                  with_ids: bool = True, seed: int = 0) -> Manifest:
    """Write a dataset of byte-tokenized texts + EOS, several shards, several blocks per file."""
    directory.mkdir(parents=True)
    tok = BytesTokenizer()
    docs = texts(n_docs, seed)
    flat, lengths = tok.encode_batch(docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    writer = ShardWriter(directory, dtype=np.dtype("uint16"),
                         limits=ShardLimits(max_bytes=None, max_tokens=shard_tokens, checksum_block_size=block_size),
                         with_ids=with_ids)
    stats = PackStats()
    entries = []
    for i, text in enumerate(docs):
        doc = np.append(flat[offsets[i]:offsets[i + 1]], EOS).astype(np.uint16)
        length = np.array([doc.size], dtype=np.int64)
        if writer.fitting_docs(length) == 0:
            entries.append(writer.close_shard())
        writer.write_docs(doc, length, [f"doc-{i}"])
        stats.add_docs("corpus/*.txt", length, len(text))
    entries.append(writer.close_shard())
    spec = {k: v for k, v in tok.spec.to_json().items() if k != "backend"}
    manifest = Manifest(dtype="uint16", tokenizer=spec, shards=tuple(entries), checksum_block_size=block_size,
                        eos_appended=True, bos_prepended=False, pack={"inputs": ["corpus/*.txt"]},
                        stats=stats.to_json())
    manifest.save(directory)
    return Manifest.load(directory)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def restore(directory: Path, pristine: dict[str, bytes]) -> None:
    """Put every file back as it was and remove anything new (cheap: the dataset is a few KiB)."""
    for p in directory.iterdir():
        if p.name not in pristine:
            p.unlink()
    for name, raw in pristine.items():
        p = directory / name
        if not p.exists() or p.read_bytes() != raw:
            p.write_bytes(raw)


def flip_bit(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


def truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def resign(directory: Path, edit=None) -> None:
    """Re-sign the checksum chain for the current bytes (what a buggy but self-consistent packer leaves).

    Recomputes every sidecar's block digests from the files it lists, the manifest's sizes and sidecar
    digests, then lets `edit(doc)` change the manifest before the fingerprint is recomputed.
    """
    import json

    from shardkit.format.checksums import ShardChecksums, digest_bytes, file_block_digests
    from shardkit.format.manifest import MANIFEST_NAME, compute_fingerprint

    mpath = directory / MANIFEST_NAME
    doc = json.loads(mpath.read_bytes())
    block = doc["checksum"]["block_size"]
    for s in doc["shards"]:
        sidecar = directory / f"{s['name']}.sum.json"
        listed = json.loads(sidecar.read_bytes())["files"]
        sums = ShardChecksums(block_size=block, files={n: file_block_digests(directory / n, block)
                                                       for n in listed if (directory / n).exists()})
        raw = sums.to_bytes()
        sidecar.write_bytes(raw)
        s["sum_xxh3"] = digest_bytes(raw)
        s["bin_bytes"] = os.path.getsize(directory / f"{s['name']}.bin")
        s["idx_bytes"] = os.path.getsize(directory / f"{s['name']}.idx")
    if edit is not None:
        edit(doc)
    doc["fingerprint"] = compute_fingerprint(doc)
    mpath.write_bytes((json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode())
