"""A real TCP proxy on 127.0.0.1 in front of the S3-protocol server that injects faults by rule.

It reads each HTTP/1.1 request whole (head and body, ``Content-Length`` or chunked), decides by
the first matching rule, and then either forwards it and relays the reply byte for byte, or:

- ``reset``: closes the client connection with a TCP reset; the request never reaches S3;
- ``500`` / ``503``: answers with that status and an S3 XML error (``InternalError`` /
  ``ServiceUnavailable``); the request never reaches S3;
- ``slowdown``: answers 503 with ``<Code>SlowDown</Code>``; the request never reaches S3;
- ``drop_after``: forwards the request, reads S3's whole reply (the request took effect),
  then resets the client connection: the reply is lost.

Rules select an S3 operation (``OPERATIONS``) and fire with a probability drawn from the
proxy's seeded generator, optionally only for the first N matches. Everything is bounded: the
accept loop polls a stop flag, every socket has a timeout, and a connection serves a bounded
number of requests.
"""

from __future__ import annotations

import contextlib
import random
import socket
import socketserver
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs, urlsplit

FAULTS = ("reset", "500", "503", "slowdown", "drop_after")
MAX_HEAD_BYTES = 64 * 1024
MAX_REQUESTS_PER_CONNECTION = 10_000
CLIENT_IDLE_SECONDS = 15.0
UPSTREAM_SECONDS = 30.0


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    raw: bytes  # exactly what is forwarded


def _is_list(r: Request) -> bool:
    return r.method == "GET" and r.query.get("list-type") == ["2"]


def _is_delete_objects(r: Request) -> bool:
    return r.method == "POST" and "delete" in r.query


def _is_conditional_put(r: Request) -> bool:
    return r.method == "PUT" and "if-none-match" in r.headers


def _is_get_manifest(r: Request) -> bool:
    return r.method == "GET" and r.path.endswith(".avro")


def _is_get_metadata(r: Request) -> bool:
    return r.method == "GET" and r.path.endswith(".metadata.json")


def _is_delete_object(r: Request) -> bool:
    """One key's DELETE: what a bulk delete falls back to for the keys a DeleteObjects did not settle."""
    return r.method == "DELETE" and "uploadId" not in r.query


def _is_put_metadata(r: Request) -> bool:
    """A table commit's metadata file, written by pyiceberg's FileIO (unconditionally)."""
    return r.method == "PUT" and r.path.endswith(".metadata.json")


def _is_get_data(r: Request) -> bool:
    """A read of a Parquet data (or delete) file."""
    return r.method == "GET" and r.path.endswith(".parquet")


def _is_put_data(r: Request) -> bool:
    """A write of a Parquet file: a plain PUT, or a multipart upload's start, part or completion."""
    return r.method in ("PUT", "POST") and r.path.endswith(".parquet")


#: The S3 operations a rule can select.
OPERATIONS: dict[str, Callable[[Request], bool]] = {
    "list": _is_list,
    "delete_objects": _is_delete_objects,
    "delete_object": _is_delete_object,
    "conditional_put": _is_conditional_put,
    "get_manifest": _is_get_manifest,
    "get_metadata": _is_get_metadata,
    "put_metadata": _is_put_metadata,
    "get_data": _is_get_data,
    "put_data": _is_put_data,
}


@dataclass
class Rule:
    """Inject ``fault`` into requests of ``operation``: each with ``probability``, at most ``first`` times."""

    operation: str
    fault: str
    probability: float = 1.0
    first: int | None = None
    fired: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"rule operation {self.operation!r}: expected one of {sorted(OPERATIONS)}")
        if self.fault not in FAULTS:
            raise ValueError(f"rule fault {self.fault!r}: expected one of {list(FAULTS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"rule probability {self.probability!r}: expected a number from 0 to 1")


_ERRORS = {
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "Service Unavailable", "ServiceUnavailable", "Service is unable to handle request."),
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}


def error_reply(fault: str) -> bytes:
    status, reason, code, message = _ERRORS[fault]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
        "<RequestId>fault-proxy</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
        "x-amz-request-id: fault-proxy\r\n\r\n"
    )
    return head.encode() + body


class _Closed(Exception):
    """The peer closed the connection (or sent something that is not HTTP/1.1)."""


