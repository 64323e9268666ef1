"""A fault-injecting HTTP proxy for tests: sits in front of an S3 endpoint and misbehaves on request.

Point the code under test at `proxy.endpoint_url` instead of the server's; every request passes through
unchanged unless a `Rule` matches it, and then the proxy answers with an error status, drops the
connection (before or after the upstream saw the request, or in the middle of the response body), or
delays. Rules are added and removed from the test thread while requests are in flight (thread-safe), and
every request is recorded (`proxy.seen()`), so a test can assert what happened and in which order:

    with FaultyProxy.start(server.port) as proxy:
        proxy.add(Rule(Action.ERROR, method="PUT", path=r"\\.bin$", status=503, times=2))
        ...  # the first two shard uploads get 503 SlowDown, the rest go through
        assert proxy.count(method="PUT", status=503) == 2

It speaks just enough HTTP/1.1 for S3 clients: keep-alive, Content-Length and chunked bodies, and
`Expect: 100-continue` (answered by the proxy itself, the body is then forwarded without the header).
"""

from __future__ import annotations

import contextlib
import re
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import BinaryIO

__all__ = ["Action", "FaultyProxy", "Rule", "Seen"]

_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout"}
_S3_CODES = {403: "AccessDenied", 404: "NoSuchKey", 500: "InternalError", 503: "SlowDown",
             429: "SlowDown", 408: "RequestTimeout", 400: "InvalidRequest", 502: "BadGateway",
             504: "GatewayTimeout"}
_MAX_HEADER = 64 << 10


class Action(Enum):
    """What a matching rule does to a request."""

    ERROR = "error"  # answer `status` with an S3-style XML error; upstream never sees the request
    DROP = "drop"  # close the connection right after reading the request; upstream never sees it
    DROP_RESPONSE = "drop-response"  # forward (upstream acts on it!), then close without answering
    TRUNCATE = "truncate"  # forward, send the headers and `body_fraction` of the body, then close
    DELAY = "delay"  # wait `delay` seconds, then forward normally (for timeouts and slow links)


@dataclass
class Rule:
    """Which requests to hit and how: `method` and `path` (a regex searched in the path and query) filter.

    The rule lets the first `after` matches through, then applies to the next `times` (None: all); `every`
    applies it to every n-th match only (a schedule). Counters say how often it matched and fired.
    """

    action: Action
    method: str | None = None
    path: str | None = None
    status: int = 503
    times: int | None = 1
    after: int = 0
    every: int = 1
    delay: float = 0.0
    body_fraction: float = 0.5
    reset: bool = False  # close with an RST (connection reset by peer) instead of a FIN
    matched: int = 0
    applied: int = 0
    _pattern: re.Pattern[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path) if self.path is not None else None
        if self.every < 1:
            raise ValueError("every must be >= 1")

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method.upper() == method)
                and (self._pattern is None or self._pattern.search(path) is not None))

    def fires(self) -> bool:
        """Called under the proxy's lock for a matching request: count it and decide."""
        self.matched += 1
        k = self.matched - self.after
        if k <= 0 or (k - 1) % self.every:
            return False
        if self.times is not None and self.applied >= self.times:
            return False
        self.applied += 1
        return True


@dataclass(frozen=True)
class Seen:
    """One request the proxy handled: what it was, what the client got, and when."""

    seq: int
    method: str
    path: str
    action: Action | None  # None: forwarded untouched
    status: int | None  # the status the client received (None: the connection was dropped)
    started: float  # time.monotonic() when the request had been read
    finished: float  # when the response was sent (or the connection dropped)


class _Closed(Exception):
    """The peer closed the connection (cleanly, between messages)."""


