"""`manifest.json`: the one file that makes a directory a dataset, written last and atomically.

Its content hash (over everything but the `fingerprint` and `created` fields) is the dataset
fingerprint: the same inputs, tokenizer and options give the same fingerprint on any machine, and
loader state dicts name it so a resume on other data is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ManifestError, brief
from .atomic import atomic_write_bytes
from .dtypes import READABLE_TOKEN_DTYPES
from .manifest_schema import check_manifest_fields

__all__ = [
    "MANIFEST_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "READABLE_FORMAT_VERSIONS",
    "ShardCompression",
    "ShardEntry",
    "Manifest",
    "check_shard_name",
    "compute_fingerprint",
]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "shardkit-dataset"
FORMAT_VERSION = 1  # written when no shard is compressed: older shardkit reads such datasets
COMPRESSED_FORMAT_VERSION = 2  # written when a shard is stored as NAME.bin.zst (older shardkit refuses it)
READABLE_FORMAT_VERSIONS = (FORMAT_VERSION, COMPRESSED_FORMAT_VERSION)
COMPRESSION_CODECS = ("zstd",)
MAX_FRAME_SIZE = 1 << 30
MAX_MANIFEST_BYTES = 1 << 30
MAX_SHARDS = 10_000_000
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_VOLATILE = ("fingerprint", "created")


def check_shard_name(name: object, where: str) -> str:
    """A shard name is a plain file stem: no separators, no `..`, nothing absolute, nothing hidden."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise ManifestError(where, f"unsafe or invalid shard name {brief(name)}: names must match "
                                   f"{_NAME_RE.pattern} with no '..' (no paths, no absolute names)")
    return name


@dataclass(frozen=True, slots=True)
class ShardCompression:
    """How a shard's tokens are stored when not as a plain `.bin`: framed zstd in `NAME.bin.zst`."""

    codec: str  # "zstd"
    level: int
    frame_size: int  # uncompressed bytes per zstd frame
    file_bytes: int  # size of NAME.bin.zst

    def to_json(self) -> dict[str, Any]:
        return {"codec": self.codec, "level": self.level, "frame_size": self.frame_size,
                "file_bytes": self.file_bytes}

    @classmethod
    def from_json(cls, d: Any, where: str, shard: str) -> ShardCompression:
        if not isinstance(d, dict):
            raise ManifestError(where, f"shard {shard}: compression must be an object")
        if d.get("codec") not in COMPRESSION_CODECS:
            raise ManifestError(where, f"shard {shard}: compression codec {brief(d.get('codec'))} is unknown (this "
                                       f"shardkit reads {', '.join(COMPRESSION_CODECS)}); upgrade shardkit")
        level, frame, size = d.get("level"), d.get("frame_size"), d.get("file_bytes")
        if not isinstance(level, int) or isinstance(level, bool):
            raise ManifestError(where, f"shard {shard}: compression level must be an integer, got {brief(level)}")
        if not isinstance(frame, int) or isinstance(frame, bool) or not 1 <= frame <= MAX_FRAME_SIZE:
            raise ManifestError(where, f"shard {shard}: compression frame_size must be an integer in "
                                       f"[1, {MAX_FRAME_SIZE}], got {brief(frame)}")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 62:
            raise ManifestError(where, f"shard {shard}: compression file_bytes must be a non-negative "
                                       f"integer, got {brief(size)}")
        return cls(d["codec"], level, frame, size)


