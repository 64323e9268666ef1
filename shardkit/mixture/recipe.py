"""A mixture recipe — sources, phases, weights — read from YAML, TOML, JSON or a dict, and validated.

Every problem is a `ConfigError` that starts with the key path (`phases[1].mix.maths: ...`), says what was
found and how to fix it. Paths are not opened here: they may be remote, and the loader checks them.

```yaml
seed: 1234
seq_len: 4096
phases:
  - {name: pretrain, tokens: 10T, mix: {web: 0.7, code: 0.3},
     batch: {ramp: {start: 512, increment: 512, over_samples: 50M, final: 4096}}}
  - {name: anneal, tokens: 500B, batch: 8192, seq_len: 8192, mix: {web: 0.5, code: 0.5}}
sources:
  web: {path: s3://bucket/web/}
  code: {path: shards/code/, epochs: 2, shuffle: full}
```
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.skips import parse_skips
from ..errors import ConfigError, InputError, MissingDependencyError, brief
from ..order import BatchSchedule, Constant, PackingStrategy, Piecewise, Ramp, ShuffleMode
from ..units import parse_count
from .phases import Phase, PhasePlan
from .weights import as_weight, normalize_weights

__all__ = ["FORMAT_VERSION", "MixtureWarning", "Recipe", "RecipeWarning", "SourceSpec", "WeightsBy", "load_recipe"]

FORMAT_VERSION = 1
_TOP = ("version", "order", "seed", "seq_len", "phases", "sources", "shuffle", "weights_by", "packing", "skip")
_PHASE = ("name", "tokens", "batch", "seq_len", "mix", "packing")
_SOURCE = ("path", "epochs", "shuffle")
_RAMP = ("start", "increment", "over_samples", "ramp_samples", "final")
_PIECEWISE = ("pieces", "final", "unit", "seq_len")


class RecipeWarning(UserWarning):
    """A recipe was accepted after a silent-looking fix (weights normalized to sum to 1)."""


class MixtureWarning(RecipeWarning):
    """The run differs from what the recipe asks for in full: a capped source ends it early, or the sources
    were packed with different tokenizers. (A RecipeWarning, so one filter covers both.)"""


class WeightsBy(Enum):
    """What mix weights are shares of. Inside a phase every sample is `seq_len` tokens, so both agree."""

    TOKENS = "tokens"
    SAMPLES = "samples"


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """One dataset. `epochs=None` ("auto") repeats it with a new permutation per epoch as often as needed;
    an int caps the epochs, and running out ends the run with a clear error (the loader enforces both)."""

    name: str
    path: str
    epochs: int | None = None
    shuffle: ShuffleMode | None = None  # None: the recipe's mode


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A validated, normalized recipe: phases in order, sources by name, exact weights summing to 1."""

    seed: int
    phases: tuple[Phase, ...]
    sources: tuple[SourceSpec, ...]
    shuffle: ShuffleMode = ShuffleMode.BLOCK
    weights_by: WeightsBy = WeightsBy.TOKENS
    # global batch ranges never delivered (engine/skips.py); operational, so not part of to_json() or the
    # fingerprint: adding a skip to a running job's recipe is an exact resume
    skip: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ConfigError(f"sources: duplicate names in {names}")
        if not self.phases:
            raise ConfigError("phases: empty; a recipe needs at least one phase")
        for i, p in enumerate(self.phases):
            missing = sorted(set(p.weights) - set(names))
            if missing:
                raise ConfigError(f"phases[{i}].mix.{missing[0]}: unknown source {missing[0]!r} "
                                  f"(sources: {', '.join(sorted(names))})")

    def source(self, name: str) -> SourceSpec:
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(f"no source named {name!r} (sources: {', '.join(s.name for s in self.sources)})")

    def shuffle_of(self, name: str) -> ShuffleMode:
        """The source's own shuffle mode, or the recipe's."""
        return self.source(name).shuffle or self.shuffle

    @cached_property
    def plan(self) -> PhasePlan:
        """Phase boundaries, interleaves and carried per-source counters (computed once)."""
        return PhasePlan(self.phases)

    def to_json(self) -> dict[str, Any]:
        """The normalized recipe as JSON-able data; `load_recipe(r.to_json()) == r`."""
        return {
            "version": FORMAT_VERSION,
            "seed": self.seed,
            "shuffle": self.shuffle.value,
            "weights_by": self.weights_by.value,
            "phases": [{"name": p.name, "tokens": p.tokens, "seq_len": p.seq_len, "batch": p.batch.to_json(),
                        "mix": {name: _weight_json(w) for name, w in p.mix},
                        # a window phase keeps the normalized form (and fingerprint) it always had
                        **({"packing": p.packing.value} if p.packing is not PackingStrategy.WINDOW else {})}
                       for p in self.phases],
            "sources": {s.name: {"path": s.path, "epochs": "auto" if s.epochs is None else s.epochs,
                                 **({"shuffle": s.shuffle.value} if s.shuffle else {})} for s in self.sources},
        }

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the normalized recipe: equal for equivalent files."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def validate_world_size(self, world_size: int, *, micro_batch_size: int | None = None) -> None:
        """Refuse a world size (and micro-batch size) that does not divide every batch a phase will run."""
        w = _positive(world_size, "world_size")
        m = None if micro_batch_size is None else _positive(micro_batch_size, "micro_batch_size")
        for i, (p, bounds) in enumerate(zip(self.phases, self.plan.bounds)):
            used = [(b, size) for b, _, size in p.batch.stages if b < bounds.num_batches]
            sizes = [size for _, size in used]
            for b, size in used:
                if size % w:
                    g = math.gcd(*sizes)
                    raise ConfigError(f"phases[{i}] ({p.name}): batch size {size} (from batch {b} of the phase) "
                                      f"is not divisible by world size {w}; use a world size dividing {g}, "
                                      f"or batch sizes that are multiples of {w}")
                if m is not None and (size // w) % m:
                    raise ConfigError(f"phases[{i}] ({p.name}): batch size {size} gives {size // w} samples per "
                                      f"rank (world size {w}), not a multiple of micro_batch_size {m}")


def load_recipe(source: str | os.PathLike[str] | Mapping[str, Any] | Recipe, *, strict: bool = False) -> Recipe:
    """A Recipe from a `.yaml`/`.yml` (needs PyYAML), `.toml` or `.json` file, or from a dict.

    Weights that do not sum to 1 are normalized with a `RecipeWarning` naming the phase; `strict=True`
    refuses them instead.
    """
    if isinstance(source, Recipe):
        return source
    if isinstance(source, (str, os.PathLike)):
        return _recipe(_read(Path(source)), strict=strict, origin=str(source))
    return _recipe(source, strict=strict)


# -- reading files ----------------------------------------------------------------------------------------------


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ConfigError(f"{path}: unknown recipe format {suffix or '(no suffix)'!r}; "
                          "use a .yaml, .yml, .toml or .json file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read the recipe: {e.strerror or e}") from None
    if suffix == ".json":
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:  # (also: nested too deeply, an int of > 4300 digits)
            raise ConfigError(f"{path}: not valid JSON: {str(e)[:200]}") from None
    if suffix == ".toml":
        toml = _toml()
        try:
            return toml.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # TOMLDecodeError, bad UTF-8, deep nesting, huge ints
            raise ConfigError(f"{path}: not valid TOML: {str(e)[:200]}") from None
    yaml = _yaml()
    # libyaml's loader when PyYAML has it: the pure-Python scanner is quadratic in the nesting depth
    # (a 2 KiB file of brackets takes seconds), libyaml refuses nesting past 1,000 levels at once.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(data, Loader=loader)  # (a safe loader either way)
    except (ValueError, RecursionError) as e:  # PyYAML lets these through: huge ints, deep nesting
        raise ConfigError(f"{path}: not valid YAML: {str(e)[:200]}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from None


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise MissingDependencyError("pyyaml", purpose="reading YAML recipes (or use .toml / .json)") from None
    return yaml


def _toml() -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise MissingDependencyError("tomli", purpose="reading TOML recipes on Python 3.10") from None
    return tomllib


# -- validation -------------------------------------------------------------------------------------------------


def _recipe(data: Any, *, strict: bool, origin: str | None = None) -> Recipe:
    order = data.get("order", "shardkit") if isinstance(data, Mapping) else "shardkit"
    if order != "shardkit":  # (before the keys: a Megatron recipe has keys of its own)
        if order == "megatron":
            raise ConfigError("order: megatron makes the recipe one Megatron blend, streamed by `Loader`: open it "
                              "with Loader.from_recipe(...) (or `shardkit stream --recipe`), not MixtureLoader")
        raise ConfigError(f"order: expected shardkit or megatron, got {brief(order)}")
    top = _mapping(data, origin or "recipe", _TOP, required=("phases", "sources"), root=True)
    if "version" in top and top["version"] != FORMAT_VERSION:
        raise ConfigError(f"version: recipe format {brief(top['version'])} is not supported (this shardkit reads "
                          f"version {FORMAT_VERSION}); upgrade shardkit")
    seed = _int(top.get("seed", 0), "seed", minimum=0)
    seq_len = _positive(top["seq_len"], "seq_len") if top.get("seq_len") is not None else None
    shuffle = _shuffle(top.get("shuffle", "block"), "shuffle")
    weights_by = _enum(WeightsBy, top.get("weights_by", "tokens"), "weights_by")
    sources = _sources(top["sources"])
    packing = _packing(top.get("packing", "window"), "packing")
    phases = _phases(top["phases"], seq_len, {s.name for s in sources}, strict, packing)
    skip = parse_skips(top.get("skip"), "skip")
    return Recipe(seed=seed, phases=phases, sources=sources, shuffle=shuffle, weights_by=weights_by, skip=skip)


def _sources(value: Any) -> tuple[SourceSpec, ...]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"sources: expected a mapping of source name to {{path: ...}}, got {_kind(value)}")
    if not value:
        raise ConfigError("sources: empty; define at least one source with a path")
    out = []
    for name in sorted(value, key=str):
        where = f"sources.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: a source name must be a non-empty string, got {name!r}")
        body = _mapping(value[name], where, _SOURCE, required=("path",))
        path = body["path"]
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{where}.path: expected a path or URL string, got {brief(path)}")
        epochs = body.get("epochs", "auto")
        epochs = None if epochs == "auto" else _positive(epochs, f"{where}.epochs", hint="or 'auto'")
        mode = _shuffle(body["shuffle"], f"{where}.shuffle") if "shuffle" in body else None
        out.append(SourceSpec(name=name, path=path, epochs=epochs, shuffle=mode))
    return tuple(out)


