"""Dotted-path field lookup ("meta.body" -> obj["meta"]["body"]) and the per-record messages it produces.

Dots always separate levels; a key that itself contains a dot cannot be addressed. The same wording is used
by every reader so a report groups identical problems together.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FieldPath", "MISSING", "did_you_mean", "type_name", "stringify_id"]

# names datasets commonly give their text (The Pile, RedPajama, C4, Dolma, FineWeb, StarCoder, ...)
_TEXT_NAMES = ("text", "content", "raw_content", "body", "document", "article", "story", "passage", "code",
               "markdown", "html", "contents", "sentence", "prompt")


def did_you_mean(wanted: str, names: Sequence[str], values: Mapping[str, Any] | None = None) -> str | None:
    """The name the user most likely meant: a close spelling, a usual text field's name, or (given the
    values) the field holding the longest string."""
    close = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.6)
    if close:
        return close[0]
    for common in _TEXT_NAMES:
        if common in names and common != wanted:
            return common
    if values:
        strings = [(len(v), k) for k, v in values.items() if type(v) is str]
        if strings:
            return max(strings)[1]
    return None


def fields_hint(wanted: str, names: Sequence[str], values: Mapping[str, Any] | None = None,
                flag: str = "--text-field ") -> str:
    """'fields a, b; did you mean --text-field b?' (names cut to the first 12)."""
    shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
    guess = did_you_mean(wanted, names, values)
    return (f"fields {shown}" if shown else "no fields") + (f"; did you mean {flag}{guess}?" if guess else "")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "bool", int: "int", float: "float",
               type(None): "null"}


def type_name(value: object) -> str:
    """The JSON-flavoured name of a value's type, for messages ("got int", "got object")."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


class FieldPath:
    """A parsed dotted path; `get` returns the value or MISSING, `why_missing` says which level failed."""

    __slots__ = ("path", "parts")

    def __init__(self, path: str) -> None:
        self.path = path
        self.parts = tuple(path.split("."))

    def get(self, obj: dict[str, Any]) -> Any:
        value: Any = obj
        for part in self.parts:
            if type(value) is not dict:
                return MISSING
            value = value.get(part, MISSING)
            if value is MISSING:
                return MISSING
        return value

    def why_missing(self, obj: dict[str, Any]) -> str:
        """The message for a record where `get` returned MISSING."""
        value: Any = obj
        for depth, part in enumerate(self.parts):
            if type(value) is not dict:
                parent = ".".join(self.parts[:depth])
                return f"missing field {self.path!r} ({parent!r} is not an object, got {type_name(value)})"
            found = value.get(part, MISSING)
            if found is MISSING:
                names = [str(k) for k in value]
                prefix = ".".join(self.parts[:depth])
                hint = fields_hint(part, names, value, flag="--text-field " + (prefix + "." if prefix else ""))
                return f"missing field {self.path!r} ({repr(prefix) if prefix else 'the record'} has {hint})"
            value = found
        return f"missing field {self.path!r}"

    def text_error(self, obj: dict[str, Any], value: Any) -> str:
        """The message for a text value that is missing, null or not a string."""
        if value is MISSING:
            return self.why_missing(obj)
        if value is None:
            return f"field {self.path!r} is null"
        return f"field {self.path!r} is not a string (got {type_name(value)})"


def stringify_id(value: Any) -> str | None:
    """An id value as text: strings as they are, other JSON values in compact JSON; missing or null -> None.

    Ids label documents (the optional .ids.jsonl sidecar); a record without one is still a document.
    """
    if value is MISSING or value is None:
        return None
    if type(value) is str:
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
