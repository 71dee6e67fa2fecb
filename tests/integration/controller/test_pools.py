"""The controller function with capacity pools (issue #22): the queue and the state in moto, each
pool's ECS service answered from the world of ecs_answers.py (moto's ECS has no Managed
Instances, PROVISIONING tasks, service events or Spot interruptions), every request checked
against botocore's ECS model. A Spot pool is cheaper than the On-Demand one, so demand goes
there first; each capacity signal moves it to On-Demand, and the cooldown brings it back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tests.integration.controller.ecs_answers import EcsAnswers, EcsService
from tests.lib.moto_stack import PARAMS, Stack, moto_stack
from tts_fleet.controller.metrics import (
    POOL_DESIRED,
    POOL_DIMENSION,
    POOL_UNAVAILABLE,
    STACK_DIMENSION,
)
from tts_fleet.scaling.controller import ControllerState
from tts_fleet.scaling.pools import (
    INTERRUPTIONS,
    PLACEMENT_FAILURE,
    PROVISIONING_TIMEOUT,
    PlacementParams,
    PoolSpec,
)

SPOT = PoolSpec("spot", "spot", "worker-spot", 0, 5, 0.40)
ON_DEMAND = PoolSpec("od", "on-demand", "worker-od", 0, 5, 1.01)
PLACEMENT = PlacementParams(provisioning_timeout_s=300.0, cooldown_s=600.0)
# Slow jobs and a short cold start: a backlog is worth one worker per 4 jobs (20 jobs: 5,
# what one pool allows), up to 8 in all.
BUSY = replace(PARAMS, cold_start_s=10.0, seconds_per_job=60.0, jobs_per_worker=4, max_workers=8)


@dataclass
class Pooled:
    stack: Stack
    ecs: EcsAnswers

    @property
    def now(self) -> float:
        return self.stack.clock.now

    def invoke(self) -> None:
        self.stack.invoke(budget_s=0)  # one sample: each test looks at one decision

    def desired(self) -> dict[str, int]:
        return {name: service.desired for name, service in self.ecs.services.items()}

    def pool_lines(self) -> dict[str, dict[str, Any]]:
        """The last sample's line per pool."""
        records = [json.loads(line) for line in self.stack.lines]
        return {r[POOL_DIMENSION]: r for r in records if POOL_DIMENSION in r}


@pytest.fixture
def pooled(in_process_aws: None) -> Iterator[Pooled]:
    with moto_stack() as stack:
        ecs = EcsAnswers(
            cluster=stack.settings.cluster,
            services={name: EcsService(name) for name in (SPOT.service, ON_DEMAND.service)},
        )
        stack.clients = replace(stack.clients, ecs=ecs.client())
        stack.settings = replace(
            stack.settings,
            service=SPOT.service,
            params=BUSY,
            pools=(SPOT, ON_DEMAND),
            placement=PLACEMENT,
        )
        yield Pooled(stack, ecs)


def spot_starting(pooled: Pooled, age_s: float, count: int = 2) -> None:
    """The Spot service asked for `count` workers `age_s` ago; none has capacity yet."""
    service = pooled.ecs.services[SPOT.service]
    service.desired = count
    for _ in range(count):
        pooled.ecs.add_task(SPOT.service, "PROVISIONING", pooled.now - age_s)


def test_demand_goes_to_the_cheapest_pool_first(pooled: Pooled) -> None:
    pooled.stack.send(20)
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}
    assert pooled.ecs.updates() == [(SPOT.service, 5)]


def test_a_task_provisioning_past_the_timeout_moves_demand_to_the_next_pool(
    pooled: Pooled,
) -> None:
    pooled.stack.send(20)
    spot_starting(pooled, age_s=PLACEMENT.provisioning_timeout_s + 1)
    pooled.invoke()
    # Spot is cut to what runs there (none): a task that starts later would overshoot.
    assert pooled.desired() == {SPOT.service: 0, ON_DEMAND.service: 5}
    line = pooled.pool_lines()["spot"]
    assert (line["change"], line["cause"], line[POOL_UNAVAILABLE]) == (
        "unavailable",
        PROVISIONING_TIMEOUT,
        1,
    )
    assert line["oldest_provisioning_s"] == PLACEMENT.provisioning_timeout_s + 1


def test_a_task_provisioning_within_the_timeout_keeps_its_pool(pooled: Pooled) -> None:
    pooled.stack.send(20)
    spot_starting(pooled, age_s=PLACEMENT.provisioning_timeout_s - 60)
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}


