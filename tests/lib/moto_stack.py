"""The controller function's world for its tests: SQS, ECS, Application Auto Scaling and S3
in one moto account (in process), a virtual clock, and what the workers would do to the
queue. The `stack` fixture (fixtures/controller.py) yields one `Stack`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from moto import mock_aws

from tts_fleet.controller import handler
from tts_fleet.controller.handler import Clients, run
from tts_fleet.controller.settings import STATE_KEY, Settings
from tts_fleet.scaling.controller import ControllerParams

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
        data: dict[str, Any] = json.loads(self.stored_object()[0])
        return data

    def stored_object(self) -> tuple[bytes, str]:
        """The state object as it is in the bucket: its bytes and its ETag."""
        answer = self.clients.s3.get_object(Bucket=self.settings.bucket, Key=STATE_KEY)
        return answer["Body"].read(), answer["ETag"]

    def plant_state(self, body: bytes) -> None:
        """What any writer to the bucket could leave in place of the controller's state."""
        self.clients.s3.put_object(Bucket=self.settings.bucket, Key=STATE_KEY, Body=body)

    def state_lines(self) -> list[dict[str, Any]]:
        """The invocations' log lines about the state object (not the decisions)."""
        records = [json.loads(line) for line in self.lines]
        return [record for record in records if record["event"] != "decision"]

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


def register_target(stack: Stack, low: int, high: int) -> None:
    stack.clients.autoscaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=stack.settings.resource_id,
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=low,
        MaxCapacity=high,
    )


@contextmanager
def moto_stack() -> Iterator[Stack]:
    """A mocked account with the queue, the bucket, the cluster and the service (desired 0)."""
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
