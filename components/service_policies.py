"""IAM documents of WorkerService, scoped to this stack's own ARNs (DESIGN §7.4).

Kept beside service.py so the component stays small and the documents can be tested as data.
"""

from __future__ import annotations

import pulumi

from components.iam import cluster_task_arns
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX, VOICES_PREFIX
from worker.settings import CACHE_PREFIX, WEIGHTS_PREFIX

CONTAINER_NAME = "worker"
# Where the worker writes (DESIGN §3.3); the task role may touch nothing else in the bucket.
OUTPUT_PREFIXES = (OUTPUTS_PREFIX, FAILURES_PREFIX)
ECR_PULL_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
]


def task_protection_arn(
    cluster_arn: pulumi.Input[str], cluster_name: pulumi.Input[str]
) -> pulumi.Output[str]:
    """`arn:<partition>:ecs:<region>:<account>:task/<clusterName>/*` from the cluster's ARN."""

    return pulumi.Output.all(cluster_arn, cluster_name).apply(
        lambda values: cluster_task_arns(*values)
    )


def execution_policy(
    repository_arns: pulumi.Input[list[str]], log_group_arn: pulumi.Input[str]
) -> dict:
    """The ECS agent's role: pull this image, write this log group."""
    statements: list[dict] = [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": pulumi.Output.concat(log_group_arn, ":*"),
        },
    ]

    def pull(arns: list[str]) -> list[dict]:
        if not arns:
            return []  # a public registry image needs no ECR permissions
        return [
            # GetAuthorizationToken has no resource-level permissions; it only mints a login.
            {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {"Effect": "Allow", "Action": ECR_PULL_ACTIONS, "Resource": arns},
        ]

    ecr = pulumi.Output.from_input(repository_arns).apply(pull)
    return {
        "Version": "2012-10-17",
        "Statement": pulumi.Output.all(statements, ecr).apply(lambda parts: parts[0] + parts[1]),
    }


def weights_statements(bucket_arn: pulumi.Input[str]) -> list[dict]:
    """`worker.weights: s3`: the task reads the model snapshot (`weights/`, written by an
    operator's `tts-fleet weights upload`, never by a task) and reads and writes the compile
    caches it saves after its first healthy start (`cache/`)."""
    return [
        {
            "Sid": "ReadModelWeights",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": pulumi.Output.concat(bucket_arn, "/", WEIGHTS_PREFIX, "*"),
        },
        {
            "Sid": "ReadWriteCompileCaches",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": pulumi.Output.concat(bucket_arn, "/", CACHE_PREFIX, "*"),
        },
    ]


def voices_statement(bucket_arn: pulumi.Input[str]) -> dict:
    """A Base or VoiceDesign stack: the task reads the voice library (`voices/`, written by an
    operator's `tts-fleet voices add`, never by a task)."""
    return {
        "Sid": "ReadVoices",
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": pulumi.Output.concat(bucket_arn, "/", VOICES_PREFIX, "*"),
    }


def task_policy(
    *,
    queue_arn: pulumi.Input[str],
    dlq_arn: pulumi.Input[str],
    bucket_arn: pulumi.Input[str],
    protection_arn: pulumi.Input[str],
    s3_weights: bool = False,
    voices: bool = False,
) -> dict:
    """The worker's role: this queue, this DLQ, two prefixes of this bucket, its own
    protection; with `s3_weights` also the model snapshot and the compile caches."""
    objects = [pulumi.Output.concat(bucket_arn, "/", p, "*") for p in OUTPUT_PREFIXES]
    weights = weights_statements(bucket_arn) if s3_weights else []
    weights += [voices_statement(bucket_arn)] if voices else []
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ConsumeJobs",
                "Effect": "Allow",
                "Action": [
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:ChangeMessageVisibility",
                    "sqs:GetQueueAttributes",
                ],
                "Resource": queue_arn,
            },
            {
                # GetQueueAttributes: the worker checks at start that its DLQ exists.
                "Sid": "DeadLetterInvalidJobs",
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
                "Resource": dlq_arn,
            },
            {
                "Sid": "WriteOutputs",
                "Effect": "Allow",
                # HeadObject is authorised by s3:GetObject.
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": objects,
            },
            {
                # Without ListBucket a HEAD of a missing manifest answers 403, not 404, and the
                # worker could not tell "not done yet" from "denied". No s3:prefix condition: a
                # HEAD carries no prefix, so such a condition would never match. The bucket
                # holds only outputs/ and failures/, so listing it shows nothing more.
                "Sid": "SeeOwnOutputs",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
            },
            {
                # The worker holds ECS task scale-in protection while a job is in flight: it
                # calls $ECS_AGENT_URI/task-protection/v1/state, which the agent authorises
                # against the task role. Only this cluster's tasks.
                "Sid": "TaskScaleInProtection",
                "Effect": "Allow",
                "Action": ["ecs:UpdateTaskProtection", "ecs:GetTaskProtection"],
                "Resource": protection_arn,
            },
            {
                # The cold-start record's `provision` phase starts at the task's createdAt,
                # which only DescribeTasks gives (the metadata endpoint has none); the worker
                # describes its own task (worker/coldstart.py). Only this cluster's tasks.
                "Sid": "DescribeOwnTask",
                "Effect": "Allow",
                "Action": "ecs:DescribeTasks",
                "Resource": protection_arn,
            },
            *weights,
        ],
    }
