"""The `make_file` fixture: write an input file in any supported format under tmp_path."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from reader_testutil import compress, input_file

from shardkit.sources import InputFile


@pytest.fixture
def make_file(tmp_path: Path) -> Callable[..., InputFile]:
    """make_file(data, name="in.jsonl") writes `data` (compressed as the name says unless raw=True)."""
    counter = itertools.count()

    def make(data: bytes, name: str = "in.jsonl", *, raw: bool = False) -> InputFile:
        path = tmp_path / f"{next(counter)}-{name}"
        path.write_bytes(data if raw else compress(data, name))
        return input_file(path)

    return make