def _read_head(f: BinaryIO) -> bytes:
    lines = []
    size = 0
    while True:
        line = f.readline(_MAX_HEADER + 1)
        if not line:
            if lines:
                raise ConnectionError("connection closed inside a message header")
            raise _Closed
        if not lines and line in (b"\r\n", b"\n"):  # tolerate stray CRLF between messages
            continue
        lines.append(line)
        size += len(line)
        if size > _MAX_HEADER:
            raise ConnectionError("message header too large")
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            out[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    return out


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ConnectionError(f"connection closed after {len(data)} of {n} body bytes")
    return data


def _read_chunked(f: BinaryIO) -> bytes:
    """A chunked body in its raw wire form (sizes, chunks, trailers), so it is forwarded byte for byte."""
    parts = []
    while True:
        size_line = f.readline(1 << 16)
        if not size_line:
            raise ConnectionError("connection closed inside a chunked body")
        parts.append(size_line)
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, up to the empty line
                trailer = f.readline(1 << 16)
                if not trailer:
                    raise ConnectionError("connection closed inside chunked trailers")
                parts.append(trailer)
                if trailer in (b"\r\n", b"\n"):
                    return b"".join(parts)
        parts.append(_read_exact(f, size + 2))


def _read_body(f: BinaryIO, headers: dict[str, str], *, until_close: bool) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _read_chunked(f)
    if "content-length" in headers:
        return _read_exact(f, int(headers["content-length"]))
    return f.read() if until_close else b""


def _without_header(head: bytes, name: bytes) -> bytes:
    lines = head.split(b"\r\n")
    return b"\r\n".join(ln for ln in lines if not ln.lower().startswith(name.lower() + b":"))


def _error_response(status: int, method: str, path: str) -> bytes:
    code = _S3_CODES.get(status, "InternalError")
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected by FaultyProxy</Message><Resource>{path}</Resource>"
            f"<RequestId>faulty-proxy</RequestId></Error>").encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nx-amz-request-id: faulty-proxy\r\n\r\n").encode()
    return head + (b"" if method == "HEAD" else body)


def _close(sock: socket.socket, *, reset: bool) -> None:
    with contextlib.suppress(OSError):
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Upstream:
    """One keep-alive connection to the real server, reopened when the server closed it."""

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.sock: socket.socket | None = None
        self.rfile: BinaryIO | None = None

    def exchange(self, request: bytes, method: str) -> tuple[bytes, bytes, int, bool]:
        """Send `request`; the response head, body, status and whether the connection must close after it."""
        for attempt in (0, 1):
            fresh = self.sock is None
            if fresh:
                self.sock = socket.create_connection(self.addr, timeout=60)
                self.rfile = self.sock.makefile("rb")
            assert self.sock is not None and self.rfile is not None
            try:
                self.sock.sendall(request)
                head = _read_head(self.rfile)
                break
            except (OSError, _Closed, ConnectionError):
                self.close()  # a keep-alive connection the server had closed: retry once on a new one
                if fresh or attempt:
                    raise
        status = int(head.split(b" ", 2)[1])
        headers = _headers(head)
        closing = headers.get("connection", "").lower() == "close" or head.startswith(b"HTTP/1.0")
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
        body = b"" if no_body else _read_body(self.rfile, headers, until_close=not framed)
        if closing or not (framed or no_body):
            self.close()
            closing = True
        return head, body, status, closing

    def close(self) -> None:
        if self.sock is not None:
            _close(self.sock, reset=False)
        self.sock = self.rfile = None


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        proxy = self.server.proxy
        conn: socket.socket = self.request
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = conn.makefile("rb")
        upstream = _Upstream(proxy.upstream_host, proxy.upstream_port)
        try:
            while not proxy.stopping.is_set():
                try:
                    if not self._one(proxy, conn, rfile, upstream):
                        return
                except (_Closed, OSError, ConnectionError, ValueError):
                    return
        finally:
            upstream.close()
            with contextlib.suppress(OSError):
                rfile.close()
            _close(conn, reset=False)

    def _one(self, proxy: FaultyProxy, conn: socket.socket, rfile: BinaryIO, upstream: _Upstream) -> bool:
        """Handle one request; False when the client connection must be closed."""
        head = _read_head(rfile)
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, path = request_line.split(" ", 2)[:2]
        headers = _headers(head)
        rule, cancelled = proxy._decide(method, path)
        expects = headers.get("expect", "").lower() == "100-continue"
        if rule is not None and rule.action is Action.ERROR and expects:
            # refuse before the body is sent, as a real server does; the client may not send it now
            conn.sendall(_error_response(rule.status, method, path))
            proxy._record(method, path, rule, rule.status)
            return False
        if expects:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = _without_header(head, b"expect")
        body = _read_body(rfile, headers, until_close=False)
        started = time.monotonic()
        if rule is not None:
            if rule.action is Action.ERROR:
                conn.sendall(_error_response(rule.status, method, path))
                proxy._record(method, path, rule, rule.status, started)
                return True
            if rule.action is Action.DROP:
                proxy._record(method, path, rule, None, started)
                _close(conn, reset=rule.reset)
                return False
            if rule.action is Action.DELAY and cancelled.wait(rule.delay):
                _close(conn, reset=False)  # clear()/stop() while waiting: drop it, never forward it late
                return False
        resp_head, resp_body, status, closing = upstream.exchange(head + body, method)
        if rule is not None and rule.action is Action.DROP_RESPONSE:
            proxy._record(method, path, rule, None, started)
            _close(conn, reset=rule.reset)
            return False
        if rule is not None and rule.action is Action.TRUNCATE:
            conn.sendall(resp_head + resp_body[: int(len(resp_body) * rule.body_fraction)])
            proxy._record(method, path, rule, None, started)
            _close(conn, reset=rule.reset)
            return False
        # recorded before the client can see the response: a test that counts right after its call returns
        # must find the request
        proxy._record(method, path, rule if rule is not None and rule.action is Action.DELAY else None, status,
                      started)
        conn.sendall(resp_head + resp_body)
        return not closing


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultyProxy


