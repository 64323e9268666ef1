"""A remote dataset (any fsspec URL) that the loader reads like a local one, through a bounded local cache.

`open_remote_dataset(url)` fetches and verifies the manifest, then returns a `RemoteDataset`: a `Dataset`
whose shards are sparse files of their full size in the cache directory, mapped once each exactly like
local shards, so the loader's gathers are unchanged. Checksum sidecars and indexes are fetched whole and
verified on first use of a shard; token bytes arrive block by block (the sidecar's 16 MiB blocks) through
`ReadGate` / `GroupPrefetch`, the two hooks `WindowSource` and `Readahead` call for remote datasets.

Defaults: cache directory `$SHARDKIT_REMOTE_CACHE_DIR`, else `$SHARDKIT_CACHE_DIR/remote` (that variable
also holds the compiled-tokenizer cache), else `$XDG_CACHE_HOME/shardkit/remote` or
`~/.cache/shardkit/remote`; limit `$SHARDKIT_REMOTE_CACHE_LIMIT` (e.g. `200GiB`), else 16 GiB.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from ..errors import ConfigError, IntegrityError, ManifestError
from ..format.atomic import atomic_write_bytes
from ..format.checksums import ShardChecksums, digest_bytes
from ..format.dataset import Dataset, Shard, open_dataset
from ..format.idx import HEADER_SIZE, IndexFile, parse_index_header
from ..format.manifest import MANIFEST_NAME, Manifest, ShardEntry
from ..format.shard_files import check_header_agrees
from ..units import parse_bytes
from .blocks import charge_of
from .cache import CacheRoot, DatasetCache, ofd_lock
from .fs import filesystem, is_remote
from .gate import GroupPrefetch, ReadGate
from .prefetch import Fetcher
from .retry import RetryPolicy, retrying

__all__ = ["RemoteConfig", "RemoteDataset", "default_cache_dir", "default_cache_limit", "open_any",
           "open_remote_dataset"]

DEFAULT_LIMIT = 16 << 30


def default_cache_dir() -> Path:
    if os.environ.get("SHARDKIT_REMOTE_CACHE_DIR"):
        return Path(os.environ["SHARDKIT_REMOTE_CACHE_DIR"])
    if os.environ.get("SHARDKIT_CACHE_DIR"):
        return Path(os.environ["SHARDKIT_CACHE_DIR"]) / "remote"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shardkit" / "remote"


def default_cache_limit() -> int:
    raw = os.environ.get("SHARDKIT_REMOTE_CACHE_LIMIT")
    return parse_bytes(raw) if raw else DEFAULT_LIMIT


@dataclass(frozen=True, kw_only=True)
class RemoteConfig:
    """How a remote dataset is cached and fetched (one per opened dataset)."""

    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | str | None = None  # bytes (or "20GiB") for everything in cache_dir, all datasets
    storage_options: dict[str, Any] | None = None
    lookahead_groups: int = 4  # shuffle groups fetched ahead of the current one (0: only the current one)
    lookahead_bytes: int | str | None = None  # cap on what is pinned ahead per reader; None: half the limit
    fetch_workers: int = 4  # parallel range downloads per process
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    mismatch_retries: int = 3  # downloads of a block before a checksum mismatch is an error
    stall_timeout: float = 300.0  # seconds a read may wait for other processes to free cache space

    def __post_init__(self) -> None:
        limit = self.cache_limit if self.cache_limit is not None else default_cache_limit()
        object.__setattr__(self, "cache_limit", parse_bytes(limit) if isinstance(limit, str) else limit)
        if self.lookahead_bytes is not None:
            la = self.lookahead_bytes
            object.__setattr__(self, "lookahead_bytes", parse_bytes(la) if isinstance(la, str) else la)
        object.__setattr__(self, "cache_dir", Path(self.cache_dir) if self.cache_dir else default_cache_dir())
        if not isinstance(self.cache_limit, int) or self.cache_limit <= 0:
            raise ConfigError(f"cache_limit must be a positive size, got {self.cache_limit!r}")
        if isinstance(self.lookahead_groups, bool) or not isinstance(self.lookahead_groups, int) or not (
                0 <= self.lookahead_groups <= 64):
            raise ConfigError(f"lookahead_groups must be an integer from 0 to 64, got {self.lookahead_groups!r}; "
                              "bound prefetch by size with lookahead_bytes")
        if self.fetch_workers < 1 or self.mismatch_retries < 1:
            raise ConfigError("fetch_workers and mismatch_retries must be at least 1")


class _Remote:
    """The remote side of one dataset: URLs, whole-file metadata, verified block downloads."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, path: str, manifest: Manifest,
                 cache: DatasetCache, config: RemoteConfig) -> None:
        self.url = url.rstrip("/")
        self.fs = fs
        self.path = path.rstrip("/")
        self.manifest = manifest
        self.cache = cache
        self.config = config
        self._sums: dict[int, ShardChecksums] = {}
        self._headers_checked: set[int] = set()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._pid = os.getpid()

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _get(self, name: str, start: int | None = None, end: int | None = None, label: str = "") -> bytes:
        what = f"read {self.url_of(name)}" + (f" bytes [{start}, {end})" if start is not None else "") + label
        return retrying(lambda: self.fs.cat_file(f"{self.path}/{name}", start=start, end=end), what=what,
                        policy=self.config.retry)

    def _name_lock(self, name: str) -> threading.Lock:
        if self._pid != os.getpid():  # a forked child: a parent thread may have held one of these
            self._pid, self._locks, self._locks_guard = os.getpid(), {}, threading.Lock()
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    def _meta(self, s: int, kind: int, name: str, check: Any) -> bytes:
        """A small file fetched whole, verified by `check(raw) -> problem or None`, kept in the cache."""
        local = self.cache.dir / name
        with self._name_lock(name):
            self.cache.check_fork()
            old = local.read_bytes() if local.exists() else None
            if old is not None and check(old) is None:
                return old
            lock_at = 2 * self.cache.blocks.num_blocks + 2 * s + kind
            ofd_lock(self.cache.own_fd, fcntl.F_WRLCK, lock_at, wait=True)  # one process fetches it
            try:
                old = local.read_bytes() if local.exists() else None
                if old is not None and check(old) is None:
                    return old
                problem = None
                for _ in range(self.config.mismatch_retries):
                    raw = self._get(name)
                    problem = check(raw)
                    if problem is None:
                        break
                else:
                    raise IntegrityError(self.url_of(name), f"{problem} after {self.config.mismatch_retries} "
                                                            "downloads; the remote dataset is damaged: re-upload it")
                need = int(charge_of(len(raw)))
                self.cache.reserve_meta(need)
                try:
                    with self.cache.root.space_errors(f"writing {local}"):
                        atomic_write_bytes(local, raw)
                except BaseException:
                    self.cache.release_meta(need)  # nothing was written: the charge goes too
                    raise
                if old is not None:
                    self.cache.release_meta(int(charge_of(len(old))))
                return raw
            finally:
                ofd_lock(self.cache.own_fd, fcntl.F_UNLCK, lock_at, wait=False)

    def sums(self, s: int) -> ShardChecksums:
        got = self._sums.get(s)
        if got is not None:
            return got
        e = self.manifest.shards[s]

        def check(raw: bytes) -> str | None:
            actual = digest_bytes(raw)
            return None if actual == e.sum_digest else (f"checksum sidecar digest {actual} differs from the "
                                                        f"manifest's {e.sum_digest}")

        sums = ShardChecksums.from_bytes(self._meta(s, 0, e.sum_name, check), self.url_of(e.sum_name))
        for fname, size in ((e.bin_name, e.bin_bytes), (e.idx_name, e.idx_bytes)):
            fc = sums.files.get(fname)
            if fc is None or fc.size != size:
                raise ManifestError(self.url_of(e.sum_name), f"no checksums for {fname} of {size:,} bytes")
        if sums.block_size != self.manifest.checksum_block_size:
            raise ManifestError(self.url_of(e.sum_name), f"block_size {sums.block_size} differs from the "
                                                         f"manifest's {self.manifest.checksum_block_size}")
        self._sums[s] = sums
        return sums

    def ensure_index(self, s: int) -> None:
        e = self.manifest.shards[s]
        fc = self.sums(s).files[e.idx_name]
        bs = self.manifest.checksum_block_size

        def check(raw: bytes) -> str | None:
            if len(raw) != e.idx_bytes:
                return f"{len(raw):,} bytes, the manifest records {e.idx_bytes:,}"
            for i, want in enumerate(fc.blocks):
                got = digest_bytes(memoryview(raw)[i * bs:(i + 1) * bs])
                if got != want:
                    return f"block {i} digest {got} differs from the sidecar's {want}"
            return None

        self._meta(s, 1, e.idx_name, check)

    def check_header(self, s: int, dtype: Any) -> None:
        """The remote `.idx` header agrees with the manifest: one 34-byte range read per shard and process."""
        if s in self._headers_checked:
            return
        e = self.manifest.shards[s]
        raw = self._get(e.idx_name, 0, HEADER_SIZE, " (index header)")
        where = self.url_of(e.idx_name)
        if len(raw) < HEADER_SIZE:
            raise ManifestError(where, f"index is {len(raw)} bytes, shorter than the {HEADER_SIZE}-byte header")
        check_header_agrees(parse_index_header(raw, e.idx_bytes, where), e, dtype, where)
        self._headers_checked.add(s)

    def _block(self, gid: int) -> tuple[ShardEntry, int, int, int, str]:
        s, lo, hi = self.cache.blocks.byte_range(gid)
        e = self.manifest.shards[s]
        i = gid - int(self.cache.blocks.base[s])
        return e, i, lo, hi, self.sums(s).files[e.bin_name].blocks[i]

    def download(self, gid: int) -> bytes:
        """Block `gid`'s bytes, verified; transient errors retried, then a mismatch re-downloaded."""
        e, i, lo, hi, want = self._block(gid)
        got = ""
        for _ in range(self.config.mismatch_retries):
            data = self._get(e.bin_name, lo, hi, f" (cache block {i} of shard {e.name})")
            got = digest_bytes(data) if len(data) == hi - lo else f"{len(data):,} bytes instead of {hi - lo:,}"
            if got == want:
                return data
        err = IntegrityError(self.url_of(e.bin_name),
                             f"cache block {i} of shard {e.name} does not match its checksum after "
                             f"{self.config.mismatch_retries} downloads (got {got}); the remote copy is damaged: "
                             "verify and re-upload it", byte_range=(lo, hi), expected=want, actual=got)
        err.block = gid  # the dataset's cache block id: a loader with on_corrupt='skip' reads around it
        raise err

    def verify_present(self, gid: int) -> bool:
        """Whether the cached bytes of a PRESENT block still match their digest (never serve a damaged entry)."""
        e, _, lo, hi, want = self._block(gid)
        fd = self.cache.data_fd(self.cache.blocks.shard_of(gid))
        data = os.pread(fd, hi - lo, lo)
        return len(data) == hi - lo and digest_bytes(data) == want


