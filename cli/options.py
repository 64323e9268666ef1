"""Shared click option types and decorators."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10: TOML config files need tomli
    tomllib = None  # type: ignore[assignment]

from shardkit.errors import ConfigError
from shardkit.remote import is_remote
from shardkit.units import parse_bytes

__all__ = ["ByteSize", "check_dataset_arg", "json_option", "load_pack_config", "parse_storage_options",
           "read_config_file", "remote_dataset_options", "storage_option_flag"]


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


def _skip_ranges(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[list[int]]:
    out = []
    for item in value:
        try:
            first, last = (int(x) for x in item.split(","))
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected FIRST,LAST (global batch indices, inclusive), e.g. "
                                     "412000,412050") from None
        out.append([first, last])
    return out


skip_option = click.option("--skip", multiple=True, callback=_skip_ranges, metavar="FIRST,LAST",
                           help="Never deliver global batches FIRST..LAST (inclusive; repeatable): see docs/operations.md.")



def verify_options(f: Any) -> Any:
    """`--verify-on-read` and `--on-corrupt`: checksum blocks hashed on first read, and what a damaged one costs."""
    f = click.option("--on-corrupt", type=click.Choice(["raise", "refetch", "skip"]), default="raise",
                     show_default=True,
                     help="A block that fails its checksum: stop naming it, read it again (then stop), or replace "
                          "the rows reading it and go on (counted and reported): see docs/operations.md.")(f)
    return click.option("--verify-on-read", is_flag=True,
                        help="Hash each local checksum block on its first read (remote blocks always are).")(f)


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


def load_pack_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """`--config FILE`: its keys become the command's defaults, so flags given on the command line win.

    Keys are the flags' names without dashes (`shard-size` or `shard_size`), plus `inputs` (a list or one
    string) and `output`; an unknown key is a usage error naming the known ones.
    """
    if value is None:
        return
    try:
        data = read_config_file(value)
    except ConfigError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    by_name: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        if p.name is None or not p.expose_value:
            continue
        by_name[p.name] = p
        for opt in (*p.opts, *p.secondary_opts):
            by_name.setdefault(opt.lstrip("-").replace("-", "_"), p)
    defaults: dict[str, Any] = dict(ctx.default_map or {})
    for key, raw in data.items():
        p = by_name.get(str(key).replace("-", "_"))
        if p is None or p.name == "as_json":
            known = sorted(n for n, q in by_name.items() if n == q.name and n != "as_json")
            raise click.BadParameter(f"{value}: unknown key {key!r}; the keys are the flags' names: "
                                     f"{', '.join(known)}", ctx=ctx, param=param)
        defaults[p.name] = _config_value(p, raw)  # type: ignore[index]
    ctx.default_map = defaults


def _config_value(p: click.Parameter, raw: Any) -> Any:
    if p.name == "storage_options" and isinstance(raw, dict):
        return tuple(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in raw.items())
    if p.name == "inputs":
        return (raw,) if isinstance(raw, str) else tuple(str(x) for x in raw)
    if p.multiple or p.nargs == -1:
        return (raw,) if isinstance(raw, str) else tuple(raw)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and p.type is click.STRING:
        return str(raw)
    return raw


def read_config_file(path: str) -> dict[str, Any]:
    """A YAML, TOML or JSON file of one mapping (by extension; YAML otherwise)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None
    try:
        if path.endswith(".toml"):
            if tomllib is None:
                raise ConfigError(f"{path}: TOML needs Python 3.11+ (or use a YAML or JSON config file)")
            data = tomllib.loads(text)
        elif path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{path} is not valid {path.rsplit('.', 1)[-1].upper()}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold one mapping of option names to values, got {type(data).__name__}")
    return data


_REMOTE_OPTIONS = [
    click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                 help="Remote DATASET: the cache directory [default: $SHARDKIT_REMOTE_CACHE_DIR, else "
                      "~/.cache/shardkit/remote]."),
    click.option("--cache-limit", type=ByteSize(), default=None,
                 help="Remote DATASET: the cache's size limit, e.g. 20GiB [default: $SHARDKIT_REMOTE_CACHE_LIMIT, "
                      "else 16GiB]."),
    storage_option_flag,
]


def remote_dataset_options(f):
    """--cache-dir, --cache-limit and --storage-option, as `stream` has them, for a DATASET that may be a URL."""
    for option in reversed(_REMOTE_OPTIONS):
        f = option(f)
    return f


def check_dataset_arg(dataset: str, cache_dir: Any, cache_limit: Any, storage_options: Any) -> bool:
    """True when DATASET is a remote URL; a usage error for a missing directory or a cache flag on a local one."""
    remote = is_remote(dataset)
    if not remote and not os.path.isdir(dataset.removeprefix("file://")):
        raise click.BadParameter(f"{dataset!r} is not a directory (nor a remote URL such as s3://bucket/ds)",
                                 param_hint="DATASET")
    flags = [f for f, v in (("--cache-dir", cache_dir), ("--cache-limit", cache_limit),
                            ("--storage-option", storage_options)) if v is not None]
    if flags and not remote:
        raise click.UsageError(f"{flags[0]} applies to a remote DATASET URL only")
    return remote