class FaultyProxy:
    """The proxy: `start(upstream_port)`, add rules, read what it saw, `stop()`."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._cancel = threading.Event()  # set by clear()/stop(): pending delays end by dropping the request
        self._seen: list[Seen] = []
        self._server = _Server(("127.0.0.1", 0), _Handler, bind_and_activate=True)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="faulty-proxy", daemon=True)

    @classmethod
    def start(cls, upstream_port: int, upstream_host: str = "127.0.0.1") -> FaultyProxy:
        proxy = cls(upstream_port, upstream_host)
        proxy._thread.start()
        return proxy

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.stopping.set()
        self._cancel.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the control API (any thread) ---
    def add(self, rule: Rule) -> Rule:
        """Add a rule (checked after the earlier ones; the first that fires wins) and return it."""
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            self._rules = [r for r in self._rules if r is not rule]

    def clear(self) -> None:
        """Remove every rule and forget what was seen (between the phases of one test).

        Requests still being delayed are dropped rather than forwarded late, so a request of a killed
        client cannot reach the server after the test moved on.
        """
        with self._lock:
            self._rules.clear()
            self._seen.clear()
            self._cancel.set()
            self._cancel = threading.Event()

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def count(self, *, method: str | None = None, path: str | None = None, status: int | None = None,
              action: Action | None = None, faulted: bool | None = None) -> int:
        """How many recorded requests match every given filter (`path` is a regex)."""
        pattern = re.compile(path) if path is not None else None
        n = 0
        for s in self.seen():
            if method is not None and s.method != method.upper():
                continue
            if pattern is not None and not pattern.search(s.path):
                continue
            if status is not None and s.status != status:
                continue
            if action is not None and s.action is not action:
                continue
            if faulted is not None and (s.action is not None) != faulted:
                continue
            n += 1
        return n

    def wait_for(self, predicate: Callable[[FaultyProxy], bool], timeout: float = 10.0) -> bool:
        """Poll `predicate(self)` until it is true or `timeout` passes (for tests racing a subprocess)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.01)
        return predicate(self)

    # --- used by the handler threads ---
    def _decide(self, method: str, path: str) -> tuple[Rule | None, threading.Event]:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path) and rule.fires():
                    return rule, self._cancel
            return None, self._cancel

    def _record(self, method: str, path: str, rule: Rule | None, status: int | None,
                started: float | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            self._seen.append(Seen(len(self._seen), method, path, rule.action if rule else None, status,
                                   started if started is not None else now, now))
