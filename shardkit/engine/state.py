"""The loaders' resumable state: one small, versioned, JSON-able dict for both facades, every field checked.

```json
{"format": "shardkit-loader-state", "version": 2,
 "stream": {"kind": "recipe", "fingerprint": "<sha256>", "definition": {...the normalized recipe...}},
 "datasets": {"code": "<fingerprint>", "web": "<fingerprint>"},
 "batch": 1234, "micro": 0, "samples": 9872, "phase": "pretrain",
 "sources": {"code": {"samples": 2961, "tokens": 12128256}, "web": {"samples": 6911, "tokens": 28307456}},
 "anchor": 0, "offsets": {}, "world_size": 8, "rank": 0, "micro_batch_size": null}
```
A single dataset is a stream of kind `"dataset"` with one source named `"data"`; its definition is the
stream config (`seq_len`, `seed`, `shuffle`, `schedule`, `budget_samples`). `sources` is each source's
position (all ranks together) before `batch`: checked on a plain resume, authoritative after a recipe
change (the new recipe continues every source from there, recorded as `offsets` from the `anchor` batch).

States written by earlier releases (version 1: `shardkit-loader-state` and `shardkit-mixture-state`) are
migrated on load (`parse_state`). Pickle never appears: the state is plain JSON types.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, ResumeError, brief
from .skips import parse_skips

__all__ = ["Overrides", "STATE_FORMAT", "STATE_VERSION", "SavedState", "definition_diff", "is_budget_path",
           "make_state", "parse_state", "stream_fingerprint"]

STATE_FORMAT = "shardkit-loader-state"
STATE_VERSION = 2
_V1_MIXTURE = "shardkit-mixture-state"
_MAX = 1 << 62
_KINDS = ("dataset", "recipe")
_HEX64 = re.compile(r"[0-9a-f]{64}")
SINGLE_SOURCE = "data"  # the name of a single dataset's one source


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """What `load_state_dict` may accept beyond an exact resume; each gives up something named in its doc.

    * `allow_budget_change` — the token/epoch budget differs (a Loader's `max_tokens`/`max_epochs`, a
      recipe's phase `tokens` or source `epochs`). Kept exact: every batch up to the saved one and after it
      is what a run with the new budget from the start delivers; refused if the change moves the saved
      batch into another phase or changes what came before it (use `allow_recipe_change` then). Given up:
      nothing but the end of the run.
    * `allow_recipe_change` — anything else about the stream differs (weights, phases, seq_len, seed,
      shuffle, batch schedule, sources added or removed, a single dataset resumed as a recipe). The new
      definition takes over at the saved batch index and every source continues its own order where it
      was (by tokens when seq_len changed). Given up: the batches are no longer those of either run alone,
      and a source whose order changed (seed, shuffle, seq_len) no longer sees each sample exactly once in
      the epoch it is in.
    * `allow_data_change` — a source's dataset fingerprint differs (re-packed, appended, repaired). Every
      source continues at the same positions of its new data. Given up: positions name other samples, so
      exactly-once within the current epoch holds only if the data kept its order and size.

    World size and batch size changes need no override (elastic resume at a step boundary).
    """

    allow_budget_change: bool = False
    allow_recipe_change: bool = False
    allow_data_change: bool = False

    def __post_init__(self) -> None:
        for name in ("allow_budget_change", "allow_recipe_change", "allow_data_change"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @classmethod
    def everything(cls) -> Overrides:
        return cls(allow_budget_change=True, allow_recipe_change=True, allow_data_change=True)

    def merged(self, **given: bool | None) -> Overrides:
        """These overrides with the non-None keyword values replacing them."""
        values = {k: getattr(self, k) for k in ("allow_budget_change", "allow_recipe_change", "allow_data_change")}
        values.update({k: v for k, v in given.items() if v is not None})
        return Overrides(**values)


@dataclass
class SavedState:
    """A validated state: positions as ints, per-source positions and offsets as {name: (samples, tokens)}."""

    kind: str
    fingerprint: str
    definition: dict[str, Any] | None  # None: migrated from a version-1 mixture state (fingerprint only)
    datasets: dict[str, str]
    batch: int
    micro: int
    samples: int
    phase: str | None
    sources: dict[str, tuple[int, int]]
    retired: dict[str, tuple[int, int]]
    anchor: int
    offsets: dict[str, tuple[int, int]]
    world_size: int
    rank: int
    micro_batch_size: int | None
    migrated_from: int | None = field(default=None)
    skips: tuple[tuple[int, int], ...] = ()  # global batch ranges never delivered (engine/skips.py)


def stream_fingerprint(kind: str, definition: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of (kind, definition); a recipe's equals `Recipe.fingerprint()`."""
    obj = definition if kind == "recipe" else {"kind": kind, "definition": definition}
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_state(*, kind: str, definition: dict[str, Any], datasets: dict[str, str], batch: int, micro: int,
               samples: int, phase: str | None, sources: dict[str, dict[str, Any]], anchor: int,
               offsets: dict[str, dict[str, int]], world_size: int, rank: int,
               micro_batch_size: int | None, skips: list[list[int]] | None = None) -> dict[str, Any]:
    state = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "stream": {"kind": kind, "fingerprint": stream_fingerprint(kind, definition), "definition": definition},
        "datasets": datasets,
        "batch": batch,
        "micro": micro,
        "samples": samples,
        "phase": phase,
        "sources": sources,
        "anchor": anchor,
        "offsets": offsets,
        "world_size": world_size,  # informational: any world size that divides the batches resumes
        "rank": rank,
        "micro_batch_size": micro_batch_size,
    }
    if skips:  # only when there are some: a state without skips is what it always was
        state["skips"] = skips
    return state


