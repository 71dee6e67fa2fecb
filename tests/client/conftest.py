"""A jobs queue with its DLQ and an output bucket in the emulator, and the env naming them."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from tests.lib.aws_events import counting_calls
from tests.lib.client_stack import MAX_RECEIVE_COUNT, Stack
from tts_fleet.local.emulator import create_stack


@pytest.fixture
def stack(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Stack:
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    created = create_stack(
        sqs, s3, "tts-jobs", bucket="tts-outputs", max_receive_count=MAX_RECEIVE_COUNT
    )
    names = {"TTS_FLEET_QUEUE_URL": created.queue_url, "TTS_FLEET_BUCKET": created.bucket}
    for key, value in names.items():
        monkeypatch.setenv(key, value)
    for key in ("TTS_FLEET_DLQ_URL", "TTS_FLEET_OUTPUT_PREFIX"):
        monkeypatch.delenv(key, raising=False)
    return Stack(created.queue_url, created.dlq_url, created.bucket, {**aws_env, **names})


@pytest.fixture
def count_calls(stack: Stack) -> Iterator[dict[str, int]]:
    """Counts API calls made by the CLI's own shared SQS client, by operation name."""
    from tts_fleet.client.aws import client_for

    with counting_calls(client_for("sqs"), "sqs") as counts:
        yield counts
