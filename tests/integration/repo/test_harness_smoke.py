"""The shared fixtures and stand-ins themselves work: the emulator answers, is clean per test,
and `create_stack` makes the redrive and the versioned bucket the tests count on."""

import boto3

from tts_fleet.local.emulator import create_stack, visible_and_in_flight


def test_emulator_is_reset_between_tests_first(aws_env: dict[str, str]) -> None:
    sqs = boto3.client("sqs")
    sqs.create_queue(QueueName="leftover")
    assert len(sqs.list_queues().get("QueueUrls", [])) == 1


def test_emulator_is_reset_between_tests_second(aws_env: dict[str, str]) -> None:
    assert boto3.client("sqs").list_queues().get("QueueUrls", []) == []


def test_create_stack_redrives_after_max_receive_count_and_versions_on_request(
    aws_env: dict[str, str],
) -> None:
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    stack = create_stack(sqs, s3, "jobs", max_receive_count=2, visibility_timeout=7, versioned=True)
    attributes = sqs.get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=["All"])
    assert attributes["Attributes"]["VisibilityTimeout"] == "7"
    sqs.send_message(QueueUrl=stack.queue_url, MessageBody="poison")
    for _ in range(2):  # each receive counts; the message is back at once (visibility 0)
        assert sqs.receive_message(QueueUrl=stack.queue_url, VisibilityTimeout=0)["Messages"]
    assert not sqs.receive_message(QueueUrl=stack.queue_url).get("Messages")  # the third moves it
    assert visible_and_in_flight(sqs, stack.dlq_url) == (1, 0)
    for body in (b"one", b"two"):
        s3.put_object(Bucket=stack.bucket, Key="k", Body=body)
    assert len(s3.list_object_versions(Bucket=stack.bucket)["Versions"]) == 2
