"""A fault-injecting HTTP proxy in front of the emulator: SQS and S3 brown-outs on demand.

    brownout = Brownout(random.Random(1), services={"sqs"})
    with FaultProxy(moto_endpoint, brownout) as proxy:
        ...  # point a worker's AWS_ENDPOINT_URL at proxy.url
        brownout.start(10.0)  # for 10 s, most SQS calls fail

Outside a brown-out every request is passed to the emulator and its answer passed back. Inside
one, each request to a browned-out service fails with probability `rate`, in one of the ways
real SQS and S3 fail under load (`Fault`): an answer 503 (S3's SlowDown), a throttling error,
a connection reset with no answer, or the request carried out and then answered 500, so that
the write landed and the caller does not know it (the case that makes retried writes
duplicates). What was injected is counted in `Brownout.injected`.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from tts_fleet.local.proxy import HOP_BY_HOP, ForwardingHandler, ProxyServer, RunningProxy

Service = str  # "sqs" or "s3": the proxy tells them apart by SQS's X-Amz-Target header


class Fault(StrEnum):
    UNAVAILABLE = "unavailable"
    THROTTLED = "throttled"
    RESET = "reset"
    LOST_ANSWER = "lost answer"  # carried out, then answered 500


# The error each service answers for each fault: (HTTP status, error code).
ERRORS: dict[Service, dict[Fault, tuple[int, str]]] = {
    "sqs": {
        Fault.UNAVAILABLE: (503, "ServiceUnavailable"),
        Fault.THROTTLED: (400, "RequestThrottled"),
        Fault.LOST_ANSWER: (500, "InternalError"),
    },
    "s3": {
        Fault.UNAVAILABLE: (503, "SlowDown"),
        Fault.THROTTLED: (503, "SlowDown"),
        Fault.LOST_ANSWER: (500, "InternalError"),
    },
}
# Headers that describe one hop's connection, not the message: never forwarded.


@dataclass
class Brownout:
    """When the services misbehave, how often, how, and what was injected.

    Thread-safe: the proxy asks from one thread per connection, a test or benchmark starts and
    stops brown-outs from its own."""

    rng: random.Random
    rate: float = 0.6  # the share of requests that fail during a brown-out
    services: Collection[Service] = ("sqs", "s3")
    kinds: tuple[Fault, ...] = tuple(Fault)
    until: float = 0.0  # time.monotonic() at which the current brown-out ends
    injected: Counter[str] = field(default_factory=Counter)  # "<service> <fault>": count
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, seconds: float) -> None:
        with self.lock:
            self.until = time.monotonic() + seconds

    def stop(self) -> None:
        with self.lock:
            self.until = 0.0

    def active(self) -> bool:
        with self.lock:
            return time.monotonic() < self.until

    def fault(self, service: Service) -> Fault | None:
        """The fault to inject into this request, if any (drawn and counted here)."""
        with self.lock:
            if service not in self.services or time.monotonic() >= self.until:
                return None
            if self.rng.random() >= self.rate:
                return None
            kind = self.rng.choice(self.kinds)
            self.injected[f"{service} {kind}"] += 1
            return kind


class _ProxyServer(ProxyServer):
    def __init__(self, upstream: str, brownout: Brownout) -> None:
        super().__init__(upstream, _Handler)
        self.brownout = brownout


class _Handler(ForwardingHandler):
    server: _ProxyServer

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        service = "sqs" if self.headers.get("X-Amz-Target", "").startswith("AmazonSQS.") else "s3"
        fault = self.server.brownout.fault(service)
        if fault is Fault.RESET:
            self._reset()
            return
        if fault is Fault.LOST_ANSWER:
            self._forward(body)  # it lands; the answer does not
        if fault is not None:
            self._error(service, fault)
            return
        self._reply(*self._forward(body))

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        response = self.upstream_response(body)
        return response.status, response.getheaders(), response.read()

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        length = str(len(body))
        for name, value in headers:
            if name.lower() == "content-length" and self.command == "HEAD":
                length = value  # a HEAD answer describes the object it did not send
            elif name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, service: Service, fault: Fault) -> None:
        status, code = ERRORS[service][fault]
        if service == "sqs":  # SQS's JSON protocol, as boto3 reads it
            body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": code}).encode()
            headers = [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("x-amzn-query-error", f"{code};Receiver"),
            ]
        else:
            body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
            headers = [("Content-Type", "application/xml")]
        self._reply(status, headers, b"" if self.command == "HEAD" else body)

    def _reset(self) -> None:
        """Closes the connection with a TCP RST and no answer (a reset connection)."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True


class FaultProxy(RunningProxy):
    """The proxy on 127.0.0.1 and a free port, served from a daemon thread of this process."""

    def __init__(self, upstream: str, brownout: Brownout) -> None:
        """`upstream` is the emulator's endpoint, `http://host:port`."""
        self.brownout = brownout
        super().__init__(_ProxyServer(upstream, brownout))
