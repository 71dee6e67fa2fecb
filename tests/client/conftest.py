"""A jobs queue with its DLQ and an output bucket in the emulator, and the env naming them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

from tests.lib.aws_events import counting_calls
from tests.lib.client_stack import MAX_RECEIVE_COUNT, Stack


@pytest.fixture
def stack(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Stack:
    sqs = boto3.client("sqs")
    dlq_url = sqs.create_queue(QueueName="tts-jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    policy = {
        "deadLetterTargetArn": dlq_arn["Attributes"]["QueueArn"],
        "maxReceiveCount": MAX_RECEIVE_COUNT,
    }
    queue_url = sqs.create_queue(
        QueueName="tts-jobs", Attributes={"RedrivePolicy": json.dumps(policy)}
    )["QueueUrl"]
    boto3.client("s3").create_bucket(Bucket="tts-outputs")
    names = {"TTS_FLEET_QUEUE_URL": queue_url, "TTS_FLEET_BUCKET": "tts-outputs"}
    for key, value in names.items():
        monkeypatch.setenv(key, value)
    for key in ("TTS_FLEET_DLQ_URL", "TTS_FLEET_OUTPUT_PREFIX"):
        monkeypatch.delenv(key, raising=False)
    return Stack(queue_url, dlq_url, "tts-outputs", {**aws_env, **names})


@pytest.fixture
def count_calls(stack: Stack) -> Iterator[dict[str, int]]:
    """Counts API calls made by the CLI's own shared SQS client, by operation name."""
    from tts_fleet.client.aws import client_for

    with counting_calls(client_for("sqs"), "sqs") as counts:
        yield counts
