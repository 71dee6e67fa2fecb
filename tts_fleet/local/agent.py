"""A stand-in for the ECS container agent's task scale-in protection endpoint.

Each local worker gets `ECS_AGENT_URI=http://127.0.0.1:PORT/<worker-id>` and calls
`PUT|GET {ECS_AGENT_URI}/task-protection/v1/state` exactly as it would on ECS, so the
worker's real protection code runs. The local scaler asks this agent which workers are
protected and, like ECS, stops only unprotected ones.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROTECTION_PATH = "/task-protection/v1/state"
# ECS: ExpiresInMinutes is 1..2880 (48 h), default 120.
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html
MAX_EXPIRES_MINUTES = 2880
DEFAULT_EXPIRES_MINUTES = 120
TASK_ARN = "arn:aws:ecs:us-east-1:000000000000:task/tts-fleet-local/{task}"


@dataclass(frozen=True)
class Protection:
    enabled: bool
    expires_at: float | None  # epoch seconds
    updates: int

    def active(self, now: float) -> bool:
        return self.enabled and (self.expires_at is None or now < self.expires_at)


class EcsAgent:
    """A tiny threaded HTTP server that records each task's protection state."""

    def __init__(self, clock: Any = time.time) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, Protection] = {}
        self._clock = clock
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def uri(self, task: str) -> str:
        return f"http://127.0.0.1:{self.port}/{task}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def is_protected(self, task: str) -> bool:
        with self._lock:
            state = self._states.get(task)
        return state is not None and state.active(self._clock())

    def state(self, task: str) -> Protection | None:
        with self._lock:
            return self._states.get(task)

    def set(self, task: str, enabled: bool, minutes: int) -> Protection:
        with self._lock:
            previous = self._states.get(task)
            expires = self._clock() + minutes * 60 if enabled else None
            state = Protection(enabled, expires, (previous.updates if previous else 0) + 1)
            self._states[task] = state
            return state

    def describe(self, task: str) -> dict[str, Any]:
        """The agent's response body: {"protection": {...}}."""
        state = self.state(task)
        enabled = state is not None and state.active(self._clock())
        expires = state.expires_at if state is not None and enabled else None
        return {
            "protection": {
                "ExpirationDate": _iso(expires) if expires is not None else None,
                "ProtectionEnabled": enabled,
                "TaskArn": TASK_ARN.format(task=task),
            }
        }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_request(body: bytes) -> tuple[bool, int]:
    """Validates a PUT body like the agent does; raises ValueError with the reason."""
    try:
        data = json.loads(body or b"null")
    except json.JSONDecodeError as error:
        raise ValueError(f"body is not JSON: {error.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ProtectionEnabled"), bool):
        raise ValueError("ProtectionEnabled (boolean) is required")
    minutes = data.get("ExpiresInMinutes", DEFAULT_EXPIRES_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise ValueError("ExpiresInMinutes must be an integer")
    if not 1 <= minutes <= MAX_EXPIRES_MINUTES:
        raise ValueError(f"ExpiresInMinutes must be in 1..{MAX_EXPIRES_MINUTES}, got {minutes}")
    return data["ProtectionEnabled"], minutes


def _handler_for(agent: EcsAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _task(self) -> str | None:
            task, _, rest = self.path.lstrip("/").partition("/")
            return task if task and f"/{rest}" == PROTECTION_PATH else None

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            task = self._task()
            if task is None:
                self._reply(404, {"error": {"Code": "NotFound", "Message": self.path}})
                return
            self._reply(200, agent.describe(task))

        def do_PUT(self) -> None:
            task = self._task()
            if task is None:
                self._reply(404, {"error": {"Code": "NotFound", "Message": self.path}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                enabled, minutes = parse_request(self.rfile.read(length))
            except ValueError as error:
                self._reply(
                    400, {"error": {"Code": "InvalidParameterException", "Message": str(error)}}
                )
                return
            agent.set(task, enabled, minutes)
            self._reply(200, agent.describe(task))

        def log_message(self, format: str, *args: Any) -> None:
            """Silenced: the scaler reports protection in its own events."""

    return Handler
