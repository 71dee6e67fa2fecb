"""An HTTP proxy in front of the emulator that serves each connection at a fixed rate, as S3
does: one connection to S3 carries tens of MB/s, and the aggregate grows with the number of
connections (S3 performance guidelines, "Horizontal scaling and request parallelization").

    with ThrottleProxy(moto_endpoint, bytes_per_second=8 * 2**20) as proxy:
        ...  # point AWS_ENDPOINT_URL at proxy.url; proxy.requests lists what was asked

Each client connection is served by its own thread with its own budget: an answer's body is
sent in slices, never faster than `bytes_per_second` on that connection (requests are not
slowed, only answers: downloads are what it models). Every request is recorded as
(method, path, Range header) in `requests`, so a test can tell what a client fetched.
"""

from __future__ import annotations

import http.client
import io
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Headers of one hop's connection, not of the message: never forwarded.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "expect"}
UPSTREAM_TIMEOUT_SECONDS = 120
SLICE_SECONDS = 0.02  # pacing granularity: a slice is what the connection may send in 20 ms


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent: /bucket/key?query
    range: str  # the Range header, "" without one


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, bytes_per_second: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream_port = int(port)
        self.bytes_per_second = bytes_per_second
        self.requests: list[Request] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silent: a client that went away (a killed fetch) is not the proxy's failure."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one budget per connection, as boto3 reuses it
    server: _Server
    _upstream: http.client.HTTPConnection | None = None

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests.append(
                Request(self.command, self.path, self.headers.get("Range", ""))
            )
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = f"{self.server.upstream_host}:{self.server.upstream_port}"
        response = self._forward(body, headers)
        declared = response.getheader("Content-Length")
        source: Any = response
        if declared is None and self.command != "HEAD":  # a chunked answer: length unknown
            content = response.read()
            source, declared = io.BytesIO(content), str(len(content))
        length = int(declared or 0)
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command != "HEAD":
            self._paced(source, length)
        else:
            response.read()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

    def _forward(self, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        for attempt in (1, 2):  # the emulator may have closed a kept-alive connection
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(
                    self.server.upstream_host, self.server.upstream_port, UPSTREAM_TIMEOUT_SECONDS
                )
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                return self._upstream.getresponse()
            except (http.client.HTTPException, OSError):
                self._upstream.close()
                self._upstream = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _paced(self, source: Any, length: int) -> None:
        """The body at no more than bytes_per_second on this connection."""
        rate = self.server.bytes_per_second
        slice_bytes = max(1, int(rate * SLICE_SECONDS))
        started, sent = time.monotonic(), 0
        while sent < length:
            chunk = source.read(min(slice_bytes, length - sent))
            if not chunk:
                break
            self.wfile.write(chunk)
            sent += len(chunk)
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: one line per ranged GET would drown the caller's own."""


class ThrottleProxy:
    """The proxy on 127.0.0.1 and a free port, served from daemon threads of this process."""

    def __init__(self, upstream: str, bytes_per_second: float) -> None:
        """`upstream` is the emulator's endpoint, `http://host:port`."""
        if bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")
        self._server = _Server(upstream, bytes_per_second)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[Request]:
        with self._server.lock:
            return list(self._server.requests)

    def clear(self) -> None:
        with self._server.lock:
            self._server.requests.clear()

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ThrottleProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
