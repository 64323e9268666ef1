"""Hugging Face tokenizer names ("gpt2", "org/name") resolved from the local Hugging Face cache, offline.

shardkit never downloads. A name the user has already fetched (by `transformers`, `huggingface-cli
download`, `hf download`, ...) sits in the hub cache as huggingface_hub lays it out:

    $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
      models--ORG--NAME/refs/REVISION        the commit hash a branch or tag points to (REVISION: main)
      models--ORG--NAME/snapshots/HASH/tokenizer.json

`NAME@REVISION` picks a branch, tag or commit hash; without it, `main` (or the only snapshot there is).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import TokenizerError

__all__ = ["hub_cache_dir", "looks_like_hub_name", "resolve_hub_tokenizer"]

_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?(@[\w.\-/]+)?$")


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories (the same environment variables, same order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "huggingface" / "hub"


def looks_like_hub_name(spec: str) -> bool:
    """"gpt2", "openai-community/gpt2", "org/name@rev": no file suffix, at most one slash, not a path."""
    return bool(_NAME.match(spec)) and not spec.startswith(".") and Path(spec).suffix.lower() not in (
        ".json", ".model", ".tiktoken", ".txt")


def resolve_hub_tokenizer(spec: str) -> str:
    """The cached tokenizer.json of hub repository `spec`; a TokenizerError saying how to get it otherwise."""
    name, _, revision = spec.partition("@")
    cache = hub_cache_dir()
    repo = cache / ("models--" + name.replace("/", "--"))
    wanted = revision or "main"
    snapshot = None
    ref = repo / "refs" / wanted
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
    elif (repo / "snapshots" / wanted).is_dir():  # a commit hash given directly
        snapshot = repo / "snapshots" / wanted
    elif not revision and (repo / "snapshots").is_dir():
        snaps = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
        if len(snaps) == 1:
            snapshot = snaps[0]
    if snapshot is not None and (snapshot / "tokenizer.json").is_file():
        return str(snapshot / "tokenizer.json")
    what = (f"has no snapshot for revision {wanted!r}" if repo.is_dir() and snapshot is None else
            "has no tokenizer.json in that snapshot" if repo.is_dir() else f"has no {repo.name}")
    raise TokenizerError(
        f"tokenizer {spec!r} is not a file here, and the Hugging Face cache ({cache}) {what}. shardkit works "
        f"offline and never downloads: fetch it once with `hf download {name} tokenizer.json` (or "
        f"`huggingface-cli download {name} tokenizer.json`; $HF_HOME / $HF_HUB_CACHE choose the cache), or "
        "pass the path of a tokenizer.json")
