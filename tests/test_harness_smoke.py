"""The shared fixtures themselves work: the emulator answers and is clean per test."""

import boto3


def test_emulator_is_reset_between_tests_first(aws_env: dict[str, str]) -> None:
    sqs = boto3.client("sqs")
    sqs.create_queue(QueueName="leftover")
    assert len(sqs.list_queues().get("QueueUrls", [])) == 1


def test_emulator_is_reset_between_tests_second(aws_env: dict[str, str]) -> None:
    assert boto3.client("sqs").list_queues().get("QueueUrls", []) == []