# -- checking ----------------------------------------------------------------------------------------------
def _index(value: Any, name: str, *, signed: bool = False, lo: int = 0) -> int:
    low = -_MAX if signed else lo
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < _MAX:
        kind = "an integer" if signed else ("a non-negative integer" if lo == 0 else f"an integer ≥ {lo}")
        raise ResumeError(name, f"must be {kind} below 2**62, got {brief(value)}")
    return value


def _name(key: Any) -> str:
    return key[:80] if isinstance(key, str) else brief(key)


def _pairs(obj: Any, name: str, *, signed: bool) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """({active source: (samples, tokens)}, {retired source: (samples, tokens)})."""
    if not isinstance(obj, dict):
        raise ResumeError(name, f"expected a mapping of source name to {{samples, tokens}}, got {brief(obj)}")
    active, retired = {}, {}
    for key, v in obj.items():
        at = f"{name}.{_name(key)}"
        if not isinstance(key, str) or not key:
            raise ResumeError(at, "a source name must be a non-empty string")
        if not isinstance(v, dict) or set(v) - {"samples", "tokens", "active"} or not {"samples", "tokens"} <= set(v):
            raise ResumeError(at, f"expected {{samples, tokens}}, got {brief(v)}")
        if "active" in v and v["active"] is not False:
            raise ResumeError(f"{at}.active", f"only false is written (a source of an earlier recipe), got "
                                              f"{brief(v['active'])}")
        pair = (_index(v["samples"], f"{at}.samples", signed=signed), _index(v["tokens"], f"{at}.tokens", signed=signed))
        (retired if v.get("active") is False else active)[key] = pair
    return active, retired


def _placement(state: dict[str, Any]) -> tuple[int, int, int | None]:
    world = _index(state.get("world_size", 1), "world_size", lo=1)
    rank = _index(state.get("rank", 0), "rank")
    if rank >= world:
        raise ResumeError("rank", f"{rank} is not below world_size {world}")
    m = state.get("micro_batch_size")
    if m is not None:
        m = _index(m, "micro_batch_size", lo=1)
    return world, rank, m


def _datasets(obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        raise ResumeError("datasets", f"expected a mapping of source name to dataset fingerprint, got {brief(obj)}")
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, str) or not v:
            raise ResumeError(f"datasets.{_name(k)}", f"expected a dataset fingerprint string, got {brief(v)}")
    return dict(obj)


