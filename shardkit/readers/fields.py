"""Dotted-path field lookup ("meta.body" -> obj["meta"]["body"]) and the per-record messages it produces.

Dots always separate levels; a key that itself contains a dot cannot be addressed. The same wording is used
by every reader so a report groups identical problems together.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FieldPath", "MISSING", "type_name", "stringify_id"]


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
            value = value.get(part, MISSING)
            if value is MISSING:
                break
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
