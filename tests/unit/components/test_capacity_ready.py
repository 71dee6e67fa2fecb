"""CapacityProviderReady: the service waits until the capacity provider is ACTIVE.

moto reports every capacity provider ACTIVE at once, so the wait is tested against a scripted
ECS client that answers DescribeCapacityProviders with a status sequence (PROVISIONING first,
the real first status of a new Managed Instances provider), with botocore's response shape.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.capacity_ready import (
    WAIT_TIMEOUT_SECONDS,
    CapacityProviderNotActive,
    CapacityProviderReadyProvider,
    wait_until_active,
)

NAME, CLUSTER = "tts-capacity-gpu", "tts-capacity-cluster"


class ScriptedEcs:
    """DescribeCapacityProviders answering one status per call, recording each request."""

    def __init__(self, *statuses: str | None) -> None:
        self.statuses = list(statuses)
        self.requests: list[dict[str, Any]] = []

    def describe_capacity_providers(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        status = self.statuses.pop(0)
        if status is None:
            return {"capacityProviders": [], "failures": [{"arn": NAME, "reason": "MISSING"}]}
        provider = {
            "capacityProviderArn": f"arn:aws:ecs:us-east-1:123456789012:capacity-provider/{NAME}",
            "name": NAME,
            "cluster": CLUSTER,
            "status": status,
            "type": "MANAGED_INSTANCES",
        }
        return {"capacityProviders": [provider], "failures": []}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_provisioning_is_waited_through_until_active() -> None:
    ecs, clock = ScriptedEcs("PROVISIONING", "PROVISIONING", "ACTIVE"), Clock()
    polls = wait_until_active(ecs, NAME, CLUSTER, sleep=clock.sleep, clock=clock)
    assert polls == 3
    assert clock.sleeps == [5.0, 5.0]  # no sleep after ACTIVE
    assert ecs.requests == [{"capacityProviders": [NAME], "cluster": CLUSTER}] * 3


def test_an_active_provider_is_not_waited_for() -> None:
    ecs, clock = ScriptedEcs("ACTIVE"), Clock()
    assert wait_until_active(ecs, NAME, CLUSTER, sleep=clock.sleep, clock=clock) == 1
    assert clock.sleeps == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("INACTIVE", f"capacity provider {NAME} is INACTIVE"),
        ("DEPROVISIONING", f"capacity provider {NAME} is DEPROVISIONING"),
        (None, f"capacity provider {NAME} is MISSING: MISSING"),
    ],
)
def test_a_provider_that_will_not_become_active_fails_at_once(
    status: str | None, message: str
) -> None:
    ecs, clock = ScriptedEcs("PROVISIONING", status), Clock()
    with pytest.raises(CapacityProviderNotActive) as raised:
        wait_until_active(ecs, NAME, CLUSTER, sleep=clock.sleep, clock=clock)
    assert str(raised.value) == message
    assert len(ecs.requests) == 2


def test_a_provider_provisioning_past_the_timeout_fails() -> None:
    polls = int(WAIT_TIMEOUT_SECONDS / 5.0) + 1
    ecs, clock = ScriptedEcs(*["PROVISIONING"] * polls), Clock()
    with pytest.raises(CapacityProviderNotActive, match="still PROVISIONING after 600 s"):
        wait_until_active(ecs, NAME, CLUSTER, sleep=clock.sleep, clock=clock)
    assert len(ecs.requests) == polls
    assert ecs.statuses == []


def test_the_provider_waits_on_create_and_is_replaced_with_the_capacity_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ecs = ScriptedEcs("PROVISIONING", "ACTIVE")
    monkeypatch.setattr("components.capacity_ready.ecs_client", lambda region: ecs)
    monkeypatch.setattr("components.capacity_ready.time.sleep", lambda seconds: None)
    props = {"name": NAME, "cluster": CLUSTER, "region": "us-east-1"}
    provider = CapacityProviderReadyProvider()
    created = provider.create(props)
    assert (created.id, created.outs) == (f"{CLUSTER}/{NAME}", props)
    assert ecs.statuses == []  # both answers consumed: it waited through PROVISIONING
    renamed = {**props, "name": "tts-capacity-gpu-2"}
    diff = provider.diff(created.id, props, renamed)
    assert (diff.changes, diff.replaces) == (True, ["name"])
    same = provider.diff(created.id, props, dict(props))
    assert (same.changes, same.replaces) == (False, [])