def parse_state(state: Any) -> SavedState:
    """Check the shape, types and ranges of a state dict (not yet against a loader); migrates version 1."""
    if not isinstance(state, dict):
        raise ResumeError("state", f"expected a dict from a loader's state_dict(), got {type(state).__name__}")
    fmt, version = state.get("format"), state.get("version")
    if type(version) is not int:  # noqa: E721 - True == 1, but True is not a version
        raise ResumeError("version", f"expected an integer format version, got {brief(version)}")
    if fmt == STATE_FORMAT and version == 1:
        return _from_v1_loader(state)
    if fmt == _V1_MIXTURE and version == 1:
        return _from_v1_mixture(state)
    if fmt not in (STATE_FORMAT, _V1_MIXTURE):
        raise ResumeError("format", f"not a shardkit loader state (format {brief(fmt)})")
    if version != STATE_VERSION:
        raise ResumeError("version", f"state version {brief(version)} is not one this shardkit reads (1 or "
                                     f"{STATE_VERSION}); it was written by a newer shardkit")
    stream = state.get("stream")
    if not isinstance(stream, dict) or set(stream) != {"kind", "fingerprint", "definition"}:
        raise ResumeError("stream", f"expected {{kind, fingerprint, definition}}, got {brief(stream)}")
    kind, fp, definition = stream["kind"], stream["fingerprint"], stream["definition"]
    if kind not in _KINDS:
        raise ResumeError("stream.kind", f"expected one of {', '.join(_KINDS)}, got {brief(kind)}")
    if not isinstance(fp, str) or not _HEX64.fullmatch(fp):
        raise ResumeError("stream.fingerprint", f"expected a sha256 hex digest, got {brief(fp)}")
    if not isinstance(definition, dict):
        raise ResumeError("stream.definition", f"expected the stream's definition as a dict, got {brief(definition)}")
    _check_plain(definition, "stream.definition")
    if stream_fingerprint(kind, definition) != fp:
        raise ResumeError("stream.fingerprint", "does not match the stream definition stored beside it: the state "
                                                "was edited or is corrupt")
    batch, micro, samples, anchor = (_index(state.get(k), k) for k in ("batch", "micro", "samples", "anchor"))
    if anchor > batch:
        raise ResumeError("anchor", f"{anchor} is after the batch {batch} the state was taken at")
    phase = state.get("phase")
    if phase is not None and not isinstance(phase, str):
        raise ResumeError("phase", f"expected a phase name or null, got {brief(phase)}")
    sources, retired = _pairs(state.get("sources"), "sources", signed=False)
    offsets, stray = _pairs(state.get("offsets", {}), "offsets", signed=True)
    if stray:
        raise ResumeError(f"offsets.{next(iter(stray))}", "offsets carry no 'active' flag")
    world, rank, m = _placement(state)
    known = {"format", "version", "stream", "datasets", "batch", "micro", "samples", "phase", "sources", "anchor",
             "offsets", "world_size", "rank", "micro_batch_size", "skips"}
    extra = sorted(set(state) - known, key=str)
    if extra:
        raise ResumeError(_name(extra[0]), "is not a field of a shardkit loader state")
    try:
        skips = parse_skips(state.get("skips"), "skips")
    except ConfigError as e:
        raise ResumeError("skips", str(e)) from None
    return SavedState(kind=kind, fingerprint=fp, definition=definition, datasets=_datasets(state.get("datasets")),
                      batch=batch, micro=micro, samples=samples, phase=phase, sources=sources, retired=retired,
                      anchor=anchor, offsets=offsets, world_size=world, rank=rank, micro_batch_size=m, skips=skips)


_MAX_NODES, _MAX_DEPTH, _MAX_TEXT = 20_000, 32, 4096


