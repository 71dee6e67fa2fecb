"""JobQueue: the jobs queue, its DLQ with redrive, TLS-only policies and a producer policy.

The DLQ's redrive-allow policy (`byQueue`) names the jobs queue only: no other queue of the
account can dead-letter into it, so `dlq list` and `dlq redrive` see only this stack's jobs.

Both queues use SQS-managed SSE. The queue policy denies any request that is not over TLS and,
when `producers.principalArns` is set, allows those principals to SendMessage. Same-account
producers get access by attaching the exported producer policy (SendMessage + GetQueueUrl on
this queue only, InvokeFunction on the scaling controller when the stack has one, so
`tts-fleet submit` can wake it, and PutObject on the output bucket's `books/` when given it,
for `submit BOOK.epub`'s book record). The queue policy adds access; it does not take any away,
so an account principal whose own IAM policy allows sqs:SendMessage on `*` can still send.
Another account's principals also need their own IAM policy for this queue's ARN.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from components.args import ComponentArgs, StrInput
from components.controller import function_arn
from components.iam import deny_insecure_transport
from components.storage import book_writer_statement
from tts_fleet.config.models import QueueConfig

SECONDS_PER_DAY = 86_400


def redrive_policy(dlq_arn: str, max_receive_count: int) -> str:
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})


def redrive_allow_policy(source_queue_arn: str) -> str:
    return json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [source_queue_arn]})


class JobQueueArgs(ComponentArgs):
    config: QueueConfig
    producer_principal_arns: tuple[str, ...] = ()
    # The scaling controller's function name (components/controller.py), or None (alarms).
    controller_function_name: str | None = None
    # The output bucket's ARN: producers may then write book records under its books/.
    books_bucket_arn: StrInput | None = None


class JobQueue(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    dlq_url: pulumi.Output[str]
    dlq_arn: pulumi.Output[str]
    dlq_name: pulumi.Output[str]
    producer_policy_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: JobQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:queue:JobQueue", name, None, opts)
        cfg, child = args.config, pulumi.ResourceOptions(parent=self)
        dlq = aws.sqs.Queue(
            f"{name}-dlq",
            message_retention_seconds=cfg.dlq_retention_days * SECONDS_PER_DAY,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        queue = aws.sqs.Queue(
            f"{name}-jobs",
            visibility_timeout_seconds=cfg.visibility_timeout_seconds,
            message_retention_seconds=cfg.retention_days * SECONDS_PER_DAY,
            receive_wait_time_seconds=20,  # long polling by default for every consumer
            sqs_managed_sse_enabled=True,
            redrive_policy=dlq.arn.apply(lambda arn: redrive_policy(arn, cfg.max_receive_count)),
            opts=child,
        )
        aws.sqs.QueuePolicy(
            f"{name}-jobs-policy",
            queue_url=queue.url,
            policy=pulumi.Output.json_dumps(
                self._queue_policy(queue.arn, args.producer_principal_arns)
            ),
            opts=child,
        )
        aws.sqs.QueuePolicy(
            f"{name}-dlq-policy",
            queue_url=dlq.url,
            policy=pulumi.Output.json_dumps(self._queue_policy(dlq.arn, ())),
            opts=child,
        )
        # Only the jobs queue may dead-letter into the DLQ: by default any queue of the account
        # could, and `dlq redrive` would move its messages into the jobs queue. Its own
        # resource: the jobs queue's redrive policy already needs the DLQ's ARN.
        aws.sqs.RedriveAllowPolicy(
            f"{name}-dlq-redrive-allow",
            queue_url=dlq.url,
            redrive_allow_policy=queue.arn.apply(redrive_allow_policy),
            opts=child,
        )
        producer = aws.iam.Policy(
            f"{name}-producer",
            description="Send jobs to this tts-fleet queue (attach to producers)",
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": self._producer_statements(queue.arn, args),
                }
            ),
            opts=child,
        )
        self.queue_url, self.queue_arn, self.queue_name = queue.url, queue.arn, queue.name
        self.dlq_url, self.dlq_arn, self.dlq_name = dlq.url, dlq.arn, dlq.name
        self.producer_policy_arn = producer.arn
        self.register_outputs(
            {
                "queue_url": self.queue_url,
                "queue_arn": self.queue_arn,
                "dlq_url": self.dlq_url,
                "dlq_arn": self.dlq_arn,
                "producer_policy_arn": self.producer_policy_arn,
            }
        )

    @staticmethod
    def _producer_statements(queue_arn: pulumi.Output[str], args: JobQueueArgs) -> list[dict]:
        statements: list[dict] = [
            {
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
                "Resource": queue_arn,
            }
        ]
        name = args.controller_function_name
        if name is not None:
            # The function's ARN from the queue's account and region: the function is built
            # after this policy, with this fixed name.
            statements.append(
                {
                    "Effect": "Allow",
                    "Action": "lambda:InvokeFunction",
                    "Resource": queue_arn.apply(lambda arn: function_arn(arn, name)),
                }
            )
        if args.books_bucket_arn is not None:
            statements.append(book_writer_statement(args.books_bucket_arn))
        return statements

    @staticmethod
    def _queue_policy(arn: pulumi.Output[str], principals: tuple[str, ...]) -> dict:
        statements = [deny_insecure_transport(arn, "sqs:*")]
        if principals:
            statements.append(
                {
                    "Sid": "AllowProducers",
                    "Effect": "Allow",
                    "Principal": {"AWS": list(principals)},
                    "Action": "sqs:SendMessage",
                    "Resource": arn,
                }
            )
        return {"Version": "2012-10-17", "Statement": statements}
