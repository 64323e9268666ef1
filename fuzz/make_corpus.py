"""Regenerate the committed seed corpora under fuzz/corpus/<target>/ from real small files.

Seeds are what shardkit itself writes: a tiny `shardkit pack` (bytes tokenizer, three shards) gives the
`.idx`, manifest and sidecar seeds; the fuzz fixtures give loader and mixture states; the readers get
small files of each input format. Files named `regress-*` are crash inputs the fuzzers found: they are
kept, never regenerated. Run from the repository root: `.venv/bin/python -m fuzz.make_corpus`.
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
import zstandard

from fuzz import targets
from shardkit.format.idx import encode_index
from shardkit.format.zstd_frames import write_framed
from shardkit.pack import PackConfig, pack
from shardkit.writer import ShardLimits

CORPUS = Path(__file__).parent / "corpus"

TEXTS = ["Hello, world.", "naïve café ✓ — ünïcödé", "", "line one\nline two\r\nline three", "x" * 200,
         "emoji 🙂 and \u2028 separator", "tab\tand \"quotes\""]


def _jsonl() -> bytes:
    lines = [json.dumps({"text": t, "id": i}, ensure_ascii=i % 2 == 0) for i, t in enumerate(TEXTS)]
    lines += ["", '{"text": "nested", "id": {"a": [1, 2.5, null]}}', '{"text": 5}', '{"body": "no text"}',
              "not json", '{"text": "\\ud800 lone surrogate"}', '  {"text": "padded"}  ', '[1, 2]']
    return ("\n".join(lines) + "\n").encode()


def _toml(recipe: dict) -> str:
    """The fixture recipe as TOML (written by hand: the standard library reads TOML but does not write it)."""
    out = [f"seed = {recipe['seed']}", f"seq_len = {recipe['seq_len']}", ""]
    for name, src in recipe["sources"].items():
        out.append(f"[sources.{name}]")
        out += [f"{k} = {json.dumps(v)}" for k, v in src.items()]
        out.append("")
    for p in recipe["phases"]:
        out.append("[[phases]]")
        out += [f"name = {json.dumps(p['name'])}", f"tokens = {p['tokens']}"]
        batch = p["batch"]
        if isinstance(batch, int):
            out.append(f"batch = {batch}")
        else:
            ramp = ", ".join(f"{k} = {v}" for k, v in batch["ramp"].items())
            out.append(f"batch = {{ ramp = {{ {ramp} }} }}")
        out.append("mix = { " + ", ".join(f"{k} = {v}" for k, v in p["mix"].items()) + " }")
        out.append("")
    return "\n".join(out)


def _write(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def _clear() -> None:
    for d in CORPUS.glob("*"):
        for f in d.iterdir():
            if not f.name.startswith("regress-"):
                f.unlink()


def main() -> None:
    _clear()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        (src / "a.jsonl").write_bytes(_jsonl())
        out = Path(tmp) / "ds"
        pack(PackConfig(inputs=(str(src),), output=str(out), workers=1, max_skip_fraction=1.0,  # bad lines on purpose
                        limits=ShardLimits(max_bytes=None, max_tokens=160, checksum_block_size=4096)))
        for f in sorted(out.iterdir()):
            if f.suffix == ".idx":
                _write("idx", f.name, f.read_bytes())
            elif f.name.endswith(".sum.json"):
                _write("checksums", f.name, f.read_bytes())
        _write("manifest", "pack-manifest.json", (out / "manifest.json").read_bytes())
        bins = sorted(out.glob("*.bin"))
        for f, bs in zip(bins, (64, 1000, 7)):
            index = write_framed(Path(tmp) / "f.zst", np.fromfile(f, dtype=np.uint8), block_size=bs)
            raw = (Path(tmp) / "f.zst").read_bytes()
            _write("zstd_frames", f"{f.stem}-b{bs}.bin.zst", raw)
            # the same frames in the wrapped form (targets._framed): count, block size, lengths, frames
            frames = index.frames[:8]
            _write("zstd_frames", f"{f.stem}-b{bs}.frames", bytes([len(frames)]) + bs.to_bytes(2, "little")
                   + b"".join(e.length.to_bytes(2, "little") for e in frames)
                   + raw[:frames[-1].offset + frames[-1].length])
        write_framed(Path(tmp) / "e.zst", b"", block_size=64)
        _write("zstd_frames", "empty.bin.zst", (Path(tmp) / "e.zst").read_bytes())
    # an empty index (a shard of no documents), an int32 one, and the fuzz fixture's own files
    _write("idx", "empty.idx", encode_index(np.zeros(0, np.int32), np.dtype("uint16")))
    _write("idx", "int32.idx", encode_index(np.array([3, 0, 70000]), np.dtype("int32")))
    _write("dataset", "fixture-manifest.json", (targets._dataset_dir() / "manifest.json").read_bytes())
    _write("manifest", "fixture-manifest.json", (targets._dataset_dir() / "manifest.json").read_bytes())

    loader = targets._loader()
    for b in (0, 1, 7):
        _write("loader_state", f"batch-{b}.json", json.dumps(loader.state_at(b)).encode())
    mix = targets._mixture()
    for b in (0, 3, mix.plan.num_batches - 1):
        _write("mixture_state", f"batch-{b}.json", json.dumps(mix.state_at(b)).encode())

    recipe = targets.MIXTURE_RECIPE
    _write("recipe_json", "fixture.json", json.dumps(recipe, indent=1).encode())
    _write("recipe_yaml", "fixture.yaml", yaml.safe_dump(recipe, sort_keys=False).encode())
    _write("recipe_yaml", "flow.yaml", b"seed: 1\nseq_len: 4096\nphases:\n  - {name: pretrain, tokens: 10T, "
           b"mix: {web: 0.7, code: 0.3}, batch: {piecewise: {pieces: [[100, 512], [200, 1024]], final: 2048}}}\n"
           b"sources:\n  web: {path: s3://bucket/web/}\n  code: {path: shards/code/, epochs: 2, shuffle: full}\n")
    _write("recipe_toml", "fixture.toml", _toml(recipe).encode())

    jsonl = _jsonl()
    _write("reader_jsonl", "mixed.jsonl", jsonl)
    _write("reader_jsonl", "bom-crlf.jsonl", b"\xef\xbb\xbf" + jsonl.replace(b"\n", b"\r\n"))
    _write("reader_jsonl", "bad-utf8.jsonl", b'{"text": "ok"}\n{"text": "\xff\xfe"}\n{"text": "end"}')
    _write("reader_text", "plain.txt", "\n".join(TEXTS).encode())
    _write("reader_text", "bom-bad.txt", b"\xef\xbb\xbfhello \xff world\r\n")
    _write("reader_gzip", "one.jsonl.gz", gzip.compress(jsonl, mtime=0))
    _write("reader_gzip", "two-members.jsonl.gz", gzip.compress(jsonl[:100], mtime=0)
           + gzip.compress(jsonl[100:], mtime=0) + bytes(4))
    cctx = zstandard.ZstdCompressor(level=3)
    _write("reader_zstd", "one.jsonl.zst", cctx.compress(jsonl))
    _write("reader_zstd", "two-frames.jsonl.zst", cctx.compress(jsonl[:100]) + cctx.compress(jsonl[100:]))
    for name, table, rows in (
        ("plain.parquet", pa.table({"text": TEXTS, "id": list(range(len(TEXTS)))}), 3),
        ("nulls-binary.parquet", pa.table({"text": pa.array([b"a", None, b"\xff", b"ok"], pa.binary()),
                                           "id": pa.array(["x", None, "z", "w"])}), 2),
        ("dictionary.parquet", pa.table({"text": pa.array(["a", "b", "a", None]).dictionary_encode(),
                                         "id": [1.5, 2.5, None, 4.0]}), 4),
    ):
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=rows, compression="snappy")
        _write("reader_parquet", name, buf.getvalue())
    sizes = {d.name: sum(f.stat().st_size for f in d.iterdir()) for d in sorted(CORPUS.iterdir())}
    print(json.dumps(sizes, indent=1))


if __name__ == "__main__":
    main()
