"""The controller function against moto: SQS, ECS, Application Auto Scaling and S3 in one
mocked account. The clock and sleep are the test's, so a 50-s invocation takes no time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tts_fleet.controller import handler
from tts_fleet.controller.handler import Clients, run
from tts_fleet.controller.metrics import DESIRED, NAMESPACE, OUTSTANDING
from tts_fleet.controller.settings import STATE_KEY, Settings
from tts_fleet.scaling import policy
from tts_fleet.scaling.controller import SAMPLE_INTERVAL_S, ControllerParams, ControllerState

REGION = "us-east-1"
PARAMS = ControllerParams(
    min_workers=0,
    max_workers=4,
    jobs_per_worker=8,
    idle_minutes=5,
    cold_start_work=0.5,
    cold_start_s=630.0,
    seconds_per_job=2.0,
    concurrency=1,
    host_idle_s=200.0,
)


@dataclass
class Clock:
    """Virtual time: sleep advances it; each AWS call costs nothing."""

    now: float = 1_700_000_000.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class Stack:
    settings: Settings
    clients: Clients
    queue_url: str
    clock: Clock = field(default_factory=Clock)
    lines: list[str] = field(default_factory=list)

    def invoke(self, budget_s: float = 50.0) -> handler.Outcome:
        return run(
            self.settings,
            self.clients,
            budget_s=budget_s,
            clock=self.clock,
            sleep=self.clock.sleep,
            emit=self.lines.append,
        )

    def desired(self) -> int:
        services = self.clients.ecs.describe_services(
            cluster=self.settings.cluster, services=[self.settings.service]
        )["services"]
        return int(services[0]["desiredCount"])

    def stored(self) -> dict[str, Any]:
        body = self.clients.s3.get_object(Bucket=self.settings.bucket, Key=STATE_KEY)["Body"]
        return json.loads(body.read())

    def set_desired(self, count: int) -> None:
        self.clients.ecs.update_service(
            cluster=self.settings.cluster, service=self.settings.service, desiredCount=count
        )

    def drain(self) -> None:
        """What the workers would do: receive and delete every message."""
        while True:
            answer = self.clients.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10
            )
            if not answer.get("Messages"):
                return
            for message in answer["Messages"]:
                self.clients.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def send(self, count: int) -> None:
        for index in range(count):
            self.clients.sqs.send_message(QueueUrl=self.queue_url, MessageBody=f"job {index}")


@pytest.fixture
def stack(in_process_aws: None) -> Iterator[Stack]:
    with mock_aws():
        clients = Clients(
            sqs=boto3.client("sqs", region_name=REGION),
            ecs=boto3.client("ecs", region_name=REGION),
            autoscaling=boto3.client("application-autoscaling", region_name=REGION),
            s3=boto3.client("s3", region_name=REGION),
        )
        queue_url = clients.sqs.create_queue(QueueName="jobs")["QueueUrl"]
        clients.s3.create_bucket(Bucket="outputs")
        clients.ecs.create_cluster(clusterName="fleet")
        clients.ecs.register_task_definition(
            family="worker",
            containerDefinitions=[{"name": "worker", "image": "worker:1", "memory": 512}],
        )
        clients.ecs.create_service(
            cluster="fleet", serviceName="worker", taskDefinition="worker", desiredCount=0
        )
        settings = Settings(
            queue_url=queue_url,
            cluster="fleet",
            service="worker",
            bucket="outputs",
            stack="dev",
            params=PARAMS,
        )
        yield Stack(settings, clients, queue_url)


def register_target(stack: Stack, low: int, high: int) -> None:
    stack.clients.autoscaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=stack.settings.resource_id,
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=low,
        MaxCapacity=high,
    )


def test_an_idle_stack_returns_after_one_sample_and_leaves_the_count(stack: Stack) -> None:
    outcome = stack.invoke()
    assert (outcome.samples, outcome.desired, outcome.changes) == (1, 0, 0)
    assert stack.clock.slept == []
    assert stack.desired() == 0


def test_a_job_in_an_idle_queue_starts_a_worker_within_one_invocation(stack: Stack) -> None:
    register_target(stack, 0, 4)
    stack.send(1)
    outcome = stack.invoke()
    assert stack.desired() == 1
    assert outcome.changes == 1  # set once, on the first sample; later samples agree
    # moto reports the new task running at once but nothing consumes the job, so it stays
    # outstanding: sampling goes on every 10 s for the whole budget, at 0, 10, .., 50 s.
    assert outcome.samples == 6
    assert stack.clock.slept == [SAMPLE_INTERVAL_S] * 5


def test_each_decision_is_an_emf_line_with_the_stack_dimension(stack: Stack) -> None:
    stack.send(3)
    stack.invoke(budget_s=0)
    [line] = stack.lines
    record = json.loads(line)
    directive = record["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == NAMESPACE
    assert directive["Dimensions"] == [["Stack"]]
    assert {m["Name"] for m in directive["Metrics"]} >= {DESIRED, OUTSTANDING}
    assert (record["Stack"], record[DESIRED], record[OUTSTANDING]) == ("dev", 1, 3)
    assert record["reason"] and record["visible"] == 3


def test_the_state_round_trips_through_s3(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.send(2)
    stack.invoke(budget_s=0)
    first = stack.stored()
    assert ControllerState.from_json(first).to_json() == first
    assert first["updated"] == stack.clock.now and first["desired"] == stack.desired() == 1
    # The next invocation starts from what the last one saved: the policy gets it back.
    seen: list[ControllerState] = []
    real = policy.decide

    def spy(params: ControllerParams, state: ControllerState, obs: Any) -> Any:
        seen.append(state)
        return real(params, state, obs)

    monkeypatch.setattr(policy, "decide", spy)
    stack.clock.now += 60
    stack.invoke(budget_s=0)
    assert [state.to_json() for state in seen] == [first]
    assert ControllerState.from_json(stack.stored()).updated == stack.clock.now


def test_an_unreadable_state_object_starts_afresh(stack: Stack) -> None:
    stack.clients.s3.put_object(Bucket="outputs", Key=STATE_KEY, Body=b"not json")
    stack.send(1)
    assert stack.invoke(budget_s=0).desired == 1
    assert stack.stored()["updated"] == stack.clock.now  # replaced by a readable one


def test_an_empty_queue_releases_per_the_policy(stack: Stack) -> None:
    stack.send(20)
    stack.invoke(budget_s=0)
    stack.set_desired(3)  # as if the backlog had called up three workers
    stack.drain()
    # moto runs the tasks at once. The queue emptied: the surplus goes at once; at most one
    # warm worker waits for the next job (how long is the policy's learned idle window).
    stack.clock.now += 60
    outcome = stack.invoke()
    assert outcome.desired <= 1 and stack.desired() == outcome.desired
    # Still empty past idleMinutes: back to minWorkers; with nothing left running the
    # invocation returns after that one sample.
    stack.clock.now += PARAMS.idle_minutes * 60
    outcome = stack.invoke()
    assert (outcome.desired, stack.desired()) == (PARAMS.min_workers, PARAMS.min_workers)
    assert stack.stored()["desired"] == PARAMS.min_workers


def test_a_schedules_bounds_on_the_scalable_target_clamp_the_decision(stack: Stack) -> None:
    register_target(stack, 2, 3)  # what a scheduled action leaves: min 2, max 3
    outcome = stack.invoke(budget_s=0)
    assert (outcome.desired, stack.desired()) == (2, 2)
    # Slow jobs and a short cold start: 40 jobs are worth 5 workers, capped at the max 3.
    slow = replace(PARAMS, cold_start_s=10.0, seconds_per_job=60.0)
    stack.settings = replace(stack.settings, params=slow)
    stack.send(40)
    assert stack.invoke(budget_s=0).desired == 3


def test_the_handler_reads_its_settings_from_the_environment(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in stack.settings.to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(handler.Clients, "default", classmethod(lambda cls: stack.clients))
    stack.send(1)

    class Context:
        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 14_000  # 14 s left: 9 s of budget, so one sample and no sleep

    monkeypatch.setattr(handler.time, "sleep", lambda s: pytest.fail("slept past the budget"))
    assert handler.handle({"source": "test"}, Context()) == {
        "samples": 1,
        "desired": 1,
        "reason": stack.stored()["reason"],
        "changes": 1,
    }
