"""The loader's resumable state: a small, versioned, JSON-able dict (no pickle), checked field by field."""

from __future__ import annotations

from typing import Any

from ..errors import ResumeError

__all__ = ["STATE_FORMAT", "STATE_VERSION", "make_state", "check_state"]

STATE_FORMAT = "shardkit-loader-state"
STATE_VERSION = 1
_MAX_INDEX = 1 << 62


def make_state(*, fingerprint: str, config: dict[str, Any], batch: int, samples: int, micro: int = 0,
               world_size: int, rank: int) -> dict[str, Any]:
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "fingerprint": fingerprint,
        "config": config,
        "batch": batch,
        "micro": micro,
        "samples": samples,
        "world_size": world_size,  # informational: resuming on another world size is allowed
        "rank": rank,
    }


def check_state(state: Any, *, fingerprint: str, config: dict[str, Any], force: bool) -> tuple[int, int, int]:
    """Validate a state dict against this loader; returns (batch, samples, micro). ResumeError names the field."""
    if not isinstance(state, dict):
        raise ResumeError("state", f"expected a dict from Loader.state_dict(), got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT:
        raise ResumeError("format", f"not a shardkit loader state (format {state.get('format')!r})")
    if state.get("version") != STATE_VERSION:
        raise ResumeError("version", f"state version {state.get('version')!r} is not {STATE_VERSION}; it was "
                                     "written by another shardkit version")
    for key in ("batch", "samples", "micro"):
        v = state.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < _MAX_INDEX:
            raise ResumeError(key, f"must be a non-negative integer below 2**62, got {v!r}")
    if state.get("fingerprint") != fingerprint and not force:
        raise ResumeError("fingerprint", f"the state was saved on dataset {str(state.get('fingerprint'))[:16]}, "
                                         f"this loader reads {fingerprint[:16]}; pass force=True to continue "
                                         "on the new data from the same position")
    saved = state.get("config")
    if not isinstance(saved, dict):
        raise ResumeError("config", "missing")
    if not force:
        for key in sorted(set(saved) | set(config)):
            if saved.get(key) != config.get(key):
                raise ResumeError(f"config.{key}", f"saved {saved.get(key)!r}, now {config.get(key)!r}: the "
                                                   "sample stream would differ; use the saved setting or "
                                                   "force=True")
    return state["batch"], state["samples"], state["micro"]
