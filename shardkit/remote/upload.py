"""Upload a finished local dataset to any fsspec URL: every file verified, the manifest last.

A remote dataset is visible (openable) only through its `manifest.json`, so uploading the manifest after
every other file has been uploaded *and verified* means a reader never finds a manifest naming a missing
or half-written shard. Object stores publish an object atomically when its PUT completes, so a crash
leaves at most some verified shards and no manifest; re-running uploads only what is missing or differs.

A small local ledger (JSON lines) records each verified upload with the object's ETag (or modification
time), so a re-run trusts those objects without reading them back; anything else already present is
re-read and compared before it is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import fsspec
import xxhash

from ..errors import ConfigError, RemoteError
from ..format.checksums import file_hexdigest
from .fs import filesystem, join
from .retry import DEFAULT_POLICY, RetryPolicy, retrying

__all__ = ["UploadConfig", "UploadReport", "UploadVerify", "file_digest", "list_remote", "remove_remote",
           "upload_dataset"]

_READ = 8 << 20
_IDENTITY_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "LastModified", "mtime", "created")


class UploadVerify(Enum):
    """How an uploaded (or already present) object is checked against the local file."""

    FULL = "full"  # read the object back and compare its xxh3-128 digest with the local file's
    SIZE = "size"  # compare sizes only (trust the store's own transfer checksums; half the traffic)


@dataclass(frozen=True, kw_only=True)
class UploadConfig:
    """Where credentials come from, how uploads are checked and retried, and how many run at once."""

    storage_options: Mapping[str, Any] | None = None
    verify: UploadVerify = UploadVerify.FULL
    retry: RetryPolicy = DEFAULT_POLICY
    parallel: int = 4

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise ConfigError(f"upload parallelism must be >= 1, got {self.parallel}")


@dataclass(frozen=True)
class UploadReport:
    """What an upload did: files sent, files found already there and verified, stale objects removed."""

    url: str
    uploaded: tuple[str, ...]
    kept: tuple[str, ...]
    removed: tuple[str, ...]
    bytes_uploaded: int
    seconds: float


def file_digest(path: str | os.PathLike[str]) -> str:
    """xxh3-128 of a local file's bytes."""
    return file_hexdigest(path)


def _remote_digest(fs: fsspec.AbstractFileSystem, path: str, size: int) -> str:
    if size <= _READ:  # one GET, no separate size lookup
        return xxhash.xxh3_128_hexdigest(fs.cat_file(path))
    h = xxhash.xxh3_128()
    with fs.open(path, "rb", block_size=_READ) as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    return h.hexdigest()


def _identity(info: Mapping[str, Any]) -> str | None:
    """What changes whenever the object is rewritten (ETag on S3), to trust a ledger entry."""
    for k in _IDENTITY_KEYS:
        v = info.get(k)
        if v not in (None, ""):
            return f"{k}={v}"
    return None


def _invalidate(fs: fsspec.AbstractFileSystem, path: str) -> None:
    with contextlib.suppress(Exception):  # not every filesystem caches listings
        fs.invalidate_cache(path)


def list_remote(url: str, *, storage_options: Mapping[str, Any] | None = None,
                policy: RetryPolicy = DEFAULT_POLICY) -> dict[str, dict[str, Any]]:
    """The entries directly under `url` (name -> fsspec info); empty when nothing is there yet."""
    fs, root = filesystem(url, storage_options, policy)

    def ls() -> dict[str, dict[str, Any]]:
        _invalidate(fs, root)
        try:
            entries = fs.ls(root, detail=True)
        except FileNotFoundError:
            return {}
        out = {}
        for e in entries:
            name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name and str(e["name"]).rstrip("/") != root.rstrip("/"):
                out[name] = e
        return out

    return retrying(ls, what=f"list {url}", policy=policy)


def remove_remote(url: str, names: Iterable[str], *, storage_options: Mapping[str, Any] | None = None,
                  policy: RetryPolicy = DEFAULT_POLICY) -> list[str]:
    """Delete the objects `names` under `url` (missing ones are fine); returns the names asked for."""
    fs, root = filesystem(url, storage_options, policy)
    done = []
    for name in names:
        rpath = f"{root}/{name}"

        def rm(rpath: str = rpath) -> None:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(rpath)
            _invalidate(fs, rpath)

        retrying(rm, what=f"delete {join(url, name)}", policy=policy)
        done.append(name)
    return done


@dataclass
class _Ledger:
    """Verified uploads of this staging directory: name -> {size, digest, identity}; append-only JSONL."""

    path: Path | None
    url: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, path: Path | None, url: str) -> _Ledger:
        ledger = cls(path, url)
        if path is None or not path.exists():
            return ledger
        for line in path.read_bytes().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash
            if isinstance(doc, dict) and doc.get("url") == url and isinstance(doc.get("name"), str):
                ledger.entries[doc["name"]] = doc
        return ledger

    def trusts(self, name: str, size: int, digest: str, info: Mapping[str, Any]) -> bool:
        e = self.entries.get(name)
        ident = _identity(info)
        return (e is not None and ident is not None and e.get("size") == size == info.get("size")
                and e.get("digest") == digest and e.get("identity") == ident)

    def record(self, name: str, size: int, digest: str, info: Mapping[str, Any]) -> None:
        doc = {"url": self.url, "name": name, "size": size, "digest": digest, "identity": _identity(info)}
        with self.lock:
            self.entries[name] = doc
            if self.path is None:
                return
            with open(self.path, "ab") as f:
                f.write(json.dumps(doc, sort_keys=True).encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())


