"""The datasets of a recipe, opened and checked, and the order seed of each of its sources.

A source's order is keyed by the recipe's seed and the source's *name* (and the seq_len), never by its index
or by the other sources, so adding a source to a recipe leaves every other source's order unchanged.
Sources may be local directories or remote URLs (streamed through the block cache, `shardkit.remote`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError, ManifestError
from ..format import Dataset
from ..order import derive_key
from ..remote.dataset import open_any
from ..remote.fs import is_remote
from .recipe import Recipe

__all__ = ["open_sources", "stream_seed"]


def stream_seed(seed: int, name: str, seq_len: int) -> int:
    """The order seed of source `name` at `seq_len`: derive_key(seed, first 8 bytes of sha256(name), seq_len)."""
    name_key = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
    return derive_key(seed, name_key, seq_len)


def resolve_source(path: str, base_dir: Path) -> str:
    """A source's location: a URL as given, a local path made absolute (relative to `base_dir`)."""
    if is_remote(path):
        return path
    p = Path(path[len("file://"):] if path.startswith("file://") else path).expanduser()
    return str(p if p.is_absolute() else (base_dir / p).resolve())


def open_sources(recipe: Recipe, base_dir: Path, *, cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None,
                 check_files: bool = True) -> dict[str, Dataset]:
    """Open every source the phases use (relative paths from `base_dir`); names the source in every error."""
    used = sorted({name for p in recipe.phases for name, _ in p.mix})
    out: dict[str, Dataset] = {}
    opened: dict[str, Dataset] = {}  # sources naming the same dataset share one Dataset (one mapping)
    for name in used:
        spec = recipe.source(name)
        where = resolve_source(spec.path, base_dir)
        if where in opened:
            out[name] = opened[where]
            continue
        if not is_remote(where) and not Path(where).exists():
            rel = "" if Path(spec.path).expanduser().is_absolute() else f", relative to {base_dir}"
            raise InputError(where, f"source {name!r} (sources.{name}.path = {spec.path!r}{rel}): no such "
                                    "directory; fix the path or pack the dataset first")
        try:
            out[name] = opened[where] = open_any(where, cache_dir=cache_dir, cache_limit=cache_limit,
                                                 storage_options=storage_options, check_files=check_files)
        except ManifestError as e:
            raise ManifestError(e.path, f"source {name!r}: {e.problem}") from None
    for i, phase in enumerate(recipe.phases):
        for name, _ in phase.mix:
            ds = out[name]
            if (ds.num_tokens - 1) // phase.seq_len < 1:
                raise ConfigError(f"phases[{i}] ({phase.name}): seq_len {phase.seq_len:,} is too long for source "
                                  f"{name!r}: it has {ds.num_tokens:,} tokens, a window needs "
                                  f"{phase.seq_len + 1:,}; use a shorter seq_len or drop {name!r} from the phase")
    return out
