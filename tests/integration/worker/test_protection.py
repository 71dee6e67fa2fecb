"""ECS task scale-in protection against a tiny local stand-in for the ECS agent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.lib.fake_worker import BlockingSpeech, make_worker
from tests.lib.procs import (
    make_queues_and_bucket,
    visible_and_in_flight,
    wait_for,
)
from worker.jobs import Job
from worker.protection import Protection

STATE = "/worker-3/task-protection/v1/state"


class Agent(ThreadingHTTPServer):
    """Records every call; answers like the ECS agent's task-protection endpoint."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), AgentHandler)
        self.calls: list[tuple[float, str, str, dict[str, Any] | None]] = []
        self.state = {"ProtectionEnabled": False}
        self.refuse = 0  # this many next PUTs get the agent's 200 {"failure": ...} answer

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/worker-3"

    def puts(self) -> list[dict[str, Any]]:
        return [body for _, method, _, body in self.calls if method == "PUT" and body]


class AgentHandler(BaseHTTPRequestHandler):
    server: Agent

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        payload = json.dumps({"protection": self.server.state}).encode()
        self.send_response(200 if self.path == STATE else 404)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self.server.calls.append((time.time(), "GET", self.path, None))
        self._answer()

    def do_PUT(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append((time.time(), "PUT", self.path, body))
        if self.server.refuse:  # as the ECS agent answers a failed UpdateTaskProtection
            self.server.refuse -= 1
            payload = json.dumps({"failure": {"Arn": "arn:task", "Reason": "TASK_NOT_VALID"}})
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload.encode())
            return
        self.server.state = body
        self._answer()


@pytest.fixture
def agent() -> Iterator[Agent]:
    server = Agent()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_client_on_when_busy_renewed_off_when_idle(agent: Agent) -> None:
    protection = Protection(agent.uri, expires_minutes=30, renew_seconds=0.2)
    protection.busy()
    protection.busy()  # already on: no second call
    protection.renew_if_due()  # not due yet
    time.sleep(0.3)
    protection.renew_if_due()  # due: resets the expiry
    assert protection.state() == {"protection": {"ProtectionEnabled": True, "ExpiresInMinutes": 30}}
    protection.idle()
    protection.idle()  # already off: no second call
    assert agent.puts() == [
        {"ProtectionEnabled": True, "ExpiresInMinutes": 30},
        {"ProtectionEnabled": True, "ExpiresInMinutes": 30},
        {"ProtectionEnabled": False},
    ]
    assert {path for _, _, path, _ in agent.calls} == {STATE}


def test_refused_put_is_not_protection_and_is_retried(agent: Agent) -> None:
    protection = Protection(agent.uri, expires_minutes=30, renew_seconds=600)
    agent.refuse = 1
    protection.busy()
    assert protection.enabled is False  # HTTP 200, but the agent said "failure"
    protection.renew_if_due()  # not due for renewal, but wanted and not held: retried
    assert protection.enabled is True
    assert protection.state() == {"protection": {"ProtectionEnabled": True, "ExpiresInMinutes": 30}}
    agent.refuse = 1
    protection.idle()
    assert protection.enabled is True  # still on as far as the agent knows: idle() retries
    protection.idle()
    assert (protection.enabled, agent.state) == (False, {"ProtectionEnabled": False})
    assert len(agent.puts()) == 4


@pytest.mark.timeout(60)
def test_renewal_and_retry_do_not_wait_for_the_heartbeat(aws_env, sqs, s3, agent: Agent) -> None:
    # Heartbeat every 20 s (visibility 60 s); protection renewed every 0.5 s. The agent refuses
    # the first PUT: the renewal timer must retry it while the job runs, then keep renewing.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=60)
    speech = BlockingSpeech({"long"})
    protection = Protection(agent.uri, expires_minutes=1, renew_seconds=0.5)
    worker = make_worker(
        names,
        sqs,
        s3,
        speech,
        visibility_timeout=60,
        heartbeat_seconds=20,
        protection_expires_minutes=1,
        protection_renew_seconds=0.5,
        protection=protection,
    )
    agent.refuse = 1
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="long", text="Hi.").body())
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: len(agent.puts()) >= 4, 30)  # refused, retried, renewed twice
        held = agent.state
    finally:
        speech.go.set()
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 30)
        worker.request_stop()
        thread.join(60)
    assert held == {"ProtectionEnabled": True, "ExpiresInMinutes": 1}
    assert all(body["ProtectionEnabled"] for body in agent.puts()[:4])
    assert agent.puts()[-1] == {"ProtectionEnabled": False}


def test_client_without_agent_makes_no_calls(agent: Agent) -> None:
    protection = Protection("", expires_minutes=30)
    protection.busy()
    protection.idle()
    assert (protection.active, protection.state(), agent.calls) == (False, None, [])
