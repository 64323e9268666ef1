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

__all__ = ["filesystem", "is_remote", "join", "protocols", "storage_options_scope", "strip_protocol"]

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
               ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `url` and the path on it (protocol stripped, no trailing slash).

    `storage_options` go to the filesystem's constructor (for s3: key, secret, client_kwargs={"endpoint_url":
    ...}, anon, ...); fsspec caches filesystem instances per options, so calling this repeatedly is cheap.
    """
    url = os.fspath(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **_copied(storage_options))
    except ImportError as e:
        package, extra = _PACKAGES.get(_protocol(url) or "", (str(e), None))
        raise MissingDependencyError(package, extra, purpose=f"{_protocol(url)}:// URLs") from e
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{url}: cannot open this location with the given storage options: {e}") from e
    if not isinstance(fs, LocalFileSystem):
        path = path.rstrip("/") or path
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
                          storage_options: Mapping[str, Any] | None) -> Iterator[None]:
    """Make `storage_options` the defaults of every filesystem fsspec creates for the protocols of `urls`.

    Code that opens plain URL strings (``fsspec.open(url)`` in the readers, listing) then reaches the
    endpoint and credentials the caller gave, without each layer passing options along. The options are
    merged over fsspec's own config (FSSPEC_<PROTOCOL>_* variables, config files) and restored on exit.
    This is process-wide state: concurrent scopes for the same protocol must agree.
    """
    if not storage_options:
        yield
        return
    protos = protocols(urls)
    with _CONF_LOCK:
        saved = {p: _copied(fsspec.config.conf[p]) if p in fsspec.config.conf else None for p in protos}
        for p in protos:
            fsspec.config.conf[p] = {**fsspec.config.conf.get(p, {}), **_copied(storage_options)}
    try:
        yield
    finally:
        with _CONF_LOCK:
            for p, old in saved.items():
                if old is None:
                    fsspec.config.conf.pop(p, None)
                else:
                    fsspec.config.conf[p] = old
