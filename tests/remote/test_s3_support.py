"""The test infrastructure itself: the moto server answers like S3 and the proxy injects what it is told."""

from __future__ import annotations

import time

import pytest
import s3fs
from support.faulty_proxy import Action, Rule

NO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}, "skip_instance_cache": True}


def _fs(endpoint, **extra) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**endpoint.storage_options(**extra))


def test_server_round_trip(s3):
    fs = _fs(s3)
    fs.pipe(f"{s3.bucket}/a/b.txt", b"hello")
    assert fs.cat(f"{s3.bucket}/a/b.txt") == b"hello"
    assert s3.objects() == {"a/b.txt": b"hello"}


def test_proxy_forwards_and_records(faulty_s3):
    fs = _fs(faulty_s3, **NO_RETRIES)
    payload = bytes(range(256)) * 4096  # 1 MiB: several reads through the proxy
    fs.pipe(f"{faulty_s3.bucket}/x.bin", payload)
    assert fs.cat(f"{faulty_s3.bucket}/x.bin") == payload
    proxy = faulty_s3.proxy
    assert proxy.count(method="PUT", path=r"/x\.bin") == 1
    assert proxy.count(method="GET", path=r"/x\.bin", status=200) >= 1
    assert proxy.count(faulted=True) == 0


@pytest.mark.parametrize(("status", "error"), [(403, PermissionError), (404, FileNotFoundError)])
def test_error_rule(faulty_s3, status, error):
    fs = _fs(faulty_s3, **NO_RETRIES)
    fs.pipe(f"{faulty_s3.bucket}/k", b"data")
    rule = faulty_s3.proxy.add(Rule(Action.ERROR, method="GET", path=r"/k$", status=status, times=None))
    with pytest.raises(error):
        fs.cat(f"{faulty_s3.bucket}/k")
    assert rule.applied >= 1
    faulty_s3.proxy.remove(rule)
    assert fs.cat(f"{faulty_s3.bucket}/k") == b"data"


def test_schedule_after_and_times(faulty_s3):
    fs = _fs(faulty_s3, **NO_RETRIES)
    rule = faulty_s3.proxy.add(Rule(Action.ERROR, method="PUT", status=500, after=1, times=1))
    fs.pipe(f"{faulty_s3.bucket}/one", b"1")  # let through (after=1)
    with pytest.raises(OSError):
        fs.pipe(f"{faulty_s3.bucket}/two", b"2")  # the one failure
    fs.pipe(f"{faulty_s3.bucket}/three", b"3")  # times exhausted
    assert (rule.matched, rule.applied) == (3, 1)
    assert sorted(faulty_s3.objects()) == ["one", "three"]


@pytest.mark.parametrize("action", [Action.DROP, Action.DROP_RESPONSE, Action.TRUNCATE])
def test_connection_faults_are_retried_by_the_client(faulty_s3, action):
    fs = _fs(faulty_s3, skip_instance_cache=True)  # botocore's and s3fs's own retries on
    payload = b"z" * 300_000
    fs.pipe(f"{faulty_s3.bucket}/f", payload)
    rule = faulty_s3.proxy.add(Rule(action, method="GET", path=r"/f$", times=1))
    assert fs.cat(f"{faulty_s3.bucket}/f") == payload
    assert rule.applied == 1


def test_delay_causes_read_timeout(faulty_s3):
    fs = _fs(faulty_s3, config_kwargs={"read_timeout": 0.3, "retries": {"total_max_attempts": 1}},
             skip_instance_cache=True)
    fs.retries = 1  # s3fs retries timeouts itself (5 x 5 times): here one attempt shows the proxy's delay
    fs.pipe(f"{faulty_s3.bucket}/slow", b"s")
    rule = faulty_s3.proxy.add(Rule(Action.DELAY, method="GET", path=r"/slow$", delay=1.0, times=None))
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - botocore/aiohttp/s3fs each raise their own timeout type
        fs.cat(f"{faulty_s3.bucket}/slow")
    assert time.monotonic() - t0 < 3
    assert rule.applied == 1  # recorded in seen() only once the delayed response is sent
