"""A real S3 endpoint for tests: moto's standalone server in a subprocess on 127.0.0.1.

Use it through the fixtures in tests/remote/conftest.py (`s3`, `s3_bucket`, `faulty_s3`); this module only
knows how to start, wait for and stop the server, and how to talk to it:

    with MotoServer.start() as server:
        server.create_bucket("data")
        fs = s3fs.S3FileSystem(**server.storage_options())

The server is a separate process (its own interpreter, real HTTP on a real socket), so code under test
goes through botocore/aiobotocore/s3fs exactly as against AWS; nothing is patched in-process.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CREDENTIALS_ENV", "MotoServer", "free_port", "running_server", "s3_storage_options", "unique_bucket"]

# dummy credentials: moto accepts any; real values must never reach a test
CREDENTIALS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # never probe 169.254.169.254 for credentials (slow, and not ours)
    "AWS_CONFIG_FILE": os.devnull,  # the developer's ~/.aws must not leak into tests
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
_UNSET_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE")


def free_port() -> int:
    """A TCP port nobody listens on right now (the server binds it a moment later; `start` retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_bucket(prefix: str = "test") -> str:
    """A fresh, valid bucket name, so tests never see each other's objects and need no reset."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def s3_storage_options(endpoint_url: str, **extra: Any) -> dict[str, Any]:
    """fsspec/s3fs options for `endpoint_url` with the dummy credentials (explicit, not from the env).

    `config_kwargs` (botocore Config) is taken from `extra` and merged, e.g. ``{"retries": {"max_attempts":
    1}}`` so a test sees shardkit's own retries rather than botocore's.
    """
    options: dict[str, Any] = {
        "anon": False,
        "key": CREDENTIALS_ENV["AWS_ACCESS_KEY_ID"],
        "secret": CREDENTIALS_ENV["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": endpoint_url, "region_name": "us-east-1"},
    }
    options.update(extra)
    return options


def _get(host: str, port: int, path: str, *, method: str = "GET", timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@dataclass
class MotoServer:
    """A running moto server process; `stop()` (or leaving the `with`) kills it."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: str
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(cls, *, log_dir: str | None = None, timeout: float = 30.0, attempts: int = 3) -> MotoServer:
        """Start `python -m moto.server` on a free port of 127.0.0.1 and wait until it answers."""
        last: Exception | None = None
        for _ in range(attempts):  # a free port can be taken between free_port() and the bind
            port = free_port()
            log_path = os.path.join(log_dir or os.environ.get("TMPDIR", "/tmp"), f"moto-{port}.log")
            env = {k: v for k, v in os.environ.items() if k not in _UNSET_ENV}
            env.update(CREDENTIALS_ENV)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    start_new_session=True)  # a Ctrl-C of pytest reaches us, and we stop the server ourselves
            server = cls("127.0.0.1", port, proc, log_path)
            try:
                server.wait_ready(timeout)
                return server
            except RuntimeError as e:
                last = e
                server.stop()
        raise RuntimeError(f"moto server did not start: {last}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.process.returncode}; log: {self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if _get(self.host, self.port, "/moto-api/data.json", timeout=1.0) == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"moto server not ready after {timeout:.0f} s; log: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A plain boto3 S3 client on this server, for setting up and inspecting state outside the code under test."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                            aws_access_key_id=CREDENTIALS_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS_ENV["AWS_SECRET_ACCESS_KEY"])

    def create_bucket(self, name: str | None = None) -> str:
        name = name or unique_bucket()
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return s3_storage_options(self.endpoint_url, **extra)

    def reset(self) -> None:
        """Drop every bucket and object (moto's reset API); per-test buckets usually make this unnecessary."""
        _get(self.host, self.port, "/moto-api/reset", method="POST")
        self.buckets.clear()

    def keys(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under `prefix` as key -> bytes (tests compare whole remote datasets)."""
        c = self.client()
        out: dict[str, bytes] = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = c.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out


@contextlib.contextmanager
def running_server(**kwargs: Any) -> Iterator[MotoServer]:
    server = MotoServer.start(**kwargs)
    try:
        yield server
    finally:
        server.stop()
