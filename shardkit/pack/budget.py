"""The skip budget: how much of the input a pack may drop as bad records before it refuses to finish.

`--on-error skip` keeps a pack going past bad records; the budget stops it from quietly losing a real
part of the corpus (three books in cp1252 among 29 are 10 % of the tokens). Two measures, both checked:

* records: skipped records / all records read;
* bytes: each input file's size times the share of its records that were skipped, summed, over the
  total input size — exact for one-document files (.txt) and for files that yield nothing, an estimate
  (bytes spread evenly over records) for files with many records.

Records dropped by a policy the user chose (`--encoding-errors skip`) are reported but not counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PackError
from ..sources import InputFile
from .stats import PackStats

__all__ = ["DEFAULT_MAX_SKIP_FRACTION", "SkipUsage", "check_skip_budget", "empty_files", "is_encoding_problem",
           "skip_usage"]

DEFAULT_MAX_SKIP_FRACTION = 0.005  # 5 per mille: a few broken lines pass, a lost file of a small corpus does not


def is_encoding_problem(reason: str) -> bool:
    """A record bad only because its text is not valid Unicode (what --encoding-errors decides)."""
    return reason.startswith("invalid UTF-8") or "unpaired surrogate" in reason


@dataclass(frozen=True)
class SkipUsage:
    counted: int  # skipped records that count against the budget
    chosen: int  # skipped by a chosen policy (--encoding-errors skip)
    records: int  # all records read: packed documents and skipped records
    record_fraction: float
    byte_fraction: float

    @property
    def fraction(self) -> float:
        return max(self.record_fraction, self.byte_fraction)


def skip_usage(stats: PackStats, files: Sequence[InputFile]) -> SkipUsage:
    chosen = sum(int(f[2]) for f in stats.files.values())
    counted = stats.skipped - chosen
    records = stats.docs + stats.skipped
    total_bytes = sum(f.size for f in files)
    lost = 0.0
    for i, (docs, bad, good_skips, _first) in stats.files.items():
        n = docs + bad + good_skips
        if bad and 0 <= i < len(files):
            lost += files[i].size * bad / n
    return SkipUsage(counted=counted, chosen=chosen, records=records,
                     record_fraction=counted / records if records else 0.0,
                     byte_fraction=lost / total_bytes if total_bytes else 0.0)


def empty_files(stats: PackStats, files: Sequence[InputFile]) -> list[dict[str, str]]:
    """Input files that yielded no document but had problems, each with its first problem."""
    return [{"file": files[i].url, "first_problem": str(first)}
            for i, (docs, _bad, _chosen, first) in sorted(stats.files.items())
            if docs == 0 and first is not None and 0 <= i < len(files)]


def _kind(reason: str) -> str:
    """A reason without its numbers, so "invalid UTF-8 at byte 5" and "… at byte 17" group together."""
    return re.sub(r"(?<![\w-])\d+", "N", reason)


def check_skip_budget(stats: PackStats, files: Sequence[InputFile], max_fraction: float,
                      encoding_errors: str) -> SkipUsage:
    """The usage; a PackError naming the top reasons and example locations when it is past `max_fraction`."""
    usage = skip_usage(stats, files)
    if usage.counted == 0 or usage.fraction <= max_fraction:
        return usage
    kinds: dict[str, int] = {}
    for reason, n in stats.skipped_by_reason.items():
        kinds[_kind(reason)] = kinds.get(_kind(reason), 0) + n
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    lines = [f"skipped {usage.counted:,} of {usage.records:,} record(s) ({usage.record_fraction:.2%}; about "
             f"{usage.byte_fraction:.2%} of the input bytes), more than the skip budget --max-skip-fraction "
             f"{max_fraction:g} ({max_fraction:.2%}); the dataset was not finalised.",
             "  top reasons: " + "; ".join(f"{k}: {n:,}" for k, n in top)]
    bad_files = [first for _i, (docs, _b, _c, first) in sorted(stats.files.items()) if docs == 0 and first]
    if bad_files:
        lines.append(f"  {len(bad_files):,} file(s) yielded nothing, first problem of each:")
        lines += [f"    {p}" for p in bad_files[:5]]
    examples = [f"    {e['location']}: {e['reason']}" for e in stats.skip_examples[:5]]
    examples = [e for e in examples if e.strip() not in bad_files]
    if examples:
        lines += ["  examples:", *examples]
    advice = ["fix or remove those inputs and re-run with --overwrite"]
    if any(is_encoding_problem(r) for r in stats.skipped_by_reason) and encoding_errors == "strict":
        advice.append("for text that is not UTF-8, re-run with --overwrite and --encoding-errors replace (keeps "
                      "the documents, bad bytes become U+FFFD) or --encoding-errors skip (drops them knowingly)")
    need = min(1.0, _ceil4(usage.fraction))
    advice.append(f"or accept the loss: re-run the same command with --max-skip-fraction {need:g} (the shards "
                  "already written are kept, so it finishes at once)")
    lines.append("  what to do: " + "; ".join(advice))
    raise PackError("\n".join(lines))


def _ceil4(x: float) -> float:
    """x rounded up to 4 decimals, so the suggested budget always admits what was seen."""
    y = math.ceil(x * 1e4) / 1e4
    return y if y >= x else y + 1e-4