def _check_text(value: str, name: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # "\ud800" is valid JSON, but no text a loader writes (nor can hash)
            raise ResumeError(name, f"a string with an unpaired surrogate ({brief(value)}): not text a loader "
                                    "writes; the state was edited or damaged") from None


def _check_plain(obj: Any, name: str) -> None:
    """A definition is small plain JSON (what a recipe or stream config is): bounded before it is hashed, so a
    crafted state cannot make the check itself recurse, allocate or convert without limit."""
    todo, nodes = [(obj, 0)], 0
    while todo:
        value, depth = todo.pop()
        nodes += 1
        if nodes > _MAX_NODES or depth > _MAX_DEPTH:
            raise ResumeError(name, f"more than {_MAX_NODES:,} values or {_MAX_DEPTH} levels: not a stream "
                                    "definition a loader writes")
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or len(k) > _MAX_TEXT:
                    raise ResumeError(name, f"keys must be short strings, got {brief(k)}")
                _check_text(k, name)
                todo.append((v, depth + 1))
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            if len(value) > _MAX_TEXT:
                raise ResumeError(name, f"a string of {len(value):,} characters: not a stream definition")
            _check_text(value, name)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not -(1 << 64) < value < 1 << 64:
                raise ResumeError(name, "an integer beyond 64 bits: not a stream definition")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise ResumeError(name, f"a non-finite number ({value!r}): not a stream definition")
        else:
            raise ResumeError(name, f"a {type(value).__name__}: a state holds JSON types only")


def _from_v1_loader(state: dict[str, Any]) -> SavedState:
    """Version 1 of the single-dataset state: {fingerprint, config, batch, micro, samples, world_size, rank}."""
    batch, micro, samples = (_index(state.get(k), k) for k in ("batch", "micro", "samples"))
    fp = state.get("fingerprint")
    if not isinstance(fp, str) or not fp:
        raise ResumeError("fingerprint", f"expected the dataset fingerprint, got {brief(fp)}")
    config = state.get("config")
    if not isinstance(config, dict):
        raise ResumeError("config", f"missing (expected the loader's stream config as a dict, got {brief(config)})")
    _check_plain(config, "config")
    seq_len = config.get("seq_len")
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or not 1 <= seq_len < 1 << 31:
        raise ResumeError("config.seq_len", f"expected a positive integer below 2**31, got {brief(seq_len)}")
    if samples * seq_len >= _MAX:
        raise ResumeError("samples", f"{samples} samples of {seq_len} tokens are beyond 2**62 tokens")
    world, rank, m = _placement(state)
    return SavedState(kind="dataset", fingerprint=stream_fingerprint("dataset", config), definition=dict(config),
                      datasets={SINGLE_SOURCE: fp}, batch=batch, micro=micro, samples=samples, phase=None,
                      sources={SINGLE_SOURCE: (samples, samples * seq_len)}, retired={}, anchor=0, offsets={},
                      world_size=world, rank=rank, micro_batch_size=m, migrated_from=1)


def _from_v1_mixture(state: dict[str, Any]) -> SavedState:
    """Version 1 of the mixture state: the recipe's fingerprint only (no definition)."""
    recipe = state.get("recipe")
    if not isinstance(recipe, str) or not _HEX64.fullmatch(recipe):
        raise ResumeError("recipe", f"expected the recipe fingerprint, got {brief(recipe)}")
    batch, micro, samples, anchor = (_index(state.get(k), k) for k in ("batch", "micro", "samples", "anchor"))
    if anchor > batch:
        raise ResumeError("anchor", f"{anchor} is after the batch {batch} the state was taken at")
    sources, retired = _pairs(state.get("sources"), "sources", signed=False)
    offsets, _ = _pairs(state.get("offsets", {}), "offsets", signed=True)
    phase = state.get("phase")
    world, rank, m = _placement(state)
    return SavedState(kind="recipe", fingerprint=recipe, definition=None, datasets=_datasets(state.get("datasets")),
                      batch=batch, micro=micro, samples=samples, phase=phase if isinstance(phase, str) else None,
                      sources=sources, retired=retired, anchor=anchor, offsets=offsets, world_size=world,
                      rank=rank, micro_batch_size=m, migrated_from=1)


# -- comparing definitions -----------------------------------------------------------------------------------
def definition_diff(saved: Any, mine: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, saved value, current value) of every leaf where two definitions differ, in a stable order."""
    if isinstance(saved, dict) and isinstance(mine, dict):
        out = []
        for key in sorted(set(saved) | set(mine), key=str):
            sub = f"{path}.{_name(key)}" if path else _name(key)
            if key not in saved or key not in mine:
                out.append((sub, saved.get(key), mine.get(key)))
            else:
                out += definition_diff(saved[key], mine[key], sub)
        return out
    if isinstance(saved, list) and isinstance(mine, list) and len(saved) == len(mine):
        out = []
        for i, (a, b) in enumerate(zip(saved, mine)):
            out += definition_diff(a, b, f"{path}[{i}]")
        return out
    return [] if saved == mine else [(path, saved, mine)]


_BUDGET = (re.compile(r"budget_samples"), re.compile(r"phases\[\d+\]\.tokens"), re.compile(r"sources\.[^.]+\.epochs"))


def is_budget_path(path: str) -> bool:
    """Whether a definition path is a budget: a single dataset's budget, a phase's tokens, a source's epochs."""
    return any(p.fullmatch(path) for p in _BUDGET)
