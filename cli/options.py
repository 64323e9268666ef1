"""Shared click option types and decorators."""

from __future__ import annotations

import json
from typing import Any

import click

from shardkit.errors import ConfigError
from shardkit.units import parse_bytes

__all__ = ["ByteSize", "json_option", "parse_storage_options", "storage_option_flag"]


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

# values of these keys stay strings even when they look like numbers (a secret of digits is still a secret)
_STRING_KEYS = frozenset({"key", "secret", "token", "password", "username", "profile", "endpoint_url",
                          "region_name", "region", "project", "account_name", "account_key", "sas_token"})


def parse_storage_options(items: tuple[str, ...] | list[str]) -> dict[str, Any] | None:
    """`KEY=VALUE` strings -> an fsspec storage_options dict; dotted keys nest, JSON values are decoded.

    `client_kwargs.endpoint_url=http://host:9000` gives {"client_kwargs": {"endpoint_url": ...}};
    `anon=true` a boolean, `config_kwargs={"retries": {"max_attempts": 10}}` a dict. None when empty.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (e.g. client_kwargs.endpoint_url=http://host:9000)",
                                     param_hint="--storage-option")
        parts = key.strip().split(".")
        value: Any = raw
        if parts[-1] not in _STRING_KEYS:
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = raw
            value = raw if isinstance(decoded, str) else decoded
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise click.BadParameter(f"{key!r}: {part!r} was already given a value", param_hint="--storage-option")
            node = child
        node[parts[-1]] = value
    return out or None


def _storage_options_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    return parse_storage_options(value)


storage_option_flag = click.option(
    "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE", callback=_storage_options_callback,
    help="fsspec option for remote URLs (repeatable; dotted keys nest), e.g. "
         "client_kwargs.endpoint_url=http://localhost:9000 or anon=true. Credentials: prefer env vars or ~/.aws.")
