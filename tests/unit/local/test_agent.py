"""The stand-in ECS agent over real HTTP, and the worker's own protection client against it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tts_fleet.local.agent import MAX_EXPIRES_MINUTES, EcsAgent, parse_request
from worker.protection import Protection


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def agent(clock: Clock) -> Iterator[EcsAgent]:
    server = EcsAgent(clock=clock)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def state_url(agent: EcsAgent, task: str) -> str:
    return f"{agent.uri(task)}/task-protection/v1/state"


def test_put_then_get_reports_protection_like_the_ecs_agent(agent: EcsAgent) -> None:
    put = httpx.put(state_url(agent, "w1"), json={"ProtectionEnabled": True, "ExpiresInMinutes": 5})
    assert put.status_code == 200
    body = put.json()["protection"]
    assert body["ProtectionEnabled"] is True
    assert body["TaskArn"].endswith("/w1")
    assert body["ExpirationDate"].endswith("Z")
    assert httpx.get(state_url(agent, "w1")).json()["protection"]["ProtectionEnabled"] is True
    assert agent.is_protected("w1")
    assert not agent.is_protected("w2")  # each worker has its own state


def test_protection_expires(agent: EcsAgent, clock: Clock) -> None:
    httpx.put(state_url(agent, "w1"), json={"ProtectionEnabled": True, "ExpiresInMinutes": 2})
    clock.now += 119
    assert agent.is_protected("w1")
    clock.now += 2
    assert not agent.is_protected("w1")
    assert httpx.get(state_url(agent, "w1")).json()["protection"]["ProtectionEnabled"] is False


def test_turning_protection_off(agent: EcsAgent) -> None:
    httpx.put(state_url(agent, "w1"), json={"ProtectionEnabled": True})
    httpx.put(state_url(agent, "w1"), json={"ProtectionEnabled": False})
    assert not agent.is_protected("w1")
    state = agent.state("w1")
    assert state is not None and state.updates == 2


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not JSON"),
        (b"{}", "ProtectionEnabled"),
        (b'{"ProtectionEnabled": "yes"}', "ProtectionEnabled"),
        (b'{"ProtectionEnabled": true, "ExpiresInMinutes": 0}', "1..2880"),
        (b'{"ProtectionEnabled": true, "ExpiresInMinutes": 2881}', "1..2880"),
        (b'{"ProtectionEnabled": true, "ExpiresInMinutes": "5"}', "integer"),
    ],
)
def test_bad_requests_are_rejected_and_change_nothing(
    agent: EcsAgent, body: bytes, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason.replace(".", r"\.")):
        parse_request(body)
    answer = httpx.put(state_url(agent, "w1"), content=body)
    assert answer.status_code == 400
    assert reason in answer.json()["error"]["Message"]
    assert agent.state("w1") is None


def test_default_and_maximum_expiry() -> None:
    assert parse_request(b'{"ProtectionEnabled": true}') == (True, 120)
    limit = f'{{"ProtectionEnabled": true, "ExpiresInMinutes": {MAX_EXPIRES_MINUTES}}}'
    assert parse_request(limit.encode()) == (True, MAX_EXPIRES_MINUTES)


def test_unknown_path_is_404(agent: EcsAgent) -> None:
    assert httpx.get(f"{agent.uri('w1')}/other").status_code == 404
    assert httpx.put(f"http://127.0.0.1:{agent.port}/", json={}).status_code == 404


def test_the_workers_protection_client_drives_the_agent(agent: EcsAgent) -> None:
    """The real worker code path the local run relies on: busy() protects, idle() releases."""
    protection = Protection(agent.uri("worker-7"), expires_minutes=30)
    try:
        protection.busy()
        assert agent.is_protected("worker-7")
        assert protection.state() == agent.describe("worker-7")
        protection.idle()
        assert not agent.is_protected("worker-7")
    finally:
        protection.close()
