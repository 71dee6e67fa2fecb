"""Every request the program would send, checked against botocore's service models.

The dev, prod, endpoints and existing graphs are built under API-shaped mocks, each recorded
resource is converted into the boto3 request(s) the provider sends (tests/lib/aws_requests.py),
and each request is validated: botocore's ParamValidator, the model's enum/min/max/pattern,
and the documented rules the model does not encode. The negative tests prove the validator
can fail: one real request, one deliberate mistake, one specific report line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import botocore.session
import pytest

from tests.lib.aws_requests import (
    CONVERTERS,
    ApiShapedMocks,
    Context,
    Request,
    UnmappedInput,
    capacity_provider,
    mutated,
    problems,
    python_pattern,
    record_main,
    record_platform,
    requests_for,
)
from tests.lib.stack_support import PREBUILT, stack_file_config

EXISTING = {
    "mode": "existing",
    "vpcId": "vpc-0abc12345",
    "subnetIds": ["subnet-0aaa11111", "subnet-0bbb22222"],
}


def alarms_mode(config: dict[str, Any]) -> dict[str, Any]:
    """A stack file's config with `scaling.mode: alarms` (the step policies' design)."""
    scaling = {**config.get("tts-fleet:scaling", {}), "mode": "alarms"}
    return {**config, "tts-fleet:scaling": scaling}


PULL_THROUGH = {
    "baseImage": "vllm/vllm-openai:v0.30.0",
    "dockerHubSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:"
    "ecr-pullthroughcache/docker-hub-AbCdEf",
}
GRAPHS: dict[str, Callable[[], ApiShapedMocks]] = {
    "dev": lambda: record_main(stack_file_config("dev"), "dev"),
    "prod": lambda: record_main(stack_file_config("prod"), "prod"),
    "alarms": lambda: record_main(alarms_mode(stack_file_config("prod")), "prod"),
    "endpoints": lambda: record_platform({"network": {"mode": "endpoints"}}),
    "existing": lambda: record_platform({"network": EXISTING, "worker": {"image": PREBUILT}}),
    # The base image through a Docker Hub pull-through cache rule (worker.dockerHubSecretArn).
    "pull-through": lambda: record_platform({"worker": PULL_THROUGH}),
}
# The resource types the issue lists, each of which must yield at least one checked request.
LISTED_TYPES = {
    "aws:ecs/capacityProvider:CapacityProvider",
    "aws:ecs/taskDefinition:TaskDefinition",
    "aws:ecs/service:Service",
    "aws:appautoscaling/target:Target",
    "aws:appautoscaling/policy:Policy",
    "aws:appautoscaling/scheduledAction:ScheduledAction",
    "aws:cloudwatch/metricAlarm:MetricAlarm",
    "aws:cloudwatch/dashboard:Dashboard",
    "aws:budgets/budget:Budget",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:sqs/queue:Queue",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:codebuild/project:Project",
    "aws:kms/key:Key",
    "aws:iam/role:Role",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/policy:Policy",
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule",
    "aws:lambda/function:Function",
    "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig",
    "aws:scheduler/schedule:Schedule",
    "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy",
    "aws:s3/bucketPolicy:BucketPolicy",
}
# Recorded types this test does not convert (yet). A type missing from both this set and the
# converters fails `test_every_recorded_type_is_converted_or_named_here`: decide, do not drift.
NOT_CONVERTED = {
    "pulumi:providers:aws",  # engine configuration, not an AWS request
    "pulumi-python:dynamic:Resource",  # runs StartBuild itself (components/image_build.py)
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/eip:Eip",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:ecs/cluster:Cluster",
    "aws:cloudwatch/logGroup:LogGroup",
    "aws:sns/topic:Topic",
    "aws:sns/topicPolicy:TopicPolicy",
    "aws:sns/topicSubscription:TopicSubscription",
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketObjectv2:BucketObjectv2",
    "aws:ecr/repository:Repository",
    "aws:ecr/lifecyclePolicy:LifecyclePolicy",
}
SERVICES = ("ecs", "application-autoscaling", "cloudwatch", "budgets", "ec2", "sqs", "s3",
            "codebuild", "kms", "iam", "lambda", "scheduler", "ecr")  # fmt: skip


@cache
def graph(name: str) -> ApiShapedMocks:
    return GRAPHS[name]()


@cache
def requests(name: str) -> tuple[Request, ...]:
    return tuple(requests_for(graph(name)))


@pytest.mark.parametrize("name", list(GRAPHS))
def test_every_request_of_each_graph_passes_the_api_models(name: str) -> None:
    found = [p for request in requests(name) for p in problems(request)]
    assert found == []


def test_each_listed_resource_type_is_converted_and_checked() -> None:
    sources = {r.source.split(" ")[0] for name in GRAPHS for r in requests(name)}
    assert sources >= LISTED_TYPES, sorted(LISTED_TYPES - sources)


def test_every_recorded_resource_of_a_converted_type_yields_requests() -> None:
    for name in GRAPHS:
        converted = {r.source.split(" ", 1)[1] for r in requests(name)}
        expected = {r.name for r in graph(name).resources if r.type in CONVERTERS}
        assert converted == expected, name


def test_every_recorded_type_is_converted_or_named_here() -> None:
    recorded = {r.type for name in GRAPHS for r in graph(name).resources}
    components = {t for t in recorded if t.startswith("tts-fleet:")}
    assert recorded - components - set(CONVERTERS) - NOT_CONVERTED == set()


def test_the_graphs_send_the_operations_each_type_maps_to() -> None:
    operations = {(r.service, r.operation) for name in GRAPHS for r in requests(name)}
    assert operations == {
        ("ecs", "CreateCapacityProvider"),
        ("ecs", "RegisterTaskDefinition"),
        ("ecs", "CreateService"),
        ("ecs", "UpdateService"),
        ("application-autoscaling", "RegisterScalableTarget"),
        ("application-autoscaling", "PutScalingPolicy"),
        ("application-autoscaling", "PutScheduledAction"),
        ("cloudwatch", "PutMetricAlarm"),
        ("cloudwatch", "PutDashboard"),
        ("budgets", "CreateBudget"),
        ("ec2", "CreateVpcEndpoint"),
        ("sqs", "CreateQueue"),
        ("sqs", "SetQueueAttributes"),
        ("s3", "PutBucketLifecycleConfiguration"),
        ("s3", "PutBucketPolicy"),
        ("codebuild", "CreateProject"),
        ("kms", "CreateKey"),
        ("kms", "EnableKeyRotation"),
        ("kms", "ScheduleKeyDeletion"),
        ("iam", "CreateRole"),
        ("iam", "PutRolePolicy"),
        ("iam", "AttachRolePolicy"),
        ("iam", "CreatePolicy"),
        ("ecr", "CreatePullThroughCacheRule"),
        ("iam", "CreateInstanceProfile"),
        ("iam", "AddRoleToInstanceProfile"),
        ("lambda", "CreateFunction"),
        ("lambda", "PutFunctionConcurrency"),
        ("lambda", "PutFunctionEventInvokeConfig"),
        ("scheduler", "CreateSchedule"),
    }


def test_every_pattern_of_the_models_used_translates_to_python() -> None:
    session = botocore.session.get_session()
    untranslated = []
    for service in SERVICES:
        model = session.get_service_model(service)
        for shape_name in model.shape_names:
            pattern = model.shape_for(shape_name).metadata.get("pattern")
            try:
                if pattern:
                    python_pattern(pattern)
            except re.error as error:
                untranslated.append((service, shape_name, pattern, str(error)))
    assert untranslated == []


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (r"\p{Print}+", "tts-fleet-idle-1a2b3c4", "tab\there"),
        (r"[\p{L}\p{Z}\p{N}_.:/=+\-@]*", "tts-fleet:stack", "a#b"),
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "service/c/s", "\x01"),
        (r"^(?![^:\\]*/action/|(?i).*<script>.*</script>.*)[^:\\]+$", "budget-1", "a:b"),
    ],
)
def test_java_patterns_keep_their_meaning(pattern: str, good: str, bad: str) -> None:
    assert python_pattern(pattern).fullmatch(good)
    assert not python_pattern(pattern).fullmatch(bad)


def one(operation: str, source_part: str, graph_name: str = "prod") -> Request:
    found = [
        r for r in requests(graph_name) if r.operation == operation and source_part in r.source
    ]
    assert len(found) == 1, (operation, source_part, [r.source for r in found])
    return found[0]


def _steps(params: dict[str, Any]) -> list[dict[str, Any]]:
    return params["StepScalingPolicyConfiguration"]["StepAdjustments"]


def _template(params: dict[str, Any]) -> dict[str, Any]:
    return params["managedInstancesProvider"]["instanceLaunchTemplate"]


def _twenty_one_steps(params: dict[str, Any]) -> None:
    steps = [
        {"MetricIntervalLowerBound": float(i), "MetricIntervalUpperBound": float(i + 1),
         "ScalingAdjustment": i + 1}
        for i in range(20)
    ]  # fmt: skip
    _steps(params)[:] = [*steps, {"MetricIntervalLowerBound": 20.0, "ScalingAdjustment": 21}]


def _second_return_data(params: dict[str, Any]) -> None:
    params["Metrics"][0]["ReturnData"] = True


MUTATIONS: list[tuple[str, str, str, Callable[[dict[str, Any]], None], str]] = [
    ("wrong enum", "CreateCapacityProvider", "gpu",
     lambda p: _template(p).update(capacityOptionType="ONDEMAND"),
     "capacityOptionType: 'ONDEMAND' is not one of ['ON_DEMAND', 'SPOT', 'RESERVED']"),
    ("gap in the steps", "PutScalingPolicy", "scale-out",
     lambda p: _steps(p).pop(3), "gap between steps: nothing covers 48.0..64.0"),
    ("overlapping steps", "PutScalingPolicy", "scale-out",
     lambda p: _steps(p)[1].update(MetricIntervalLowerBound=8.0), "overlapping steps at 8.0..16.0"),
    ("21 steps", "PutScalingPolicy", "scale-out", _twenty_one_steps,
     "21 step adjustments; at most 20"),
    ("open at both ends", "PutScalingPolicy", "idle",
     lambda p: _steps(p)[0].pop("MetricIntervalUpperBound"), "a step with both bounds open"),
    ("TreatMissingData spelling", "PutMetricAlarm", "autoscaling-idle",
     lambda p: p.update(TreatMissingData="notbreaching"), "TreatMissingData 'notbreaching'"),
    ("two ReturnData", "PutMetricAlarm", "autoscaling-scale-out", _second_return_data,
     "exactly one query must have ReturnData true, got ['visible', 'outstanding']"),
    ("expression names an unknown id", "PutMetricAlarm", "autoscaling-scale-out",
     lambda p: p["Metrics"][2].update(Expression="visible + hidden"), "unknown id 'hidden'"),
    ("over a day of evaluation", "PutMetricAlarm", "autoscaling-idle",
     lambda p: p.update(EvaluationPeriods=1441, DatapointsToAlarm=1441),
     "EvaluationPeriods × Period = 1441 × 60 > 86400 s"),
    ("scaleInAfter over an hour", "CreateCapacityProvider", "gpu",
     lambda p: p["managedInstancesProvider"]["infrastructureOptimization"].update(
         scaleInAfter=3601), "scaleInAfter 3601 is neither -1 nor 0..3600"),
    ("name over the model's max", "CreateRole", "worker-task-role",
     lambda p: p.update(RoleName="r" * 65), "RoleName: 65 is above the model's max 64"),
    ("name against the model's pattern", "CreateRole", "worker-task-role",
     lambda p: p.update(RoleName="worker role!"), "RoleName: 'worker role!' does not match"),
    ("tag key against the model's pattern", "CreateCapacityProvider", "gpu",
     lambda p: p["tags"][0].update(key="tts#fleet"), "tags[0].key: 'tts#fleet' does not match"),
    ("value below the model's min", "CreateCapacityProvider", "gpu",
     lambda p: _template(p)["storageConfiguration"].update(storageSizeGiB=0),
     "storageSizeGiB: 0 is below the model's min 1"),
    ("missing required", "PutMetricAlarm", "oldest-job", lambda p: p.pop("AlarmName"),
     'Missing required parameter in input: "AlarmName"'),
    ("wrong type", "RegisterScalableTarget", "target",
     lambda p: p.update(MinCapacity="zero"), "Invalid type for parameter MinCapacity"),
    ("SQS attribute name", "CreateQueue", "jobs",
     lambda p: p["Attributes"].update(VisibilityTimeoutSeconds="300"),
     "Attributes<key 'VisibilityTimeoutSeconds'>: 'VisibilityTimeoutSeconds' is not one of"),
    ("SQS range", "CreateQueue", "jobs", lambda p: p["Attributes"].update(DelaySeconds="901"),
     "DelaySeconds 901 is outside 0..900"),
    ("policy grammar version", "PutRolePolicy", "worker-task-policy",
     lambda p: p.update(PolicyDocument=p["PolicyDocument"].replace("2012-10-17", "2008-10-17")),
     "policy Version '2008-10-17' is not '2012-10-17'"),
    ("budget account id", "CreateBudget", "budget", lambda p: p.update(AccountId="1234"),
     "AccountId: 4 is below the model's min 12"),
    ("redrive-allow by queue naming none", "SetQueueAttributes", "dlq-redrive-allow",
     lambda p: p["Attributes"].update(
         RedriveAllowPolicy='{"redrivePermission": "byQueue", "sourceQueueArns": []}'),
     "RedriveAllowPolicy byQueue names 0 queues, not 1..10"),
    ("bucket policy grammar version", "PutBucketPolicy", "outputs-policy",
     lambda p: p.update(Policy=p["Policy"].replace("2012-10-17", "2008-10-17")),
     "policy Version '2008-10-17' is not '2012-10-17'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("operation", "source_part", "change", "expected"),
    [m[1:] for m in MUTATIONS],
    ids=[m[0] for m in MUTATIONS],
)
def test_a_deliberate_mistake_is_reported(
    operation: str, source_part: str, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    # The alarms design's graph: its step policies carry the band rules the mutations break.
    request = one(operation, source_part, "alarms")
    assert problems(request) == []
    found = problems(mutated(request, change))
    assert any(expected in line for line in found), found


def test_an_endpoint_policy_is_checked_as_a_resource_policy() -> None:
    request = one("CreateVpcEndpoint", "network-sqs", "endpoints")
    assert problems(request) == []
    broken = request.params["PolicyDocument"].replace('"Principal"', '"Grantee"')
    found = problems(mutated(request, lambda p: p.update(PolicyDocument=broken)))
    assert any(line.endswith("Statement[0] has no Principal") for line in found), found


def test_an_input_without_a_mapping_raises_instead_of_being_dropped() -> None:
    recorded = graph("prod").one("aws:ecs/capacityProvider:CapacityProvider")
    resource = type(recorded)(
        recorded.type,
        recorded.name,
        {**recorded.inputs, "managedDraining": "ENABLED"},
        recorded.provider,
    )
    context = Context(resource, graph("prod").outputs[recorded.name], {})
    with pytest.raises(UnmappedInput, match="managedDraining"):
        capacity_provider(context)
