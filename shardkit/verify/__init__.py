"""Verify a dataset: structure (quick), every block checksum (full), token ids/EOS/decoding (deep).

    report = verify_dataset("data/ds", mode="full", jobs=8)
    report.verdict            # Verdict.OK | CORRUPT | INCOMPLETE
    report.problems           # each located to shard, file and byte range
"""

from .remote import verify_remote_dataset
from .report import Check, Problem, Verdict, VerifyMode, VerifyProgress, VerifyReport
from .run import verify_dataset

__all__ = ["Check", "Problem", "Verdict", "VerifyMode", "VerifyProgress", "VerifyReport", "verify_dataset",
           "verify_remote_dataset"]
