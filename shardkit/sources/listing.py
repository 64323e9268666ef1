"""Expand input patterns (files, directories, globs, fsspec URLs) into a deterministic list of files.

The order of the list is part of the pack's output contract (output bytes depend on the inputs *in their
order*), so it never depends on directory-listing order: patterns keep the order given, and the matches of
one pattern are sorted by their full path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import fsspec.core
from fsspec.implementations.local import LocalFileSystem

from ..errors import InputError

__all__ = [
    "Compression",
    "InputFile",
    "InputFormat",
    "SUPPORTED_EXTENSIONS",
    "input_compression",
    "input_format",
    "list_inputs",
    "list_inputs_with_report",
    "local_file_problem",
]


class InputFormat(Enum):
    """How a file's bytes are turned into records; chosen by extension."""

    JSONL = "jsonl"
    PARQUET = "parquet"
    TEXT = "text"
    ARROW = "arrow"  # Arrow IPC (stream or file): Hugging Face `datasets`' save_to_disk and cache files


class Compression(Enum):
    """The stream compression wrapped around a line- or text-format file."""

    NONE = "none"
    GZIP = "gzip"
    ZSTD = "zstd"


_BASES = {".jsonl": InputFormat.JSONL, ".json": InputFormat.JSONL, ".ndjson": InputFormat.JSONL,
          ".txt": InputFormat.TEXT}
_SUFFIXES = {"": Compression.NONE, ".gz": Compression.GZIP, ".zst": Compression.ZSTD, ".zstd": Compression.ZSTD}

# extension -> (format, compression); parquet compresses internally, so it has no outer suffix
_EXTENSIONS: dict[str, tuple[InputFormat, Compression]] = {
    base + suffix: (fmt, comp) for base, fmt in _BASES.items() for suffix, comp in _SUFFIXES.items()
}
_EXTENSIONS[".parquet"] = (InputFormat.PARQUET, Compression.NONE)
_EXTENSIONS[".arrow"] = (InputFormat.ARROW, Compression.NONE)
# a directory written by `datasets.Dataset.save_to_disk`: Arrow files plus these two metadata files, which
# are not input (they would otherwise be read as JSON lines)
_HF_DATASET_METADATA = ("state.json", "dataset_info.json")

SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(sorted(_EXTENSIONS))
_BY_LENGTH = sorted(_EXTENSIONS, key=len, reverse=True)
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input file: where it is, how big it is on storage, and which input argument named it."""

    url: str  # a local absolute path, or a URL fsspec can open ("memory://x/a.jsonl", "s3://b/k")
    size: int  # bytes on storage (the compressed size for .gz/.zst)
    source: str  # the pattern, directory or file exactly as the user gave it (for per-source stats)


def _extension(url: str) -> str | None:
    name = url.rsplit("/", 1)[-1].lower()
    for ext in _BY_LENGTH:
        if name.endswith(ext) and len(name) > len(ext):
            return ext
    return None


def _kind(url: str) -> tuple[InputFormat, Compression]:
    ext = _extension(url)
    if ext is None:
        raise InputError(url, f"unsupported file extension; supported: {', '.join(SUPPORTED_EXTENSIONS)}")
    return _EXTENSIONS[ext]


def input_format(url: str) -> InputFormat:
    """The record format of `url`, from its extension; InputError when the extension is unsupported."""
    return _kind(url)[0]


def input_compression(url: str) -> Compression:
    """The outer stream compression of `url` (gzip/zstd/none), from its extension."""
    return _kind(url)[1]


def _is_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def _hidden_below(path: str, root: str) -> bool:
    rel = path[len(root):] if path.startswith(root) else path
    return any(part.startswith(".") for part in rel.split("/") if part)


def _readable(path: str) -> bool:
    return os.access(path, os.R_OK)


def local_file_problem(path: str) -> str | None:
    """Why a local input path cannot be read as a file (dangling or looping link, FIFO, device), else None.

    Only regular files are inputs: opening a FIFO blocks until a writer appears, a device never ends.
    """
    try:
        st = os.stat(path)
    except PermissionError:
        return None  # reported as permission denied by the caller
    except OSError as e:
        if os.path.islink(path):
            if e.errno == errno.ELOOP:
                return "a symbolic link loop (it resolves back to itself); fix or remove the link"
            if e.errno == errno.ENOENT:
                return (f"a dangling symbolic link (its target {os.readlink(path)!r} does not exist); fix or "
                        "remove the link")
        return f"cannot be examined ({e.strerror or e})"
    if not stat.S_ISREG(st.st_mode):
        return ("not a regular file (a FIFO, socket or device); inputs must be regular files: write the data "
                "to a file first")
    return None


class _Lister:
    """Expands one pattern into its supported files (url -> size) and the files skipped for their extension."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        try:
            self.fs, self.path = fsspec.core.url_to_fs(pattern)
        except (ValueError, ImportError) as e:
            raise InputError(pattern, f"cannot open this location: {e}") from e
        self.local = isinstance(self.fs, LocalFileSystem)
        self.found: dict[str, int] = {}
        self.ignored: list[str] = []

    def url(self, path: str) -> str:
        return path if self.local else self.fs.unstrip_protocol(path)

    def _denied(self, path: str) -> InputError:
        return InputError(self.url(path), "permission denied; check the file's and its directories' permissions")

    def add_file(self, info: dict[str, Any], *, explicit: bool) -> None:
        path = info["name"]
        url = self.url(path)
        if _extension(url) is None:
            if explicit:
                raise InputError(url, "unsupported file extension; supported: " + ", ".join(SUPPORTED_EXTENSIONS))
            self.ignored.append(url)
            return
        if self.local:
            if (problem := local_file_problem(path)) is not None:
                raise InputError(url, problem)
            if not _readable(path):
                raise self._denied(path)
        self.found[url] = int(info.get("size") or 0)

    def walk(self, root: str) -> None:
        """Add every supported, non-hidden file below `root`, pruning hidden directories."""
        try:
            for directory, dirs, files in self.fs.walk(root, detail=True, on_error="raise"):
                for name in [d for d in dirs if d.startswith(".")]:
                    del dirs[name]
                if "dataset_dict.json" in files:
                    raise InputError(self.url(directory), "a Hugging Face DatasetDict (several splits saved with "
                                     f"save_to_disk: {', '.join(sorted(dirs))}); name one split's directory, "
                                     f"e.g. {self.url(directory).rstrip('/')}/{min(dirs, default='train')}")
                hf_dataset = all(n in files for n in _HF_DATASET_METADATA)
                for name, info in files.items():
                    if hf_dataset and name in _HF_DATASET_METADATA:
                        self.ignored.append(self.url(info["name"]))
                    elif not name.startswith("."):
                        self.add_file(info, explicit=False)
        except PermissionError as e:
            raise self._denied(str(e.filename or root)) from e

    def expand(self) -> None:
        try:
            if _is_glob(self.path) and not self.fs.exists(self.path):  # "a[1].jsonl" may be a real name
                self._expand_glob()
            else:
                self._expand_path()
        except PermissionError as e:
            raise self._denied(str(e.filename or self.path)) from e
        except OSError as e:  # network filesystems: timeouts, auth, missing buckets
            raise InputError(self.pattern, f"cannot list this location: {e}") from e

    def _expand_path(self) -> None:
        if self.local and os.path.islink(self.path) and (problem := local_file_problem(self.path)) is not None:
            raise InputError(self.pattern, problem)
        try:
            info = self.fs.info(self.path)
        except FileNotFoundError:
            raise InputError(self.pattern, "no input files match; check the path or quote the glob") from None
        if info.get("type") == "directory":
            if self.local and not _readable(self.path):
                raise self._denied(self.path)
            self.walk(self.path)
            if not self.found:
                raise InputError(self.pattern, self._nothing_supported("directory holds"))
        else:
            self.add_file(info, explicit=True)

    def _expand_glob(self) -> None:
        try:
            matches: dict[str, dict[str, Any]] = self.fs.glob(self.path, detail=True)
        except ValueError as e:
            raise InputError(self.pattern, f"invalid glob: {e}") from e
        first = min(i for i, c in enumerate(self.path) if c in _GLOB_CHARS)
        root = self.path[: self.path.rfind("/", 0, first) + 1]
        wants_hidden = "/." in "/" + self.path[len(root):]
        for path, info in matches.items():
            if not wants_hidden and _hidden_below(path, root):
                continue
            if info.get("type") == "directory":
                self.walk(path)
            else:
                self.add_file(info, explicit=False)
        if not self.found:
            if self.ignored:
                raise InputError(self.pattern, self._nothing_supported("the glob matches"))
            raise InputError(self.pattern, "no input files match; check the path or quote the glob")

    def _nothing_supported(self, what: str) -> str:
        example = self.ignored[0].rsplit("/", 1)[-1] if self.ignored else None
        ignored = f" ({len(self.ignored)} other files ignored, e.g. {example})" if example else ""
        return f"{what} no files with a supported extension{ignored}; supported: {', '.join(SUPPORTED_EXTENSIONS)}"


def list_inputs_with_report(patterns: Sequence[str]) -> tuple[list[InputFile], list[str]]:
    """The input files named by `patterns` in pack order, and the files skipped for their extension.

    Patterns keep their order; one pattern's matches are sorted by full path; a file named twice is kept at
    its first occurrence. Ignored files come from directory walks and globs (an explicitly named file with
    an unsupported extension is an error instead).
    """
    if isinstance(patterns, str):  # a bare string would silently iterate by character
        patterns = [patterns]
    files: list[InputFile] = []
    seen: set[str] = set()
    ignored: dict[str, None] = {}  # ordered set
    for pattern in patterns:
        lister = _Lister(pattern)
        lister.expand()
        for url in sorted(lister.found):
            if url not in seen:
                seen.add(url)
                files.append(InputFile(url=url, size=lister.found[url], source=pattern))
        ignored.update(dict.fromkeys(sorted(lister.ignored)))
    return files, list(ignored)


def list_inputs(patterns: Sequence[str]) -> list[InputFile]:
    """The input files named by `patterns`, in the deterministic order the pack reads them."""
    return list_inputs_with_report(patterns)[0]

