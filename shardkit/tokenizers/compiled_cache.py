"""A per-user cache of compiled fast-path encodings, keyed by the tokenizer.json's SHA-256.

Compiling GPT-2's tokenizer.json for tiktoken (parsing it and proving every stage exact) takes ~1 s;
loading the result takes ~0.1 s. Every pack with the same file reuses it. The entry is derived only from
the file's bytes and this module's FORMAT, so a changed file or a changed compiler never hits a stale
entry; the start-up self-check on real input still runs on every pack. Files: the ranks in tiktoken's
own text format plus one JSON (no pickle), written to a temporary directory and renamed into place.

Location: $SHARDKIT_CACHE_DIR, else $XDG_CACHE_HOME/shardkit, else ~/.cache/shardkit. An unwritable or
damaged cache is ignored (compiling again is always correct).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import tiktoken
from tokenizers.normalizers import NFC

from .added_tokens import AddedTokenPlan

__all__ = ["cache_root", "load_entry", "store_entry", "write_ranks", "read_ranks_file", "FORMAT"]

FORMAT = 1  # bump when compile_tiktoken's result (or this layout) changes


def cache_root() -> Path:
    if os.environ.get("SHARDKIT_CACHE_DIR"):
        return Path(os.environ["SHARDKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shardkit"


def _entry(sha256: str) -> Path:
    return cache_root() / "fastpath" / f"{sha256}-v{FORMAT}"


def write_ranks(ranks: dict[bytes, int], path: Path) -> None:
    """tiktoken's ranks format: one `BASE64TOKEN RANK` line per token, by rank."""
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in by_rank))


def read_ranks_file(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token, validate=True)] = int(rank)
    return ranks


def plan_to_json(plan: AddedTokenPlan | None) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"raw": plan.raw, "normalized": plan.normalized, "nfc": plan.normalize is not None}


def plan_from_json(d: dict[str, Any] | None) -> AddedTokenPlan | None:
    if d is None:
        return None
    return AddedTokenPlan(raw=d["raw"], normalized=d["normalized"], normalize=NFC().normalize_str if d["nfc"] else None)


def store_entry(sha256: str, encoding: Any, vocab: dict[str, int], plan: AddedTokenPlan | None) -> None:
    """Save a compiled encoding; silently skipped when the cache cannot be written."""
    final = _entry(sha256)
    if final.exists():
        return
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
        write_ranks(encoding._mergeable_ranks, tmp / "encoding.tiktoken")
        (tmp / "compiled.json").write_text(json.dumps({
            "format": FORMAT, "name": encoding.name, "pat_str": encoding._pat_str,
            "special_tokens": encoding._special_tokens, "vocab": vocab, "plan": plan_to_json(plan)}),
            encoding="utf-8")
        try:
            os.rename(tmp, final)  # another process may have won the race: theirs is identical
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def load_entry(sha256: str) -> tuple[Any, dict[str, int], AddedTokenPlan | None] | None:
    """(tiktoken Encoding, vocabulary, added-token plan) from the cache, or None."""
    entry = _entry(sha256)
    try:
        desc = json.loads((entry / "compiled.json").read_text(encoding="utf-8"))
        if desc.get("format") != FORMAT:
            return None
        ranks = read_ranks_file(entry / "encoding.tiktoken")
        encoding = tiktoken.Encoding(name=desc["name"], pat_str=desc["pat_str"], mergeable_ranks=ranks,
                                     special_tokens=desc["special_tokens"])
        return encoding, desc["vocab"], plan_from_json(desc["plan"])
    except (OSError, ValueError, KeyError, TypeError, binascii.Error):
        return None
