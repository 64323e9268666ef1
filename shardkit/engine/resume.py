"""Resume: a validated saved state → the cursor and position this loader continues from, or a named refusal.

A plain resume (same stream, same data) continues exactly: the saved per-source positions must be what the
plan says they are at the saved batch. Anything else needs the narrow override that covers it
(`state.Overrides`); a recipe change takes over at the saved batch with per-source offsets, so every source
continues its order where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ResumeError, brief
from ..mixture.cursor import Cursor
from .config import Placement
from .plan import Plan
from .state import Overrides, SavedState, definition_diff, is_budget_path

__all__ = ["Resumed", "resume"]


@dataclass
class Resumed:
    cursor: Cursor
    batch: int
    micro: int
    retired: dict[str, tuple[int, int]]  # sources of an earlier recipe, kept in later states


def resume(saved: SavedState, *, plan: Plan, kind: str, definition: dict[str, Any], fingerprint: str,
           datasets: dict[str, str], placement: Placement, overrides: Overrides) -> Resumed:
    """Check `saved` against this loader and return where to continue (nothing is changed on refusal)."""
    changed = sorted(n for n in set(datasets) & set(saved.datasets) if datasets[n] != saved.datasets[n])
    if changed and not overrides.allow_data_change:
        n = changed[0]
        field = "fingerprint" if kind == "dataset" and n == "data" else f"datasets.{n}"
        raise ResumeError(field, f"source {n!r} was dataset {saved.datasets[n][:16]} when the state was saved, it "
                                 f"is now {datasets[n][:16]}; pass allow_data_change=True to continue on the new "
                                 "data from the same positions")
    # new data: every source continues at its saved position (tokens) of the new data
    take_over = _compare_stream(saved, kind, definition, fingerprint, overrides, data_changed=bool(changed)) \
        or bool(changed)
    if take_over:
        cursor, retired = _take_over(saved, plan)
    else:
        cursor, retired = _resume_same(saved, plan, budget_changed=saved.fingerprint != fingerprint)
    _check_micro(saved, plan, placement)
    return Resumed(cursor=cursor, batch=saved.batch, micro=saved.micro, retired=retired)


# what a single dataset's definition derives from the data itself: it follows a change of data
_DATA_DERIVED = ("shuffle.block_samples",)


def _compare_stream(saved: SavedState, kind: str, definition: dict[str, Any], fingerprint: str,
                    overrides: Overrides, *, data_changed: bool) -> bool:
    """Whether the saved stream differs beyond its budget (a take-over); refuses what no override allows."""
    if saved.fingerprint == fingerprint and saved.kind == kind:
        return False
    if saved.kind != kind:
        if overrides.allow_recipe_change:
            return True
        what = {"dataset": "a single dataset (Loader)", "recipe": "a recipe (MixtureLoader)"}
        raise ResumeError("stream.kind", f"the state was saved by a loader of {what[saved.kind]}, this is a loader "
                                         f"of {what[kind]}; pass allow_recipe_change=True to continue with this "
                                         f"stream from batch {saved.batch}, each source where it was")
    if saved.definition is None:  # a version-1 mixture state: the recipe's fingerprint alone
        if overrides.allow_recipe_change:
            return True
        raise ResumeError("recipe", f"the state was saved on recipe {saved.fingerprint[:16]}, this loader reads "
                                    f"recipe {fingerprint[:16]}; pass allow_recipe_change=True to continue with "
                                    f"this recipe from batch {saved.batch}, each source continuing its order where "
                                    "it was")
    diffs = [d for d in definition_diff(saved.definition, definition)
             if not (data_changed and kind == "dataset" and d[0] in _DATA_DERIVED)]
    if not diffs:
        return False
    other = [d for d in diffs if not is_budget_path(d[0])]
    if other:
        if overrides.allow_recipe_change:
            return True
        path, was, now = other[0]
        raise ResumeError(f"stream.{path}", f"saved {brief(was)}, now {brief(now)}: the sample stream would differ; "
                                            "use the saved setting, or pass allow_recipe_change=True to continue "
                                            f"with the new one from batch {saved.batch}, each source where it was")
    if not overrides.allow_budget_change and not overrides.allow_recipe_change:
        path, was, now = diffs[0]
        raise ResumeError(f"stream.{path}", f"saved {brief(was)}, now {brief(now)}: the token budget changed; "
                                            "pass allow_budget_change=True to continue the same stream to the "
                                            "new end")
    return False


def _resume_same(saved: SavedState, plan: Plan, *, budget_changed: bool) -> tuple[Cursor, dict[str, tuple[int, int]]]:
    """The cursor of a plain resume: the saved offsets, every position checked against the plan."""
    if saved.batch > plan.phases.num_batches:
        raise ResumeError("batch", f"{saved.batch} is past the end of the stream ({plan.phases.num_batches:,} "
                                   "batches)")
    names = plan.names
    idx = {n: j for j, n in enumerate(names)}
    ot, os_ = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
    for n, (s, t) in saved.offsets.items():
        if n not in idx:
            raise ResumeError(f"offsets.{n}", f"no source {n!r} in this stream")
        os_[idx[n]], ot[idx[n]] = s, t
    cursor = Cursor(plan.phases, offset_tokens=ot, offset_samples=os_, anchor=saved.anchor)
    hint = (" — the budget change moved it or what came before it; pass allow_recipe_change=True to take over "
            "there instead") if budget_changed else ": the state was edited or is corrupt"
    if cursor.global_samples_before(saved.batch) != saved.samples:
        raise ResumeError("samples", f"{saved.samples} consumed samples do not match batch {saved.batch} of this "
                                     f"stream ({cursor.global_samples_before(saved.batch)}){hint}")
    for n, s, t in zip(names, cursor.samples_before(saved.batch).tolist(), cursor.tokens_before(saved.batch).tolist()):
        if saved.sources.get(n) != (s, t):
            found = dict(zip(("samples", "tokens"), saved.sources[n])) if n in saved.sources else "nothing"
            raise ResumeError(f"sources.{n}", f"saved {found}, this stream has {{'samples': {s}, 'tokens': {t}}} "
                                              f"at batch {saved.batch}{hint}")
    extra = sorted(set(saved.sources) - set(names))
    if extra:
        raise ResumeError(f"sources.{extra[0]}", f"no source {extra[0]!r} in this stream{hint}")
    return cursor, dict(saved.retired)


def _take_over(saved: SavedState, plan: Plan) -> tuple[Cursor, dict[str, tuple[int, int]]]:
    """A changed stream continues at the saved batch index; each source's offset keeps its position."""
    if saved.batch >= plan.phases.num_batches:
        raise ResumeError("batch", f"the state is at batch {saved.batch}, but the new stream has only "
                                   f"{plan.phases.num_batches} batches; extend its last phase")
    plain = Cursor(plan.phases)
    samples, tokens = plain.samples_before(saved.batch), plain.tokens_before(saved.batch)
    ot, os_ = np.zeros_like(tokens), np.zeros_like(samples)
    given = {**saved.retired, **saved.sources}
    for j, n in enumerate(plan.names):  # a source new to the run has given nothing yet: it starts at 0
        s, t = given.get(n, (0, 0))
        os_[j], ot[j] = s - samples[j], t - tokens[j]
    retired = {n: v for n, v in given.items() if n not in plan.names}
    return Cursor(plan.phases, offset_tokens=ot, offset_samples=os_, anchor=saved.batch), retired


def _check_micro(saved: SavedState, plan: Plan, placement: Placement) -> None:
    """A mid-step state (micro > 0) resumes only where micro-batch `micro` names the same rows."""
    micro = saved.micro
    if not micro:
        return
    m = placement.micro_batch_size
    if not m:
        raise ResumeError("micro", "the state is mid-step but this loader has no micro_batch_size")
    if saved.world_size != placement.world_size or saved.micro_batch_size != m:
        raise ResumeError("micro", f"the state was taken inside a step (micro-batch {micro}) with world_size "
                                   f"{saved.world_size} and micro_batch_size {saved.micro_batch_size}; a mid-step "
                                   f"state resumes only on the same (now {placement.world_size} and {m}) — "
                                   "checkpoint at a step boundary to change them")
    if saved.batch >= plan.end:
        raise ResumeError("micro", f"{micro} is set but batch {saved.batch} is the end of the stream")
    num = plan.batch_size(saved.batch) // placement.world_size // m
    if micro >= num:
        raise ResumeError("micro", f"micro-batch {micro} of batch {saved.batch}, which has {num} per rank here")