class RemoteShard(Shard):
    """A shard whose `.bin` is a sparse cache file and whose index is fetched on first use."""

    def __init__(self, directory: Path, entry: ShardEntry, dtype: Any, remote: _Remote, index: int) -> None:
        super().__init__(directory, entry, dtype)
        self._remote = remote
        self._i = index

    def check_header(self) -> None:
        self._remote.check_header(self._i, self.dtype)

    def load_index(self, *, check: bool = True) -> IndexFile:
        fetcher = self._remote.cache.fetcher  # waits while other readers' pins leave no room for the index
        fetcher.with_room(lambda: self._remote.ensure_index(self._i))
        return super().load_index(check=check)


class RemoteDataset(Dataset):
    """A `Dataset` over the cache's sparse files; readers must go through `read_gate` (WindowSource does)."""

    remote = True

    def __init__(self, url: str, remote: _Remote, fetcher: Fetcher, config: RemoteConfig) -> None:
        super().__init__(remote.cache.dir, remote.manifest)
        self.url = url
        self.config = config
        self._remote = remote
        self.fetcher = fetcher
        self.cache = remote.cache
        self.shards = [RemoteShard(self.path, e, self.dtype, remote, i) for i, e in enumerate(self.manifest.shards)]

    def __repr__(self) -> str:
        return (f"RemoteDataset({self.url!r}, cache={str(self.path)!r}, shards={self.num_shards}, "
                f"tokens={self.num_tokens:,}, dtype={self.dtype.name})")

    def _lookahead(self) -> int:
        la = self.config.lookahead_bytes
        return la if la is not None else self.cache.root.limit // 2  # type: ignore[return-value]

    def read_gate(self, seq_len: int) -> ReadGate:
        """For `WindowSource`: every copy of rows waits for (and pins) the cache blocks under them."""
        return ReadGate(self.fetcher, self.cache.blocks, seq_len, self._lookahead())

    def prefetch_window(self, seq_len: int, block_samples: int) -> GroupPrefetch:
        """For `Readahead`: the blocks of the current and next shuffle group, fetched ahead."""
        return GroupPrefetch(self.fetcher, self.cache.blocks, seq_len, block_samples,
                             lookahead_groups=self.config.lookahead_groups, lookahead_bytes=self._lookahead())

    def close(self) -> None:
        """Stop downloads and release this process's pins and descriptors (the cache files stay)."""
        self.fetcher.close()
        self.cache.close()

    def __enter__(self) -> RemoteDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Downloads, verifications, waits and pins of this process, and the cache's size and limit."""
        with self.cache.root.locked():
            used = self.cache.root.used()
        return {**self.fetcher.stats(), "cache_used": used, "cache_limit": self.cache.root.limit}


