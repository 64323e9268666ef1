"""The loader's resumable state: a small, versioned, JSON-able dict (no pickle), checked field by field."""

from __future__ import annotations

from typing import Any

from ..errors import ResumeError, brief

__all__ = ["STATE_FORMAT", "STATE_VERSION", "brief", "make_state", "check_state"]

STATE_FORMAT = "shardkit-loader-state"
STATE_VERSION = 1
_MAX_INDEX = 1 << 62
def make_state(*, fingerprint: str, config: dict[str, Any], batch: int, samples: int, micro: int = 0,
               world_size: int, rank: int, micro_batch_size: int | None = None) -> dict[str, Any]:
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "fingerprint": fingerprint,
        "config": config,
        "batch": batch,
        "micro": micro,
        "samples": samples,
        "world_size": world_size,  # resuming on another world size is allowed (at a step boundary)
        "rank": rank,
        "micro_batch_size": micro_batch_size,
    }


def check_mid_step(state: dict[str, Any], micro: int, *, world_size: int, micro_batch_size: int | None) -> None:
    """Refuse a mid-step state (micro > 0) on another world size or micro-batch size.

    Micro-batch k is the k-th slice of *this rank's* rows of the step; with W' ranks or another
    micro_batch_size the rows already consumed are no longer a prefix of any rank's slice, so no position
    continues the step exactly (resuming anyway delivers some samples twice and skips others).
    """
    if not micro:
        return
    saved_w, saved_m = state.get("world_size"), state.get("micro_batch_size", micro_batch_size)
    if saved_w != world_size or saved_m != micro_batch_size:
        raise ResumeError("micro", f"the state was taken inside a step (micro-batch {micro}) with world_size "
                                   f"{brief(saved_w)} and micro_batch_size {brief(saved_m)}; a mid-step state "
                                   f"resumes only on the same (now {world_size} and {micro_batch_size}) — "
                                   "checkpoint at a step boundary to change them")


def check_state(state: Any, *, fingerprint: str, config: dict[str, Any], force: bool) -> tuple[int, int, int]:
    """Validate a state dict against this loader; returns (batch, samples, micro). ResumeError names the field."""
    if not isinstance(state, dict):
        raise ResumeError("state", f"expected a dict from Loader.state_dict(), got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT:
        raise ResumeError("format", f"not a shardkit loader state (format {brief(state.get('format'))})")
    if state.get("version") != STATE_VERSION:
        raise ResumeError("version", f"state version {brief(state.get('version'))} is not {STATE_VERSION}; it was "
                                     "written by another shardkit version")
    for key in ("batch", "samples", "micro"):
        v = state.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < _MAX_INDEX:
            raise ResumeError(key, f"must be a non-negative integer below 2**62, got {brief(v)}")
    saved_fp = state.get("fingerprint")
    if saved_fp != fingerprint and not force:
        shown = saved_fp[:16] if isinstance(saved_fp, str) else brief(saved_fp)
        raise ResumeError("fingerprint", f"the state was saved on dataset {shown}, "
                                         f"this loader reads {fingerprint[:16]}; pass force=True to continue "
                                         "on the new data from the same position")
    saved = state.get("config")
    if not isinstance(saved, dict):
        raise ResumeError("config", f"missing (expected the loader's stream config as a dict, got {brief(saved)})")
    if not force:
        for key in sorted(set(saved) | set(config), key=str):  # (a checkpoint may give non-str keys)
            if saved.get(key) != config.get(key):
                name = key[:80] if isinstance(key, str) else brief(key)
                raise ResumeError(f"config.{name}", f"saved {brief(saved.get(key))}, now {brief(config.get(key))}: "
                                                    "the sample stream would differ; use the saved setting or "
                                                    "force=True")
    return state["batch"], state["samples"], state["micro"]
