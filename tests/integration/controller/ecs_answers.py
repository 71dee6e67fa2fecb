"""Stubbed ECS answers for the pool tests: moto's ECS has no Managed Instances, no PROVISIONING
tasks, no service events and no Spot interruptions, so a real boto3 ECS client is answered
from a small world the test arranges.

Every request the controller sends is still the client's own: botocore serialises and checks it
against the ECS service model (types, required members) before the answer is taken, and
`tests.lib.aws_requests.problems` checks what ParamValidator skips (enums, max, patterns).
Every answer is checked against the operation's output shape, as botocore's Stubber does, so
the controller reads only fields ECS has, in the types botocore gives them (datetimes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import ParamValidator

from tests.lib.aws_requests import Request, problems

REGION = "us-east-1"
ACCOUNT = "123456789012"


def when(epoch: float) -> datetime:
    """A time as botocore parses ECS timestamps: an aware datetime."""
    return datetime.fromtimestamp(epoch, tz=UTC)


@dataclass
class EcsService:
    name: str
    desired: int = 0
    running: int = 0
    pending: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EcsAnswers:
    """The cluster's services as ECS would describe them; `calls` records each request."""

    cluster: str
    services: dict[str, EcsService]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _serial: int = 0
    _sent: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Any:
        """A real ECS client whose requests this world answers."""
        ecs = boto3.client(
            "ecs",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        ecs.meta.events.register_first("before-parameter-build.ecs.*", self._request)
        ecs.meta.events.register_first("before-call.ecs.*", self._answer)
        return ecs

    def arn(self, kind: str, name: str) -> str:
        return f"arn:aws:ecs:{REGION}:{ACCOUNT}:{kind}/{self.cluster}/{name}"

    def add_task(self, service: str, last_status: str, created: float, **more: Any) -> str:
        """A task of `service`; `more` adds ECS Task fields (stopCode, stoppedAt, ...)."""
        self._serial += 1
        task_arn = self.arn("task", f"{self._serial:032x}")
        desired = "STOPPED" if last_status in ("STOPPING", "STOPPED") else "RUNNING"
        task = {
            "taskArn": task_arn,
            "clusterArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{self.cluster}",
            "group": f"service:{service}",
            "lastStatus": last_status,
            "desiredStatus": more.pop("desiredStatus", desired),
            "createdAt": when(created),
            **{k: when(v) if k.endswith("At") else v for k, v in more.items()},
        }
        self.services[service].tasks.append(task)
        return task_arn

    def add_event(self, service: str, at: float, message: str) -> None:
        """A service event, newest first as DescribeServices lists them."""
        self._serial += 1
        event = {"id": f"{self._serial:08x}", "createdAt": when(at), "message": message}
        self.services[service].events.insert(0, event)

    def updates(self) -> list[tuple[str, int]]:
        return [(c["service"], c["desiredCount"]) for op, c in self.calls if op == "UpdateService"]

    def _request(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        # The parameters as the controller passed them; botocore validates them against the
        # model next (and raises on a bad one before any answer); this checks the rest.
        found = problems(Request("ecs", model.name, dict(params), "controller"))
        assert not found, found
        self._sent = dict(params)

    def _answer(self, model: Any, **_: Any) -> tuple[AWSResponse, Any]:
        name, sent = model.name, self._sent
        self.calls.append((name, sent))
        answer = getattr(self, f"_{name}")(sent)
        report = ParamValidator().validate(answer, model.output_shape)
        assert not report.has_errors(), report.generate_report()
        return AWSResponse("https://ecs.amazonaws.com", 200, {}, None), answer

    def _DescribeServices(self, sent: dict[str, Any]) -> dict[str, Any]:
        assert sent["cluster"] == self.cluster
        found = [self._service(self.services[n]) for n in sent["services"] if n in self.services]
        failures = [
            {"arn": self.arn("service", n), "reason": "MISSING"}
            for n in sent["services"]
            if n not in self.services
        ]
        return {"services": found, "failures": failures}

    def _service(self, service: EcsService) -> dict[str, Any]:
        return {
            "serviceArn": self.arn("service", service.name),
            "serviceName": service.name,
            "status": "ACTIVE",
            "desiredCount": service.desired,
            "runningCount": service.running,
            "pendingCount": service.pending,
            "events": list(service.events[:100]),
        }

    def _ListTasks(self, sent: dict[str, Any]) -> dict[str, Any]:
        service = self.services[sent["serviceName"]]
        status = sent.get("desiredStatus", "RUNNING")
        arns = [t["taskArn"] for t in service.tasks if t["desiredStatus"] == status]
        return {"taskArns": arns[: sent.get("maxResults", 100)]}

    def _DescribeTasks(self, sent: dict[str, Any]) -> dict[str, Any]:
        tasks = {t["taskArn"]: t for s in self.services.values() for t in s.tasks}
        return {"tasks": [tasks[arn] for arn in sent["tasks"]], "failures": []}

    def _UpdateService(self, sent: dict[str, Any]) -> dict[str, Any]:
        assert set(sent) == {"cluster", "service", "desiredCount"}, sent
        service = self.services[sent["service"]]
        service.desired = sent["desiredCount"]
        return {"service": self._service(service)}
