"""Fixtures for tests against real S3 (a moto server subprocess), directly or through a faulty proxy.

- `s3_server` (session): the running `MotoServer`; started once, killed at the end of the session.
- `s3` (test): an `S3Endpoint` with a fresh bucket, its `storage_options` for fsspec/s3fs, and the dummy
  AWS credentials set in the environment for this test only.
- `faulty_proxy` (session) / `faulty_s3` (test): the same, with every request going through a
  `FaultyProxy`; rules and records are cleared before each test.

Tests needing neither never start the server (the fixtures are lazy).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("s3fs", reason="remote tests need the test extra: pip install -e '.[test]'")
pytest.importorskip("moto.server", reason="remote tests need moto[server] (the test extra)")

from support.faulty_proxy import FaultyProxy  # noqa: E402
from support.remote_cache import set_aws_test_env
from support.s3server import MotoServer, s3_storage_options  # noqa: E402


@dataclass(frozen=True)
class S3Endpoint:
    """Where a test talks to S3: the endpoint (server or proxy), a fresh bucket, and options for fsspec."""

    server: MotoServer
    endpoint_url: str
    bucket: str
    proxy: FaultyProxy | None = None

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """s3fs options for this endpoint; extra keys (e.g. config_kwargs) are merged in."""
        return s3_storage_options(self.endpoint_url, **extra)

    def url(self, key: str = "") -> str:
        """`s3://BUCKET/key`."""
        return f"s3://{self.bucket}/{key.lstrip('/')}"

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        """Every object under `prefix` (read directly from the server, never through the proxy)."""
        return self.server.keys(self.bucket, prefix)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer.start(log_dir=str(tmp_path_factory.mktemp("moto")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def faulty_proxy(s3_server: MotoServer) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy.start(s3_server.port)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The dummy credentials in the environment (and no profile or endpoint from the developer's)."""
    return set_aws_test_env(monkeypatch)


@pytest.fixture()
def s3(s3_server: MotoServer, aws_env: dict[str, str]) -> S3Endpoint:
    return S3Endpoint(s3_server, s3_server.endpoint_url, s3_server.create_bucket())


@pytest.fixture()
def faulty_s3(s3_server: MotoServer, faulty_proxy: FaultyProxy, aws_env: dict[str, str]) -> Iterator[S3Endpoint]:
    faulty_proxy.clear()
    yield S3Endpoint(s3_server, faulty_proxy.endpoint_url, s3_server.create_bucket(), faulty_proxy)
    faulty_proxy.clear()
