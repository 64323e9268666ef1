"""The RetryPolicy's deadline holds end to end: the S3 client's own retries and timeouts fit inside it.

botocore (several attempts with backoff) and s3fs (five more around each call) used to retry inside one
shardkit attempt: with `deadline=5` a server that accepts and then closes connections took ~40 s to fail,
a killed one ~12 s (the field saw 179-314 s with the defaults). Each case here must fail with a
RemoteError within the deadline plus one attempt's timeouts.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest
from support.faulty_proxy import Action, Rule
from support.s3server import s3_storage_options

from shardkit.errors import ManifestError, RemoteError
from shardkit.format.manifest import compute_fingerprint
from shardkit.loader import Loader
from shardkit.remote.dataset import RemoteConfig, open_remote_dataset
from shardkit.remote.fs import _with_limits, client_limits
from shardkit.remote.retry import RetryPolicy
from shardkit.remote.upload import list_remote
from shardkit.writer import write_dataset

DEADLINE = 5.0
POLICY = RetryPolicy(initial_delay=0.2, max_delay=1.0, deadline=DEADLINE)
LIMITS = client_limits(POLICY)
SLACK = LIMITS["connect_timeout"] + LIMITS["read_timeout"] + 1.5  # one attempt may start just before the end


def _fails_in_time(endpoint: str, tmp_path) -> RemoteError:
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as e:
        open_remote_dataset("s3://bucket/ds", RemoteConfig(cache_dir=tmp_path / "cache", retry=POLICY,
                                                           storage_options=s3_storage_options(endpoint)))
    took = time.monotonic() - t0
    assert took < DEADLINE + SLACK, f"took {took:.1f} s with a {DEADLINE} s deadline"
    assert e.value.transient
    return e.value


def test_a_server_that_accepts_then_closes_fails_within_the_deadline(faulty_s3, tmp_path):
    faulty_s3.proxy.add(Rule(Action.DROP, times=None))
    err = _fails_in_time(faulty_s3.endpoint_url, tmp_path)
    assert err.attempts > 1  # shardkit's policy did the retrying, not the client inside one attempt


def test_a_server_that_never_answers_fails_within_the_deadline(faulty_s3, tmp_path):
    faulty_s3.proxy.add(Rule(Action.DELAY, times=None, delay=600))
    _fails_in_time(faulty_s3.endpoint_url, tmp_path)


def test_a_killed_server_fails_within_the_deadline(tmp_path, aws_env):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: every connect is refused, as after a kill
    err = _fails_in_time(f"http://127.0.0.1:{port}", tmp_path)
    assert err.attempts > 1


def test_a_raw_socket_that_accepts_and_closes(tmp_path, aws_env):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        _fails_in_time(f"http://127.0.0.1:{srv.getsockname()[1]}", tmp_path)
    finally:
        stop.set()
        t.join()
        srv.close()


def test_uploads_listing_follows_the_same_limits(faulty_s3):
    faulty_s3.proxy.add(Rule(Action.DROP, times=None))
    t0 = time.monotonic()
    with pytest.raises(RemoteError):
        list_remote(faulty_s3.url("ds"), storage_options=faulty_s3.storage_options(), policy=POLICY)
    assert time.monotonic() - t0 < DEADLINE + SLACK


def test_the_callers_own_client_settings_win():
    mine = _with_limits("s3://b/k", {"config_kwargs": {"read_timeout": 300}}, POLICY)
    assert mine["config_kwargs"]["read_timeout"] == 300
    assert mine["config_kwargs"]["retries"] == {"total_max_attempts": 1, "mode": "standard"}
    assert _with_limits("gs://b/k", {}, POLICY) == {}


def test_a_remote_manifest_edited_to_another_dtype_is_refused_at_mapping(s3, tmp_path):
    """The remote shard's `.idx` header (one range GET) is cross-checked like a local one's."""
    local = tmp_path / "ds"
    write_dataset(local, [np.arange(1, 40, dtype=np.uint16)] * 6, max_tokens_per_shard=100, checksum_block_size=64)
    doc = json.loads((local / "manifest.json").read_bytes())
    doc["dtype"] = "int16"
    doc["fingerprint"] = compute_fingerprint(doc)
    (local / "manifest.json").write_text(json.dumps(doc))
    client = s3.server.client()
    for f in sorted(local.iterdir()):
        client.put_object(Bucket=s3.bucket, Key=f"ds/{f.name}", Body=f.read_bytes())
    data = open_remote_dataset(s3.url("ds"), RemoteConfig(cache_dir=tmp_path / "cache", retry=POLICY,
                                                          storage_options=s3.storage_options()))
    with data, pytest.raises(ManifestError, match="index records token dtype uint16"):
        next(iter(Loader(data, seq_len=8, batch_schedule=2, readahead=False)))
