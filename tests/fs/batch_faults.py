"""A real HTTP proxy on 127.0.0.1 in front of a GCS emulator or Azurite that refuses chosen deletes of a batch.

This is a mock of what cannot run here: neither GCS emulator refuses one delete of a batch (no
holds, no permissions, no throttling), and Azurite never throttles. Everything else is the
emulator's: every request is forwarded, and every reply relayed, except in a batch (a
``multipart/mixed`` POST of one embedded ``DELETE`` a file) the deletes of the files named in
``faults``. Each of those, while it has faults left, is refused with the next status in its list:

- the embedded request's object name is overwritten with ``~`` of the same length, so the file
  stays (a refused delete changes nothing) and the batch keeps its length, which Azure's Shared
  Key signature covers; the emulator answers it (404, or 403 for the broken signature),
- and that embedded reply is replaced by the store's own form of the refusal (``refusal``).

``batches`` records, for every batch forwarded, the names of the files its deletes named, in order.
The proxy runs in a process of its own: served from the test's process, reads through pyarrow's
GCS filesystem stalled (its client did not read the proxy's reply).
"""

from __future__ import annotations

import http.client
import http.server
import json
import multiprocessing
import re
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import TracebackType
from urllib.parse import unquote, urlsplit

#: Headers of one hop's connection and framing, which the proxy sets itself; without Accept-Encoding
#: replies come uncompressed, so that a batch reply can be rewritten.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding"})
REPLY_OWN_HEADERS = HOP_HEADERS | {"server", "date"}
_DELETE_LINE = re.compile(rb"^DELETE (\S+) HTTP/1\.1", re.MULTILINE)


#: The refusals the tests use, worded as the stores word them.
GCS_REFUSALS = {
    403: "test@example.com does not have storage.objects.delete access to the Google Cloud Storage object.",
    429: "The rate of change requests to the object exceeds the rate limit.",
    503: "Backend Error",
}
AZURE_REFUSALS = {
    403: ("AuthorizationPermissionMismatch", "This request is not authorized to perform this operation."),
    503: ("ServerBusy", "The server is busy."),
}


def gcs_refusal(status: int) -> bytes:
    """An embedded reply of the JSON API refusing a delete."""
    body = json.dumps({"error": {"code": status, "message": GCS_REFUSALS[status]}})
    reason = http.HTTPStatus(status).phrase
    return f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{body}".encode()


def azure_refusal(status: int) -> bytes:
    """An embedded reply of Blob Batch refusing a delete: the error code in a header, the message as the reason."""
    code, message = AZURE_REFUSALS[status]
    return f"HTTP/1.1 {status} {message}\r\nx-ms-error-code: {code}\r\nContent-Length: 0\r\n\r\n".encode()


def _boundary(content_type: str) -> bytes:
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    assert match, f"not a multipart body: {content_type!r}"
    return b"--" + match.group(1).encode()


def _file_name(target: bytes) -> str:
    """The last component of the object name in an embedded request's target (GCS spells ``/`` as %2F)."""
    return unquote(urlsplit(target.decode()).path).rsplit("/", 1)[-1]


class _Proxy:
    """The server, in the proxy's process."""

    def __init__(self, upstream: str, faults: dict[str, list[int]], refusal: Callable[[int], bytes]) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname and parts.port, f"upstream {upstream!r}: expected http://HOST:PORT"
        self.upstream = (parts.hostname, parts.port)
        self.faults = faults
        self.refusal = refusal
        self.batches: list[list[str]] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the proxy is not started"
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    def _refuse(self, body: bytes, boundary: bytes) -> tuple[bytes, dict[int, int]]:
        """The batch with the refused deletes blanked out, and the status of each refused part (by position)."""
        parts = body.split(boundary)
        refused: dict[int, int] = {}
        names: list[str] = []
        with self._lock:
            for i, part in enumerate(parts[1:-1]):
                line = _DELETE_LINE.search(part)
                if line is None:
                    continue
                name = _file_name(line.group(1))
                names.append(name)
                if self.faults.get(name):
                    refused[i] = self.faults[name].pop(0)
                    target = line.group(1)
                    path = urlsplit(target).path
                    folder, _, last = path.rpartition(b"/")
                    parts[i + 1] = part.replace(target, target.replace(path, folder + b"/" + b"~" * len(last), 1), 1)
            self.batches.append(names)
        return boundary.join(parts), refused

    def _rewrite(self, body: bytes, boundary: bytes, refused: dict[int, int]) -> bytes:
        parts = body.split(boundary)
        for i, status in refused.items():
            part = parts[i + 1]
            start = part.index(b"HTTP/1.1 ")
            parts[i + 1] = part[:start] + self.refusal(status) + b"\r\n"
        return boundary.join(parts)

    def _forward(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
        content_type = handler.headers.get("Content-Type", "")
        is_batch = handler.command == "POST" and content_type.startswith("multipart/mixed")
        refused: dict[int, int] = {}
        if is_batch:
            body, refused = self._refuse(body, _boundary(content_type))
        upstream = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
        finally:
            upstream.close()
        if refused:
            data = self._rewrite(data, _boundary(reply.getheader("Content-Type", "")), refused)
        handler.send_response(reply.status, reply.reason)
        for name, value in reply.getheaders():
            if name.lower() not in REPLY_OWN_HEADERS:
                handler.send_header(name, value)
        content_length = reply.getheader("Content-Length", "0") if handler.command == "HEAD" else str(len(data))
        handler.send_header("Content-Length", content_length)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def __enter__(self) -> _Proxy:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the clients expect
            timeout = 30

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    self.raw_requestline = self.rfile.readline(65537)
                except TimeoutError:
                    self.raw_requestline = b""  # an idle client: drop its connection
                if not self.raw_requestline or not self.parse_request():
                    self.close_connection = True
                    return
                proxy._forward(self)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _serve(upstream: str, faults: dict[str, list[int]], refusal: Callable[[int], bytes], conn: Connection) -> None:
    with _Proxy(upstream, faults, refusal) as proxy:
        conn.send(proxy.url)
        conn.recv()  # until the test is done
        with proxy._lock:
            conn.send(proxy.batches)


class BatchFaults:
    """The proxy, as a context manager: ``url`` while it runs, ``batches`` after.

    ``faults``: file name -> the statuses its next deletes get; ``refusal`` a module-level function.
    """

    def __init__(self, upstream: str, faults: dict[str, list[int]], refusal: Callable[[int], bytes]) -> None:
        self.url = ""
        self.batches: list[list[str]] = []
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no copy of the test's threads
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(upstream, faults, refusal, child), daemon=True)

    def __enter__(self) -> BatchFaults:
        self._process.start()
        assert self._conn.poll(60), "the batch proxy did not start within 60 s"
        self.url = self._conn.recv()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._conn.send("stop")
        assert self._conn.poll(30), "the batch proxy did not stop within 30 s"
        self.batches = self._conn.recv()
        self._process.join(timeout=30)
