"""One error hierarchy, so callers (and the CLI) can tell user problems from bugs.

Every message says what was found, what was expected and what to do; errors about a place in the data
carry that place (file and line, shard and byte range) as attributes as well as in the text.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "brief",
    "exception_chain",
    "ShardkitError",
    "ConfigError",
    "MissingDependencyError",
    "InputError",
    "ReaderError",
    "TokenizerError",
    "ManifestError",
    "IntegrityError",
    "PackError",
    "ResumeError",
    "RemoteError",
]


class ShardkitError(Exception):
    """Base class of every error shardkit raises on purpose (the CLI prints these in one line, exit 1)."""


class ConfigError(ShardkitError, ValueError):
    """An option or argument has a value that cannot work."""


class MissingDependencyError(ShardkitError, ImportError):
    """An optional package is needed; the message carries the exact install line."""

    def __init__(self, package: str, extra: str | None = None, purpose: str = "") -> None:
        self.package = package
        line = f"pip install 'shardkit[{extra}]'" if extra else f"pip install {package}"
        what = f" for {purpose}" if purpose else ""
        super().__init__(f"the optional package {package!r} is needed{what}; install it with: {line}")


class InputError(ShardkitError):
    """An input path or pattern cannot be listed or opened."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, nearest first, each once."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


class ReaderError(ShardkitError):
    """A record or a whole input file cannot be read (corrupt, truncated, wrong format)."""

    def __init__(self, path: str, problem: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")

    @property
    def device_error(self) -> OSError | None:
        """The OS error under this one when the device, not the data, failed (EIO, ESTALE, ...), else None.

        Such a file is not bad input: skipping it would make the output depend on a passing fault, so pack
        stops instead. A missing or unreadable file (ENOENT, EACCES) is a fact about the input and counts
        as a file error.
        """
        return next((e for e in exception_chain(self)
                     if isinstance(e, OSError) and not isinstance(e, _FILE_FACTS) and e.errno is not None), None)


_FILE_FACTS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class TokenizerError(ShardkitError):
    """A tokenizer cannot be loaded or does not fit the dataset (e.g. vocabulary too large)."""


class ManifestError(ShardkitError):
    """A dataset directory or its manifest/index files are malformed, incomplete or unsafe."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class IntegrityError(ShardkitError):
    """Stored bytes do not match their recorded checksum or structure."""

    def __init__(
        self,
        shard: str,
        problem: str,
        *,
        byte_range: tuple[int, int] | None = None,
        expected: str | None = None,
        actual: str | None = None,
    ) -> None:
        self.shard = shard
        self.problem = problem
        self.byte_range = byte_range
        self.expected = expected
        self.actual = actual
        self.block: int | None = None  # a dataset's checksum block id, where a reader knows it
        self.source: int | None = None  # the loader source whose read found it
        where = f" bytes [{byte_range[0]}, {byte_range[1]})" if byte_range else ""
        super().__init__(f"{shard}{where}: {problem}")


class PackError(ShardkitError):
    """Packing stopped: a record failed under --on-error fail, or the output directory is in the way."""


class ResumeError(ShardkitError):
    """A saved state (pack journal or loader state dict) does not fit the current run; names the field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"cannot resume: {field}: {problem}")


class RemoteError(ShardkitError):
    """Remote storage refused or kept failing an operation; names the operation and its URL.

    `transient` tells an exhausted retry of a passing fault (worth re-running) from a permanent refusal
    (403, 404, bad bucket: fix the URL or credentials); `not_found` marks a missing object or bucket.
    """

    def __init__(self, what: str, problem: str, *, transient: bool = False, attempts: int = 1,
                 not_found: bool = False) -> None:
        self.what = what
        self.problem = problem
        self.transient = transient
        self.attempts = attempts
        self.not_found = not_found
        super().__init__(f"{what}: {problem}")


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 2, 60, 60, 60
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 4


def brief(value: Any) -> str:
    """A short repr for error messages: a manifest, state or recipe may hold huge strings or deep nesting."""
    try:
        text = _BRIEF.repr(value)
        return text if len(text) <= 200 else text[:197] + "..."
    except (ValueError, RecursionError):  # an int past str()'s digit limit, an object with a deep repr
        return f"<{type(value).__name__}>"
