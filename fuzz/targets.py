"""The fuzz targets: each takes arbitrary bytes and drives one parser the way shardkit uses it.

The contract every target checks (`run_one`): an input yields a result or a `ShardkitError`. Any other
exception is a crash; a hang or a huge allocation is caught by the runner (atheris `-timeout`,
`-rss_limit_mb`) and by the per-input time budget of `run_one`. Where a parser has a cheap oracle
(a round trip, two block sizes that must agree, a resume that must match a full read) the target
checks it too, so a wrong answer is a crash as well.

Targets that need real files (a dataset, a loader, a mixture) build them once per process in a
temporary directory: a few KiB, made by shardkit's own writer.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import xxhash

from shardkit.errors import ShardkitError
from shardkit.format import open_dataset
from shardkit.format.checksums import ShardChecksums
from shardkit.format.idx import read_index
from shardkit.format.manifest import MANIFEST_NAME, Manifest, compute_fingerprint
from shardkit.format.zstd_frames import FOOTER_SIZE, MAGIC, FramedReader
from shardkit.inspect import inspect_dataset
from shardkit.loader import Loader
from shardkit.mixture import load_recipe
from shardkit.loader import MixtureLoader
from shardkit.readers import ReaderConfig, read_records
from shardkit.readers import compression as _compression
from shardkit.sources import InputFile
from shardkit.writer import write_dataset

__all__ = ["TARGETS", "Rejected", "SlowInput", "Target", "run_one"]


class Rejected(Exception):
    """The bytes are not an input of this target at all (a state target given text that is not JSON)."""


class SlowInput(AssertionError):
    """One input took longer than the per-input budget: a hang in the making."""


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]
    what: str


def run_one(target: Target, data: bytes, *, budget: float | None = None) -> str:
    """Feed `data`; returns "ok", "error" (a ShardkitError) or "rejected". Anything else propagates."""
    t0 = time.monotonic()
    try:
        target.run(data)
        outcome = "ok"
    except ShardkitError:
        outcome = "error"
    except Rejected:
        outcome = "rejected"
    took = time.monotonic() - t0
    if budget is not None and took > budget:
        raise SlowInput(f"{target.name}: one input of {len(data)} bytes took {took:.1f}s (budget {budget}s)")
    return outcome


# -- scratch space and fixtures --------------------------------------------------------------------------------


@cache
def _scratch() -> Path:
    root = Path(tempfile.mkdtemp(prefix="shardkit-fuzz-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _write_new(path: Path, data: bytes) -> None:
    """Replace `path` by a new inode, so a mapping of the previous input is never truncated under it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _docs(n: int, seed: int, lo: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(lo, lo + 500, size=int(rng.integers(1, 30)), dtype=np.uint16) for _ in range(n)]


@cache
def _dataset_dir() -> Path:
    """A pristine tiny dataset (3 shards, 64-byte checksum blocks): the source of the dataset targets."""
    path = _scratch() / "pristine"
    write_dataset(path, _docs(24, 1, 1000), max_tokens_per_shard=120, checksum_block_size=64)
    return path


@cache
def _loader() -> Loader:
    return Loader(_dataset_dir(), seq_len=8, batch_schedule=4, readahead=False)


MIXTURE_RECIPE: dict[str, Any] = {
    "seed": 3, "seq_len": 8,
    "phases": [{"name": "warm", "tokens": 640, "batch": {"ramp": {"start": 2, "increment": 2, "over_samples": 16,
                                                                   "final": 4}}, "mix": {"a": 0.75, "b": 0.25}},
               {"name": "main", "tokens": 1280, "batch": 4, "mix": {"a": 0.5, "b": 0.5}}],
    "sources": {"a": {"path": "a"}, "b": {"path": "b", "epochs": "auto", "shuffle": "full"}},
}


@cache
def _mixture_root() -> Path:
    root = _scratch() / "mixture"
    for i, name in enumerate(("a", "b")):
        write_dataset(root / name, _docs(40, 10 + i, 1000 * (i + 1)), max_tokens_per_shard=200,
                      checksum_block_size=256)
    return root


@cache
def _mixture() -> MixtureLoader:
    return MixtureLoader(MIXTURE_RECIPE, base_dir=_mixture_root(), readahead=False)


