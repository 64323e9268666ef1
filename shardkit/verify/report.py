"""What verification found: problems located to a shard, file and byte range, and a verdict.

A problem is data, not an exception: verification collects every one it can see (one bad shard never
hides another) and the caller decides how to show them. `VerifyReport.to_json()` is the `--json` schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["Check", "Problem", "Verdict", "VerifyMode", "VerifyProgress", "VerifyReport"]

REPORT_VERSION = 1


class VerifyMode(str, Enum):
    """How much to read: `quick` never reads a `.bin`; `full` hashes every block; `deep` also checks tokens."""

    QUICK = "quick"
    FULL = "full"
    DEEP = "deep"


class Verdict(str, Enum):
    OK = "ok"
    CORRUPT = "corrupt"  # something is missing, malformed or does not match its checksum
    INCOMPLETE = "incomplete"  # a pack is running or was interrupted: journal present, no manifest yet


class Check(str, Enum):
    """Which check found a problem (the `status` column of the CLI table)."""

    DATASET = "dataset"  # the directory itself: not a dataset, manifest missing
    MANIFEST = "manifest"  # unparsable, wrong version, fingerprint, totals, non-canonical bytes
    STATS = "stats"  # manifest statistics disagree with the shards
    MISSING = "missing"  # a file the manifest or a sidecar names is absent (or a link out of the dataset)
    SIZE = "size"  # a file is present with another size than recorded
    SIDECAR = "sidecar"  # NAME.sum.json changed, unparsable, or inconsistent with the manifest
    INDEX = "index"  # NAME.idx header, counts, lengths, pointers or document indices
    IDS = "ids"  # NAME.ids.jsonl does not have one line per document
    CHECKSUM = "checksum"  # a block's bytes do not match its recorded digest
    FRAMES = "frames"  # a compressed shard's zstd footer, frame index or a frame is damaged
    TOKENS = "tokens"  # a token id outside [0, vocab size)
    EOS = "eos"  # a document does not end in EOS although the manifest says EOS was appended
    BOS = "bos"  # a document does not start with BOS although the manifest says BOS was prepended
    DECODE = "decode"  # the tokenizer failed on a sampled document


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding; `shard` is None for dataset-level problems, `byte_range` is `[start, end)` in `file`."""

    check: Check
    detail: str
    shard: str | None = None
    file: str | None = None
    byte_range: tuple[int, int] | None = None
    expected: str | None = None
    actual: str | None = None

    def __str__(self) -> str:
        where = self.file or self.shard or "dataset"
        rng = f" bytes [{self.byte_range[0]}, {self.byte_range[1]})" if self.byte_range else ""
        return f"{where}{rng}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check.value,
            "shard": self.shard,
            "file": self.file,
            "byte_range": list(self.byte_range) if self.byte_range else None,
            "detail": self.detail,
            "expected": self.expected,
            "actual": self.actual,
        }


@dataclass(frozen=True, slots=True)
class VerifyProgress:
    """Handed to the `progress` callback from the calling thread; `unit` is "bytes" or "shards"."""

    phase: str  # "structure" | "content" | "tokens"
    done: int
    total: int
    unit: str
    elapsed: float  # seconds since this phase began


@dataclass
class VerifyReport:
    path: str
    mode: VerifyMode
    verdict: Verdict = Verdict.OK
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fingerprint: str | None = None
    shard_names: list[str] = field(default_factory=list)
    bytes_total: int = 0  # bytes of every file the manifest and sidecars name
    bytes_hashed: int = 0  # bytes whose block digests were recomputed
    bytes_scanned: int = 0  # token bytes read by the deep checks
    bytes_decompressed: int = 0  # uncompressed bytes of compressed shards decoded and hashed (in bytes_hashed)
    seconds: float = 0.0
    samples: list[dict[str, Any]] = field(default_factory=list)  # --decode-sample results

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    @property
    def shards(self) -> int:
        return len(self.shard_names)

    def problems_by_shard(self) -> dict[str | None, list[Problem]]:
        """Problems grouped by shard in manifest order; dataset-level ones (key None) first."""
        order = {None: -1, **{n: i for i, n in enumerate(self.shard_names)}}
        out: dict[str | None, list[Problem]] = {}
        for p in sorted(self.problems, key=lambda p: order.get(p.shard, len(order))):
            out.setdefault(p.shard, []).append(p)
        return out

    @property
    def bad_shards(self) -> list[str]:
        return [s for s in self.problems_by_shard() if s is not None]

    @property
    def shards_ok(self) -> int:
        if self.verdict is Verdict.INCOMPLETE:
            return 0
        return len(self.shard_names) - len(set(self.bad_shards) & set(self.shard_names))

    def finish(self) -> VerifyReport:
        self.notes = list(dict.fromkeys(self.notes))
        if self.verdict is not Verdict.INCOMPLETE:
            self.verdict = Verdict.CORRUPT if self.problems else Verdict.OK
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "report_version": REPORT_VERSION,
            "path": self.path,
            "mode": self.mode.value,
            "verdict": self.verdict.value,
            "ok": self.ok,
            "fingerprint": self.fingerprint,
            "shards": self.shards,
            "shards_ok": self.shards_ok,
            "bad_shards": self.bad_shards,
            "bytes_total": self.bytes_total,
            "bytes_hashed": self.bytes_hashed,
            "bytes_scanned": self.bytes_scanned,
            "bytes_decompressed": self.bytes_decompressed,
            "seconds": round(self.seconds, 4),
            "problems": [p.to_json() for p in self.problems_by_shard_flat()],
            "notes": list(self.notes),
            "samples": list(self.samples),
        }

    def problems_by_shard_flat(self) -> list[Problem]:
        return [p for ps in self.problems_by_shard().values() for p in ps]