def _fetcher_of(cache: DatasetCache, remote: _Remote, config: RemoteConfig) -> Fetcher:
    """One fetcher per dataset and process: pins of two fetchers would share (and drop) one OFD lock."""
    f = cache.fetcher
    if f is None:
        f = Fetcher(cache, remote.download, remote.verify_present, workers=config.fetch_workers,
                    stall_timeout=config.stall_timeout, prepare=remote._block)
        cache.fetcher = f
    return f


def open_remote_dataset(url: str, config: RemoteConfig | None = None, **kwargs: Any) -> RemoteDataset:
    """Open the dataset at `url` through the local block cache (see RemoteConfig for the options)."""
    config = config or RemoteConfig(**kwargs)
    fs, path = filesystem(url, config.storage_options, config.retry)
    where = f"{url.rstrip('/')}/{MANIFEST_NAME}"
    raw = retrying(lambda: fs.cat_file(f"{path.rstrip('/')}/{MANIFEST_NAME}"), what=f"read {where}",
                   policy=config.retry)
    manifest = Manifest.from_bytes(raw, where)
    packed = [e.name for e in manifest.shards if getattr(e, "compression", None) is not None]
    if packed:
        raise ConfigError(f"{url}: shard {packed[0]} (and {len(packed) - 1} more) is zstd-compressed; remote "
                          "streaming reads plain NAME.bin shards only for now: decompress the dataset "
                          "(`shardkit decompress`) or download it and open the local copy")
    root = CacheRoot.get(config.cache_dir, config.cache_limit)  # type: ignore[arg-type]
    cache = DatasetCache.create(root, root.path / manifest.fingerprint[:32], manifest, raw)
    remote = cache.remote_source
    if remote is None:
        remote = cache.remote_source = _Remote(url, fs, path, cache.manifest, cache, config)
    return RemoteDataset(url, remote, _fetcher_of(cache, remote, config), config)


def open_any(data: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
             cache_limit: int | str | None = None, storage_options: dict[str, Any] | None = None,
             check_files: bool = True) -> Dataset:
    """A local dataset directory, or a remote URL through the block cache (`check_files`: see open_dataset)."""
    text = os.fspath(data)
    if is_remote(text):
        return open_remote_dataset(text, RemoteConfig(cache_dir=cache_dir, cache_limit=cache_limit,
                                                      storage_options=storage_options))
    if text.startswith("file://"):
        text = text[len("file://"):]
    return open_dataset(Path(text), check_files=check_files)
