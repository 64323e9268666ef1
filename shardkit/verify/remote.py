"""Verify a remote dataset (any fsspec URL): download its directory, check the copy, report the URL.

Verification reads every byte of a dataset whatever its location, so the copy costs no extra reads; it
goes to a temporary directory under the remote cache directory and is removed afterwards (see
remote/local_copy.py). Every check and message is the local one, with the URL in place of the copy's path.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..remote.local_copy import remote_copy
from .report import VerifyReport
from .run import verify_dataset

__all__ = ["verify_remote_dataset"]


def verify_remote_dataset(url: str, *, cache_dir: str | os.PathLike[str] | None = None,
                          cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None,
                          **kwargs: Any) -> VerifyReport:
    """`verify_dataset` on a downloaded copy of the dataset at `url`; `kwargs` are verify_dataset's."""
    with remote_copy(url, None, cache_dir=cache_dir, cache_limit=cache_limit,
                     storage_options=storage_options) as copy:
        report = verify_dataset(copy.path, **kwargs)
        local = str(copy.path)
    base = url.rstrip("/")

    def swap(text: str | None) -> str | None:
        return text.replace(local, base) if isinstance(text, str) else text

    report.path = url
    report.problems = [dataclasses.replace(p, detail=swap(p.detail), file=swap(p.file)) for p in report.problems]
    report.notes = [swap(n) or "" for n in report.notes]
    return report
