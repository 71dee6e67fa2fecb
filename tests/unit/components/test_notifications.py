"""CompletionEvents and `notifications.enabled`: the exact graph on and off, its policies, the
requests it sends, and its event pattern against the S3 events it must and must not match.

Mocks cannot prove that AWS accepts the rule or delivers to the queue; tests/
integration/client/test_events.py runs the same pattern through moto's S3 → EventBridge → SQS path.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from moto.events.models import EventPattern

from components.notifications import CompletionEvents, CompletionEventsArgs, event_pattern
from tests.lib.aws_events import s3_object_event
from tests.lib.aws_requests import problems, record_platform, requests_for
from tests.lib.pulumi_harness import RecordingMocks, run_program
from tests.lib.stack_support import PREBUILT, policy, run_platform
from tts_fleet.config.models import ConfigError, StackConfig

COMPONENT = "tts-fleet:notifications:CompletionEvents"
NOTIFICATION = "aws:s3/bucketNotification:BucketNotification"
QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
RULE = "aws:cloudwatch/eventRule:EventRule"
TARGET = "aws:cloudwatch/eventTarget:EventTarget"
IAM_POLICY = "aws:iam/policy:Policy"
ARN = "arn:aws:sqs:us-east-1:123456789012"
# What `notifications.enabled: true` adds to the stack, reviewed against the component.
ADDED = Counter(
    {COMPONENT: 1, NOTIFICATION: 1, QUEUE: 1, QUEUE_POLICY: 1, RULE: 1, TARGET: 1, IAM_POLICY: 1}
)
PATTERN = {
    "source": ["aws.s3"],
    "detail-type": ["Object Created"],
    "detail": {
        "bucket": {"name": ["tts-outputs"]},
        "object": {"key": [{"wildcard": "outputs/*.json"}, {"wildcard": "failures/*.json"}]},
    },
}


def build() -> RecordingMocks:
    return run_program(
        lambda: CompletionEvents("ev", CompletionEventsArgs(bucket_name="tts-outputs"))
    )


def test_the_component_builds_exactly_these_resources_with_these_inputs() -> None:
    mocks = build()
    assert mocks.counts() == dict(ADDED)
    assert mocks.one(NOTIFICATION).inputs == {"bucket": "tts-outputs", "eventbridge": True}
    assert mocks.one(QUEUE).inputs == {
        "messageRetentionSeconds": 3600,
        "receiveWaitTimeSeconds": 20,
        "sqsManagedSseEnabled": True,
    }
    rule = mocks.one(RULE).inputs
    assert json.loads(rule["eventPattern"]) == PATTERN
    assert rule["description"] == "tts-fleet: a job's manifest or failure record was written"
    assert mocks.one(TARGET).inputs == {
        "rule": "ev-rule",
        "arn": f"{ARN}:ev-queue",
        "targetId": "events-queue",
    }


def test_only_this_rule_may_send_to_the_events_queue_and_only_over_tls() -> None:
    recorded = build().one(QUEUE_POLICY)
    assert recorded.inputs["queueUrl"].endswith("/ev-queue")
    assert policy(recorded)["Statement"] == [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": f"{ARN}:ev-queue",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        {
            "Sid": "AllowThisRule",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": f"{ARN}:ev-queue",
            "Condition": {
                "ArnEquals": {"aws:SourceArn": "arn:aws:cloudwatch:us-east-1:123456789012:ev-rule"}
            },
        },
    ]


def test_the_consumer_policy_receives_and_deletes_on_the_events_queue_only() -> None:
    assert policy(build().one(IAM_POLICY))["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
            "Resource": f"{ARN}:ev-queue",
        }
    ]


def test_the_stack_adds_exactly_the_component_when_on_and_nothing_when_off() -> None:
    base = {"worker": {"image": PREBUILT}}
    off = run_platform({**base, "notifications": {"enabled": False}})
    on = run_platform({**base, "notifications": {"enabled": True}})
    assert off.counts() == run_platform(base).counts()  # off is the default
    assert off.counts().get(COMPONENT, 0) == 0 and off.counts().get(RULE, 0) == 0
    assert Counter(on.counts()) - Counter(off.counts()) == ADDED
    # The notification and the rule are on the stack's output bucket, by its name.
    bucket = on.one("aws:s3/bucket:Bucket").name
    assert on.one(NOTIFICATION).inputs["bucket"] == bucket
    assert json.loads(on.one(RULE).inputs["eventPattern"])["detail"]["bucket"] == {"name": [bucket]}


def test_the_requests_the_events_graph_sends_pass_the_api_models() -> None:
    mocks = record_platform({"worker": {"image": PREBUILT}, "notifications": {"enabled": True}})
    mine = [r for r in requests_for(mocks) if "-events-" in r.source]
    assert sorted((r.service, r.operation) for r in mine) == [
        ("events", "PutRule"),
        ("events", "PutTargets"),
        ("iam", "CreatePolicy"),
        ("s3", "PutBucketNotificationConfiguration"),
        ("sqs", "CreateQueue"),
        ("sqs", "SetQueueAttributes"),
    ]
    assert [p for request in mine for p in problems(request)] == []
    put = next(r for r in mine if r.operation == "PutBucketNotificationConfiguration")
    assert put.params["NotificationConfiguration"] == {"EventBridgeConfiguration": {}}


def s3_event(key: str, bucket: str = "tts-outputs", detail_type: str = "Object Created") -> dict:
    """The event S3 sends to EventBridge, which the rule's pattern must match or not."""
    return s3_object_event(key, bucket, detail_type)


@pytest.mark.parametrize(
    ("event", "matches"),
    [
        (s3_event("outputs/chapter-1.json"), True),
        (s3_event("outputs/chapter-1.p002.json"), True),
        (s3_event("failures/poison.json"), True),
        (s3_event("outputs/chapter-1.wav"), False),  # the audio: the manifest follows it
        (s3_event("outputs/chapter-1.json.wav"), False),
        (s3_event("other/chapter-1.json"), False),
        (s3_event("outputs/chapter-1.json", bucket="someone-else"), False),
        (s3_event("outputs/chapter-1.json", detail_type="Object Deleted"), False),
    ],
)
def test_the_pattern_matches_manifests_and_failure_records_only(
    event: dict[str, Any], matches: bool
) -> None:
    assert EventPattern.load(event_pattern("tts-outputs")).matches_event(event) is matches


def test_notifications_take_only_enabled() -> None:
    assert StackConfig().notifications.enabled is False
    with pytest.raises(ConfigError) as raised:
        StackConfig.from_raw({"notifications": {"target": "sns"}})
    assert raised.value.problems == ["tts-fleet:notifications.target: unknown key (known: enabled)"]
