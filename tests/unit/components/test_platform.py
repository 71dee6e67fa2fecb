"""Platform and __main__: exact resource counts per type token for each network mode, both
stack files and a prebuilt image, and the stack exports.

Counts are composed from literal per-part tables (each reviewed against the component), so a
resource added or lost anywhere shows up here. Mocks cannot prove AWS accepts the requests.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from components.image_source import image_tag
from tests.lib.stack_support import (
    PREBUILT,
    WORKER_DIR,
    run_main,
    run_platform,
    stack_file_config,
)
from tts_fleet.config.models import DEFAULT_BASE_IMAGE, WorkerConfig

OUTPUT_BUCKET = {
    "tts-fleet:storage:OutputBucket": 1,
    "aws:s3/bucket:Bucket": 1,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": 1,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": 1,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": 1,
    "aws:s3/bucketPolicy:BucketPolicy": 1,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": 1,
}
# ScalingController (scaling.mode: controller, the default): function, its async config,
# log group, schedule, the function's and the scheduler's roles and policies.
CONTROLLER = Counter(
    {
        "tts-fleet:controller:ScalingController": 1,
        "aws:lambda/function:Function": 1,
        "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig": 1,
        "aws:cloudwatch/logGroup:LogGroup": 1,
        "aws:scheduler/schedule:Schedule": 1,
        "aws:iam/role:Role": 2,
        "aws:iam/rolePolicy:RolePolicy": 2,
        "aws:cloudwatch/metricAlarm:MetricAlarm": 1,  # Observability's: the function failing
    }
)
CORE = Counter(
    {
        "tts-fleet:platform:Platform": 1,
        # JobQueue
        "tts-fleet:queue:JobQueue": 1,
        "aws:sqs/queue:Queue": 2,
        "aws:sqs/queuePolicy:QueuePolicy": 2,
        "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy": 1,  # only the jobs queue dead-letters
        # BucketWriters: the outputs bucket's policy (OutputBucket's own in OUTPUT_BUCKET)
        "tts-fleet:storage:BucketWriters": 1,
        "aws:iam/policy:Policy": 1 + 1,  # + OutputBucket's reader policy
        # GpuCapacity
        "tts-fleet:capacity:GpuCapacity": 1,
        "aws:ecs/cluster:Cluster": 1,
        "aws:ec2/securityGroup:SecurityGroup": 1,
        "aws:iam/role:Role": 2 + 2,  # + WorkerService's execution and task roles
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment": 2,
        "aws:iam/instanceProfile:InstanceProfile": 1,
        "aws:iam/rolePolicy:RolePolicy": 1 + 2,  # + WorkerService's two role policies
        "aws:ecs/capacityProvider:CapacityProvider": 1,
        "pulumi-python:dynamic:Resource": 1,  # CapacityProviderReady: waits for ACTIVE
        # WorkerService
        "tts-fleet:service:WorkerService": 1,
        "aws:cloudwatch/logGroup:LogGroup": 1,
        "aws:ecs/taskDefinition:TaskDefinition": 1,
        "aws:ecs/service:Service": 1,
        # WorkerImage (its build parts are in BUILT_IMAGE)
        "tts-fleet:image:WorkerImage": 1,
        "tts-fleet:network:Network": 1,
        # ScalableTarget (its type token is still QueueAutoscaling's), and controller mode's
        # SafetyNet: the safety-net policy and alarm
        "tts-fleet:autoscaling:QueueAutoscaling": 1,
        "tts-fleet:autoscaling:SafetyNet": 1,
        "aws:appautoscaling/target:Target": 1,
        "aws:appautoscaling/policy:Policy": 1,
        "aws:cloudwatch/metricAlarm:MetricAlarm": 1 + 2,  # + Observability's DLQ and age alarms
        # Observability: key, topic, topic policy, dashboard
        "tts-fleet:observability:Observability": 1,
        "aws:kms/key:Key": 1,
        "aws:sns/topic:Topic": 1,
        "aws:sns/topicPolicy:TopicPolicy": 1,
        "aws:cloudwatch/dashboard:Dashboard": 1,
    }
) + Counter(OUTPUT_BUCKET)
CORE += CONTROLLER
# What Pulumi.prod.yaml adds: two schedules, an alert email and a monthly budget.
PROD_EXTRAS = Counter(
    {
        "aws:appautoscaling/scheduledAction:ScheduledAction": 2,
        "aws:sns/topicSubscription:TopicSubscription": 1,
        "aws:budgets/budget:Budget": 1,
    }
)
BUILT_IMAGE = Counter(
    {
        "aws:ecr/repository:Repository": 1,
        "aws:ecr/lifecyclePolicy:LifecyclePolicy": 1,
        # the default base image (ECR Public) comes through the stack's own cache rule
        "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": 1,
        "aws:s3/bucketObjectv2:BucketObjectv2": 1,
        "aws:cloudwatch/logGroup:LogGroup": 1,
        "aws:iam/role:Role": 1,
        "aws:iam/rolePolicy:RolePolicy": 1,
        "aws:codebuild/project:Project": 1,
        "pulumi-python:dynamic:Resource": 1,
    }
) + Counter(OUTPUT_BUCKET)


def nat(az: int, nats: int) -> Counter[str]:
    return Counter(
        {
            "aws:ec2/vpc:Vpc": 1,
            "aws:ec2/subnet:Subnet": 2 * az,
            "aws:ec2/internetGateway:InternetGateway": 1,
            "aws:ec2/eip:Eip": nats,
            "aws:ec2/natGateway:NatGateway": nats,
            "aws:ec2/routeTable:RouteTable": 1 + nats,
            "aws:ec2/routeTableAssociation:RouteTableAssociation": 2 * az,
            "aws:ec2/vpcEndpoint:VpcEndpoint": 1,
        }
    )


ENDPOINTS = Counter(
    {
        "aws:ec2/vpc:Vpc": 1,
        "aws:ec2/subnet:Subnet": 2,
        "aws:ec2/routeTable:RouteTable": 1,
        "aws:ec2/routeTableAssociation:RouteTableAssociation": 2,
        "aws:ec2/securityGroup:SecurityGroup": 1,
        "aws:ec2/vpcEndpoint:VpcEndpoint": 9,  # S3 gateway + 8 interface endpoints
    }
)
PROVIDER = Counter({"pulumi:providers:aws": 1})
EXISTING = {
    "mode": "existing",
    "vpcId": "vpc-0abc12345",
    "subnetIds": ["subnet-0aaa11111", "subnet-0bbb22222"],
}


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        ("dev", CORE + BUILT_IMAGE + nat(az=2, nats=1) + PROVIDER),
        ("prod", CORE + BUILT_IMAGE + nat(az=3, nats=3) + PROVIDER + PROD_EXTRAS),
    ],
)
def test_each_stack_file_builds_exactly_these_resources(stack: str, expected: Counter[str]) -> None:
    mocks, _ = run_main(stack_file_config(stack), stack)
    assert mocks.counts() == dict(expected)


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ({"mode": "nat", "azCount": 3, "natGateways": "one-per-az"}, nat(az=3, nats=3)),
        ({"mode": "nat", "azCount": 3, "natGateways": "single"}, nat(az=3, nats=1)),
        ({"mode": "endpoints"}, ENDPOINTS),
        (EXISTING, Counter()),
    ],
    ids=["nat-one-per-az", "nat-single", "endpoints", "existing"],
)
def test_each_network_mode_with_a_prebuilt_image(
    network: dict[str, Any], expected: Counter[str]
) -> None:
    mocks = run_platform({"network": network, "worker": {"image": PREBUILT}})
    assert mocks.counts() == dict(CORE + expected)


def test_existing_mode_puts_hosts_and_tasks_in_the_given_subnets() -> None:
    mocks = run_platform({"network": EXISTING, "worker": {"image": PREBUILT}})
    assert mocks.counts().get("aws:ec2/vpc:Vpc", 0) == 0
    assert mocks.counts().get("aws:ec2/subnet:Subnet", 0) == 0
    provider = mocks.one("aws:ecs/capacityProvider:CapacityProvider").inputs
    template = provider["managedInstancesProvider"]["instanceLaunchTemplate"]
    assert template["networkConfiguration"]["subnets"] == ["subnet-0aaa11111", "subnet-0bbb22222"]
    service = mocks.one("aws:ecs/service:Service").inputs
    assert service["networkConfiguration"]["subnets"] == ["subnet-0aaa11111", "subnet-0bbb22222"]
    assert mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs["vpcId"] == "vpc-0abc12345"


def test_main_exports_the_stack_outputs() -> None:
    _, exports = run_main(stack_file_config("dev"), "dev")
    build_args = {
        "BASE_IMAGE": DEFAULT_BASE_IMAGE,
        "MODEL_REVISION": WorkerConfig().model_revision,
        "WEIGHTS": WorkerConfig().weights,
    }
    tag = image_tag(WORKER_DIR, "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", build_args)
    assert exports == {
        "queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/tts-fleet-queue-jobs",
        "dlqUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/tts-fleet-queue-dlq",
        "bucketName": "tts-fleet-outputs-bucket",
        "clusterName": "tts-fleet-capacity-cluster",
        "serviceName": "tts-fleet-worker-service",
        "producerPolicyArn": "arn:aws:iam:us-east-1:123456789012:tts-fleet-queue-producer",
        "readerPolicyArn": "arn:aws:iam:us-east-1:123456789012:tts-fleet-outputs-reader",
        "imageUri": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/tts-fleet-image-repo:{tag}",
        "imageLayerBytes": None,  # the build resource's output: no build runs under mocks
        "dashboardUrl": "https://us-east-1.console.aws.amazon.com/cloudwatch/home"
        "?region=us-east-1#dashboards:name=tts-fleet-dev-us-east-1",
        "alertsTopicArn": "arn:aws:sns:us-east-1:123456789012:tts-fleet-observability-alerts",
        "controllerFunctionArn": "arn:aws:lambda:us-east-1:123456789012:tts-fleet-dev-controller",
        "eventsQueueUrl": None,  # notifications.enabled is off in Pulumi.dev.yaml
        "eventsConsumerPolicyArn": None,
        "maxTextChars": 20000,
        "deadlineMinutes": 0,  # scaling.deadlineMinutes: no deadline unless set
    }


def test_main_uses_the_prebuilt_image_when_worker_image_is_set() -> None:
    config = {**stack_file_config("dev"), "tts-fleet:worker": {"image": PREBUILT}}
    mocks, exports = run_main(config, "dev")
    assert exports["imageUri"] == PREBUILT
    assert mocks.counts() == dict(CORE + nat(az=2, nats=1) + PROVIDER)


def test_stack_file_values_reach_the_resources() -> None:
    mocks, _ = run_main(stack_file_config("prod"), "prod")
    jobs = next(q for q in mocks.of_type("aws:sqs/queue:Queue") if q.name.endswith("-jobs"))
    assert jobs.inputs["redrivePolicy"].endswith('"maxReceiveCount": 5}')
    provider = mocks.one("aws:ecs/capacityProvider:CapacityProvider").inputs[
        "managedInstancesProvider"
    ]
    assert provider["infrastructureOptimization"] == {"scaleInAfter": 900}
    requirements = provider["instanceLaunchTemplate"]["instanceRequirements"]
    assert requirements["acceleratorTotalMemoryMib"] == {"min": 24 * 1024}
    assert provider["instanceLaunchTemplate"]["capacityOptionType"] == "ON_DEMAND"


def test_provider_takes_the_stack_files_region() -> None:
    # An explicit provider ignores `aws:region` unless passed it; without this the shell's
    # AWS_REGION would pick the region a stack deploys to.
    config = {**stack_file_config("dev"), "aws:region": "eu-west-1"}
    mocks, _ = run_main(config, "dev")
    assert mocks.one("pulumi:providers:aws").inputs["region"] == "eu-west-1"


def test_provider_takes_the_stacks_profile_assumed_roles_and_allowed_accounts() -> None:
    config = {
        **stack_file_config("dev"),
        "aws:profile": "deploy-dev",
        "aws:assumeRoles": [
            {"roleArn": "arn:aws:iam::210987654321:role/deploy", "sessionName": "tts-fleet"}
        ],
        "aws:allowedAccountIds": ["210987654321"],
    }
    mocks, _ = run_main(config, "dev")
    inputs = mocks.one("pulumi:providers:aws").inputs
    assert inputs["profile"] == "deploy-dev"
    assert json.loads(inputs["assumeRoles"]) == [
        {"roleArn": "arn:aws:iam::210987654321:role/deploy", "sessionName": "tts-fleet"}
    ]
    assert json.loads(inputs["allowedAccountIds"]) == ["210987654321"]


def test_provider_sets_none_of_them_when_the_stack_does_not() -> None:
    mocks, _ = run_main(stack_file_config("dev"), "dev")
    inputs = mocks.one("pulumi:providers:aws").inputs
    assert not {"profile", "assumeRoles", "allowedAccountIds"} & set(inputs)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_platform_looks_up_region_partition_and_account_once(stack: str) -> None:
    # One lookup each, passed down to every component that needs it (not one per component).
    mocks, _ = run_main(stack_file_config(stack), stack)
    tokens = Counter(token for token, _ in mocks.calls)
    for lookup in ("aws:index/getRegion:getRegion", "aws:index/getPartition:getPartition",
                   "aws:index/getCallerIdentity:getCallerIdentity"):  # fmt: skip
        assert tokens[lookup] == 1, (lookup, dict(tokens))
