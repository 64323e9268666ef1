"""Retry transient storage errors with exponential backoff and jitter; let permanent ones through at once.

Object stores fail transiently all the time (503 SlowDown, reset connections, read timeouts), and an
exhausted retry must look different from "access denied" or "no such key": the first is worth re-running,
the second needs the user to fix a URL or credentials. `is_transient` makes that call for the exceptions of
botocore, s3fs, aiohttp, fsspec and the OS; `retrying` applies a `RetryPolicy` and turns what is left into a
`RemoteError` naming what failed.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import logging
import random
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ConfigError, RemoteError, ShardkitError, exception_chain

try:
    from fsspec.exceptions import FSTimeoutError as _FSTimeout
except ImportError:  # pragma: no cover
    _FSTimeout = TimeoutError  # type: ignore[assignment,misc]

__all__ = ["RetryPolicy", "is_transient", "is_not_found", "retrying", "retrying_iter"]

T = TypeVar("T")
P = TypeVar("P")

log = logging.getLogger("shardkit.remote")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "RequestTimeoutException",
    "Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
    "BandwidthLimitExceeded", "PriorRequestNotComplete", "OperationAborted", "EC2ThrottledException",
    "IDPCommunicationError", "XAmzContentSHA256Mismatch", "BadDigest",
})
_PERMANENT_OS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_TRANSIENT_ERRNO = frozenset(
    getattr(errno, n) for n in ("EIO", "EREMOTEIO", "EBUSY", "EAGAIN", "ETIMEDOUT", "ECONNRESET", "ECONNABORTED",
                                "ECONNREFUSED", "EPIPE", "ENETUNREACH", "ENETDOWN", "EHOSTUNREACH", "ENOTCONN")
    if hasattr(errno, n))
_BASE_TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionError, TimeoutError, socket.timeout, asyncio.TimeoutError, http.client.IncompleteRead,
    http.client.RemoteDisconnected, _FSTimeout)


def _client_module(name: str) -> Any:
    """botocore.exceptions or aiohttp if this process has imported them, else None.

    An error of a client library can only exist once that library is loaded, so the classification looks
    them up instead of importing them: a process that never talks to an object store (a pack worker on
    local files) does not pay aiohttp's and botocore's import time (~0.1 s each)."""
    return sys.modules.get(name)


def _transient_types() -> tuple[type[BaseException], ...]:
    out = _BASE_TRANSIENT
    bc = _client_module("botocore.exceptions")
    if bc is not None:
        out += (bc.ConnectionError, bc.HTTPClientError, bc.IncompleteReadError, bc.ResponseStreamingError,
                bc.ReadTimeoutError, bc.ConnectTimeoutError, bc.EndpointConnectionError)
    aio = _client_module("aiohttp")
    if aio is not None:
        out += (aio.ClientConnectionError, aio.ClientPayloadError, aio.ServerTimeoutError)
    return out


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How hard to try: at most `max_attempts` calls, delays growing by `multiplier` up to `max_delay`.

    Each delay is drawn uniformly from [(1 - jitter)·d, d] so that many clients failing together do not
    retry in lockstep; no new attempt starts once `deadline` seconds have passed since the first (None: no
    deadline). `max_attempts=1` disables retries.
    """

    max_attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.5
    deadline: float | None = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ConfigError("retry delays must be >= 0 and the multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry jitter must be in [0, 1], got {self.jitter}")
        if self.deadline is not None and self.deadline <= 0:
            raise ConfigError(f"retry deadline must be > 0 seconds or None, got {self.deadline}")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """The pause before retry number `retry` (1 = the first retry), jitter included."""
        d = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return d * (1 - self.jitter * (rng or random).random())


DEFAULT_POLICY = RetryPolicy()


def _status(exc: BaseException) -> int | None:
    """The HTTP status a botocore ClientError or aiohttp ClientResponseError carries, if any."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def _verdict(exc: BaseException) -> bool | None:
    """True (transient), False (permanent) or None (this exception alone does not tell)."""
    if isinstance(exc, RemoteError):
        return exc.transient
    bc, aio = _client_module("botocore.exceptions"), _client_module("aiohttp")
    if bc is not None and isinstance(exc, bc.ClientError):
        code, status = _error_code(exc), _status(exc)
        return (code in _TRANSIENT_CODES) or (status in TRANSIENT_STATUS)
    if bc is not None and isinstance(exc, (bc.NoCredentialsError, bc.ParamValidationError)):
        return False
    if aio is not None and isinstance(exc, aio.ClientResponseError):
        return exc.status in TRANSIENT_STATUS
    if isinstance(exc, _PERMANENT_OS):
        return False
    if isinstance(exc, _transient_types()):
        return True
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in _TRANSIENT_ERRNO or None
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the operation that raised `exc` may succeed (5xx, throttling, resets, timeouts).

    The nearest exception in the cause/context chain that tells decides, so a shardkit error raised while
    handling a reset connection counts as transient and one raised while handling a 403 does not.
    """
    for e in exception_chain(exc):
        verdict = _verdict(e)
        if verdict is not None:
            return verdict
    return False