def test_a_task_placed_on_a_host_is_pulling_not_waiting_for_capacity(pooled: Pooled) -> None:
    """PENDING on a container instance is the image pull of a cold start, however long."""
    pooled.stack.send(20)
    service = pooled.ecs.services[SPOT.service]
    service.desired = service.pending = 2
    for _ in range(2):
        pooled.ecs.add_task(
            SPOT.service,
            "PENDING",
            pooled.now - 3 * PLACEMENT.provisioning_timeout_s,
            containerInstanceArn=pooled.ecs.arn("container-instance", "i-0abc"),
        )
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}


@pytest.mark.parametrize(
    "message",
    [
        "(service worker-spot) was unable to place a task. Reason: UnfulfillableCapacity: "
        "Unable to fulfill capacity for the requested instance types.",
        "(service worker-spot) failed to launch an instance: InsufficientInstanceCapacity",
        "(service worker-spot) was unable to place a task: MaxSpotInstanceCountExceeded",
    ],
)
def test_a_placement_failure_event_moves_demand_to_the_next_pool(
    pooled: Pooled, message: str
) -> None:
    pooled.stack.send(20)
    pooled.ecs.services[SPOT.service].desired = 2
    pooled.ecs.add_event(
        SPOT.service, pooled.now - 400, "(service worker-spot) has started 2 tasks"
    )
    pooled.ecs.add_event(SPOT.service, pooled.now - 30, message)
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 0, ON_DEMAND.service: 5}
    assert pooled.pool_lines()["spot"]["cause"] == PLACEMENT_FAILURE


def test_a_placement_failure_older_than_the_cooldown_is_over(pooled: Pooled) -> None:
    pooled.stack.send(20)
    old = pooled.now - PLACEMENT.cooldown_s - 1
    pooled.ecs.add_event(SPOT.service, old, "(service worker-spot) ... UnfulfillableCapacity")
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}


def interrupt(pooled: Pooled, ago_s: float, **how: str) -> None:
    """A Spot worker of the pool stopped `ago_s` ago because Spot took its host back."""
    pooled.ecs.add_task(
        SPOT.service,
        "STOPPED",
        pooled.now - ago_s - 600,
        stoppedAt=pooled.now - ago_s,
        **(how or {"stopCode": "SpotInterruption", "stoppedReason": "Spot interruption"}),
    )


def test_spot_interruptions_past_the_rate_move_demand_to_the_next_pool(pooled: Pooled) -> None:
    pooled.stack.send(20)
    service = pooled.ecs.services[SPOT.service]
    service.desired = service.running = 2
    interrupt(pooled, 1800)
    interrupt(pooled, 900, stopCode="TerminationNotice", stoppedReason="Spot Interruption notice")
    # Stops that are not Spot's do not count, and the quota of the rate is three in an hour.
    interrupt(pooled, 600, stopCode="ServiceSchedulerInitiated", stoppedReason="Scaling in")
    interrupt(pooled, 4000)  # over an hour ago
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}
    interrupt(pooled, 5)
    pooled.stack.clock.now += 10
    pooled.invoke()
    # Spot keeps the two workers it runs; the rest of the demand goes On-Demand.
    assert pooled.desired() == {SPOT.service: 2, ON_DEMAND.service: 3}
    assert pooled.pool_lines()["spot"]["cause"] == INTERRUPTIONS


def test_an_interruption_seen_at_every_sample_counts_once(pooled: Pooled) -> None:
    """ECS lists a stopped task for an hour: each sample sees the same two interruptions,
    which stay two (three would be the rate), however many invocations read them."""
    pooled.stack.send(20)
    service = pooled.ecs.services[SPOT.service]
    service.desired = service.running = 2
    interrupt(pooled, 600)
    interrupt(pooled, 300)
    for _ in range(4):
        pooled.invoke()
        pooled.stack.clock.now += 60
    assert pooled.desired() == {SPOT.service: 5, ON_DEMAND.service: 0}
    assert pooled.pool_lines()["spot"][POOL_UNAVAILABLE] == 0
    assert pooled.stack.stored()["pools"][0]["interruptions"] == [
        pooled.now - 4 * 60 - 600,
        pooled.now - 4 * 60 - 300,
    ]


