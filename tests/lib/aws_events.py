"""Real-shaped AWS events and a call counter for the tests of completion events and the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def s3_object_event(
    key: str, bucket: str = "tts-outputs", detail_type: str = "Object Created"
) -> dict[str, Any]:
    """The event S3 sends to EventBridge, which the rule delivers to the queue unchanged
    (docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html)."""
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": detail_type,
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-01-12T00:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": key, "size": 2, "etag": "99914b93", "sequencer": "617f0829"},
            "request-id": "N4N7GDK58NMKJ12R",
            "requester": "123456789012",
            "reason": "PutObject",
        },
    }


@contextmanager
def counting_calls(client: Any, service: str) -> Iterator[dict[str, int]]:
    """API calls `client` makes while inside, by operation name (a botocore event hook)."""
    counts: dict[str, int] = {}

    def hook(model: Any, **_: Any) -> None:
        counts[model.name] = counts.get(model.name, 0) + 1

    unique = f"count-{service}-calls"
    client.meta.events.register(f"before-call.{service}", hook, unique_id=unique)
    try:
        yield counts
    finally:
        client.meta.events.unregister(f"before-call.{service}", unique_id=unique)
