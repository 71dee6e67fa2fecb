"""Run Pulumi code under recording mocks (no CLI, no provider plugin, no AWS).

What a mock cannot prove: that AWS accepts the request. The recorded inputs are exactly what
the engine would send to the provider, so tests pin counts and inputs per type token; the
provider's own validation and AWS's API checks only happen at `pulumi preview`/`up`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

ACCOUNT = "123456789012"
REGION = "us-east-1"
AZS = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"]


@dataclass
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str | None


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    resources: list[Recorded] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.resources.append(Recorded(args.typ, args.name, dict(args.inputs), args.provider))
        service = args.typ.split(":")[1].split("/")[0]
        physical = args.inputs.get("name") or args.name
        outputs = {
            "arn": f"arn:aws:{service}:{REGION}:{ACCOUNT}:{physical}",
            "name": physical,
            **args.inputs,
        }
        if args.typ == "aws:sqs/queue:Queue":
            outputs["url"] = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{physical}"
        if args.typ == "aws:s3/bucket:Bucket" or args.typ == "aws:s3/bucketV2:BucketV2":
            outputs["bucket"] = args.inputs.get("bucket") or physical
            outputs["arn"] = f"arn:aws:s3:::{outputs['bucket']}"
        if (
            args.typ == "aws:ec2/vpcEndpoint:VpcEndpoint"
            and args.inputs.get("vpcEndpointType") == "Gateway"
        ):
            outputs["prefixListId"] = f"pl-{args.name}"  # a gateway endpoint's prefix list
        if args.typ == "aws:ecr/repository:Repository":
            outputs["repositoryUrl"] = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{physical}"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        self.calls.append((args.token, dict(args.args)))
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": AZS, "zoneIds": [f"use1-az{i}" for i in range(1, 7)]}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": ACCOUNT,
                "arn": f"arn:aws:iam::{ACCOUNT}:user/test",
                "userId": "test",
            }
        if args.token in ("aws:index/getRegion:getRegion",):
            return {"name": REGION, "region": REGION, "id": REGION}
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com"}
        return {}

    def of_type(self, type_token: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str) -> Recorded:
        found = self.of_type(type_token)
        assert len(found) == 1, f"expected one {type_token}, found {len(found)}"
        return found[0]

    def counts(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for resource in self.resources:
            result[resource.type] = result.get(resource.type, 0) + 1
        return result


def run_program(
    program: Callable[[], Any],
    config: dict[str, Any] | None = None,
    stack: str = "dev",
) -> RecordingMocks:
    """Runs `program` under fresh recording mocks and waits for every registration."""
    mocks = RecordingMocks()
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in (config or {}).items()}
    )
    pulumi.runtime.set_mocks(mocks, project="tts-fleet", stack=stack, preview=False)

    @pulumi.runtime.test
    def _run() -> Any:
        return program()

    _run()
    return mocks


def stack_config(raw: dict[str, Any]) -> dict[str, Any]:
    """`{section: value}` → the engine's `tts-fleet:<section>` config map."""
    return {f"tts-fleet:{name}": value for name, value in raw.items()}
