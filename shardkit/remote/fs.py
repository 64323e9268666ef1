"""Resolve a dataset or input URL to an fsspec filesystem and a path on it.

One place decides what counts as remote and how storage options reach the filesystem, so the pack (remote
outputs) and the loader (remote datasets) agree. Credentials and endpoints come from the usual places
(environment, ~/.aws, fsspec's FSSPEC_<PROTOCOL>_* config) merged under explicit `storage_options`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import fsspec
import fsspec.config
import fsspec.core
from fsspec.implementations.local import LocalFileSystem

from ..errors import ConfigError, MissingDependencyError
from .retry import DEFAULT_POLICY, RetryPolicy

__all__ = ["client_limits", "filesystem", "is_remote", "join", "protocols", "storage_options_scope",
           "strip_protocol"]

_S3_PROTOCOLS = frozenset({"s3", "s3a"})

_LOCAL_PROTOCOLS = frozenset({"file", "local"})
# protocol -> (package, shardkit extra or None) for the "pip install" hint
_PACKAGES = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", None), "gcs": ("gcsfs", None),
             "az": ("adlfs", None), "abfs": ("adlfs", None), "abfss": ("adlfs", None)}
_CONF_LOCK = threading.Lock()


def _protocol(url: str) -> str | None:
    if "://" not in url:
        return None
    return url.split("://", 1)[0].split("::")[-1].lower() or None


def _copied(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A deep copy where possible (filesystems may modify nested dicts such as client_kwargs)."""
    try:
        return copy.deepcopy(dict(options or {}))
    except (TypeError, copy.Error):  # e.g. a live session object among the options
        return dict(options or {})


def client_limits(policy: RetryPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """botocore settings under which one shardkit attempt is one HTTP attempt of bounded duration.

    botocore (up to 5 attempts with backoff) and s3fs (5 more around each) retry on their own, inside one
    attempt of `retrying`: a dead endpoint took minutes to fail whatever the RetryPolicy said. Here the
    client makes a single attempt, with connect and read timeouts scaled to the policy's deadline, and
    shardkit's policy is the one retry loop (so its deadline is kept to within one attempt's timeouts).
    A `config_kwargs` key the caller sets in `storage_options` wins over these.
    """
    deadline = policy.deadline if policy.deadline is not None else 120.0
    return {"connect_timeout": min(10.0, max(1.0, deadline / 8)), "read_timeout": min(60.0, max(2.0, deadline / 4)),
            "retries": {"total_max_attempts": 1, "mode": "standard"}}


def _with_limits(url: str, options: dict[str, Any], policy: RetryPolicy) -> dict[str, Any]:
    if _protocol(url) not in _S3_PROTOCOLS:
        return options
    return {**options, "config_kwargs": {**client_limits(policy), **(options.get("config_kwargs") or {})}}


def is_remote(url: str | os.PathLike[str]) -> bool:
    """True when `url` names a non-local fsspec location (``s3://``, ``gs://``, ``memory://``, ...).

    Plain paths and ``file://`` URLs are local; chained URLs (``simplecache::s3://``) are remote when any
    link is. ``memory://`` counts as remote: it is not a directory the OS can rename into.
    """
    url = os.fspath(url)
    if "://" not in url:
        return False
    links = url.split("::")
    return any(_protocol(link) not in _LOCAL_PROTOCOLS for link in links if "://" in link)


def filesystem(url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
               policy: RetryPolicy = DEFAULT_POLICY) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `url` and the path on it (protocol stripped, no trailing slash).

    `storage_options` go to the filesystem's constructor (for s3: key, secret, client_kwargs={"endpoint_url":
    ...}, anon, ...); fsspec caches filesystem instances per options, so calling this repeatedly is cheap.
    For s3, the client's own retries are turned off and its timeouts fit `policy` (see `client_limits`).
    """
    url = os.fspath(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **_with_limits(url, _copied(storage_options), policy))
    except ImportError as e:
        package, extra = _PACKAGES.get(_protocol(url) or "", (str(e), None))
        raise MissingDependencyError(package, extra, purpose=f"{_protocol(url)}:// URLs") from e
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{url}: cannot open this location with the given storage options: {e}") from e
    if not isinstance(fs, LocalFileSystem):
        path = path.rstrip("/") or path
    if _protocol(url) in _S3_PROTOCOLS and isinstance(getattr(type(fs), "retries", None), int):
        fs.retries = 1  # s3fs's own retry loop around each call (its sleeps and 5 tries): shardkit retries
    return fs, path


def join(url: str | os.PathLike[str], name: str) -> str:
    """`url` + "/" + `name` without doubling slashes; `name` must be a single path component."""
    url = os.fspath(url)
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ConfigError(f"{name!r} is not a single file name (no path separators, not '.' or '..')")
    if not is_remote(url):
        return os.path.join(url, name)
    return url.rstrip("/") + "/" + name


def strip_protocol(url: str) -> str:
    """`url` without its protocol, for messages and local cache keys (``s3://b/k`` -> ``b/k``)."""
    return url.split("://", 1)[-1]


def protocols(urls: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The distinct remote protocols of `urls`, in first-seen order (``["s3"]`` for s3:// inputs)."""
    out: dict[str, None] = {}
    for url in urls:
        url = os.fspath(url)
        for link in url.split("::"):
            proto = _protocol(link)
            if proto is not None and proto not in _LOCAL_PROTOCOLS:
                out[proto] = None
    return list(out)


@contextlib.contextmanager
def storage_options_scope(urls: Iterable[str | os.PathLike[str]],
                          storage_options: Mapping[str, Any] | None,
                          policy: RetryPolicy = DEFAULT_POLICY) -> Iterator[None]:
    """Make `storage_options` the defaults of every filesystem fsspec creates for the protocols of `urls`.

    Code that opens plain URL strings (``fsspec.open(url)`` in the readers, listing) then reaches the
    endpoint and credentials the caller gave, without each layer passing options along. The options are
    merged over fsspec's own config (FSSPEC_<PROTOCOL>_* variables, config files) and restored on exit.
    This is process-wide state: concurrent scopes for the same protocol must agree.
    """
    protos = [p for p in protocols(urls) if storage_options or p in _S3_PROTOCOLS]
    if not protos:
        yield
        return
    with _CONF_LOCK:
        saved = {p: _copied(fsspec.config.conf[p]) if p in fsspec.config.conf else None for p in protos}
        for p in protos:
            merged = {**fsspec.config.conf.get(p, {}), **_copied(storage_options)}
            fsspec.config.conf[p] = _with_limits(f"{p}://", merged, policy)
    try:
        yield
    finally:
        with _CONF_LOCK:
            for p, old in saved.items():
                if old is None:
                    fsspec.config.conf.pop(p, None)
                else:
                    fsspec.config.conf[p] = old
