"""Types and ranges of the manifest fields outside the shard table, checked at every open and by `verify`.

The fingerprint proves only that the manifest is self-consistent (anyone can recompute it), so a field
shardkit acts on must also be plausible: `verify --deep` checks ids against `tokenizer.vocab_size`, EOS
placement by `eos_appended`, block digests by `checksum.block_size`. A value of the wrong type or out of
range is refused with the field's name, never read as "unset" or passed on to fail later.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ManifestError, brief
from .dtypes import MAX_VOCAB_32

__all__ = ["MAX_CHECKSUM_BLOCK", "check_manifest_fields"]

MAX_CHECKSUM_BLOCK = 1 << 32  # 4 GiB; pack writes 16 MiB blocks (at least 4 KiB)
CHECKSUM_ALGORITHMS = ("xxh3_128",)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fail(where: str, field: str, expected: str, value: object) -> ManifestError:
    return ManifestError(where, f"manifest field {field} must be {expected}, got {brief(value)}; the manifest "
                                "was edited or damaged: restore it or re-pack")


def check_manifest_fields(doc: dict[str, Any], where: str, dtype_max_id: int) -> None:
    """Raise ManifestError naming the first field whose type or value cannot be right."""
    for flag in ("eos_appended", "bos_prepended"):
        if doc.get(flag) is not None and not isinstance(doc.get(flag), bool):
            raise _fail(where, flag, "true, false or null", doc.get(flag))
    checksum = doc.get("checksum")
    if not isinstance(checksum, dict):
        raise _fail(where, "checksum", "an object with algorithm and block_size", checksum)
    block = checksum.get("block_size")
    if not _is_int(block) or not 1 <= block <= MAX_CHECKSUM_BLOCK:
        raise _fail(where, "checksum.block_size", f"an integer from 1 to {MAX_CHECKSUM_BLOCK:,}", block)
    if checksum.get("algorithm") not in CHECKSUM_ALGORITHMS:
        raise _fail(where, "checksum.algorithm", " or ".join(map(repr, CHECKSUM_ALGORITHMS)),
                    checksum.get("algorithm"))
    for key in ("pack", "stats", "created"):
        if key in doc and not isinstance(doc[key], dict):
            raise _fail(where, key, "an object", doc[key])
    totals = doc.get("totals")
    if isinstance(totals, dict) and "bytes" in totals and (not _is_int(totals["bytes"]) or totals["bytes"] < 0):
        raise _fail(where, "totals.bytes", "a non-negative integer", totals["bytes"])
    tok = doc.get("tokenizer")
    if isinstance(tok, dict):
        _check_tokenizer(tok, where, dtype_max_id)


def _check_tokenizer(tok: dict[str, Any], where: str, dtype_max_id: int) -> None:
    for key in ("kind", "name", "path"):
        if tok.get(key) is not None and not isinstance(tok[key], str):
            raise _fail(where, f"tokenizer.{key}", "a string", tok[key])
    sha = tok.get("sha256")
    if sha is not None and not (isinstance(sha, str) and (sha == "" or _SHA256.fullmatch(sha))):
        raise _fail(where, "tokenizer.sha256", "64 lowercase hex digits", sha)
    vocab = tok.get("vocab_size")
    if vocab is not None:
        if not _is_int(vocab) or not 1 <= vocab <= MAX_VOCAB_32:
            raise _fail(where, "tokenizer.vocab_size", f"an integer from 1 to {MAX_VOCAB_32:,}", vocab)
        if vocab - 1 > dtype_max_id:
            raise _fail(where, "tokenizer.vocab_size", f"at most {dtype_max_id + 1:,} (the dataset's token dtype "
                                                       "cannot hold larger ids)", vocab)
    for key in ("eos_id", "bos_id"):
        v = tok.get(key)
        if v is None:
            continue
        top = vocab if _is_int(vocab) else dtype_max_id + 1
        if not _is_int(v) or not 0 <= v < top:
            raise _fail(where, f"tokenizer.{key}", f"null or an integer from 0 to {top - 1:,}", v)