@dataclass(frozen=True, slots=True)
class ShardEntry:
    name: str
    num_docs: int
    num_tokens: int
    bin_bytes: int  # uncompressed token bytes (= tokens × itemsize), whether stored plain or compressed
    idx_bytes: int
    sum_digest: str  # xxh3-128 of the NAME.sum.json sidecar
    compression: ShardCompression | None = None  # None: tokens are stored plain in NAME.bin

    @property
    def bin_name(self) -> str:
        """The plain token file's name; for a compressed shard it names the uncompressed bytes, not a file."""
        return f"{self.name}.bin"

    @property
    def zst_name(self) -> str:
        return f"{self.name}.bin.zst"

    @property
    def data_name(self) -> str:
        """The file on disk holding the tokens: NAME.bin, or NAME.bin.zst for a compressed shard."""
        return self.zst_name if self.compression else self.bin_name

    @property
    def data_bytes(self) -> int:
        """Size of `data_name` on disk."""
        return self.compression.file_bytes if self.compression else self.bin_bytes

    @property
    def idx_name(self) -> str:
        return f"{self.name}.idx"

    @property
    def sum_name(self) -> str:
        return f"{self.name}.sum.json"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "docs": self.num_docs,
            "tokens": self.num_tokens,
            "bin_bytes": self.bin_bytes,
            "idx_bytes": self.idx_bytes,
            "sum_xxh3": self.sum_digest,
        }
        if self.compression is not None:  # absent for plain shards: their entries (and fingerprints) are unchanged
            doc["compression"] = self.compression.to_json()
        return doc

    @classmethod
    def from_json(cls, d: Any, where: str) -> ShardEntry:
        if not isinstance(d, dict):
            raise ManifestError(where, "shard entry is not an object")
        name = check_shard_name(d.get("name"), where)
        ints = {k: d.get(k) for k in ("docs", "tokens", "bin_bytes", "idx_bytes")}
        for k, v in ints.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v >= 1 << 62:
                raise ManifestError(where, f"shard {name}: {k} must be a non-negative integer, got {brief(v)}")
        digest = d.get("sum_xxh3")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{32}", digest):
            raise ManifestError(where, f"shard {name}: sum_xxh3 must be 32 hex digits")
        compression = ShardCompression.from_json(d["compression"], where, name) if "compression" in d else None
        return cls(name, ints["docs"], ints["tokens"], ints["bin_bytes"], ints["idx_bytes"], digest,  # type: ignore[arg-type]
                   compression)


