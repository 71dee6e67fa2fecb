"""JobQueue: redrive from config, SSE, TLS-only policies, producer access.

Mocks cannot prove that AWS accepts the policies; they pin what the program asks for.
"""

from __future__ import annotations

import json

from components.queue import JobQueue, JobQueueArgs
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import policy
from tts_fleet.config.models import QueueConfig

QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
IAM_POLICY = "aws:iam/policy:Policy"
REDRIVE_ALLOW = "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy"
ARN = "arn:aws:sqs:us-east-1:123456789012"
PRODUCER = "arn:aws:iam::210987654321:role/producer"
DENY_TLS = {
    "Sid": "DenyInsecureTransport",
    "Effect": "Deny",
    "Principal": "*",
    "Action": "sqs:*",
    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
}


def build(cfg: QueueConfig, principals: tuple[str, ...] = ()) -> RecordingMocks:
    return run_program(
        lambda: JobQueue("q", JobQueueArgs(config=cfg, producer_principal_arns=principals))
    )


def test_queues_take_redrive_retention_and_visibility_from_config() -> None:
    cfg = QueueConfig(
        visibility_timeout_seconds=900, max_receive_count=7, retention_days=3, dlq_retention_days=9
    )
    mocks = build(cfg)
    assert mocks.counts() == {
        "tts-fleet:queue:JobQueue": 1,
        QUEUE: 2,
        QUEUE_POLICY: 2,
        REDRIVE_ALLOW: 1,
        IAM_POLICY: 1,
    }
    queues = {q.name: q.inputs for q in mocks.of_type(QUEUE)}
    jobs, dlq = queues["q-jobs"], queues["q-dlq"]
    assert json.loads(jobs["redrivePolicy"]) == {
        "deadLetterTargetArn": f"{ARN}:q-dlq",
        "maxReceiveCount": 7,
    }
    assert jobs["visibilityTimeoutSeconds"] == 900
    assert jobs["messageRetentionSeconds"] == 3 * 86_400
    assert dlq["messageRetentionSeconds"] == 9 * 86_400
    assert jobs["sqsManagedSseEnabled"] is True and dlq["sqsManagedSseEnabled"] is True
    assert "redrivePolicy" not in dlq


def test_only_the_jobs_queue_may_dead_letter_into_the_dlq() -> None:
    allow = build(QueueConfig()).one(REDRIVE_ALLOW)
    assert allow.name == "q-dlq-redrive-allow"
    assert allow.inputs["queueUrl"] == "https://sqs.us-east-1.amazonaws.com/123456789012/q-dlq"
    assert json.loads(allow.inputs["redriveAllowPolicy"]) == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": [f"{ARN}:q-jobs"],
    }


def test_both_queue_policies_deny_requests_without_tls() -> None:
    mocks = build(QueueConfig())
    by_queue = {
        p.inputs["queueUrl"].rsplit("/", 1)[1]: policy(p) for p in mocks.of_type(QUEUE_POLICY)
    }
    assert by_queue["q-jobs"]["Statement"] == [{**DENY_TLS, "Resource": f"{ARN}:q-jobs"}]
    assert by_queue["q-dlq"]["Statement"] == [{**DENY_TLS, "Resource": f"{ARN}:q-dlq"}]


def test_listed_producers_may_only_send_to_the_jobs_queue() -> None:
    mocks = build(QueueConfig(), (PRODUCER,))
    jobs = next(p for p in mocks.of_type(QUEUE_POLICY) if p.name == "q-jobs-policy")
    assert policy(jobs)["Statement"][1] == {
        "Sid": "AllowProducers",
        "Effect": "Allow",
        "Principal": {"AWS": [PRODUCER]},
        "Action": "sqs:SendMessage",
        "Resource": f"{ARN}:q-jobs",
    }
    dlq = next(p for p in mocks.of_type(QUEUE_POLICY) if p.name == "q-dlq-policy")
    assert len(policy(dlq)["Statement"]) == 1  # nobody is invited to write the DLQ


def test_producer_policy_is_send_and_get_url_on_this_queue_only() -> None:
    mocks = build(QueueConfig())
    assert policy(mocks.one(IAM_POLICY))["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
            "Resource": f"{ARN}:q-jobs",
        }
    ]


def test_given_the_bucket_producers_may_write_book_records_only() -> None:
    bucket = "arn:aws:s3:::out-bucket"
    mocks = run_program(
        lambda: JobQueue("q", JobQueueArgs(config=QueueConfig(), books_bucket_arn=bucket))
    )
    assert policy(mocks.one(IAM_POLICY))["Statement"][1:] == [
        {
            "Sid": "WriteBookRecords",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": f"{bucket}/books/*",
        }
    ]
