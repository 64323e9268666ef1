"""Hypothesis over the fuzz targets: mutated real files yield a result or a ShardkitError, quickly and small.

Two kinds of structured mutation, both starting from the committed seeds (fuzz/corpus/<target>/, real
files shardkit wrote):

* bytes: flips, overwrites, truncations, extensions, insertions, deletions and integer splices;
* JSON trees (manifest, dataset, sidecar, states, recipes, JSONL): a value at a random path replaced by
  a hostile one (wrong type, huge or negative number, NaN, huge string, nesting 900 or 100,000 deep,
  path traversal), keys dropped or added, values swapped.

Each input must come back within `BUDGET` seconds with at most `MAX_PEAK` bytes allocated (tracemalloc
sees Python and NumPy allocations), which is how a hang or a huge allocation shows up here.
"""

from __future__ import annotations

import copy
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz.targets import TARGETS, run_one  # noqa: E402

CORPUS = ROOT / "fuzz" / "corpus"
BUDGET = 10.0  # seconds per input
MAX_PEAK = 128 << 20  # bytes allocated at once by one input
SETTINGS = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

JSON_TARGETS = ("manifest", "dataset", "checksums", "loader_state", "mixture_state", "recipe_json",
                "recipe_yaml", "reader_jsonl")
_DEEP = "__hostile_deep__"  # placeholders: nesting too deep to build as objects and serialise here
_NEST = "__hostile_nest__"
HOSTILE: list[Any] = [None, True, False, -1, 0, 1, 2**31, 2**62, 2**63, 2**64 + 1, 10**30, -10**30, 10**400,
                      0.5, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, "", "x" * 100_000, "0",
                      "1e400", "10T", "../../etc/passwd", "/etc/passwd", "a\x00b", "a\\b", "\u202eevil",
                      "ＡＢＣ", "\ud800", [], {}, [1, [2, [3]]], {"a": {"b": None}}, _DEEP, _NEST]

# keys a parser reads only when present (so seeds rarely have them), and junk keys
OPTIONAL_KEYS = ("compression", "codec", "level", "frame_size", "file_bytes", "active", "offsets", "anchor",
                 "micro", "shuffle", "epochs", "seq_len", "weights_by", "version", "ramp", "piecewise",
                 "megatron_documents", "extra", "", "x" * 300, "\x00")


def _hostile(draw: st.DrawFn) -> Any:
    return copy.deepcopy(draw(st.sampled_from(HOSTILE)))  # a copy: later mutations must not edit HOSTILE


def _seeds(target: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((CORPUS / target).iterdir())]


def _check(target: str, data: bytes) -> None:
    tracemalloc.reset_peak()
    run_one(TARGETS[target], data, budget=BUDGET)  # raises on anything but a result or a ShardkitError
    peak = tracemalloc.get_traced_memory()[1]
    assert peak < MAX_PEAK, f"{target}: one input of {len(data)} bytes allocated {peak:,} bytes at once"


@pytest.fixture(autouse=True, scope="module")
def _traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


# -- byte mutations ---------------------------------------------------------------------------------------------


@st.composite
def mutated_bytes(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(("flip", "set", "truncate", "extend", "insert", "delete", "int")))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from((0, 0xFF, 0x7F, 0x80, ord("\n"), ord("["), ord('"'), ord("9"))))
        elif op == "truncate":
            del data[at:]
        elif op == "extend":
            data += draw(st.binary(max_size=64)) * draw(st.integers(1, 64))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=32))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 64))]
        elif op == "int":  # a little-endian integer at any offset: counts and sizes in binary headers
            width = draw(st.sampled_from((1, 2, 4, 8)))
            value = draw(st.sampled_from((0, 1, 2**(8 * width) - 1, 2**(8 * width - 1), 2**(8 * width - 1) - 1)))
            data[at:at + width] = value.to_bytes(width, "little")
    return bytes(data)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_mutated_bytes_never_crash(target):
    @SETTINGS
    @given(mutated_bytes(_seeds(target)))
    def run(data: bytes) -> None:
        _check(target, data)

    run()


# -- JSON tree mutations ----------------------------------------------------------------------------------------


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def _dumps(doc: Any) -> str:
    text = json.dumps(doc)  # NaN and Infinity stay (json.loads reads them back)
    text = text.replace(json.dumps(_DEEP), "[" * 100_000 + "]" * 100_000)
    return text.replace(json.dumps(_NEST), "[" * 900 + "]" * 900)


@st.composite
def mutated_json(draw: st.DrawFn, docs: list[Any]) -> str:
    doc = json.loads(json.dumps(draw(st.sampled_from(docs))))  # a private copy
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(("replace", "replace", "drop", "add", "swap")))
        parent = _get(doc, path[:-1]) if path else None
        if op == "replace" or not path:
            doc = _set(doc, path, _hostile(draw))
        elif op == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == "drop" and isinstance(parent, list):
            parent.pop(path[-1])
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(OPTIONAL_KEYS))] = _hostile(draw)
        elif op == "add" and isinstance(parent, list):
            parent.append(_hostile(draw))
        elif op == "swap":
            other = draw(st.sampled_from(paths))
            value = _get(doc, other)
            if path[:len(other)] != other and other[:len(path)] != path:  # neither inside the other
                doc = _set(doc, path, json.loads(json.dumps(value)))
    return _dumps(doc)


def _json_docs(target: str) -> list[Any]:
    if target == "recipe_yaml":  # the JSON recipe seeds: YAML reads JSON text
        return [json.loads(s) for s in _seeds("recipe_json")]
    if target == "reader_jsonl":
        return [json.loads(line) for s in _seeds(target) for line in s.splitlines() if line.startswith(b'{"text"')
                and _loads(line) is not None]
    return [json.loads(s) for s in _seeds(target) if _loads(s) is not None]


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


@pytest.mark.parametrize("target", JSON_TARGETS)
def test_mutated_json_never_crashes(target):
    docs = _json_docs(target)
    assert docs, f"no JSON seeds for {target}"

    @SETTINGS
    @given(st.lists(mutated_json(docs), min_size=1, max_size=3 if target == "reader_jsonl" else 1))
    def run(texts: list[str]) -> None:
        _check(target, ("\n".join(texts) + "\n").encode())

    run()
