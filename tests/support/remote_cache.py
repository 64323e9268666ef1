"""Reading a remote dataset's block cache straight from disk, and the dummy AWS environment, for the tests
that check what the cache holds after faults (tests/remote, tests/faults)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardkit.format.checksums import ShardChecksums, digest_bytes
from shardkit.remote.blocks import PRESENT
from support.s3server import CREDENTIALS_ENV

_ENV_TO_DROP = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def set_aws_test_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The dummy credentials in the environment, and no profile or endpoint from the developer's."""
    for k, v in CREDENTIALS_ENV.items():
        monkeypatch.setenv(k, v)
    for k in _ENV_TO_DROP:
        monkeypatch.delenv(k, raising=False)
    return dict(CREDENTIALS_ENV)


def cache_state(ds_dir: Path) -> np.ndarray:
    """The per-block state bytes of a dataset's cache directory (ABSENT / RESERVED / PRESENT)."""
    raw = (ds_dir / "state").read_bytes()
    return np.frombuffer(raw, dtype=np.uint8, count=int.from_bytes(raw[16:24], "little"), offset=64).copy()


def verify_present(ds_dir: Path, block: int) -> int:
    """Every PRESENT block of the cache holds exactly its bytes (by its sidecar digest); how many there are."""
    manifest = json.loads((ds_dir / "manifest.json").read_bytes())
    state = cache_state(ds_dir)
    gid, count = 0, 0
    for e in manifest["shards"]:
        sums = ShardChecksums.read(ds_dir / f"{e['name']}.sum.json").files[f"{e['name']}.bin"]
        data = (ds_dir / f"{e['name']}.bin").read_bytes()
        for i, want in enumerate(sums.blocks if e["bin_bytes"] else []):
            if state[gid] == PRESENT:
                assert digest_bytes(data[i * block:(i + 1) * block]) == want, f"{e['name']} block {i} is torn"
                count += 1
            gid += 1
    return count
