"""A jobs queue with its DLQ and an output bucket in the emulator, and the env naming them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result

from fleet.cli import cli

MAX_RECEIVE_COUNT = 3


@dataclass(frozen=True)
class Stack:
    queue_url: str
    dlq_url: str
    bucket: str
    env: dict[str, str]


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


def run(*args: str, input: str | None = None) -> Result:
    """The real command through click's runner (in process, so botocore hooks can count)."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def run_json(*args: str, input: str | None = None) -> tuple[int, dict[str, Any]]:
    result = run(*args, "--json", input=input)
    return result.exit_code, json.loads(result.stdout)


def depth(queue_url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def drain_bodies(queue_url: str) -> list[dict[str, Any]]:
    """Receives (and deletes) every message; their parsed bodies."""
    sqs = boto3.client("sqs")
    bodies: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            return bodies
        bodies += [json.loads(m["Body"]) for m in messages]
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


@pytest.fixture
def count_calls(stack: Stack) -> Iterator[dict[str, int]]:
    """Counts API calls made by the CLI's own shared SQS client, by operation name."""
    from fleet.client import client_for

    counts: dict[str, int] = {}

    def hook(model: Any, **_: Any) -> None:
        counts[model.name] = counts.get(model.name, 0) + 1

    events = client_for("sqs").meta.events
    events.register("before-call.sqs", hook, unique_id="count-calls")
    try:
        yield counts
    finally:
        events.unregister("before-call.sqs", unique_id="count-calls")


def queued_bodies(queue_url: str) -> list[dict[str, Any]]:
    """Every message body a queue holds (visible, in flight or delayed), read from the
    in-process emulator's state: exact, and without receiving 1,000 messages over HTTP."""
    from moto.sqs.models import sqs_backends

    account, name = queue_url.rstrip("/").split("/")[-2:]
    queue = sqs_backends[account]["us-east-1"].queues[name]
    return [json.loads(message.body) for message in queue._messages]
