"""The pack configuration: one frozen, validated object per run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import ConfigError
from ..readers import ReaderConfig
from ..remote.retry import RetryPolicy
from ..remote.upload import UploadVerify
from ..writer import CompressionConfig, ShardLimits
from .budget import DEFAULT_MAX_SKIP_FRACTION
from .tasks import TaskSpec

__all__ = ["OnError", "ResumeMode", "TokenizeOptions", "PackConfig"]


class OnError(Enum):
    """What a bad record does: `skip` counts and reports it; `fail` stops the pack (exit 1)."""

    SKIP = "skip"
    FAIL = "fail"


class ResumeMode(Enum):
    """`auto` continues an unfinished pack of the same job; `require` insists on one; `never` refuses."""

    AUTO = "auto"
    REQUIRE = "require"
    NEVER = "never"


@dataclass(frozen=True, kw_only=True)
class TokenizeOptions:
    tokenizer: str = "bytes"
    backend: str = "auto"
    append_eos: bool = True
    prepend_bos: bool = False

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "hf", "tiktoken", "fastokens"):
            raise ConfigError(f"tokenizer backend must be auto, hf, tiktoken or fastokens, got {self.backend!r}")


@dataclass(frozen=True, kw_only=True)
class PackConfig:
    inputs: tuple[str, ...]
    output: str
    tokenize: TokenizeOptions = field(default_factory=TokenizeOptions)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    limits: ShardLimits = field(default_factory=ShardLimits)
    compression: CompressionConfig = field(default_factory=CompressionConfig)  # default: plain NAME.bin
    on_error: OnError = OnError.SKIP
    # the skip budget (budget.py): past this share of skipped records or input bytes the pack is not
    # finalised. Not part of the job: re-running with a larger budget finishes the same pack at once.
    max_skip_fraction: float = DEFAULT_MAX_SKIP_FRACTION
    workers: int = 0  # 0: `auto_workers` of the usable cores
    overwrite: bool = False
    resume: ResumeMode = ResumeMode.AUTO
    # remote inputs and outputs (any fsspec URL; docs/remote.md). None of these shape the output bytes.
    storage_options: Mapping[str, Any] | None = None  # fsspec options for remote inputs and the output
    staging_dir: str | None = None  # remote output: local staging root ($SHARDKIT_STAGING_DIR, else temp)
    upload_verify: UploadVerify = UploadVerify.FULL
    upload_parallel: int = 4
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # transient storage errors
    task: TaskSpec | None = None  # pack one task of a split job into a part (see tasks.py)

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ConfigError("no inputs given: name at least one file, directory, glob or URL")
        if self.workers < 0:
            raise ConfigError(f"workers must be ≥ 0 (0 = chosen from the cores), got {self.workers}")
        if self.limits.checksum_block_size < 4096:
            raise ConfigError("checksum block size must be at least 4 KiB")
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise ConfigError(f"storage_options must be a dict of fsspec options, got {type(self.storage_options).__name__}")
        if isinstance(self.max_skip_fraction, bool) or not 0.0 <= self.max_skip_fraction <= 1.0:
            raise ConfigError(f"max_skip_fraction must be a number from 0 to 1 (0.005 = 5 per mille), got "
                              f"{self.max_skip_fraction!r}")
        if self.upload_parallel < 1:
            raise ConfigError(f"upload_parallel must be >= 1, got {self.upload_parallel}")

    @property
    def effective_workers(self) -> int:
        return self.workers or auto_workers(usable_cores())

    def options_json(self) -> dict[str, Any]:
        """Everything that shapes the output bytes (never the worker count)."""
        return {
            "text_field": self.reader.text_field,
            "id_field": self.reader.id_field,
            "encoding_errors": self.reader.encoding_errors,
            "append_eos": self.tokenize.append_eos,
            "prepend_bos": self.tokenize.prepend_bos,
            "shard_max_bytes": self.limits.max_bytes,
            "shard_max_tokens": self.limits.max_tokens,
            "checksum_block_size": self.limits.checksum_block_size,
            "on_error": self.on_error.value,
            # only when enabled: a plain pack's options (and fingerprint) do not mention compression at all
            **({"compression": self.compression.to_json()} if self.compression.enabled else {}),
        }


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or a job's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def auto_workers(cores: int) -> int:
    """`workers=0`: one tokenizer process per core, except on one or two cores, where one worker is
    faster — its reading, tokenizing and writing threads already keep two cores busy (pipeline.py),
    without a second interpreter, tokenizer load and result transfer (1.3–1.4× two workers on the
    2-core benchmark machine, docs/benchmarks.md)."""
    return 1 if cores <= 2 else cores
