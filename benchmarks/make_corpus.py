"""Assemble a real-text benchmark corpus of a given size as JSONL files.

Sources, in this order: ../shared/data/corpus (Gutenberg, WikiText, Shakespeare, HumanEval), the Python
standard library's sources, and /usr/share/doc text. Bigger sizes repeat the sources (the tokenizer
work per byte stays the same; memory flatness is what the larger size measures).

    python benchmarks/make_corpus.py --size 100MB -o bench-data/corpus-100M
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardkit.demo import stdlib_sources  # noqa: E402
from shardkit.units import parse_bytes  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus"
FILE_BYTES = 16 << 20


def _shared_docs() -> Iterator[str]:
    if not SHARED.is_dir():
        return
    for p in sorted(SHARED.rglob("*")):
        if p.suffix in (".txt", ".raw"):
            yield p.read_bytes().decode("utf-8", "replace")
        elif p.name.endswith(".jsonl.gz"):
            with gzip.open(p, "rt", encoding="utf-8") as f:
                for line in f:
                    rec = json.loads(line)
                    yield rec.get("prompt", "") + rec.get("canonical_solution", "")


def _doc_files() -> Iterator[str]:
    root = Path("/usr/share/doc")
    if not root.is_dir():
        return
    for p in sorted(root.rglob("*")):
        try:
            if p.is_symlink() or not p.is_file():
                continue
            raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            if p.suffix in ("", ".gz", ".txt", ".md", ".rst") or p.name in ("copyright", "changelog"):
                text = raw.decode("utf-8")
                if text.strip():
                    yield text
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue


def documents() -> Iterator[str]:
    yield from _shared_docs()
    for _, text in stdlib_sources():
        yield text
    yield from _doc_files()


def build(size: int, out: Path) -> tuple[int, int]:
    out.mkdir(parents=True, exist_ok=True)
    total = docs = part = 0
    f = open(out / f"part-{part:03d}.jsonl", "w", encoding="utf-8")  # noqa: SIM115 - rolled over below
    written = 0
    while total < size:
        before = total
        for text in documents():
            line = json.dumps({"text": text}) + "\n"
            f.write(line)
            n = len(line.encode())
            total += n
            written += n
            docs += 1
            if written >= FILE_BYTES:
                f.close()
                part += 1
                f = open(out / f"part-{part:03d}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
                written = 0
            if total >= size:
                break
        if total == before:
            raise SystemExit("no source text found")
    f.close()
    return total, docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100MB")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    total, docs = build(parse_bytes(args.size), Path(args.output))
    print(f"{args.output}: {docs:,} documents, {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