def compute_fingerprint(doc: dict[str, Any]) -> str:
    stable = {k: v for k, v in doc.items() if k not in _VOLATILE}
    canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Manifest:
    """The parsed, validated manifest. Unknown extra keys are kept (forward-compatible readers)."""

    dtype: str
    tokenizer: dict[str, Any] | None
    shards: tuple[ShardEntry, ...]
    checksum_block_size: int
    eos_appended: bool | None = True
    bos_prepended: bool | None = False
    pack: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    created: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    @property
    def num_docs(self) -> int:
        return sum(s.num_docs for s in self.shards)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.shards)

    @property
    def token_dtype(self) -> np.dtype:
        return np.dtype(self.dtype).newbyteorder("<")

    @property
    def compressed(self) -> bool:
        return any(s.compression is not None for s in self.shards)

    @property
    def format_version(self) -> int:
        """1 unless a shard is compressed: plain datasets stay readable by shardkit versions before 2."""
        return COMPRESSED_FORMAT_VERSION if self.compressed else FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "dtype": self.dtype,
            "tokenizer": self.tokenizer,
            "eos_appended": self.eos_appended,
            "bos_prepended": self.bos_prepended,
            "totals": {
                "shards": len(self.shards),
                "docs": self.num_docs,
                "tokens": self.num_tokens,
                "bytes": sum(s.bin_bytes for s in self.shards),
            },
            "checksum": {"algorithm": "xxh3_128", "block_size": self.checksum_block_size},
            "pack": self.pack,
            "stats": self.stats,
            "shards": [s.to_json() for s in self.shards],
        }
        doc["fingerprint"] = compute_fingerprint(doc)
        doc["created"] = self.created
        return doc

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()

    def save(self, directory: Path) -> str:
        """Write atomically; returns the fingerprint."""
        raw = self.to_bytes()
        atomic_write_bytes(directory / MANIFEST_NAME, raw)
        return json.loads(raw)["fingerprint"]

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Manifest:
        if not isinstance(doc, dict):
            raise ManifestError(where, "manifest is not a JSON object")
        if doc.get("format") != FORMAT_NAME:
            raise ManifestError(where, f"not a shardkit manifest (format {brief(doc.get('format'))})")
        version = doc.get("format_version")
        if version not in READABLE_FORMAT_VERSIONS or isinstance(version, bool):
            raise ManifestError(where, f"format version {brief(version)} is not supported by this shardkit "
                                       f"(reads versions {', '.join(map(str, READABLE_FORMAT_VERSIONS))}); "
                                       "upgrade shardkit or re-pack")
        dtype = doc.get("dtype")
        if dtype not in READABLE_TOKEN_DTYPES:
            raise ManifestError(where, f"dtype {brief(dtype)} is not a token dtype ({', '.join(READABLE_TOKEN_DTYPES)})")
        shards_raw = doc.get("shards")
        if not isinstance(shards_raw, list) or len(shards_raw) > MAX_SHARDS:
            raise ManifestError(where, "manifest 'shards' must be a list (of at most 10,000,000 entries)")
        shards = tuple(ShardEntry.from_json(s, where) for s in shards_raw)
        names = [s.name for s in shards]
        if len(set(names)) != len(names):
            raise ManifestError(where, "manifest names a shard twice")
        compressed = any(s.compression is not None for s in shards)
        if compressed != (version == COMPRESSED_FORMAT_VERSION):
            raise ManifestError(where, f"format version {version} does not match the shards (version "
                                       f"{COMPRESSED_FORMAT_VERSION} exactly when a shard is compressed)")
        itemsize = np.dtype(dtype).itemsize
        for s in shards:
            if s.bin_bytes != s.num_tokens * itemsize:
                raise ManifestError(where, f"shard {s.name}: bin_bytes {s.bin_bytes} != tokens × {itemsize}")
        check_manifest_fields(doc, where, int(np.iinfo(np.dtype(dtype)).max))
        block = doc["checksum"]["block_size"]
        totals = doc.get("totals")
        if not isinstance(totals, dict):
            raise ManifestError(where, "manifest lacks totals")
        for key, actual in (("shards", len(shards)), ("docs", sum(s.num_docs for s in shards)),
                            ("tokens", sum(s.num_tokens for s in shards))):
            if totals.get(key) != actual:
                raise ManifestError(where, f"totals.{key} is {brief(totals.get(key))} but the shard entries add up "
                                           f"to {actual}")
        tokenizer = doc.get("tokenizer")
        if tokenizer is not None and not isinstance(tokenizer, dict):
            raise ManifestError(where, "manifest 'tokenizer' must be an object or null")
        fingerprint = doc.get("fingerprint")
        if fingerprint != compute_fingerprint(doc):
            raise ManifestError(where, "manifest content does not match its fingerprint "
                                       "(edited or corrupted; restore it or re-pack)")
        return cls(
            dtype=dtype,
            tokenizer=tokenizer,
            shards=shards,
            checksum_block_size=block,
            eos_appended=doc.get("eos_appended"),
            bos_prepended=doc.get("bos_prepended"),
            pack=doc.get("pack") if isinstance(doc.get("pack"), dict) else {},
            stats=doc.get("stats") if isinstance(doc.get("stats"), dict) else {},
            created=doc.get("created") if isinstance(doc.get("created"), dict) else {},
            fingerprint=fingerprint,
        )

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Manifest:
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestError(where, f"manifest is {len(raw):,} bytes, over the 1 GiB limit")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ManifestError(where, f"manifest is not valid JSON ({str(e)[:200]})") from None
        return cls.from_json(doc, where)

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST_NAME
        try:
            # Never open a FIFO (a hang) or a device such as /dev/zero (endless bytes), nor follow a link out.
            st = path.stat()
            if not stat.S_ISREG(st.st_mode):
                raise ManifestError(str(path), "not a regular file (a FIFO, device or directory); a dataset's "
                                               "manifest must be a plain file")
            real_root = os.path.realpath(directory)
            if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
                raise ManifestError(str(path), "a symlink pointing outside the dataset directory; shardkit "
                                               "refuses those: copy the file into the dataset instead")
            if st.st_size > MAX_MANIFEST_BYTES:
                raise ManifestError(str(path), f"manifest is {st.st_size:,} bytes, over the 1 GiB limit")
            with open(path, "rb") as f:
                raw = f.read(st.st_size + 1)  # (read(n) allocates n bytes up front: ask for what is there)
            if len(raw) != st.st_size:
                raise ManifestError(str(path), "manifest changed while being read; retry once the pack that "
                                               "writes it has finished")
        except FileNotFoundError:
            hint = ""
            if any(directory.glob(".shardkit-journal*")):
                hint = " (an unfinished pack is here: re-run the same `shardkit pack` command to finish it)"
            elif (directory / ".shardkit-merging").exists():  # writer.journal.MERGE_MARKER_NAME
                hint = " (an unfinished merge is here: re-run the same merge or --num-tasks job to finish it)"
            raise ManifestError(str(directory), f"not a shardkit dataset: no {MANIFEST_NAME}{hint}") from None
        except OSError as e:
            raise ManifestError(str(path), f"cannot read manifest ({e.strerror})") from None
        return cls.from_bytes(raw, str(path))
