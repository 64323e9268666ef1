"""A temporary local copy of (part of) a remote dataset, for the commands that read files whole.

`verify`, `inspect` and `show` take the same URLs as `stream`. Verify reads every byte anyway, so it
downloads the dataset's directory and checks the copy exactly as it checks a local dataset (what was
downloaded is what the storage holds); inspect fetches the manifest and the indexes; show fetches those
and the one shard holding the document. The copy lives in a temporary directory under the cache
directory (the same `--cache-dir` as `stream`), is refused when larger than `--cache-limit`, and is
removed when the command ends.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..format.atomic import atomic_write_bytes
from ..format.manifest import MANIFEST_NAME, Manifest
from ..units import human_bytes
from .dataset import RemoteConfig
from .fs import filesystem
from .retry import retrying

__all__ = ["LocalCopy", "remote_copy"]

Select = Callable[[Manifest, dict[str, int]], list[str]]  # (manifest, remote file sizes) -> names to fetch


@dataclass(frozen=True)
class LocalCopy:
    url: str
    path: Path  # the local directory holding the fetched files
    manifest: Manifest | None  # parsed when a selection asked for files by the manifest
    remote_sizes: dict[str, int]  # every file in the remote directory (name -> bytes)


def _listing(fs: Any, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in fs.ls(path, detail=True):
        if info.get("type") == "file":
            out[info["name"].rstrip("/").rsplit("/", 1)[-1]] = int(info.get("size") or 0)
    return out


@contextmanager
def remote_copy(url: str, select: Select | None = None, *, cache_dir: str | os.PathLike[str] | None = None,
                cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None
                ) -> Iterator[LocalCopy]:
    """Fetch the files `select` names (default: every file of the directory) into a temporary directory.

    A remote directory without manifest.json is copied whole when `select` is None (verify then reports
    an unfinished pack or a missing manifest as it does locally); otherwise it is an error.
    """
    config = RemoteConfig(cache_dir=cache_dir, cache_limit=cache_limit, storage_options=storage_options)
    fs, path = filesystem(url, config.storage_options)
    path = path.rstrip("/")
    sizes = retrying(lambda: _listing(fs, path), what=f"list {url}", policy=config.retry)
    if not sizes:
        raise ConfigError(f"{url}: no files there (expected a dataset directory with {MANIFEST_NAME}); check "
                          "the URL and --storage-option")
    manifest = None
    if MANIFEST_NAME in sizes:
        raw = retrying(lambda: fs.cat_file(f"{path}/{MANIFEST_NAME}"), what=f"read {url}/{MANIFEST_NAME}",
                       policy=config.retry)
        if select is not None:
            manifest = Manifest.from_bytes(raw, f"{url.rstrip('/')}/{MANIFEST_NAME}")
    elif select is not None:
        raise ConfigError(f"{url}: no {MANIFEST_NAME} (not a finished dataset); `shardkit verify {url}` says more")
    names = sorted(sizes) if manifest is None else [n for n in select(manifest, sizes) if n != MANIFEST_NAME]  # type: ignore[misc]
    names = [n for n in names if n in sizes]  # a missing file is for the local checks to report
    need = sum(sizes[n] for n in names)
    limit = int(config.cache_limit)  # type: ignore[arg-type]
    if need > limit:
        raise ConfigError(f"{url}: the command needs a local copy of {human_bytes(need)}, more than the cache "
                          f"limit {human_bytes(limit)}; raise --cache-limit (or $SHARDKIT_REMOTE_CACHE_LIMIT) or "
                          "use --cache-dir on a larger disk")
    root = Path(config.cache_dir)  # type: ignore[arg-type]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="copy-", dir=root) as tmp:
        local = Path(tmp)
        if MANIFEST_NAME in sizes:
            atomic_write_bytes(local / MANIFEST_NAME, raw)
        for name in names:
            retrying(lambda name=name: fs.get_file(f"{path}/{name}", str(local / name)),
                     what=f"download {url.rstrip('/')}/{name}", policy=config.retry)
        yield LocalCopy(url=url, path=local, manifest=manifest, remote_sizes=sizes)
