"""How a source is cut into rows: fixed windows over its token stream, or whole documents packed.

The strategy is part of what a stream is (a recipe's phase names it; the state's definition records it);
the packing planner itself is the read engine's (`shardkit/engine/packing.py`).
"""

from __future__ import annotations

import enum

from ..errors import ConfigError

__all__ = ["PackingStrategy"]


class PackingStrategy(enum.Enum):
    """How rows are cut from the data: fixed windows over the token stream, or packed whole documents."""

    WINDOW = "window"
    FIRST_FIT = "first_fit"
    BEST_FIT = "best_fit"

    @classmethod
    def parse(cls, value: object) -> PackingStrategy:
        if isinstance(value, cls):
            return value
        names = ", ".join(repr(s.value) for s in cls)
        if not isinstance(value, str):
            raise ConfigError(f"packing must be one of {names}, got {value!r}")
        try:
            return cls(value.replace("-", "_"))
        except ValueError:
            raise ConfigError(f"packing: unknown strategy {value!r}; the strategies are {names}") from None
