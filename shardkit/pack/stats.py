"""Pack statistics, cumulative and JSON-able, so the journal can carry them across a resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HISTOGRAM_BINS", "PackStats", "MAX_SKIP_EXAMPLES"]

HISTOGRAM_BINS = 40  # bin i counts documents of [2**i, 2**(i+1)) tokens
MAX_SKIP_EXAMPLES = 20


@dataclass
class PackStats:
    docs: int = 0
    tokens: int = 0
    chars: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * HISTOGRAM_BINS)
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    skip_examples: list[dict[str, str]] = field(default_factory=list)
    # per input file (by index): [docs, counted skips, chosen skips, first problem]. Kept in the journal for
    # the skip budget and the "yielded nothing" report, never in the manifest (it names no output bytes).
    files: dict[int, list[Any]] = field(default_factory=dict)

    def _file(self, index: int) -> list[Any]:
        return self.files.setdefault(index, [0, 0, 0, None])

    def _source(self, name: str) -> dict[str, int]:
        return self.sources.setdefault(name, {"docs": 0, "tokens": 0, "skipped": 0})

    def add_docs(self, source: str, lengths: np.ndarray, chars: int, file: int | None = None) -> None:
        n = int(lengths.size)
        if not n:
            return
        if file is not None:
            self._file(file)[0] += n
        t = int(lengths.sum(dtype=np.int64))
        self.docs += n
        self.tokens += t
        self.chars += chars
        s = self._source(source)
        s["docs"] += n
        s["tokens"] += t
        bins = np.floor(np.log2(np.maximum(lengths, 1))).astype(np.int64)
        counts = np.bincount(np.minimum(bins, HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS)
        self.histogram = [a + int(b) for a, b in zip(self.histogram, counts)]

    def add_skip(self, source: str, location: str, reason: str, file: int | None = None,
                 chosen: bool = False) -> None:
        """Count a skipped record; `chosen` ones (a policy the user picked, e.g. --encoding-errors skip)
        are reported like the others but do not count against the skip budget."""
        if file is not None:
            f = self._file(file)
            f[2 if chosen else 1] += 1
            if f[3] is None:
                f[3] = f"{location}: {reason[:300]}"
        self.skipped += 1
        self._source(source)["skipped"] += 1
        kind = reason.split(":", 1)[0].split("(", 1)[0].strip()[:80]
        self.skipped_by_reason[kind] = self.skipped_by_reason.get(kind, 0) + 1
        if len(self.skip_examples) < MAX_SKIP_EXAMPLES:
            self.skip_examples.append({"location": location, "reason": reason[:300]})

    def to_json(self, *, internal: bool = False) -> dict[str, Any]:
        """The manifest's `stats`; `internal` adds the per-file counts the journal carries across a resume."""
        out = {
            "docs": self.docs,
            "tokens": self.tokens,
            "chars": self.chars,
            "doc_length_histogram": {"bins": "log2", "counts": list(self.histogram)},
            "sources": {k: dict(v) for k, v in sorted(self.sources.items())},
            "skipped": {
                "count": self.skipped,
                "by_reason": dict(sorted(self.skipped_by_reason.items())),
                "examples": list(self.skip_examples),
            },
        }
        if internal:
            out["files"] = {str(k): list(v) for k, v in sorted(self.files.items())}
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PackStats:
        skipped = d["skipped"]
        return cls(
            docs=d["docs"],
            tokens=d["tokens"],
            chars=d["chars"],
            histogram=list(d["doc_length_histogram"]["counts"]),
            sources={k: dict(v) for k, v in d["sources"].items()},
            skipped=skipped["count"],
            skipped_by_reason=dict(skipped["by_reason"]),
            skip_examples=list(skipped["examples"]),
            files={int(k): list(v) for k, v in d.get("files", {}).items()},
        )