def is_not_found(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) says the object or bucket does not exist."""
    for e in exception_chain(exc):
        if isinstance(e, FileNotFoundError) or (isinstance(e, RemoteError) and e.not_found):
            return True
        if _status(e) == 404 or _error_code(e) in ("NoSuchKey", "NoSuchBucket", "NotFound", "404"):
            return True
    return False


def _describe(exc: BaseException) -> str:
    status = next((s for s in map(_status, exception_chain(exc)) if s is not None), None)
    text = str(exc) or type(exc).__name__
    if status is not None and str(status) not in text:
        text = f"HTTP {status}: {text}"
    if isinstance(exc, PermissionError) or status == 403:
        text += " (access denied: check the credentials and the bucket policy)"
    elif is_not_found(exc):
        text += " (not found: check the URL)"
    return text


def _give_up(what: str, exc: BaseException, attempts: int, transient: bool, started: float) -> RemoteError:
    if transient:
        problem = (f"still failing after {attempts} attempt(s) over {time.monotonic() - started:.1f} s: "
                   f"{_describe(exc)}; the storage may be overloaded or unreachable, re-run to continue")
    else:
        problem = _describe(exc)
    return RemoteError(what, problem, transient=transient, attempts=attempts, not_found=is_not_found(exc))


def _should_retry(policy: RetryPolicy, failures: int, started: float) -> float | None:
    """The pause before the next attempt after `failures` failed ones, or None when the policy says stop."""
    if failures >= policy.max_attempts:
        return None
    pause = policy.delay(failures)
    if policy.deadline is not None and time.monotonic() - started + pause > policy.deadline:
        return None
    return pause


def retrying(fn: Callable[[], T], *, what: str, policy: RetryPolicy = DEFAULT_POLICY,
             sleep: Callable[[float], Any] = time.sleep) -> T:
    """`fn()`, retried on transient errors; a permanent or exhausted error becomes a RemoteError.

    `what` names the operation and its URL ("upload s3://b/ds/x.bin") for the message. A ShardkitError that
    is not caused by a storage problem (a bad config, a corrupt file) passes through unchanged.
    """
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as e:
            transient = is_transient(e)
            if not transient and (isinstance(e, ShardkitError) or not _is_storage_error(e)):
                raise  # shardkit's own errors already say what is wrong and where
            pause = _should_retry(policy, attempt, started) if transient else None
            if pause is None:
                raise _give_up(what, e, attempt, transient, started) from e
            log.warning("%s: attempt %d failed (%s); retrying in %.2f s", what, attempt, _describe(e), pause)
            sleep(pause)


def retrying_iter(start: Callable[[P | None], Iterable[T]], position: Callable[[T], P], *, what: str,
                  policy: RetryPolicy = DEFAULT_POLICY, sleep: Callable[[float], Any] = time.sleep,
                  ) -> Iterator[T]:
    """The items of `start(None)`; after a transient error, continue with `start(position(last item))`.

    For streams that can restart at a position (a reader at a record number): `position(item)` must name
    where the stream continues after `item`. Attempts are counted per resume position, so a long stream
    survives many separate hiccups but not one persistent failure at the same place.
    """
    resume: P | None = None
    failed_at: P | None = None
    failures, started = 0, time.monotonic()
    while True:
        try:
            for item in start(resume):
                resume = position(item)
                yield item
            return
        except Exception as e:
            if not is_transient(e):
                raise
            if failures == 0 or resume != failed_at:
                # progress since the last failure: a fresh budget (a stream that fails again at the same
                # position, even after re-yielding what it had, has made no progress and keeps counting)
                failures, started, failed_at = 0, time.monotonic(), resume
            failures += 1
            pause = _should_retry(policy, failures, started)
            if pause is None:
                raise _give_up(what, e, failures, True, started) from e
            log.warning("%s: stream failed (%s); continuing from the last good position in %.2f s", what,
                        _describe(e), pause)
            sleep(pause)


def _is_storage_error(exc: BaseException) -> bool:
    """Whether `exc` comes from storage (worth a RemoteError) rather than from shardkit's own checks."""
    for e in exception_chain(exc):
        if isinstance(e, OSError) or _status(e) is not None:
            return True
        bc = _client_module("botocore.exceptions")
        if bc is not None and isinstance(e, bc.BotoCoreError):
            return True
    return False