def _read_head(reader: socket.SocketIO | object) -> tuple[bytes, list[str]]:
    raw = b""
    lines: list[str] = []
    while True:
        line = reader.readline(MAX_HEAD_BYTES + 1)  # type: ignore[union-attr]  # a socket file or a buffered reader
        if not line:
            if raw:
                raise _Closed("connection closed inside a message head")
            raise _Closed("connection closed")
        raw += line
        if len(raw) > MAX_HEAD_BYTES:
            raise _Closed("message head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:  # tolerate blank lines between messages
                raw = b""
                continue
            return raw, lines
        lines.append(line.decode("latin-1").rstrip("\r\n"))


def _headers(lines: Iterable[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def _read_exact(reader: object, size: int) -> bytes:
    data = reader.read(size)  # type: ignore[attr-defined]
    if len(data) != size:
        raise _Closed("connection closed inside a message body")
    return bytes(data)


def _read_chunked(reader: object) -> bytes:
    raw = b""
    for _ in range(1_000_000):  # bounded: a chunked body of at most a million chunks
        line = reader.readline(1024)  # type: ignore[attr-defined]
        if not line:
            raise _Closed("connection closed inside a chunked body")
        raw += line
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            for _ in range(1000):  # trailers, up to the blank line
                trailer = reader.readline(MAX_HEAD_BYTES)  # type: ignore[attr-defined]
                raw += trailer
                if trailer in (b"\r\n", b"\n", b""):
                    return raw
            raise _Closed("too many trailers")
        raw += _read_exact(reader, size + 2)
    raise _Closed("too many chunks")


def _read_body(reader: object, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _read_chunked(reader)
    return _read_exact(reader, int(headers.get("content-length", "0") or 0))


class FaultProxy:
    """The proxy; ``url`` is its endpoint. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, upstream: str, rules: Sequence[Rule] = (), seed: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream {upstream!r}: expected http://HOST:PORT")
        self.upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._rules = list(rules)
        self._random = random.Random(seed)
        self.injected: Counter[tuple[str, str]] = Counter()  # (operation, fault) -> count
        self.seen: Counter[str] = Counter()  # operation (or "other") -> requests
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()

    # Rules

    def set_rules(self, rules: Sequence[Rule], seed: int | None = None) -> None:
        with self._lock:
            self._rules = list(rules)
            if seed is not None:
                self._random.seed(seed)

    def heal(self) -> None:
        self.set_rules([])

    def _choose(self, request: Request) -> tuple[str, str | None]:
        operation = next((name for name, match in OPERATIONS.items() if match(request)), "other")
        with self._lock:
            self.seen[operation] += 1
            for rule in self._rules:
                if rule.operation != operation or (rule.first is not None and rule.fired >= rule.first):
                    continue
                if rule.probability < 1.0 and self._random.random() >= rule.probability:
                    continue
                rule.fired += 1
                self.injected[(operation, rule.fault)] += 1
                return operation, rule.fault
        return operation, None

    # Serving

    @property
    def url(self) -> str:
        assert self._server is not None, "the proxy is not started"
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            live = list(self._sockets)
        for sock in live:  # unblock handlers waiting on a client or on S3
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _track(self, sock: socket.socket, live: bool) -> None:
        with self._lock:
            (self._sockets.add if live else self._sockets.discard)(sock)

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(CLIENT_IDLE_SECONDS)
        self._track(client, True)
        reader = client.makefile("rb")
        upstream: socket.socket | None = None
        up_reader = None
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                request = self._read_request(client, reader)
                _operation, fault = self._choose(request)
                if fault == "reset":
                    _reset(client, reader)
                    return
                if fault in _ERRORS:
                    client.sendall(error_reply(fault))
                    continue
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=UPSTREAM_SECONDS)
                    self._track(upstream, True)
                    up_reader = upstream.makefile("rb")
                upstream.sendall(request.raw)
                reply, keep_alive = _read_response(up_reader, request.method)
                if fault == "drop_after":
                    _reset(client, reader)  # the request took effect upstream; its reply is lost
                    return
                client.sendall(reply)
                if not keep_alive:
                    upstream.close()
                    self._track(upstream, False)
                    upstream, up_reader = None, None
        except (_Closed, OSError, ValueError):
            pass  # either side went away, or timed out: drop the connection
        finally:
            for stream in (reader, up_reader):
                if stream is not None:
                    stream.close()
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
                    self._track(sock, False)

    def _read_request(self, client: socket.socket, reader: object) -> Request:
        head, lines = _read_head(reader)
        method, target, _version = lines[0].split(" ", 2)
        headers = _headers(lines[1:])
        if headers.get("expect", "").lower() == "100-continue":
            # Answer the interim reply here (clients otherwise wait for it) and forward without it.
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = (
                b"".join(line + b"\r\n" for line in head.split(b"\r\n")[:-2] if not line.lower().startswith(b"expect:"))
                + b"\r\n"
            )
        body = _read_body(reader, headers)
        parts = urlsplit(target)
        return Request(method, parts.path, parse_qs(parts.query, keep_blank_values=True), headers, head + body)


def _read_response(reader: object, method: str) -> tuple[bytes, bool]:
    """One whole reply (interim 1xx replies skipped) and whether the connection stays open."""
    for _ in range(10):
        head, lines = _read_head(reader)
        status = int(lines[0].split(" ", 2)[1])
        if 100 <= status < 200:
            continue
        headers = _headers(lines[1:])
        keep_alive = headers.get("connection", "").lower() != "close" and not lines[0].startswith("HTTP/1.0")
        if method == "HEAD" or status in (204, 304):
            return head, keep_alive
        if "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers:
            return head + _read_body(reader, headers), keep_alive
        return head + reader.read(), False  # type: ignore[attr-defined]  # body until the server closes
    raise _Closed("too many interim replies")


def _reset(sock: socket.socket, reader: object) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a failing load balancer does."""
    reader.close()  # type: ignore[attr-defined]  # the descriptor closes only once its file object has
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