def _json(data: bytes) -> Any:
    """A state dict as a checkpoint gives it back: any JSON value (bytes that are not JSON are rejected)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise Rejected from None


# -- format ----------------------------------------------------------------------------------------------------


def fuzz_idx(data: bytes) -> None:
    """A `.idx` file from bytes: header bounds, then the O(S) array checks, then the arrays read."""
    path = _scratch() / "fuzz.idx"
    _write_new(path, data)
    idx = read_index(path, check=True)
    h = idx.header
    total = int(idx.lengths.sum(dtype=np.int64))
    assert h.expected_size == len(data)
    assert idx.lengths.shape == idx.pointers.shape == (h.num_sequences,)
    assert idx.doc_indices.shape == (h.num_doc_indices,)
    if h.num_sequences:
        assert int(idx.pointers[-1]) + int(idx.lengths[-1]) * h.dtype.itemsize == total * h.dtype.itemsize


def _maybe_resign(data: bytes) -> bytes:
    """Inputs of even length get their fingerprint recomputed, so mutations reach past that check."""
    if len(data) % 2:
        return data
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            return data
        doc["fingerprint"] = compute_fingerprint(doc)
        return json.dumps(doc).encode()
    except (ValueError, TypeError, RecursionError):
        return data


def fuzz_manifest(data: bytes) -> None:
    """`manifest.json` from bytes; a manifest that loads must serialise and load back equal."""
    m = Manifest.from_bytes(_maybe_resign(data), "manifest.json")
    again = Manifest.from_bytes(m.to_bytes(), "manifest.json (round trip)")
    assert again.shards == m.shards and again.fingerprint == m.to_json()["fingerprint"]


@cache
def _dataset_copy() -> Path:
    path = _scratch() / "dataset"
    shutil.copytree(_dataset_dir(), path)
    return path


def fuzz_dataset(data: bytes) -> None:
    """A fuzzed manifest over real shard files: open, read every document and the flat stream, inspect."""
    path = _dataset_copy()
    _write_new(path / MANIFEST_NAME, _maybe_resign(data))
    ds = open_dataset(path)
    n = 0
    for shard in ds:
        for i in range(shard.num_docs):
            n += int(shard.doc(i).size)
    out = ds.read_tokens(0, ds.num_tokens)
    assert out.size == ds.num_tokens == n
    inspect_dataset(path)


def fuzz_checksums(data: bytes) -> None:
    """A `NAME.sum.json` sidecar from bytes; one that loads must serialise and load back equal."""
    sums = ShardChecksums.from_bytes(data, "x.sum.json")
    assert ShardChecksums.from_bytes(sums.to_bytes(), "x.sum.json") == sums


def _framed(data: bytes) -> bytes:
    """Inputs not ending in the footer magic get a valid index and footer, so the frame decoder is fuzzed.

    Layout of such an input: u8 frame count k (≤ 8), u16 block_size, k × u16 compressed lengths, the frames.
    """
    if data.endswith(MAGIC) or len(data) < 3:
        return data
    k = data[0] % 9
    block_size = struct.unpack_from("<H", data, 1)[0] or 1
    pos, lengths = 3, []
    for _ in range(k):
        if pos + 2 > len(data):
            break
        lengths.append(struct.unpack_from("<H", data, pos)[0] or 1)
        pos += 2
    frames_raw = data[pos:]
    entries, off = [], 0
    for n in lengths:
        n = min(n, len(frames_raw) - off)
        if n <= 0:
            break
        entries.append((off, n))
        off += n
    frames_raw = frames_raw[:off]
    total = len(entries) * block_size - (block_size // 3 if entries else 0)
    index = b"".join(struct.pack("<QQ16s", o, n, xxhash.xxh3_128_digest(frames_raw[o:o + n]))
                     for o, n in entries)
    head = struct.pack("<QQQQ16s", block_size, total, len(entries), off + 8, xxhash.xxh3_128_digest(index))
    footer = head + struct.pack("<QI8s", xxhash.xxh3_64_intdigest(head), 1, MAGIC)
    assert len(footer) == FOOTER_SIZE
    return frames_raw + struct.pack("<II", 0x184D2A5E, len(index) + FOOTER_SIZE) + index + footer


def fuzz_zstd_frames(data: bytes) -> None:
    """A framed zstd file from bytes: open (footer, index), read ranges, verify every frame."""
    with FramedReader(io.BytesIO(_framed(data)), name="fuzz.bin.zst", cache_frames=2) as r:
        size = r.uncompressed_size
        if size:
            got = r.read(0, min(size, 1 << 20))
            last = r.read(size - 1, 1)
            assert len(got) == min(size, 1 << 20) and len(last) == 1
            if size <= 1 << 20:
                assert last == got[-1:]
        r.verify_all()


# -- loader state ----------------------------------------------------------------------------------------------


def fuzz_loader_state(data: bytes) -> None:
    """A Loader state dict (JSON) loaded into a real loader, exactly and with every override; then one batch."""
    state = _json(data)
    loader = _loader()
    before = loader.state_dict()
    for allow in (False, True):
        try:
            loader.load_state_dict(state, allow_budget_change=allow, allow_recipe_change=allow,
                                   allow_data_change=allow)
        except ShardkitError:
            continue
        now = loader.state_dict()
        json.dumps(now)
        if not allow:
            assert [now[k] for k in ("batch", "samples", "micro")] == [state[k] for k in ("batch", "samples", "micro")]
        next(iter(loader), None)
    loader.load_state_dict(before, allow_recipe_change=True, allow_data_change=True)


def fuzz_mixture_state(data: bytes) -> None:
    """A MixtureLoader state dict (JSON) loaded into a real two-source mixture; then one batch is read."""
    state = _json(data)
    loader = _mixture()
    before = loader.state_dict()
    for allow in (False, True):
        try:
            loader.load_state_dict(state, allow_recipe_change=allow, allow_data_change=allow)
        except ShardkitError:
            continue
        json.dumps(loader.state_dict())
        next(iter(loader), None)
    loader.load_state_dict(before, allow_recipe_change=True, allow_data_change=True)


# -- recipes ---------------------------------------------------------------------------------------------------


def _recipe(suffix: str) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        path = _scratch() / f"recipe{suffix}"
        _write_new(path, data)
        recipe = load_recipe(path)
        again = load_recipe(recipe.to_json())
        assert again.fingerprint() == recipe.fingerprint()
        _ = recipe.plan.num_batches  # the loader computes the phase plan: it must not hang either
        recipe.validate_world_size(1)

    run.__doc__ = f"A mixture recipe from a {suffix} file: parse, validate, normalise, plan the phases."
    return run


# -- input readers ---------------------------------------------------------------------------------------------

_MEMORY = fsspec.filesystem("memory")
_BLOCKS = (7, 64, 1 << 20)  # tiny blocks put line and frame boundaries everywhere in small inputs


def _records(url: str, data: bytes, start: int, block_size: int) -> tuple[list[tuple[Any, ...]], str | None]:
    """All records of `data` read as `url` from record `start` with reader blocks of `block_size`."""
    _MEMORY.pipe(url.removeprefix("memory://"), data)
    cfg = ReaderConfig(id_field="id", encoding_errors="replace" if len(data) % 3 == 0 else "strict")
    out: list[tuple[Any, ...]] = []
    saved = _compression.BLOCK_SIZE
    _compression.BLOCK_SIZE = block_size
    try:
        for r in read_records(InputFile(url=url, size=len(data), source="fuzz"), cfg, start):
            assert r.index >= start and (r.text is None) != (r.error is None)
            out.append((r.index, r.text, r.doc_id, r.error))
    except ShardkitError as e:
        return out, str(e)
    finally:
        _compression.BLOCK_SIZE = saved
    return out, None


def _reader(name: str, *, differential: bool) -> Callable[[bytes], None]:
    url = f"memory://fuzz/{name}"

    def run(data: bytes) -> None:
        start = data[-1] % 3 if data else 0
        whole, error = _records(url, data, 0, _BLOCKS[len(data) % 3])
        if differential:  # the same file read in other block sizes, and resumed at `start`, must agree
            for bs in _BLOCKS:
                assert _records(url, data, 0, bs) == (whole, error), f"block size {bs} changes the records"
            if start and error is None:
                resumed, _ = _records(url, data, start, 1 << 20)
                assert resumed == [r for r in whole if r[0] >= start], "resuming changes the records"
        if error is not None:
            raise ShardkitError(error)

    run.__doc__ = f"Records of a {name} file from bytes (memory:// through fsspec, as remote inputs are read)."
    return run


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("idx", fuzz_idx, "Megatron MMIDIDX index parser"),
    Target("manifest", fuzz_manifest, "manifest.json loader"),
    Target("dataset", fuzz_dataset, "open_dataset + document reads + inspect over a fuzzed manifest"),
    Target("checksums", fuzz_checksums, "checksum sidecar NAME.sum.json"),
    Target("zstd_frames", fuzz_zstd_frames, "framed zstd shard reader (FramedReader)"),
    Target("loader_state", fuzz_loader_state, "Loader.load_state_dict / check_state"),
    Target("mixture_state", fuzz_mixture_state, "MixtureLoader.load_state_dict / parse_state"),
    Target("recipe_yaml", _recipe(".yaml"), "recipe parser, YAML"),
    Target("recipe_toml", _recipe(".toml"), "recipe parser, TOML"),
    Target("recipe_json", _recipe(".json"), "recipe parser, JSON"),
    Target("reader_jsonl", _reader("in.jsonl", differential=True), "JSONL reader"),
    Target("reader_text", _reader("in.txt", differential=True), "plain-text reader"),
    Target("reader_parquet", _reader("in.parquet", differential=False), "Parquet reader"),
    Target("reader_gzip", _reader("in.jsonl.gz", differential=False), "gzip-compressed JSONL reader"),
    Target("reader_zstd", _reader("in.jsonl.zst", differential=False), "zstd-compressed JSONL reader"),
)}
