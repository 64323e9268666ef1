"""Resolve a dataset or input URL to an fsspec filesystem and a path on it.

One place decides what counts as remote and how storage options reach the filesystem, so the pack (remote
outputs) and the loader (remote datasets) agree. Credentials and endpoints come from the usual places
(environment, ~/.aws, fsspec's FSSPEC_<PROTOCOL>_* config) merged under explicit `storage_options`.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec
import fsspec.core
from fsspec.implementations.local import LocalFileSystem

from ..errors import ConfigError

__all__ = ["filesystem", "is_remote", "join", "strip_protocol"]

_LOCAL_PROTOCOLS = frozenset({"file", "local"})


def _protocol(url: str) -> str | None:
    if "://" not in url:
        return None
    return url.split("://", 1)[0].split("::")[-1].lower() or None


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


def filesystem(url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None,
               ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `url` and the path on it (protocol stripped, no trailing slash).

    `storage_options` go to the filesystem's constructor (for s3: key, secret, client_kwargs={"endpoint_url":
    ...}, anon, ...); fsspec caches filesystem instances per options, so calling this repeatedly is cheap.
    """
    url = os.fspath(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as e:
        raise ConfigError(f"{url}: the filesystem for this URL is not installed ({e}); "
                          "for s3:// install s3fs, for gs:// gcsfs, for az:// adlfs") from e
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
