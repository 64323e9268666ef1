"""Dataset-level checks: what the directory holds, whether a manifest is there, and whether it is sound.

The directory is listed once (no file is opened by name before it is known to be a regular file inside
the dataset, so a FIFO or a link out of the directory can neither hang nor leak verification). The
manifest must parse, validate (`Manifest.from_bytes`: schema, version, totals, fingerprint) and be
byte-for-byte what shardkit writes: an added or dropped newline is a change the fingerprint cannot see.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError, ResumeError
from ..format.listing import DirListing
from ..format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest
from ..writer.journal import JOURNAL_NAME, MERGE_MARKER_NAME, Journal
from .report import Check, Problem

__all__ = [
    "ManifestResult",
    "canonical_manifest_bytes",
    "extra_files",
    "load_manifest",
]

_PACK_FILES = (".shardkit-lock", JOURNAL_NAME, MERGE_MARKER_NAME)  # pack's own bookkeeping, never data


@dataclass
class ManifestResult:
    manifest: Manifest | None
    problems: list[Problem]
    notes: list[str]
    incomplete: bool = False


def canonical_manifest_bytes(raw: bytes) -> bytes:
    """The bytes `Manifest.to_bytes` writes for this content (unknown keys kept)."""
    return (json.dumps(json.loads(raw), indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()


def load_manifest(path: Path, listing: DirListing) -> ManifestResult:
    """The validated manifest, or why there is none (an unfinished pack is `incomplete`, not corrupt)."""
    journal = any(n.startswith(JOURNAL_NAME) for n in listing.files) or (
        MANIFEST_NAME not in listing.files and _journal_exists(path))
    if MANIFEST_NAME not in listing.files:
        if MANIFEST_NAME not in listing.outside | listing.others:
            if journal:
                return ManifestResult(None, [], [_journal_note(path)], incomplete=True)
            if MERGE_MARKER_NAME in listing.files or (path / MERGE_MARKER_NAME).is_file():
                return ManifestResult(None, [], [_merge_note()], incomplete=True)
            if _PACK_FILES[0] in listing.files and _only_bookkeeping(listing):
                return ManifestResult(None, [], [_starting_note()], incomplete=True)
        why = listing.absent_reason(MANIFEST_NAME)
        return ManifestResult(None, [Problem(Check.DATASET, f"{why}: not a shardkit dataset (or its manifest "
                                                            "was lost; re-pack)", file=MANIFEST_NAME)], [])
    size = listing.files[MANIFEST_NAME]
    if size > MAX_MANIFEST_BYTES:
        return _bad(f"{size:,} bytes, over the {MAX_MANIFEST_BYTES:,}-byte limit")
    try:
        raw = (path / MANIFEST_NAME).read_bytes()
        manifest = Manifest.from_bytes(raw, str(path / MANIFEST_NAME))
    except ManifestError as e:
        return _bad(e.problem)
    except OSError as e:
        return _bad(f"cannot be read ({e.strerror})")
    problems = []
    if canonical_manifest_bytes(raw) != raw:
        problems.append(Problem(Check.MANIFEST, "bytes differ from the canonical form shardkit writes (whitespace "
                                                "or layout changed; the content still matches its fingerprint)",
                                file=MANIFEST_NAME))
    notes = []
    if journal:
        notes.append(f"a pack journal ({JOURNAL_NAME}) is left next to a finished manifest; it is ignored")
    if MERGE_MARKER_NAME in listing.files:
        notes.append(f"a merge marker ({MERGE_MARKER_NAME}) is left next to a finished manifest; it is ignored "
                     "(re-running the merge removes it)")
    return ManifestResult(manifest, problems, notes)


def extra_files(listing: DirListing, named: set[str]) -> list[str]:
    """Entries no manifest or sidecar names (stray copies, renamed shards), pack bookkeeping excluded."""
    everything = set(listing.files) | listing.outside | listing.others
    return sorted(n for n in everything - named
                  if n not in _PACK_FILES and not (n.startswith(".") and n.endswith(".tmp")))


def _bad(problem: str) -> ManifestResult:
    return ManifestResult(None, [Problem(Check.MANIFEST, problem, file=MANIFEST_NAME)], [])


def _journal_exists(path: Path) -> bool:
    """Look the journal up by name: a directory listing taken while pack renames files may miss an entry
    (readdir during a rename is unspecified), a lookup by name never does."""
    return any(os.path.isfile(path / n) for n in (JOURNAL_NAME, JOURNAL_NAME + ".tmp"))


def _only_bookkeeping(listing: DirListing) -> bool:
    """Nothing but the pack lock and temp files: a pack that stopped (or is) before writing its journal.

    Final shard files without a journal or manifest are not this: that is a dataset that lost its manifest.
    """
    names = set(listing.files) | listing.outside | listing.others
    return all(n in _PACK_FILES or n.endswith(".tmp") for n in names)


def _starting_note() -> str:
    return (f"unfinished pack: only the pack lock (and temp files) are here, no {JOURNAL_NAME} yet (a pack is "
            "starting, or was stopped before it finished its first step; re-run the same `shardkit pack` "
            "command)")


def _merge_note() -> str:
    return (f"unfinished merge: {MERGE_MARKER_NAME} is present and {MANIFEST_NAME} is not yet written (a "
            "`shardkit merge` or a `--num-tasks` job may still be running; otherwise re-run the same command "
            "to finish it)")


def _journal_note(path: Path) -> str:
    try:
        got = Journal.read(path / JOURNAL_NAME)
    except (ResumeError, OSError, ValueError, AttributeError, TypeError):  # a best-effort note only
        got = None
    done = f"{len(got[2])} shard(s) finished so far; " if got else ""
    return (f"unfinished pack: {JOURNAL_NAME} is present and {MANIFEST_NAME} is not yet written ({done}"
            "a pack may still be running; otherwise re-run the same `shardkit pack` command to finish it)")
