"""`adopt()`: wrap existing Megatron-LM `.bin/.idx` pairs in a shardkit manifest without copying tokens.

Shards must live inside the dataset directory (names never carry paths), so a prefix outside the
output directory is hard-linked in: same bytes, no copy. Across filesystems a hard link is impossible;
the error says to put the output on the same filesystem.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError, ManifestError
from .format.atomic import atomic_write_bytes
from .format.checksums import DEFAULT_BLOCK_SIZE, ShardChecksums, digest_bytes, file_block_digests
from .format.idx import check_index_arrays, read_index
from .format.manifest import MANIFEST_NAME, Manifest, ShardEntry, check_shard_name

__all__ = ["AdoptResult", "adopt"]


@dataclass(frozen=True)
class AdoptResult:
    path: Path
    manifest: Manifest
    linked: int
    in_place: int


def _place(src: Path, dst: Path) -> bool:
    """Make `src` available at `dst`; True if it was linked (False: it already is that file)."""
    if dst.exists():
        if os.path.samefile(src, dst):
            real_root = os.path.realpath(dst.parent)
            if os.path.commonpath([real_root, os.path.realpath(dst)]) != real_root:
                raise ManifestError(str(dst), "a symlink pointing outside the output directory: a dataset "
                                              "refuses those, so it could not be opened; adopt into another "
                                              "directory on the same filesystem (the target is hard-linked in), "
                                              "or replace the link by the file")
            return False
        raise ConfigError(f"{dst} already exists and is a different file; choose an empty output directory")
    try:
        os.link(os.path.realpath(src), dst)  # a symlinked input: link its target, never the link itself
    except OSError as e:
        if e.errno == errno.EXDEV:
            raise ConfigError(f"cannot hard-link {src} into {dst.parent}: different filesystems. Put the "
                              "output directory on the same filesystem as the data (or adopt in place with "
                              f"-o {src.parent})") from None
        raise ConfigError(f"cannot link {src} to {dst}: {e.strerror}") from None
    return True


def adopt(
    prefixes: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    tokenizer: dict | None = None,
    checksum_block_size: int = DEFAULT_BLOCK_SIZE,
    overwrite: bool = False,
) -> AdoptResult:
    """Write manifest + checksum sidecars around Megatron data; each prefix names PREFIX.bin/PREFIX.idx."""
    if not prefixes:
        raise ConfigError("name at least one Megatron prefix (the path without .bin/.idx)")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST_NAME).exists() and not overwrite:
        raise ConfigError(f"{out} already holds a dataset manifest; pass --overwrite to replace it")
    entries: list[ShardEntry] = []
    dtype: np.dtype | None = None
    linked = in_place = 0
    megatron_docs = 0
    for raw in prefixes:
        prefix = Path(str(raw).removesuffix(".bin").removesuffix(".idx"))
        bin_src, idx_src = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
        for p in (bin_src, idx_src):
            if not p.is_file():
                raise ManifestError(str(p), "missing: a Megatron prefix needs both PREFIX.bin and PREFIX.idx")
        name = check_shard_name(prefix.name, str(prefix))
        if any(e.name == name for e in entries):
            raise ConfigError(f"two prefixes share the name {name!r}; shard names must be unique")
        idx = read_index(idx_src, check=False)
        bin_size = bin_src.stat().st_size
        check_index_arrays(idx, str(idx_src), bin_size=bin_size)
        if dtype is None:
            dtype = idx.header.dtype
        elif idx.header.dtype != dtype:
            raise ConfigError(f"{idx_src}: dtype {idx.header.dtype.name} differs from the first prefix's "
                              f"{dtype.name}; adopt them as separate datasets")
        megatron_docs += idx.header.num_doc_indices - 1
        placed = [_place(src, out / src.name) for src in (bin_src, idx_src)]
        linked += sum(placed)
        in_place += 2 - sum(placed)
        sums = ShardChecksums(block_size=checksum_block_size, files={
            bin_src.name: file_block_digests(out / bin_src.name, checksum_block_size),
            idx_src.name: file_block_digests(out / idx_src.name, checksum_block_size),
        })
        sidecar = sums.to_bytes()
        atomic_write_bytes(out / f"{name}.sum.json", sidecar)
        entries.append(ShardEntry(name=name, num_docs=idx.header.num_sequences,
                                  num_tokens=bin_size // dtype.itemsize, bin_bytes=bin_size,
                                  idx_bytes=idx_src.stat().st_size, sum_digest=digest_bytes(sidecar)))
    if dtype is None:  # unreachable: prefixes is non-empty
        raise ConfigError("no prefixes adopted")
    manifest = Manifest(dtype=dtype.name, tokenizer=tokenizer, shards=tuple(entries),
                        checksum_block_size=checksum_block_size, eos_appended=None, bos_prepended=None,
                        pack={"adopted": [str(p) for p in prefixes]},
                        stats={"megatron_documents": megatron_docs})
    manifest.save(out)
    return AdoptResult(path=out, manifest=Manifest.load(out), linked=linked, in_place=in_place)
