"""Who sent a job: the SQS SenderId system attribute of its message, which SQS sets and a
producer cannot, goes into the job's manifest and failure record (issue 20, item 4).
A `Worker` in a thread of the test process on the emulator."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lib.fake_worker import FakeSpeech, make_worker, run_until
from tests.lib.procs import make_queues_and_bucket, visible_and_in_flight
from worker.jobs import FailureRecord, Job, Manifest, failure_key, manifest_key


def emulators_sender_id(sqs: Any, queue_url: str) -> str:
    """The SenderId SQS gives this test's messages, read from a probe message (then deleted)."""
    sqs.send_message(QueueUrl=queue_url, MessageBody="probe")
    [probe] = sqs.receive_message(
        QueueUrl=queue_url, WaitTimeSeconds=1, MessageSystemAttributeNames=["SenderId"]
    )["Messages"]
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=probe["ReceiptHandle"])
    return str(probe["Attributes"]["SenderId"])


def read(s3: Any, bucket: str, key: str) -> bytes:
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


@pytest.mark.timeout(60)
def test_the_manifest_and_the_failure_record_name_the_messages_sender(
    aws_env: dict[str, str], sqs: Any, s3: Any
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=30)
    sender = emulators_sender_id(sqs, names["queue_url"])
    done = Job(id="sent-1", text="Who sent me?")
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=done.body())
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody='{"id": "bad-1"}')
    run_until(
        make_worker(names, sqs, s3, FakeSpeech(0.05)),
        lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0),
    )
    manifest = Manifest.model_validate_json(read(s3, names["bucket"], manifest_key("sent-1")))
    record = FailureRecord.model_validate_json(read(s3, names["bucket"], failure_key("bad-1")))
    assert sender
    assert manifest.sender_id == sender
    assert record.sender_id == sender