def _packing(value: Any, where: str) -> PackingStrategy:
    try:
        return PackingStrategy.parse(value)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _phases(value: Any, seq_len: int | None, sources: set[str], strict: bool,
            packing: PackingStrategy = PackingStrategy.WINDOW) -> tuple[Phase, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"phases: expected a list of phases, got {_kind(value)}")
    if not value:
        raise ConfigError("phases: empty; a recipe needs at least one phase")
    out: list[Phase] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(value):
        where = f"phases[{i}]"
        body = _mapping(raw, where, _PHASE, required=("name", "tokens", "batch", "mix"))
        name = body["name"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name: expected a non-empty string, got {brief(name)}")
        if name in names:
            raise ConfigError(f"{where}.name: duplicate phase name {name!r} (also phases[{names[name]}]); "
                              "phase names must be unique")
        names[name] = i
        tokens = _count(body["tokens"], f"{where}.tokens")
        if body.get("seq_len") is not None:
            length = _positive(body["seq_len"], f"{where}.seq_len")
        elif seq_len is not None:
            length = seq_len
        else:
            raise ConfigError(f"{where}.seq_len: missing; set seq_len at the top level or in the phase")
        batch = _schedule(body["batch"], f"{where}.batch", length)
        mix = _mix(body["mix"], f"{where}.mix", name, sources, strict)
        try:
            out.append(Phase(name=name, tokens=tokens, seq_len=length, batch=batch, mix=mix,
                             packing=_packing(body["packing"], f"{where}.packing") if "packing" in body else packing))
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return tuple(out)


def _mix(value: Any, where: str, phase: str, sources: set[str], strict: bool) -> dict[str, Fraction]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of source name to weight, got {_kind(value)}")
    if not value:
        raise ConfigError(f"{where}: empty; give at least one source a weight")
    out = {}
    for name, w in value.items():
        if name not in sources:
            close = difflib.get_close_matches(str(name), sorted(sources), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; add it under sources or fix the name"
            raise ConfigError(f"{where}.{name}: unknown source {name!r} (sources: {', '.join(sorted(sources))})"
                              f"{hint}")
        try:
            out[name] = as_weight(w, "weight")
        except ConfigError as e:
            raise ConfigError(f"{where}.{name}: {e}") from None
    try:
        normalize_weights(out.values(), list(out))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    total = sum(out.values(), Fraction(0))
    if total != 1:
        msg = f"{where} (phase {phase!r}): weights sum to {_weight_json(total)}, not 1"
        if strict:
            raise ConfigError(f"{msg}; make them sum to 1, or load without strict=True to normalize them")
        normalized = ", ".join(f"{n}: {float(w / total):.6g}" for n, w in sorted(out.items()))
        warnings.warn(f"{msg}; normalized to {{{normalized}}}", RecipeWarning, stacklevel=5)
    return out


def _schedule(value: Any, where: str, seq_len: int) -> BatchSchedule:
    if isinstance(value, BatchSchedule):
        return value
    if _is_int(value) or isinstance(value, str):
        return _build(lambda: Constant(_positive(value, where)), where)
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ConfigError(f"{where}: expected a batch size (8192) or one of {{constant: N}}, "
                          f"{{ramp: {{start, increment, over_samples, final}}}}, "
                          f"{{piecewise: {{pieces: [[until, size], ...], final, unit}}}}; got {brief(value)}")
    ((kind, body),) = value.items()
    at = f"{where}.{kind}"
    if kind == "constant":
        if isinstance(body, Mapping):
            body = _mapping(body, at, ("size",), required=("size",))["size"]
        return _build(lambda: Constant(_positive(body, at)), at)
    if kind == "ramp":
        b = _mapping(body, at, _RAMP, required=("start", "increment", "final"))
        spans = [k for k in ("over_samples", "ramp_samples") if k in b]
        if len(spans) != 1:
            raise ConfigError(f"{at}: give the ramp length as over_samples (or its alias ramp_samples), once")
        return _build(lambda: Ramp(start=_positive(b["start"], f"{at}.start"),
                                   increment=_positive(b["increment"], f"{at}.increment"),
                                   ramp_samples=_count(b[spans[0]], f"{at}.{spans[0]}"),
                                   final=_positive(b["final"], f"{at}.final")), at)
    if kind == "piecewise":
        b = _mapping(body, at, _PIECEWISE, required=("pieces", "final"))
        pieces = b["pieces"]
        if not isinstance(pieces, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pieces):
            raise ConfigError(f"{at}.pieces: expected a list of [until, batch size] pairs, got {brief(pieces)}")
        unit = b.get("unit", "steps")
        length = b.get("seq_len", seq_len if unit == "tokens" else None)
        return _build(lambda: Piecewise(
            pieces=tuple((_count(u, f"{at}.pieces[{j}][0]"), _positive(s, f"{at}.pieces[{j}][1]"))
                         for j, (u, s) in enumerate(pieces)),
            final=_positive(b["final"], f"{at}.final"), unit=unit, seq_len=length), at)
    close = difflib.get_close_matches(str(kind), ["constant", "ramp", "piecewise"], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{at}: unknown batch schedule {kind!r}{hint}; expected constant, ramp or piecewise")


def _build(make: Any, where: str) -> BatchSchedule:
    try:
        return make()
    except ConfigError as e:
        text = str(e)
        kind = where.rsplit(".", 1)[-1]
        text = text[len(kind) + 2:] if text.startswith(f"{kind}: ") else text  # "ramp: final (4) …"
        raise ConfigError(text if text.startswith(where) else f"{where}: {text}") from None


# -- small checks -----------------------------------------------------------------------------------------------


def _mapping(value: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = (),
             root: bool = False) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping with keys {', '.join(allowed)}, got {_kind(value)}")
    prefix = "" if root else f"{where}."
    for key in value:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{prefix}{key}: unknown key{hint}; allowed keys: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in value:
            raise ConfigError(f"{prefix}{key}: missing required key")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


_MAX_INT = (1 << 62) - 1  # counts and sizes past this overflow the int64 arithmetic of the phase plan


def _int(value: Any, where: str, *, minimum: int, hint: str = "", maximum: int = _MAX_INT) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not _is_int(value):
        raise ConfigError(f"{where}: expected an integer{' ' + hint if hint else ''}, got {brief(value)}")
    if value < minimum:
        raise ConfigError(f"{where}: must be ≥ {minimum}, got {brief(int(value))}")
    if value > maximum:
        raise ConfigError(f"{where}: {brief(value)} is too large (at most {maximum:,})")
    return int(value)


def _positive(value: Any, where: str, hint: str = "") -> int:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value) < 100:
        value = int(value)
    return _int(value, where, minimum=1, hint=hint)


def _count(value: Any, where: str) -> int:
    """A positive count: an int, an integral float, or a string like 10T, 500B (billion), 50M, 1e9."""
    if isinstance(value, str):
        try:
            value = parse_count(value)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return _int(value, where, minimum=1, hint="or a count such as 500B, 10T")


def _shuffle(value: Any, where: str) -> ShuffleMode:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected none, block or full, got {value!r} "
                          "(YAML reads off/no/false as a boolean; write 'none')")
    if value is not None and not isinstance(value, (str, ShuffleMode)):  # (parse would str() a whole mapping)
        raise ConfigError(f"{where}: expected none, block or full, got {brief(value)}")
    try:
        return ShuffleMode.parse(value)
    except (ConfigError, ValueError, AttributeError):
        raise ConfigError(f"{where}: expected none, block or full, got {brief(value)}") from None


def _enum(cls: Any, value: Any, where: str) -> Any:
    # only strings reach the Enum: its own ValueError message repr()s the value, which for a shared-list
    # bomb expands 10**9 leaves (13.9 GB of RSS before this check)
    if isinstance(value, cls):
        return value
    try:
        if not isinstance(value, str):
            raise ValueError
        return cls(value.strip().lower())
    except ValueError:
        raise ConfigError(f"{where}: expected one of {', '.join(m.value for m in cls)}, got {brief(value)}") from None


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {brief(value)}"[:80]


def _weight_json(w: Fraction) -> int | float | str:
    """An int or a float when it reads back exactly (1, 0.7), else the fraction as a string ("1/3")."""
    if w.denominator == 1:
        return w.numerator
    f = float(w)
    return f if Fraction(repr(f)) == w else f"{w.numerator}/{w.denominator}"
