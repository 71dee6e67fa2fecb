"""The plumbing of an HTTP proxy in front of the emulator, shared by the fault-injecting proxy
(faults.py) and the per-connection throttle (throttle.py): a threaded server on 127.0.0.1 and
a free port, one kept-alive upstream connection per client connection (reopened once when the
emulator closed it), the headers that never cross a hop, and start/stop from a daemon thread.
Each proxy adds only what it does to a request."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# Headers of one hop's connection, not of the message: never forwarded.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "expect"}
UPSTREAM_TIMEOUT_SECONDS = 120


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, handler: type[ForwardingHandler]) -> None:
        """`upstream` is the emulator's endpoint, `http://host:port`."""
        super().__init__(("127.0.0.1", 0), handler)
        self.upstream_host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silent: a connection reset on purpose, or a client that went away (a killed fetch),
        is not the proxy's failure."""


class ForwardingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3 uses it
    server: ProxyServer
    _upstream: http.client.HTTPConnection | None = None  # one per client connection

    def forwarded_headers(self) -> dict[str, str]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = f"{self.server.upstream_host}:{self.server.upstream_port}"
        return headers

    def upstream_response(self, body: bytes) -> http.client.HTTPResponse:
        """The emulator's answer to this request (its body not yet read)."""
        headers = self.forwarded_headers()
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

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a line per SQS poll or ranged GET would drown the caller's own."""


class RunningProxy:
    """A proxy server served from a daemon thread of this process, at `url`."""

    def __init__(self, server: ProxyServer) -> None:
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
