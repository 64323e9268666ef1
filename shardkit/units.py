"""Human sizes: `1GiB`, `512MB`, `500M tokens` — parsed exactly, printed readably."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["ShardSize", "parse_bytes", "parse_count", "parse_shard_size", "human_bytes", "human_count"]

_SI = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_NUM = r"(\d+(?:\.\d+)?(?:[eE]\d+)?)"
_BYTES_RE = re.compile(_NUM + r"\s*(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P|k)?(?:B|iB)?", re.ASCII)
_COUNT_RE = re.compile(_NUM + r"\s*(K|M|G|T|P|B|k)?", re.ASCII)
_TOKENS_RE = re.compile(_NUM + r"\s*(K|M|G|T|P|B|k)?\s*(?:tokens?|tok|t)", re.ASCII | re.IGNORECASE)


def _scale(number: str, factor: int, text: str) -> int:
    value = float(number) * factor
    if not math.isfinite(value) or value != int(value) or value < 0:  # ("1e400" is inf)
        raise ConfigError(f"{text!r} is not a whole, non-negative quantity")
    return int(value)


def parse_bytes(text: str) -> int:
    """`1GiB` → 1073741824, `500MB` → 500000000, `4096` → 4096."""
    m = _BYTES_RE.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"cannot read {text!r} as a size in bytes (examples: 1GiB, 512MB, 4096)")
    unit = (m.group(2) or "").replace("k", "K")
    return _scale(m.group(1), _IEC.get(unit) or _SI[unit], text)


def parse_count(text: str) -> int:
    """`10T` → 10**13, `50M` → 5*10**7, `500B` → 5*10**11 (B = billion, as in token budgets)."""
    m = _COUNT_RE.fullmatch(str(text).strip())
    if not m:
        raise ConfigError(f"cannot read {text!r} as a count (examples: 500M, 10T, 1e9)")
    unit = (m.group(2) or "").replace("k", "K").replace("B", "G")
    return _scale(m.group(1), _SI[unit], str(text))


@dataclass(frozen=True, slots=True)
class ShardSize:
    max_bytes: int | None
    max_tokens: int | None


def parse_shard_size(text: str) -> ShardSize:
    """Bytes need a B suffix (`1GiB`, `256MB`); token counts need `tokens` (`500M tokens`, `500Mtok`)."""
    t = text.strip()
    m = _TOKENS_RE.fullmatch(t)
    if m:
        unit = (m.group(2) or "").replace("k", "K").replace("B", "G")
        n = _scale(m.group(1), _SI[unit], text)
        if n <= 0:
            raise ConfigError("shard size must be positive")
        return ShardSize(max_bytes=None, max_tokens=n)
    if not re.search(r"B\s*$", t):
        raise ConfigError(f"shard size {text!r} needs a unit: bytes like '1GiB' / '256MB', "
                          "or tokens like '500M tokens'")
    n = parse_bytes(t)
    if n <= 0:
        raise ConfigError("shard size must be positive")
    return ShardSize(max_bytes=n, max_tokens=None)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def human_count(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000
    return f"{n:.2f}P"
