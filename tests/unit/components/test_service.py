"""WorkerService: task definition, roles, log group and the ECS service.

`ignore_changes` is a resource option, not an input, so MockResourceArgs never carries it.
It is recorded here by a resource transformation on the component, which sees every child's
final ResourceOptions; removing `ignore_changes` from the service makes that test fail.
Mocks cannot prove that ECS accepts the task definition; they pin what the program asks for.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from components.service import WorkerService, WorkerServiceArgs
from components.service_policies import task_protection_arn
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import PREBUILT, policy, run_platform
from tts_fleet.config.models import QaConfig, QueueConfig, WorkerConfig, memory_reservation_mib

CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:cluster/fleet"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:jobs"
DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:dlq"
BUCKET_ARN = "arn:aws:s3:::outputs"
REPO_ARN = "arn:aws:ecr:us-east-1:123456789012:repository/worker"
SERVICE = "aws:ecs/service:Service"
TASK = "aws:ecs/taskDefinition:TaskDefinition"
PROVIDER = "aws:ecs/capacityProvider:CapacityProvider"


def service_args(**overrides: Any) -> WorkerServiceArgs:
    values: dict[str, Any] = {
        "worker": WorkerConfig(
            model="Qwen/X",
            model_revision="f" * 40,
            concurrency=6,
            stop_timeout_seconds=90,
            max_text_chars=5000,
        ),
        "queue": QueueConfig(visibility_timeout_seconds=600),
        "gpu_count": 2,
        "min_memory_gib": 32,
        "cluster_arn": CLUSTER_ARN,
        "cluster_name": "fleet",
        "capacity_provider_name": "fleet-gpu",
        "subnet_ids": ["subnet-0abc12345", "subnet-0def67890"],
        "security_group_id": "sg-0123",
        "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/worker:abc",
        "repository_arns": [REPO_ARN],
        "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        "queue_arn": QUEUE_ARN,
        "dlq_url": "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
        "dlq_arn": DLQ_ARN,
        "bucket_name": "outputs",
        "bucket_arn": BUCKET_ARN,
        # Unlike the ARNs' region: the env and the log driver take the one Platform passes.
        "region": "eu-west-1",
    }
    return WorkerServiceArgs(**{**values, **overrides})


def build(args: WorkerServiceArgs) -> tuple[RecordingMocks, dict[str, list[str]]]:
    ignored: dict[str, list[str]] = {}

    def record(t: pulumi.ResourceTransformationArgs) -> None:
        ignored[t.type_] = list(t.opts.ignore_changes or [])
        return None

    def program() -> None:
        WorkerService("w", args, pulumi.ResourceOptions(transformations=[record]))

    return run_program(program), ignored


@pytest.fixture(scope="module")
def built() -> tuple[RecordingMocks, dict[str, list[str]]]:
    return build(service_args())


def test_counts(built: tuple[RecordingMocks, dict[str, list[str]]]) -> None:
    assert built[0].counts() == {
        "tts-fleet:service:WorkerService": 1,
        "aws:cloudwatch/logGroup:LogGroup": 1,
        "aws:iam/role:Role": 2,
        "aws:iam/rolePolicy:RolePolicy": 2,
        TASK: 1,
        SERVICE: 1,
    }


def test_service_starts_at_zero_and_leaves_desired_count_to_autoscaling(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    mocks, ignored = built
    service = mocks.one(SERVICE).inputs
    assert service["desiredCount"] == 0
    assert ignored[SERVICE] == ["desiredCount"]
    assert ignored[TASK] == []  # only the service ignores anything
    assert service["capacityProviderStrategies"] == [
        {"capacityProvider": "fleet-gpu", "weight": 1, "base": 0}
    ]
    assert service["networkConfiguration"] == {
        "subnets": ["subnet-0abc12345", "subnet-0def67890"],
        "securityGroups": ["sg-0123"],
        "assignPublicIp": False,
    }
    assert service["deploymentCircuitBreaker"] == {"enable": True, "rollback": True}
    assert service["forceNewDeployment"] is True
    assert "launchType" not in service  # a strategy, not a launch type


def test_task_definition_runs_on_managed_instances_with_gpus_and_the_worker_env(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    task = built[0].one(TASK).inputs
    assert task["requiresCompatibilities"] == ["MANAGED_INSTANCES"]
    assert task["networkMode"] == "awsvpc"
    [container] = json.loads(task["containerDefinitions"])
    assert container["resourceRequirements"] == [{"type": "GPU", "value": "2"}]
    assert container["stopTimeout"] == 90
    # 75 % of the smallest host, less /dev/shm (2048 MiB by default), which ECS counts too.
    assert container["memoryReservation"] == 32 * 1024 * 3 // 4 - 2048
    assert container["linuxParameters"] == {"sharedMemorySize": 2048}
    assert {e["name"]: e["value"] for e in container["environment"]} == {
        "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        "DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
        "OUTPUT_BUCKET": "outputs",
        "OUTPUT_PREFIX": "",
        "SPEECH_URL": "http://127.0.0.1:8091",
        "SPEECH_MODEL": "Qwen/X",
        "SPEECH_TASK_TYPE": "CustomVoice",  # worker.taskType's default
        "CONCURRENCY": "6",
        "VISIBILITY_TIMEOUT": "600",
        "MAX_TEXT_CHARS": "5000",
        "STOP_TIMEOUT_SECONDS": "90",
        "AWS_REGION": "eu-west-1",
        "STACK_NAME": "dev",  # the metrics' Stack dimension
        "QA_MODE": "basic",  # the output checks' defaults (worker.qa)
        "QA_RETRIES": "2",
        "QA_MAX_WER": "0.2",
        "QA_ON_FAIL": "fail",
        "ASR_URL": "http://127.0.0.1:8092",
        "ASR_MODEL": "openai/whisper-large-v3-turbo",
    }
    assert container["logConfiguration"] == {
        "logDriver": "awslogs",
        "options": {
            "awslogs-group": "w-logs",
            "awslogs-region": "eu-west-1",
            "awslogs-stream-prefix": "worker",
        },
    }
    logs = built[0].one("aws:cloudwatch/logGroup:LogGroup").inputs
    assert logs["retentionInDays"] == 30


def test_task_role_is_this_queue_dlq_prefixes_and_own_task_protection(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    task_policy = next(
        p for p in built[0].of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "w-task-policy"
    )
    assert {s["Sid"]: (s["Action"], s["Resource"]) for s in policy(task_policy)["Statement"]} == {
        "ConsumeJobs": (
            [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:ChangeMessageVisibility",
                "sqs:GetQueueAttributes",
            ],
            QUEUE_ARN,
        ),
        "DeadLetterInvalidJobs": (["sqs:SendMessage", "sqs:GetQueueAttributes"], DLQ_ARN),
        "WriteOutputs": (
            ["s3:GetObject", "s3:PutObject"],
            [f"{BUCKET_ARN}/outputs/*", f"{BUCKET_ARN}/failures/*"],
        ),
        "SeeOwnOutputs": ("s3:ListBucket", BUCKET_ARN),
        "TaskScaleInProtection": (
            ["ecs:UpdateTaskProtection", "ecs:GetTaskProtection"],
            "arn:aws:ecs:us-east-1:123456789012:task/fleet/*",
        ),
        "DescribeOwnTask": (
            "ecs:DescribeTasks",
            "arn:aws:ecs:us-east-1:123456789012:task/fleet/*",
        ),
    }


def test_execution_role_pulls_this_repository_and_writes_this_log_group(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    execution = next(
        p
        for p in built[0].of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name == "w-execution-policy"
    )
    assert policy(execution)["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "arn:aws:cloudwatch:us-east-1:123456789012:w-logs:*",
        },
        {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:GetDownloadUrlForLayer",
            ],
            "Resource": [REPO_ARN],
        },
    ]


def test_an_image_outside_ecr_gets_no_ecr_permissions() -> None:
    mocks, _ = build(service_args(image_uri="docker.io/acme/tts:1", repository_arns=[]))
    execution = next(
        p for p in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "w-execution-policy"
    )
    assert [s["Action"] for s in policy(execution)["Statement"]] == [
        ["logs:CreateLogStream", "logs:PutLogEvents"]
    ]


@pytest.mark.parametrize(
    ("cluster_arn", "expected"),
    [
        (CLUSTER_ARN, "arn:aws:ecs:us-east-1:123456789012:task/fleet/*"),
        (
            "arn:aws-cn:ecs:cn-north-1:123456789012:cluster/fleet",
            "arn:aws-cn:ecs:cn-north-1:123456789012:task/fleet/*",
        ),
    ],
)
def test_task_protection_arn(cluster_arn: str, expected: str) -> None:
    seen: list[str] = []
    run_program(lambda: task_protection_arn(cluster_arn, "fleet").apply(seen.append))
    assert seen == [expected]


def test_listing_has_no_prefix_condition_so_a_missing_manifest_is_a_404(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    # S3 answers HEAD of a missing key with 404 only if ListBucket is allowed for that request;
    # a HEAD carries no s3:prefix, so a prefix condition would turn every new job into a 403.
    task_policy = next(
        p for p in built[0].of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "w-task-policy"
    )
    listing = next(s for s in policy(task_policy)["Statement"] if s["Sid"] == "SeeOwnOutputs")
    assert "Condition" not in listing


def test_task_and_execution_roles_trust_only_this_accounts_ecs_tasks(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    roles = {r.name: r.inputs for r in built[0].of_type("aws:iam/role:Role")}
    expected = {
        "Effect": "Allow",
        "Principal": {"Service": "ecs-tasks.amazonaws.com"},
        "Action": "sts:AssumeRole",
        "Condition": {
            "StringEquals": {"aws:SourceAccount": "123456789012"},
            "ArnLike": {"aws:SourceArn": "arn:aws:ecs:us-east-1:123456789012:*"},
        },
    }
    assert {name: json.loads(r["assumeRolePolicy"])["Statement"] for name, r in roles.items()} == {
        "w-execution-role": [expected],
        "w-task-role": [expected],
    }


def container_of(mocks: RecordingMocks) -> dict[str, Any]:
    [container] = json.loads(mocks.one(TASK).inputs["containerDefinitions"])
    return container


def test_shared_memory_and_cuda_compatibility_come_from_the_worker_config() -> None:
    worker = WorkerConfig(
        model="Qwen/X", model_revision="f" * 40, shared_memory_mib=8192, cuda_compatibility=True
    )
    container = container_of(build(service_args(worker=worker))[0])
    assert container["linuxParameters"] == {"sharedMemorySize": 8192}
    assert container["memoryReservation"] == 32 * 1024 * 3 // 4 - 8192
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["VLLM_ENABLE_CUDA_COMPATIBILITY"] == "1"


def test_cuda_compatibility_is_off_by_default(
    built: tuple[RecordingMocks, dict[str, list[str]]],
) -> None:
    names = [e["name"] for e in container_of(built[0])["environment"]]
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY" not in names


def test_the_reservation_is_the_host_headroom_minus_shared_memory() -> None:
    # The floor's own check is the stack config's (tests/unit/config/test_config.py).
    assert memory_reservation_mib(16, 11_264) == 1024
    assert memory_reservation_mib(16, 2048) == 10_240


# ---- replaying a gpu.capacityType change ---------------------------------------------------


def replay(capacity_type: str) -> RecordingMocks:
    return run_platform({"worker": {"image": PREBUILT}, "gpu": {"capacityType": capacity_type}})


def test_a_capacity_type_change_reaches_a_service_that_can_take_it() -> None:
    # Two runs of the same program, as two `pulumi up`s would: the second changes only
    # gpu.capacityType. The capacity provider's launch template differs (the SDK replaces the
    # provider for it), and the service, whose strategy then names the new provider, carries
    # force_new_deployment in both: without it pulumi-aws refuses the strategy update.
    before, after = replay("on-demand"), replay("spot")
    templates = [
        m.one(PROVIDER).inputs["managedInstancesProvider"]["instanceLaunchTemplate"]
        for m in (before, after)
    ]
    assert [t["capacityOptionType"] for t in templates] == ["ON_DEMAND", "SPOT"]
    assert {k: v for k, v in templates[0].items() if k != "capacityOptionType"} == {
        k: v for k, v in templates[1].items() if k != "capacityOptionType"
    }
    services = [m.one(SERVICE).inputs for m in (before, after)]
    assert [s["forceNewDeployment"] for s in services] == [True, True]
    assert [s["capacityProviderStrategies"] for s in services] == [
        [{"capacityProvider": "tts-capacity-gpu", "weight": 1, "base": 0}]
    ] * 2
    assert services[0] == services[1]  # nothing else about the service changes


def test_the_output_checks_come_from_the_worker_qa_config() -> None:
    qa = QaConfig(
        mode="asr",
        retries=4,
        max_wer=0.05,
        on_fail="keep",
        asr_model="org/asr-small",
        asr_model_revision="e" * 40,
    )
    worker = WorkerConfig(model="Qwen/X", model_revision="f" * 40, qa=qa)
    env = {
        e["name"]: e["value"]
        for e in container_of(build(service_args(worker=worker))[0])["environment"]
    }
    assert {k: v for k, v in env.items() if k.startswith(("QA_", "ASR_"))} == {
        "QA_MODE": "asr",
        "QA_RETRIES": "4",
        "QA_MAX_WER": "0.05",
        "QA_ON_FAIL": "keep",
        "ASR_URL": "http://127.0.0.1:8092",  # loopback: the ASR server is in the task
        "ASR_MODEL": "org/asr-small",
    }
