"""The embedded default job: a real corpus every Python installation carries, packed and checked.

The corpus is the standard library itself: its module sources as JSONL.zst (one document per module)
and its docstrings as Parquet (one document per module/class/function docstring), so the demo exercises
two input formats, the built-in tokenizer, packing, opening and checksum verification.
"""

from __future__ import annotations

import ast
import io
import json
import sysconfig
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

__all__ = ["stdlib_sources", "build_stdlib_corpus"]

_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}


def stdlib_sources(max_files: int | None = None) -> Iterator[tuple[str, str]]:
    """(relative path, source text) of the standard library's .py files, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in root.rglob("*.py") if not (_SKIP_DIRS & set(p.relative_to(root).parts[:-1])))
    for n, p in enumerate(paths):
        if max_files is not None and n >= max_files:
            return
        try:
            yield str(p.relative_to(root)), p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def _docstrings(path: str, source: str) -> Iterator[dict[str, str]]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                name = getattr(node, "name", path)
                yield {"text": doc, "id": f"{path}:{name}"}


def build_stdlib_corpus(directory: str | Path, *, max_files: int | None = None) -> list[Path]:
    """Write `stdlib-sources.jsonl.zst` and `stdlib-docstrings.parquet` into `directory`; returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    sources_path = out / "stdlib-sources.jsonl.zst"
    doc_rows: list[dict[str, str]] = []
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(buf, closefd=False) as w:
        for rel, text in stdlib_sources(max_files):
            w.write((json.dumps({"text": text, "meta": {"path": rel}}) + "\n").encode())
            doc_rows.extend(_docstrings(rel, text))
    sources_path.write_bytes(buf.getvalue())
    doc_path = out / "stdlib-docstrings.parquet"
    table = pa.table({"text": [r["text"] for r in doc_rows], "id": [r["id"] for r in doc_rows]})
    pq.write_table(table, doc_path, row_group_size=4096)
    return [sources_path, doc_path]
