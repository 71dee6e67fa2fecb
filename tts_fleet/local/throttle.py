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

import io
import threading
import time
from dataclasses import dataclass
from typing import Any

from tts_fleet.local.proxy import HOP_BY_HOP, ForwardingHandler, ProxyServer, RunningProxy

SLICE_SECONDS = 0.02  # pacing granularity: a slice is what the connection may send in 20 ms


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent: /bucket/key?query
    range: str  # the Range header, "" without one


class _Server(ProxyServer):
    def __init__(self, upstream: str, bytes_per_second: float) -> None:
        super().__init__(upstream, _Handler)
        self.bytes_per_second = bytes_per_second
        self.requests: list[Request] = []
        self.lock = threading.Lock()


class _Handler(ForwardingHandler):
    # Keep-alive: one budget per connection, as boto3 reuses it.
    server: _Server

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests.append(
                Request(self.command, self.path, self.headers.get("Range", ""))
            )
        response = self.upstream_response(body)
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


class ThrottleProxy(RunningProxy):
    """The proxy on 127.0.0.1 and a free port, served from daemon threads of this process."""

    _server: _Server

    def __init__(self, upstream: str, bytes_per_second: float) -> None:
        """`upstream` is the emulator's endpoint, `http://host:port`."""
        if bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")
        super().__init__(_Server(upstream, bytes_per_second))

    @property
    def requests(self) -> list[Request]:
        with self._server.lock:
            return list(self._server.requests)

    def clear(self) -> None:
        with self._server.lock:
            self._server.requests.clear()
