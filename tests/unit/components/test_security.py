"""Security properties on the whole resource graph (dev stack through __main__, and the
endpoints mode with a prebuilt image): least privilege, TLS only, no public access, no
ingress, and the cost-allocation tag on every AWS resource.

Mocks cannot prove that AWS evaluates these policies as intended; they prove what is asked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lib.pulumi_harness import RecordingMocks
from tests.lib.stack_support import (
    PREBUILT,
    as_list,
    policy,
    run_main,
    run_platform,
    stack_file_config,
)

DENY_TLS_CONDITION = {"Bool": {"aws:SecureTransport": "false"}}
WORKER_POLICIES = ("-worker-task-policy", "-worker-execution-policy")  # name suffixes


def storage_or_queue_wildcards(document: dict[str, Any]) -> list[str]:
    """Every `*` grant on an SQS or S3 action or resource in an identity policy."""
    found: list[str] = []
    for statement in as_list(document["Statement"]):
        actions = as_list(statement.get("Action", []))
        touches = [a for a in actions if a == "*" or a.split(":")[0] in ("sqs", "s3")]
        found += [f"action {a}" for a in touches if "*" in a]
        if touches:
            found += [f"resource {r}" for r in as_list(statement["Resource"]) if r == "*"]
            found += [f"resource {r}" for r in as_list(statement["Resource"]) if r.endswith(":*")]
    return found


@pytest.fixture(scope="module")
def dev() -> RecordingMocks:
    return run_main(stack_file_config("dev"), "dev")[0]


@pytest.fixture(scope="module")
def endpoints() -> RecordingMocks:
    return run_platform({"network": {"mode": "endpoints"}, "worker": {"image": PREBUILT}})


def test_the_wildcard_check_catches_wildcards() -> None:
    # Guards the check itself: it must flag each shape it exists to forbid.
    bad = {
        "Statement": [
            {"Effect": "Allow", "Action": "sqs:*", "Resource": "arn:aws:sqs:r:1:q"},
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"},
            {"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::b/*"},
        ]
    }
    assert storage_or_queue_wildcards(bad) == ["action sqs:*", "resource *", "action *"]


@pytest.mark.parametrize("graph", ["dev", "endpoints"])
def test_task_and_execution_roles_grant_no_wildcard_on_sqs_or_s3(
    graph: str, request: pytest.FixtureRequest
) -> None:
    mocks: RecordingMocks = request.getfixturevalue(graph)
    documents = {
        suffix: policy(p)
        for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy")
        for suffix in WORKER_POLICIES
        if p.name.endswith(suffix)
    }
    assert sorted(documents) == sorted(WORKER_POLICIES)
    assert {name: storage_or_queue_wildcards(doc) for name, doc in documents.items()} == {
        name: [] for name in WORKER_POLICIES
    }
    task = documents["-worker-task-policy"]
    prefix = {"dev": "tts-fleet", "endpoints": "tts"}[graph]
    sqs_s3 = [
        r
        for s in task["Statement"]
        if any(a.split(":")[0] in ("sqs", "s3") for a in as_list(s["Action"]))
        for r in as_list(s["Resource"])
    ]
    # Only this stack's queue, DLQ and bucket (prefixes).
    assert sqs_s3 == [
        f"arn:aws:sqs:us-east-1:123456789012:{prefix}-queue-jobs",
        f"arn:aws:sqs:us-east-1:123456789012:{prefix}-queue-dlq",
        f"arn:aws:s3:::{prefix}-outputs-bucket/outputs/*",
        f"arn:aws:s3:::{prefix}-outputs-bucket/failures/*",
        f"arn:aws:s3:::{prefix}-outputs-bucket",
    ]


@pytest.mark.parametrize("graph", ["dev", "endpoints"])
def test_every_queue_and_bucket_policy_denies_insecure_transport(
    graph: str, request: pytest.FixtureRequest
) -> None:
    mocks: RecordingMocks = request.getfixturevalue(graph)
    policies = mocks.of_type("aws:sqs/queuePolicy:QueuePolicy") + mocks.of_type(
        "aws:s3/bucketPolicy:BucketPolicy"
    )
    expected = {"dev": 4, "endpoints": 3}[graph]  # dev also has the build-source bucket
    assert len(policies) == expected
    for recorded in policies:
        denies = [
            s
            for s in policy(recorded)["Statement"]
            if s["Effect"] == "Deny"
            and s["Principal"] == "*"
            and s["Condition"] == DENY_TLS_CONDITION
        ]
        assert len(denies) == 1, recorded.name
        assert denies[0]["Action"] in ("sqs:*", "s3:*")


@pytest.mark.parametrize("graph", ["dev", "endpoints"])
def test_block_public_access_is_all_true_on_every_bucket(
    graph: str, request: pytest.FixtureRequest
) -> None:
    mocks: RecordingMocks = request.getfixturevalue(graph)
    buckets = mocks.of_type("aws:s3/bucket:Bucket")
    blocks = mocks.of_type("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert sorted(b.inputs["bucket"] for b in blocks) == sorted(f"{b.name}-id" for b in buckets)
    for block in blocks:
        flags = {k: v for k, v in block.inputs.items() if k != "bucket"}
        assert flags == {
            "blockPublicAcls": True,
            "blockPublicPolicy": True,
            "ignorePublicAcls": True,
            "restrictPublicBuckets": True,
        }


@pytest.mark.parametrize("graph", ["dev", "endpoints"])
def test_the_worker_security_group_has_no_ingress(
    graph: str, request: pytest.FixtureRequest
) -> None:
    mocks: RecordingMocks = request.getfixturevalue(graph)
    groups = {g.name: g.inputs for g in mocks.of_type("aws:ec2/securityGroup:SecurityGroup")}
    assert (
        groups["tts-capacity-sg" if graph == "endpoints" else "tts-fleet-capacity-sg"].get(
            "ingress", []
        )
        == []
    )
    service = mocks.one("aws:ecs/service:Service").inputs
    [worker_sg] = service["networkConfiguration"]["securityGroups"]
    assert groups[worker_sg.removesuffix("-id")].get("ingress", []) == []
    # The only ingress anywhere is HTTPS from the VPC into the interface endpoints.
    others = {n: g["ingress"] for n, g in groups.items() if g.get("ingress")}
    if graph == "endpoints":
        assert list(others) == ["tts-network-endpoints-sg"]
        assert [(r["fromPort"], r["cidrBlocks"]) for r in others["tts-network-endpoints-sg"]] == [
            (443, ["10.0.0.0/16"])
        ]
    else:
        assert others == {}


def test_every_aws_resource_carries_the_cost_allocation_tag(dev: RecordingMocks) -> None:
    provider = dev.one("pulumi:providers:aws")
    assert json.loads(provider.inputs["defaultTags"]) == {
        "tags": {"tts-fleet:stack": "dev", "tts-fleet:project": "tts-fleet"}
    }
    urn = "urn:pulumi:dev::tts-fleet::pulumi:pulumi:Stack$pulumi:providers:aws::aws::aws-id"
    aws_resources = [r for r in dev.resources if r.type.startswith("aws:")]
    # Every aws: resource of the dev stack (see test_platform); the controller adds 9 and
    # leaves 1 of the 2 step policies and 1 of the 2 scaling alarms; the output bucket's
    # reader policy is 1 more; the default base image's ECR Public cache rule 1 more; the DLQ's
    # redrive-allow policy 1 more.
    assert len(aws_resources) == 66 + 9 - 2 + 1 + 1 + 1
    assert {r.provider for r in aws_resources} == {urn}


def test_in_endpoints_mode_the_hosts_send_https_only_to_the_endpoints(
    endpoints: RecordingMocks,
) -> None:
    groups = {g.name: g.inputs for g in endpoints.of_type("aws:ec2/securityGroup:SecurityGroup")}
    https = {"protocol": "tcp", "fromPort": 443, "toPort": 443}
    assert groups["tts-capacity-sg"]["egress"] == [
        {
            **https,
            "securityGroups": ["tts-network-endpoints-sg-id"],
            "description": "AWS APIs through the interface endpoints: SQS, ECR, ECS, Logs, STS",
        },
        {
            **https,
            "prefixListIds": ["pl-tts-network-s3"],  # the S3 gateway endpoint's
            "description": "S3 through the gateway endpoint: outputs and ECR image layers",
        },
    ]


def test_elsewhere_the_hosts_send_https_anywhere(dev: RecordingMocks) -> None:
    # nat (and existing): the APIs are reached through the NAT or the VPC's own routes.
    groups = {g.name: g.inputs for g in dev.of_type("aws:ec2/securityGroup:SecurityGroup")}
    assert groups["tts-fleet-capacity-sg"]["egress"] == [
        {
            "protocol": "tcp",
            "fromPort": 443,
            "toPort": 443,
            "cidrBlocks": ["0.0.0.0/0"],
            "description": "AWS APIs: SQS, S3, ECR, ECS, CloudWatch Logs",
        }
    ]