class _Uploader:
    """Uploads and checks single files; shared by the worker threads of one `upload_dataset` call."""

    def __init__(self, local: Path, url: str, config: UploadConfig, ledger: _Ledger,
                 progress: Callable[[int, int], None] | None, total: int) -> None:
        self.local = local
        self.url = url
        self.config = config
        self.fs, self.root = filesystem(url, config.storage_options, config.retry)
        self.ledger = ledger
        self.progress = progress
        self.total = total
        self.done = 0
        self.sent = 0
        self.lock = threading.Lock()

    def _advance(self, n: int, sent: bool) -> None:
        with self.lock:
            self.done += n
            if sent:
                self.sent += n
            done = self.done
        if self.progress is not None:
            self.progress(done, self.total)

    def _info(self, rpath: str) -> dict[str, Any]:
        _invalidate(self.fs, rpath)
        return dict(self.fs.info(rpath))

    def _matches(self, name: str, rpath: str, size: int, digest: str, info: Mapping[str, Any]) -> bool:
        """Whether the remote object equals the local file (by the configured check)."""
        if info.get("size") != size:
            return False
        if self.config.verify is UploadVerify.SIZE:
            return True
        return _remote_digest(self.fs, rpath, size) == digest

    def sync(self, name: str, existing: Mapping[str, Any] | None) -> bool:
        """Make the remote `name` equal the local file; True when it had to be uploaded."""
        lpath = self.local / name
        rpath = f"{self.root}/{name}"
        what = join(self.url, name)
        size = lpath.stat().st_size
        digest = file_digest(lpath)
        if existing is not None and existing.get("size") == size:
            if self.ledger.trusts(name, size, digest, existing):
                self._advance(size, sent=False)
                return False
            if retrying(lambda: self._matches(name, rpath, size, digest, existing),
                        what=f"verify {what}", policy=self.config.retry):
                self.ledger.record(name, size, digest, existing)
                self._advance(size, sent=False)
                return False

        def put() -> dict[str, Any]:
            self.fs.put_file(str(lpath), rpath)
            info = self._info(rpath)
            if not self._matches(name, rpath, size, digest, info):
                raise RemoteError(f"upload {what}", f"the uploaded object does not match the local file "
                                  f"({info.get('size')} bytes, expected {size}); retrying", transient=True)
            return info

        info = retrying(put, what=f"upload {what}", policy=self.config.retry)
        self.ledger.record(name, size, digest, info)
        self._advance(size, sent=True)
        return True

    def publish(self, name: str) -> None:
        """Write the small manifest in one PUT and read it back."""
        raw = (self.local / name).read_bytes()
        rpath = f"{self.root}/{name}"
        what = join(self.url, name)

        def put() -> None:
            self.fs.pipe_file(rpath, raw)
            _invalidate(self.fs, rpath)
            if self.fs.cat_file(rpath) != raw:
                raise RemoteError(f"upload {what}", "the uploaded manifest reads back different; retrying",
                                  transient=True)

        retrying(put, what=f"upload {what}", policy=self.config.retry)
        self._advance(len(raw), sent=True)


def upload_dataset(local: Path, url: str, names: Sequence[str], *, manifest: str,
                   config: UploadConfig = UploadConfig(), ledger: Path | None = None,
                   remove: Iterable[str] = (), progress: Callable[[int, int], None] | None = None,
                   ) -> UploadReport:
    """Copy `names` (then `manifest`) from the directory `local` to `url`, each verified; delete `remove`.

    Files already present remotely and equal to the local ones are kept, not sent again. The manifest is
    written only after every other file is in place and a final listing shows them all with the right
    sizes, so the remote dataset appears complete or not at all. `ledger` (a local file) makes re-runs
    skip re-reading objects this staging directory verified before. `progress(done, total)` gets bytes.
    """
    t0 = time.monotonic()
    if manifest in names:
        raise ConfigError(f"{manifest} is uploaded last on its own; do not list it among the files")
    sizes = {n: (local / n).stat().st_size for n in names}
    total = sum(sizes.values()) + (local / manifest).stat().st_size
    book = _Ledger.open(ledger, url)
    up = _Uploader(local, url, config, book, progress, total)
    existing = list_remote(url, storage_options=config.storage_options, policy=config.retry)
    uploaded: list[str] = []
    kept: list[str] = []
    with ThreadPoolExecutor(max_workers=config.parallel, thread_name_prefix="shardkit-upload") as pool:
        # largest first: the long transfers start early and the small ones fill in around them
        order = sorted(names, key=lambda n: (-sizes[n], n))
        futures = {pool.submit(up.sync, n, existing.get(n)): n for n in order}
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            for f in futures:
                f.cancel()
            raise failed[0].exception()  # type: ignore[misc]
        for f, n in futures.items():
            (uploaded if f.result() else kept).append(n)
    removed = remove_remote(url, [n for n in remove if n not in sizes and n != manifest],
                            storage_options=config.storage_options, policy=config.retry)
    final = list_remote(url, storage_options=config.storage_options, policy=config.retry)
    wrong = [n for n in names if final.get(n, {}).get("size") != sizes[n]]
    if wrong:
        raise RemoteError(f"upload {url}", f"{len(wrong)} file(s) are missing or have the wrong size after the "
                          f"upload (e.g. {wrong[0]}); something else is writing there? the manifest was "
                          "not uploaded; re-run to repair", transient=True)
    up.publish(manifest)
    return UploadReport(url=url, uploaded=tuple(sorted(uploaded)), kept=tuple(sorted(kept)),
                        removed=tuple(removed), bytes_uploaded=up.sent, seconds=time.monotonic() - t0)
