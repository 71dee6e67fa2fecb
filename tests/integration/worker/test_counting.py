"""`JobsCompleted` once per manifest (issue #12, item 8), in `Worker` threads on the emulator.

The manifest names the SQS message that made it; that message's attempts count the job, as
its delete goes out (worker/deletion.py). Faults are injected through botocore's own
`before-send` event, which answers a request in place of the emulator.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError

from tests.lib.fake_worker import FakeSpeech, make_worker, put_outputs, run_until
from tests.lib.procs import make_queues_and_bucket, visible_and_in_flight
from worker.__main__ import _clients as worker_clients
from worker.deletion import BEFORE_SEND_DELETE
from worker.jobs import Job, Manifest, manifest_key
from worker.metrics import Metrics
from worker.settings import Settings

JOB = Job(id="k1", text="Counted once.")


def completed(metrics: io.StringIO) -> int:
    return sum(json.loads(line).get("JobsCompleted", 0) for line in metrics.getvalue().split())


@pytest.fixture
def names(aws_env: dict[str, str], sqs: Any, s3: Any) -> dict[str, str]:
    return make_queues_and_bucket(sqs, s3, max_receive_count=3, visibility_timeout=30)


def drain(names: dict[str, str], sqs: Any, s3: Any, speech: FakeSpeech) -> io.StringIO:
    metrics = io.StringIO()
    run_until(
        make_worker(names, sqs, s3, speech, metrics=Metrics(metrics)),
        lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0),
    )
    return metrics


def receive_once(sqs: Any, queue_url: str) -> str:
    """Sends JOB and receives it once (as a worker that then dies would): its MessageId. It is
    made visible again at once, so the worker under test receives it a second time."""
    sqs.send_message(QueueUrl=queue_url, MessageBody=JOB.body())
    message = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"][0]
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    return str(message["MessageId"])


@pytest.mark.timeout(60)
def test_a_redelivery_of_the_message_that_made_the_manifest_counts_it(names, sqs, s3) -> None:
    sent = receive_once(sqs, names["queue_url"])
    # Its first attempt (receive 1) wrote the outputs and was killed before its delete went out.
    put_outputs(s3, names["bucket"], JOB, worker="killed", message_id=sent, attempts=1)
    speech = FakeSpeech(0.05)
    assert completed(drain(names, sqs, s3, speech)) == 1
    assert speech.calls == []


@pytest.mark.timeout(60)
def test_a_concurrent_receive_of_the_same_message_leaves_the_count_to_its_writer(
    names, sqs, s3
) -> None:
    sent = receive_once(sqs, names["queue_url"])
    # Written by a live worker that holds the same message at the same receive count (a
    # duplicate delivery): that worker counts it as its delete goes out.
    put_outputs(s3, names["bucket"], JOB, worker="alive", message_id=sent, attempts=2)
    assert completed(drain(names, sqs, s3, FakeSpeech(0.05))) == 0


@pytest.mark.timeout(60)
def test_another_message_of_a_done_job_is_not_counted(names, sqs, s3) -> None:
    put_outputs(s3, names["bucket"], JOB, message_id="the-message-that-made-it")
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=JOB.body())  # a late duplicate
    assert completed(drain(names, sqs, s3, FakeSpeech(0.05))) == 0


@pytest.mark.timeout(60)
def test_the_writer_records_its_message_and_counts_it_once(names, sqs, s3) -> None:
    sent = sqs.send_message(QueueUrl=names["queue_url"], MessageBody=JOB.body())["MessageId"]
    metrics = drain(names, sqs, s3, FakeSpeech(0.05))
    body = s3.get_object(Bucket=names["bucket"], Key=manifest_key(JOB.job_id))["Body"].read()
    assert Manifest.model_validate_json(body).message_id == sent
    assert completed(metrics) == 1


def no_retry_deletes(names: dict[str, str]) -> Any:
    """The client `python -m worker` deletes with (botocore does not retry it)."""
    settings = Settings(queue_url=names["queue_url"], dlq_url=names["dlq_url"],
                        output_bucket=names["bucket"], aws_region="us-east-1")  # fmt: skip
    return worker_clients(settings)[2]


class Raw(io.BytesIO):
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.getvalue()


class DeleteFaults:
    """Fails the first DeleteMessage requests in the emulator's place, one per kind in
    `failures` ("reset": the connection closed with no answer; "500": SQS's InternalError),
    and notes how many JobsCompleted lines were out at each call and each send."""

    def __init__(self, sqs: Any, metrics: io.StringIO, failures: list[str]) -> None:
        self.metrics, self.failures = metrics, failures
        self.at_call: list[int] = []
        self.at_send: list[int] = []
        sqs.meta.events.register("before-call.sqs.DeleteMessage", self._call)
        sqs.meta.events.register(BEFORE_SEND_DELETE, self._send)  # after the worker's own

    def _call(self, **_: Any) -> None:
        self.at_call.append(completed(self.metrics))

    def _send(self, request: Any, **_: Any) -> AWSResponse | None:
        self.at_send.append(completed(self.metrics))
        if len(self.at_send) > len(self.failures):
            return None
        if self.failures[len(self.at_send) - 1] == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        body = json.dumps({"__type": "com.amazonaws.sqs#InternalError", "message": "down"})
        headers = {"Content-Type": "application/x-amz-json-1.0",
                   "x-amzn-query-error": "InternalError;Receiver"}  # fmt: skip
        return AWSResponse(request.url, 500, headers, Raw(body.encode()))


@pytest.mark.timeout(60)
def test_the_line_goes_out_with_the_first_delete_request_and_only_once(names, s3) -> None:
    # The main clients' retry settings (max_attempts 3: four tries), then the worker tries again.
    sqs = boto3.client("sqs", config=Config(retries={"mode": "standard", "max_attempts": 3}))
    metrics = io.StringIO()
    worker = make_worker(names, sqs, s3, FakeSpeech(0.05), metrics=Metrics(metrics))
    faults = DeleteFaults(sqs, metrics, failures=["reset", "500", "500", "reset"])
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=JOB.body())
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    # Not before the delete was called; already out as its first request left; never again.
    assert faults.at_call[0] == 0
    assert faults.at_send == [1] * 5
    assert len(faults.at_call) == 2  # botocore's four tries, then the worker's own call
    assert completed(metrics) == 1


@pytest.mark.timeout(60)
def test_the_worker_retries_a_failed_delete_itself_on_a_client_botocore_does_not_retry(
    names, sqs, s3
) -> None:
    deletes = no_retry_deletes(names)
    metrics = io.StringIO()
    worker = make_worker(names, sqs, s3, FakeSpeech(0.05), metrics=Metrics(metrics),
                         delete_sqs=deletes)  # fmt: skip
    faults = DeleteFaults(deletes, metrics, failures=["reset", "500", "500", "reset"])
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=JOB.body())
    run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    assert len(faults.at_call) == len(faults.at_send) == 5  # one try per call: the worker's
    assert faults.at_send == [1] * 5
    assert completed(metrics) == 1


@pytest.mark.timeout(60)
def test_a_failing_delete_keeps_the_message_invisible_until_it_lands(names, sqs, s3) -> None:
    # Deletes fail for 2.8-5.5 s (50 ms doubling to 1 s, jittered), past the 2-s visibility:
    # only the heartbeat's extensions keep the counted message from another receive.
    deletes = no_retry_deletes(names)
    metrics = io.StringIO()
    worker = make_worker(
        names, sqs, s3, FakeSpeech(0.05), metrics=Metrics(metrics), delete_sqs=deletes,
        visibility_timeout=2, heartbeat_seconds=0.5,
    )  # fmt: skip
    faults = DeleteFaults(deletes, metrics, failures=["500"] * 9)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=JOB.body())
    seen_visible: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            if faults.at_send:  # from the first delete on: before it, the job was in hand
                seen_visible.append(visible_and_in_flight(sqs, names["queue_url"])[0])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run_until(worker, lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0))
    finally:
        done.set()
        watcher.join()
    assert len(faults.at_send) == 10  # every failure, then the delete that landed
    assert seen_visible and max(seen_visible) == 0
    assert completed(metrics) == 1