def test_a_pool_comes_back_after_its_cooldown(pooled: Pooled) -> None:
    pooled.stack.send(20)
    spot_starting(pooled, age_s=PLACEMENT.provisioning_timeout_s + 1)
    pooled.invoke()
    assert pooled.desired() == {SPOT.service: 0, ON_DEMAND.service: 5}
    # The waiting tasks are gone (desired 0 stopped them); On-Demand runs its five.
    pooled.ecs.services[SPOT.service].tasks.clear()
    pooled.ecs.services[ON_DEMAND.service].running = 5
    pooled.stack.clock.now += PLACEMENT.cooldown_s - 10
    pooled.invoke()
    assert pooled.pool_lines()["spot"][POOL_UNAVAILABLE] == 1  # still resting
    pooled.stack.clock.now += 10
    pooled.stack.send(20)  # 40 jobs: 8 workers, more than On-Demand's five
    pooled.invoke()
    line = pooled.pool_lines()["spot"]
    assert (line["change"], line[POOL_UNAVAILABLE]) == ("available", 0)
    # Sticky: On-Demand keeps its running workers; the growth goes to Spot again.
    assert pooled.desired() == {SPOT.service: 3, ON_DEMAND.service: 5}


def test_the_pools_state_survives_a_round_trip(pooled: Pooled) -> None:
    pooled.stack.send(20)
    spot_starting(pooled, age_s=PLACEMENT.provisioning_timeout_s + 1)
    pooled.invoke()
    stored = pooled.stack.stored()
    assert ControllerState.from_json(stored).to_json() == stored
    [spot, od] = stored["pools"]
    assert (spot["name"], spot["cause"], od["name"], od["unavailable_until"]) == (
        "spot",
        PROVISIONING_TIMEOUT,
        "od",
        None,
    )
    assert spot["unavailable_until"] == pooled.now + PLACEMENT.cooldown_s
    # The next invocation, ECS showing nothing wrong any more: only the stored state knows
    # Spot is resting, and demand stays On-Demand.
    pooled.ecs.services[SPOT.service].tasks.clear()
    pooled.ecs.services[SPOT.service].desired = 0
    pooled.ecs.services[ON_DEMAND.service].desired = 0
    pooled.stack.clock.now += 60
    pooled.invoke()
    assert pooled.stack.state_lines() == []  # the pools' state was taken as written
    assert pooled.desired() == {SPOT.service: 0, ON_DEMAND.service: 5}


def test_each_pool_is_an_emf_line_with_the_pool_dimension(pooled: Pooled) -> None:
    pooled.stack.send(20)
    pooled.invoke()
    lines = pooled.pool_lines()
    assert set(lines) == {"spot", "od"}
    spot = lines["spot"]
    directive = spot["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [[STACK_DIMENSION, POOL_DIMENSION]]
    assert (spot[STACK_DIMENSION], spot[POOL_DESIRED], spot["capacity_type"]) == ("dev", 5, "spot")
    assert (lines["od"][POOL_DESIRED], lines["od"][POOL_UNAVAILABLE]) == (0, 0)


def test_only_the_pools_services_are_read_and_set(pooled: Pooled) -> None:
    pooled.stack.send(20)
    spot_starting(pooled, age_s=PLACEMENT.provisioning_timeout_s + 1)
    pooled.invoke()
    named = {SPOT.service, ON_DEMAND.service}
    listed_arns: set[str] = set()
    for operation, sent in pooled.ecs.calls:
        assert sent["cluster"] == pooled.stack.settings.cluster
        if operation == "DescribeTasks":  # only tasks ListTasks gave for those services
            assert set(sent["tasks"]) <= listed_arns
            continue
        services = sent.get("services") or [sent.get("service") or sent.get("serviceName")]
        assert set(services) <= named, (operation, sent)
        if operation == "ListTasks":
            listed_arns |= {t["taskArn"] for t in pooled.ecs.services[sent["serviceName"]].tasks}
    operations = [operation for operation, _ in pooled.ecs.calls]
    # One DescribeServices for both; the tasks of the short Spot service; its stopped tasks
    # (only Spot is interrupted); On-Demand is at its count, so its tasks are not listed.
    assert operations.count("DescribeServices") == 1
    listed = [
        (s["serviceName"], s["desiredStatus"]) for o, s in pooled.ecs.calls if o == "ListTasks"
    ]
    assert listed == [(SPOT.service, "RUNNING"), (SPOT.service, "STOPPED")]


def test_the_stubbed_answers_check_each_request_against_the_ecs_model(pooled: Pooled) -> None:
    """The world refuses what ECS would: a status outside the model's enum (botocore's own
    validator lets enums through), and a member the model does not have, before answering."""
    client = pooled.ecs.client()
    with pytest.raises(AssertionError, match="desiredStatus: 'PROVISIONING' is not one of"):
        client.list_tasks(cluster="fleet", serviceName=SPOT.service, desiredStatus="PROVISIONING")
    with pytest.raises(AssertionError, match="Unknown parameter in input"):
        client.update_service(cluster="fleet", service=SPOT.service, desired=1)
