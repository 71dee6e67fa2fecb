"""Queue depth, the DLQ, the oldest message's age and the ECS service's task counts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError


def queue_counts(sqs: Any, queue_url: str) -> dict[str, int]:
    names = {
        "visible": "ApproximateNumberOfMessages",
        "in_flight": "ApproximateNumberOfMessagesNotVisible",
        "delayed": "ApproximateNumberOfMessagesDelayed",
    }
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(names.values()))
    values = attributes.get("Attributes", {})
    return {key: int(values.get(name, 0)) for key, name in names.items()}


def find_dlq_url(sqs: Any, queue_url: str) -> str | None:
    """The DLQ named by the queue's RedrivePolicy, when it has one."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    policy = attributes.get("Attributes", {}).get("RedrivePolicy")
    if not policy:
        return None
    arn = json.loads(policy)["deadLetterTargetArn"]
    _, _, _, _, account, name = arn.split(":", 5)
    return str(sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"])


def oldest_age_s(cloudwatch: Any, queue_url: str) -> float | None:
    """ApproximateAgeOfOldestMessage over the last 5 minutes, or None when CloudWatch has none
    (no data yet, or an emulator that does not publish SQS metrics)."""
    now = datetime.now(UTC)
    try:
        answer = cloudwatch.get_metric_statistics(
            Namespace="AWS/SQS",
            MetricName="ApproximateAgeOfOldestMessage",
            Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
            StartTime=now - timedelta(minutes=5),
            EndTime=now,
            Period=60,
            Statistics=["Maximum"],
        )
    except (ClientError, BotoCoreError):
        return None
    points = sorted(answer.get("Datapoints", []), key=lambda point: point["Timestamp"])
    return float(points[-1]["Maximum"]) if points else None


def service_counts(ecs: Any, cluster: str, service: str) -> dict[str, int] | None:
    """The ECS service's desired and running task counts, or None when ECS cannot say."""
    try:
        services = ecs.describe_services(cluster=cluster, services=[service]).get("services", [])
    except (ClientError, BotoCoreError):
        return None
    if not services:
        return None
    return {"desired": services[0]["desiredCount"], "running": services[0]["runningCount"]}
