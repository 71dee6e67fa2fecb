"""CompletionEvents: one EventBridge event per finished or failed job, and a queue holding them.

The output bucket sends its object events to EventBridge (`BucketNotification(eventbridge=
True)`); a rule on the default bus matches `Object Created` for this bucket's manifests
(`outputs/*.json`, the worker's "done") and failure records (`failures/*.json`, "failed"),
not the audio, and delivers each event unchanged to an SQS queue that `tts-fleet wait
--events` consumes. EventBridge rather than S3 notifications straight to SNS or SQS: a bucket
has one notification configuration, which the stack would then own, while the bus lets any
number of subscribers (SNS, Lambda, another account's bus) add rules of their own with the
pattern of docs/cli.md#completion-events, without touching the stack.

The queue: SQS-managed SSE (EventBridge can send to it; a KMS key would need a key policy for
events.amazonaws.com), a TLS-only deny, and SendMessage for events.amazonaws.com only when
`aws:SourceArn` is this rule (no other rule, account or principal may write it). Events are
an accelerator, S3 stays the truth (every wait lists the bucket first), so the queue keeps
them only an hour. The consumer policy is what a waiter needs on it: receive and delete.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from components.args import ComponentArgs, StrInput
from components.iam import deny_insecure_transport
from worker.jobs import FAILURES_PREFIX, OUTPUTS_PREFIX

# Older events are of no use to a waiter, which lists the bucket before it reads the queue.
EVENTS_RETENTION_SECONDS = 3600
EVENTS_PUBLISHER = "events.amazonaws.com"
TARGET_ID = "events-queue"


def event_pattern(bucket_name: str) -> str:
    """Object Created in this bucket, for a manifest or a failure record (never the audio).
    `wildcard` matches `*` against any characters, `/` included; job ids cannot hold `*`."""
    return json.dumps(
        {
            "source": ["aws.s3"],
            "detail-type": ["Object Created"],
            "detail": {
                "bucket": {"name": [bucket_name]},
                "object": {
                    "key": [
                        {"wildcard": f"{OUTPUTS_PREFIX}*.json"},
                        {"wildcard": f"{FAILURES_PREFIX}*.json"},
                    ]
                },
            },
        },
        sort_keys=True,
    )


class CompletionEventsArgs(ComponentArgs):
    bucket_name: StrInput  # the output bucket (components/storage.py)


class CompletionEvents(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    rule_arn: pulumi.Output[str]
    consumer_policy_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: CompletionEventsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:notifications:CompletionEvents", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        aws.s3.BucketNotification(
            f"{name}-bucket-events", bucket=args.bucket_name, eventbridge=True, opts=child
        )
        queue = aws.sqs.Queue(
            f"{name}-queue",
            message_retention_seconds=EVENTS_RETENTION_SECONDS,
            receive_wait_time_seconds=20,  # long polling by default for every consumer
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        rule = aws.cloudwatch.EventRule(
            f"{name}-rule",
            description="tts-fleet: a job's manifest or failure record was written",
            event_pattern=pulumi.Output.from_input(args.bucket_name).apply(
                lambda bucket: event_pattern(str(bucket))
            ),
            opts=child,
        )
        access = aws.sqs.QueuePolicy(
            f"{name}-queue-policy",
            queue_url=queue.url,
            policy=pulumi.Output.json_dumps(queue_policy(queue.arn, rule.arn)),
            opts=child,
        )
        # After the policy: EventBridge drops what the queue refuses once its retries end.
        aws.cloudwatch.EventTarget(
            f"{name}-target",
            rule=rule.name,
            arn=queue.arn,
            target_id=TARGET_ID,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[access]),
        )
        consumer = aws.iam.Policy(
            f"{name}-consumer",
            description="Read and delete this tts-fleet stack's completion events",
            policy=pulumi.Output.json_dumps(consumer_policy(queue.arn)),
            opts=child,
        )
        self.queue_url, self.queue_arn, self.rule_arn = queue.url, queue.arn, rule.arn
        self.consumer_policy_arn = consumer.arn
        self.register_outputs(
            {
                "queue_url": self.queue_url,
                "queue_arn": self.queue_arn,
                "rule_arn": self.rule_arn,
                "consumer_policy_arn": self.consumer_policy_arn,
            }
        )


def queue_policy(queue_arn: pulumi.Output[str], rule_arn: pulumi.Output[str]) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            deny_insecure_transport(queue_arn, "sqs:*"),
            {
                "Sid": "AllowThisRule",
                "Effect": "Allow",
                "Principal": {"Service": EVENTS_PUBLISHER},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
            },
        ],
    }


def consumer_policy(queue_arn: pulumi.Output[str]) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
                "Resource": queue_arn,
            }
        ],
    }
