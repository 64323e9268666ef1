"""Input listing: order, de-duplication, globs, directories, hidden files, extensions, errors, URLs."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import fsspec
import pytest

from shardkit.errors import InputError
from shardkit.readers import ReaderConfig, read_records
from shardkit.sources import (
    SUPPORTED_EXTENSIONS,
    Compression,
    InputFile,
    InputFormat,
    input_compression,
    input_format,
    list_inputs,
    list_inputs_with_report,
    listing,
)


def tree(root: Path, *names: str) -> Path:
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b'{"text": "x"}\n')
    return root


def urls(files: list[InputFile]) -> list[str]:
    return [f.url for f in files]


def test_single_file(tmp_path):
    tree(tmp_path, "a.jsonl")
    [f] = list_inputs([str(tmp_path / "a.jsonl")])
    assert f == InputFile(url=str(tmp_path / "a.jsonl"), size=14, source=str(tmp_path / "a.jsonl"))


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    tree(tmp_path, "d/a.jsonl")
    monkeypatch.chdir(tmp_path)
    [f] = list_inputs(["d/a.jsonl"])
    assert f.url == str(tmp_path / "d" / "a.jsonl") and f.source == "d/a.jsonl"
    assert list_inputs("d") == [InputFile(url=f.url, size=14, source="d")]  # a bare string is one pattern


def test_directory_walk_sorted_skipping_hidden_and_unsupported(tmp_path):
    tree(tmp_path, "b/2.jsonl", "b/1.parquet", "a.txt", "a/z.json.gz", ".hidden.jsonl", ".git/x.jsonl",
         "b/.cache/y.jsonl", "notes.md", "b/data.csv")
    files, ignored = list_inputs_with_report([str(tmp_path)])
    rel = [os.path.relpath(u, tmp_path) for u in urls(files)]
    assert rel == ["a.txt", "a/z.json.gz", "b/1.parquet", "b/2.jsonl"]  # plain string sort of the full path
    assert sorted(os.path.relpath(u, tmp_path) for u in ignored) == ["b/data.csv", "notes.md"]
    assert {f.source for f in files} == {str(tmp_path)}


def test_patterns_keep_order_and_dedupe_first_wins(tmp_path):
    tree(tmp_path, "x/1.jsonl", "x/2.jsonl", "y/3.jsonl")
    pats = [str(tmp_path / "y"), str(tmp_path / "x" / "2.jsonl"), str(tmp_path / "x"), str(tmp_path / "y")]
    files = list_inputs(pats)
    assert [os.path.relpath(u, tmp_path) for u in urls(files)] == ["y/3.jsonl", "x/2.jsonl", "x/1.jsonl"]
    assert [f.source for f in files] == [pats[0], pats[1], pats[2]]


def test_globs_with_double_star(tmp_path):
    tree(tmp_path, "top.jsonl", "a/one.jsonl", "a/b/two.jsonl", "a/b/skip.txt", "a/.h/hidden.jsonl",
         "a/.dot.jsonl")
    rel = lambda fs: [os.path.relpath(u, tmp_path) for u in urls(fs)]  # noqa: E731
    assert rel(list_inputs([str(tmp_path / "**" / "*.jsonl")])) == ["a/b/two.jsonl", "a/one.jsonl", "top.jsonl"]
    assert rel(list_inputs([str(tmp_path / "a" / "**" / "*.jsonl")])) == ["a/b/two.jsonl", "a/one.jsonl"]
    assert rel(list_inputs([str(tmp_path / "a" / "*.jsonl")])) == ["a/one.jsonl"]
    # a pattern that names a dot-component asks for hidden files
    assert rel(list_inputs([str(tmp_path / "a" / ".*.jsonl")])) == ["a/.dot.jsonl"]
    # directories matched by a glob are walked
    assert rel(list_inputs([str(tmp_path / "a" / "*")])) == ["a/b/skip.txt", "a/b/two.jsonl", "a/one.jsonl"]


def test_hidden_parent_named_explicitly_is_fine(tmp_path):
    tree(tmp_path, ".data/a.jsonl", ".data/sub/b.jsonl")
    assert len(list_inputs([str(tmp_path / ".data")])) == 2
    assert len(list_inputs([str(tmp_path / ".data" / "*.jsonl")])) == 1


@pytest.mark.parametrize("pattern", ["missing.jsonl", "missing_dir", "*.nothing", "**/*.jsonl.gz"])
def test_nothing_matches(tmp_path, monkeypatch, pattern):
    tree(tmp_path, "a.jsonl")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no input files match; check the path or quote the glob") as e:
        list_inputs([pattern])
    assert e.value.path == pattern


def test_directory_or_glob_with_only_unsupported_files(tmp_path):
    tree(tmp_path, "d/a.csv", "d/b.md")
    with pytest.raises(InputError, match=r"no files with a supported extension \(2 other files ignored") as e:
        list_inputs([str(tmp_path / "d")])
    assert ".jsonl" in str(e.value)
    with pytest.raises(InputError, match="supported extension"):
        list_inputs([str(tmp_path / "d" / "*")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no files with a supported extension"):
        list_inputs([str(tmp_path / "empty")])


def test_explicit_unsupported_file_is_an_error(tmp_path):
    tree(tmp_path, "data.csv")
    with pytest.raises(InputError, match="unsupported file extension; supported: .+\\.jsonl") as e:
        list_inputs([str(tmp_path / "data.csv")])
    assert e.value.path == str(tmp_path / "data.csv")


def test_invalid_glob(tmp_path):
    with pytest.raises(InputError, match="invalid glob"):
        list_inputs([str(tmp_path / "**.jsonl")])


def test_unreadable_file(tmp_path, monkeypatch):
    tree(tmp_path, "d/a.jsonl")
    monkeypatch.setattr(listing, "_readable", lambda path: not path.endswith("a.jsonl"))
    for pattern in (tmp_path / "d" / "a.jsonl", tmp_path / "d", tmp_path / "d" / "*.jsonl"):
        with pytest.raises(InputError, match="permission denied") as e:
            list_inputs([str(pattern)])
        assert e.value.path == str(tmp_path / "d" / "a.jsonl")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable_directory_for_real(tmp_path):
    tree(tmp_path, "d/sub/a.jsonl")
    (tmp_path / "d" / "sub").chmod(0)
    try:
        with pytest.raises(InputError, match="permission denied"):
            list_inputs([str(tmp_path / "d")])
    finally:
        (tmp_path / "d" / "sub").chmod(0o755)


_ids = itertools.count()


def test_memory_urls():
    mem = fsspec.filesystem("memory")
    root = f"/listing-{next(_ids)}"
    for name in ("b/2.jsonl", "a.jsonl", "b/skip.csv", "b/.h.jsonl"):
        with mem.open(f"{root}/{name}", "wb") as f:
            f.write(b'{"text": "m"}\n')
    files, ignored = list_inputs_with_report([f"memory://{root}", f"memory://{root}/a.jsonl"])
    assert urls(files) == [f"memory://{root}/a.jsonl", f"memory://{root}/b/2.jsonl"]
    assert ignored == [f"memory://{root}/b/skip.csv"]
    assert files[0].size == 14 and files[0].source == f"memory://{root}"
    assert urls(list_inputs([f"memory://{root}/**/*.jsonl"])) == urls(files)
    assert [r.text for r in read_records(files[1], ReaderConfig())] == ["m"]
    with pytest.raises(InputError, match="no input files match"):
        list_inputs([f"memory://{root}/nothing/*.jsonl"])


@pytest.mark.parametrize("url,fmt,comp", [
    ("a.jsonl", InputFormat.JSONL, Compression.NONE),
    ("a.json", InputFormat.JSONL, Compression.NONE),
    ("a.ndjson", InputFormat.JSONL, Compression.NONE),
    ("/x/a.JSONL.GZ", InputFormat.JSONL, Compression.GZIP),
    ("s3://b/k/a.json.gz", InputFormat.JSONL, Compression.GZIP),
    ("a.jsonl.zst", InputFormat.JSONL, Compression.ZSTD),
    ("a.json.zst", InputFormat.JSONL, Compression.ZSTD),
    ("a.jsonl.zstd", InputFormat.JSONL, Compression.ZSTD),
    ("a.parquet", InputFormat.PARQUET, Compression.NONE),
    ("a.txt", InputFormat.TEXT, Compression.NONE),
    ("a.txt.gz", InputFormat.TEXT, Compression.GZIP),
    ("a.txt.zst", InputFormat.TEXT, Compression.ZSTD),
])
def test_formats_by_extension(url, fmt, comp):
    assert input_format(url) == fmt and input_compression(url) == comp


@pytest.mark.parametrize("url", ["a.csv", "a.gz", "a.parquet.gz", "/x/.jsonl", "jsonl", "a.jsonl.bz2"])
def test_unsupported_extensions(url):
    with pytest.raises(InputError, match="unsupported"):
        input_format(url)


def test_supported_extensions_listed():
    for ext in (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".jsonl.zstd",
                ".parquet", ".txt", ".txt.gz", ".txt.zst"):
        assert ext in SUPPORTED_EXTENSIONS


def test_existing_name_with_glob_characters_is_taken_literally(tmp_path):
    tree(tmp_path, "a[1].jsonl", "a1.jsonl")
    assert urls(list_inputs([str(tmp_path / "a[1].jsonl")])) == [str(tmp_path / "a[1].jsonl")]
    assert urls(list_inputs([str(tmp_path / "a[0-9].jsonl")])) == [str(tmp_path / "a1.jsonl")]
