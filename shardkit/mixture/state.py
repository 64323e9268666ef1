"""The mixture loader's resumable state: a small, versioned, JSON-able dict, checked field by field.

```json
{"format": "shardkit-mixture-state", "version": 1,
 "recipe": "<sha256 of the normalized recipe>", "datasets": {"code": "<fingerprint>", "web": "<...>"},
 "batch": 1234, "micro": 0, "samples": 9872, "phase": "pretrain",
 "sources": {"code": {"samples": 2961, "tokens": 12128256}, "web": {"samples": 6911, "tokens": 28307456}},
 "anchor": 0, "offsets": {}, "world_size": 8, "rank": 0}
```
`sources` is each source's position (what it has given before `batch`, all ranks together): informational
on a plain resume (it is checked against the plan), authoritative after a recipe change — the new recipe
continues every source from there, recorded as `offsets` from the batch `anchor` where it took over.
"""

from __future__ import annotations

from typing import Any

from ..batching.state import brief
from ..errors import ResumeError

__all__ = ["STATE_FORMAT", "STATE_VERSION", "SavedState", "parse_state"]

STATE_FORMAT = "shardkit-mixture-state"
STATE_VERSION = 1
_MAX = 1 << 62


class SavedState:
    """A validated state dict: positions as ints, per-source cursors and offsets as {name: (samples, tokens)}."""

    def __init__(self, *, recipe: str, datasets: dict[str, str], batch: int, micro: int, samples: int,
                 sources: dict[str, tuple[int, int]], anchor: int, offsets: dict[str, tuple[int, int]]) -> None:
        self.recipe, self.datasets = recipe, datasets
        self.batch, self.micro, self.samples = batch, micro, samples
        self.sources, self.anchor, self.offsets = sources, anchor, offsets


def _index(value: Any, field: str, *, signed: bool = False) -> int:
    lo = -_MAX if signed else 0
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value < _MAX:
        kind = "an integer" if signed else "a non-negative integer"
        raise ResumeError(field, f"must be {kind} below 2**62, got {brief(value)}")
    return value


def _pairs(obj: Any, field: str, *, signed: bool) -> dict[str, tuple[int, int]]:
    if not isinstance(obj, dict):
        raise ResumeError(field, f"expected a mapping of source name to {{samples, tokens}}, got {brief(obj)}")
    out = {}
    for key, v in obj.items():
        name = key if isinstance(key, str) else brief(key)
        at = f"{field}.{name[:80]}"
        if not isinstance(v, dict) or set(v) - {"samples", "tokens", "active"}:
            raise ResumeError(at, f"expected {{samples, tokens}}, got {brief(v)}")
        out[name] = (_index(v.get("samples"), f"{at}.samples", signed=signed),
                     _index(v.get("tokens"), f"{at}.tokens", signed=signed))
    return out


def parse_state(state: Any) -> SavedState:
    """Check the shape and types of a state dict (not yet against a loader)."""
    if not isinstance(state, dict):
        raise ResumeError("state", f"expected a dict from MixtureLoader.state_dict(), got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT:
        hint = " (a single-source Loader state: resume it with shardkit.loader.Loader)" \
            if state.get("format") == "shardkit-loader-state" else ""
        raise ResumeError("format", f"not a shardkit mixture state (format {brief(state.get('format'))}){hint}")
    if state.get("version") != STATE_VERSION:
        raise ResumeError("version", f"state version {brief(state.get('version'))} is not {STATE_VERSION}; it was "
                                     "written by another shardkit version")
    recipe = state.get("recipe")
    if not isinstance(recipe, str):
        raise ResumeError("recipe", f"expected the recipe fingerprint, got {brief(recipe)}")
    datasets = state.get("datasets")
    if not isinstance(datasets, dict) or not all(isinstance(v, str) for v in datasets.values()):
        raise ResumeError("datasets", f"expected a mapping of source name to dataset fingerprint, got "
                                      f"{brief(datasets)}")
    batch, micro, samples, anchor = (_index(state.get(k), k) for k in ("batch", "micro", "samples", "anchor"))
    if anchor > batch:
        raise ResumeError("anchor", f"{anchor} is after the batch {batch} the state was taken at")
    return SavedState(recipe=recipe, datasets=dict(datasets), batch=batch, micro=micro, samples=samples,
                      sources=_pairs(state.get("sources"), "sources", signed=False), anchor=anchor,
                      offsets=_pairs(state.get("offsets", {}), "offsets", signed=True))
