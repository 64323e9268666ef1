"""The pack journal: one fsynced JSON line per finished shard, so a killed pack resumes where it was.

Line 1 names the job (a hash of inputs, tokenizer and options); each later line records a finished
shard, the input position just after it, and the cumulative statistics at that point. A torn last
line (the process died mid-write) is ignored: that shard is simply redone.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ResumeError
from ..format.atomic import write_errors
from ..format.manifest import ShardEntry
from .shard_writer import RESUME_HINT as _HINT

__all__ = ["JOURNAL_NAME", "MERGE_MARKER_NAME", "JournalEntry", "Journal"]

JOURNAL_NAME = ".shardkit-journal.jsonl"
# a merge's journal: present (with the lock) from before the first hard link until the manifest is written,
# so a merge stopped part-way reads as unfinished, not as a dataset that lost its manifest
MERGE_MARKER_NAME = ".shardkit-merging"
JOURNAL_VERSION = 1


@dataclass(frozen=True)
class JournalEntry:
    shard: ShardEntry
    next_file: int  # index into the input list of the first record not yet packed
    next_record: int  # record index within that file
    stats: dict[str, Any]


class Journal:
    def __init__(self, path: Path, job: dict[str, Any], job_id: str) -> None:
        self.path = path
        self.job = job
        self.job_id = job_id
        self._f = None

    @classmethod
    def read(cls, path: Path) -> tuple[str, dict[str, Any], list[JournalEntry]] | None:
        """(job id, job, entries) of an existing journal, or None if there is none."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        lines = raw.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            lines.pop()  # torn last line: no newline means the write did not finish
        if not lines:
            return None
        try:
            head = json.loads(lines[0])
            if not isinstance(head, dict) or head.get("kind") != "job" or head.get("version") != JOURNAL_VERSION:
                raise ValueError("bad header")
            entries = []
            for line in lines[1:]:
                d = json.loads(line)
                entries.append(JournalEntry(
                    shard=ShardEntry.from_json(d["shard"], str(path)),
                    next_file=int(d["next"][0]),
                    next_record=int(d["next"][1]),
                    stats=d["stats"],
                ))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as e:
            raise ResumeError("journal", f"{path} is unreadable ({e}); re-run with --overwrite to start over") from None
        return head["job_id"], head["job"], entries

    def start(self, entries_kept: list[JournalEntry]) -> None:
        """(Re)write the journal with the header and the entries that survived the resume check."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with write_errors(tmp, hint=_HINT), open(tmp, "wb") as f:
            f.write(_line({"kind": "job", "version": JOURNAL_VERSION, "job_id": self.job_id, "job": self.job}))
            for e in entries_kept:
                f.write(_entry_line(e))
            f.flush()
            os.fsync(f.fileno())
        with write_errors(tmp, f"rename to {self.path.name}", hint=_HINT):
            os.replace(tmp, self.path)
            self._f = open(self.path, "ab")  # noqa: SIM115 - closed in close()

    def append(self, entry: JournalEntry) -> None:
        if self._f is None:
            raise RuntimeError("journal not started")
        # a torn line (the disk filled mid-write) has no newline and is ignored on resume: that shard is redone
        with write_errors(self.path, hint=_HINT):
            self._f.write(_entry_line(entry))
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):  # only after a failed append: that error was already raised
                self._f.close()
            self._f = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _entry_line(e: JournalEntry) -> bytes:
    return _line({"kind": "shard", "shard": e.shard.to_json(), "next": [e.next_file, e.next_record],
                  "stats": e.stats})
