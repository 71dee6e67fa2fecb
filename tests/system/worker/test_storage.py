"""S3 failing under a running worker: no message is deleted without its outputs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    list_keys,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    version_counts,
    visible_and_in_flight,
    wait_for,
    wait_for_log,
)
from worker.jobs import Job

pytestmark = pytest.mark.processes


def remove_bucket(s3: Any, bucket: str) -> None:
    for key in list_keys(s3, bucket):
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)


def outstanding(sqs: Any, queue_url: str) -> int:
    return sum(visible_and_in_flight(sqs, queue_url))


@pytest.mark.timeout(150)
def test_bucket_removed_mid_run(aws_env, sqs, s3, procs: Processes) -> None:
    names = make_queues_and_bucket(
        sqs, s3, max_receive_count=50, visibility_timeout=30, versioning=False
    )
    bucket, queue_url = names["bucket"], names["queue_url"]
    before = [Job(id=f"b{i}", text=f"Before {i}.") for i in range(3)]
    after = [Job(id=f"a{i}", text=f"After {i}.") for i in range(6)]
    with start_speech_server("tone") as speech:
        worker = procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
        for job in before:
            sqs.send_message(QueueUrl=queue_url, MessageBody=job.body())
        wait_for(lambda: len(list_keys(s3, bucket, "outputs/")) == 6, 60)
        wait_for(lambda: outstanding(sqs, queue_url) == 0, 30)

        remove_bucket(s3, bucket)
        for job in after:
            sqs.send_message(QueueUrl=queue_url, MessageBody=job.body())
        # Every job fails to store at least once, some several times; all stay queued.
        wait_for_log(worker, r"released for \d+s after receive \d+: storage error", count=12)
        assert outstanding(sqs, queue_url) == len(after)
        assert "NoSuchBucket" in worker.log()

        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        expected = {f"outputs/{j.id}.{ext}": 1 for j in after for ext in ("wav", "json")}
        wait_for(lambda: version_counts(s3, bucket) == expected, 90)
        wait_for(lambda: outstanding(sqs, queue_url) == 0, 30)
        worker.terminate()
        assert worker.wait(30) == 0
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
