"""Shared click option types and decorators."""

from __future__ import annotations

import click

from shardkit.errors import ConfigError
from shardkit.units import parse_bytes

__all__ = ["ByteSize", "json_option"]


class ByteSize(click.ParamType):
    """A size like 16MiB or 4096 (usage error, exit 2, if unreadable)."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(value)
        except ConfigError as e:
            self.fail(str(e), param, ctx)


json_option = click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON report.")
