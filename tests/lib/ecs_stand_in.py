"""What ECS and EC2 tell a task about its own start, served from one local HTTP server: the task
metadata endpoint v4 (`GET <base>/task`), ECS `DescribeTasks` (the JSON protocol, reached
through `AWS_ENDPOINT_URL_ECS`; moto's ECS tasks carry no `createdAt`) and IMDSv2's instance
type. The `/task` answer has the shape and field names of AWS's documented response for tasks
on Managed Instances; its timestamps are written the way the agent writes them (nanoseconds,
`Z`).
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-managed-instances-response.html
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/tts-test"
TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/tts-test/0b69d5c0d1b84e1ab1e8e4e0e2a0e7d1"
INSTANCE_TYPE = "g6.xlarge"
METADATA_PATH = "/v4/0b69d5c0d1b84e1ab1e8e4e0e2a0e7d1-3822082590"
IMDS_TOKEN = "stand-in-token"


def agent_time(epoch: float) -> str:
    """An epoch as the agent writes it: `2026-12-02T00:43:06.202617438Z`."""
    whole = int(epoch)
    nanos = round((epoch - whole) * 1e9)
    stamp = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


def task_metadata(pull_started: float, pull_stopped: float, container_started: float) -> dict:
    """A v4 `/task` answer for a one-container worker task on Managed Instances."""
    return {
        "Cluster": CLUSTER,
        "ServiceName": "tts-test-worker",
        "VPCID": "vpc-0a1b2c3d4e5f60718",
        "TaskARN": TASK_ARN,
        "Family": "tts-test-worker",
        "Revision": "7",
        "DesiredStatus": "RUNNING",
        "KnownStatus": "RUNNING",
        "Limits": {"CPU": 4, "Memory": 15360},
        "PullStartedAt": agent_time(pull_started),
        "PullStoppedAt": agent_time(pull_stopped),
        "AvailabilityZone": "us-east-1a",
        "LaunchType": "MANAGED_INSTANCES",
        "Containers": [
            {
                "DockerId": "0b69d5c0d1b84e1ab1e8e4e0e2a0e7d1-3822082590",
                "Name": "worker",
                "DockerName": "worker",
                "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/tts-test:1f2e3d",
                "ImageID": "sha256:" + "ab" * 32,
                "Labels": {"com.amazonaws.ecs.task-arn": TASK_ARN},
                "DesiredStatus": "RUNNING",
                "KnownStatus": "RUNNING",
                "Limits": {"CPU": 0, "Memory": 0},
                "CreatedAt": agent_time(container_started - 0.8),
                "StartedAt": agent_time(container_started),
                "Type": "NORMAL",
                "Networks": [{"NetworkMode": "awsvpc", "IPv4Addresses": ["10.0.2.106"]}],
            }
        ],
    }


@dataclass
class EcsStandIn:
    url: str
    metadata: dict[str, Any]
    created: float
    requests: list[str] = field(default_factory=list)

    @property
    def metadata_uri(self) -> str:
        return self.url + METADATA_PATH


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        stand_in: EcsStandIn = self.server.stand_in  # type: ignore[attr-defined]
        stand_in.requests.append(f"GET {self.path}")
        if self.path == METADATA_PATH + "/task":
            self._answer(200, json.dumps(stand_in.metadata).encode())
        elif self.path == "/latest/meta-data/instance-type":
            known = self.headers.get("X-aws-ec2-metadata-token") == IMDS_TOKEN
            self._answer(200 if known else 401, INSTANCE_TYPE.encode(), "text/plain")
        else:
            self._answer(404, b"{}")

    def do_PUT(self) -> None:
        stand_in: EcsStandIn = self.server.stand_in  # type: ignore[attr-defined]
        stand_in.requests.append(f"PUT {self.path}")
        self._answer(200, IMDS_TOKEN.encode(), "text/plain")

    def do_POST(self) -> None:
        stand_in: EcsStandIn = self.server.stand_in  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        target = self.headers.get("X-Amz-Target", "")
        stand_in.requests.append(f"POST {target}")
        if target.endswith(".DescribeTasks"):
            task = {"taskArn": TASK_ARN, "clusterArn": CLUSTER, "createdAt": stand_in.created}
            self._answer(200, json.dumps({"tasks": [task], "failures": []}).encode())
        else:
            self._answer(400, b'{"__type":"InvalidParameterException"}')

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def ecs_stand_in(
    created: float, pull_started: float, pull_stopped: float, container_started: float
) -> Iterator[EcsStandIn]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    stand_in = EcsStandIn(
        f"http://127.0.0.1:{server.server_address[1]}",
        task_metadata(pull_started, pull_stopped, container_started),
        created,
    )
    server.stand_in = stand_in  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()
