"""Messages that can never succeed go to the DLQ after one receive; duplicates are one output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lib.procs import (
    Processes,
    env_for,
    list_keys,
    make_queues_and_bucket,
    receive_all,
    start_speech_server,
    start_worker,
    version_counts,
    visible_and_in_flight,
    wait_for,
    wait_for_log,
)
from worker.jobs import Job

pytestmark = pytest.mark.processes

LIMIT = 200
# body -> (failure key id, or None for "the SQS message id"; words the failure must name)
POISON: dict[str, tuple[str | None, str]] = {
    "this is {not json": (None, "body is not JSON"),
    '{"id": "no-text", "voice": "Ryan"}': ("no-text", "text: Field required"),
    '{"id": "extra", "text": "hi", "colour": "red"}': ("extra", "colour: unknown field"),
    '{"id": "bad id!", "text": "hi"}': (None, "id: String should match pattern"),
    json.dumps({"id": "too-long", "text": "a" * (LIMIT + 1)}): (
        "too-long",
        f"text has {LIMIT + 1} characters, more than the limit of {LIMIT}",
    ),
    '{"id": "bad-voice", "text": "Hello.", "voice": "Bob"}': ("bad-voice", "Invalid voice 'bob'"),
    # JSON's decoder raises RecursionError here (issue 20, item 6): still one receive.
    "[" * 100_000: (None, "body is not JSON: nested too deeply"),
    # Not failures/newline\n.json: an id is matched whole, so the record is the message's.
    '{"id": "newline\\n", "text": "hi"}': (None, "id: String should match pattern"),
    '{"id": "blank", "text": "\\u200b\\u200d\\ufeff"}': ("blank", "text is blank"),
}


def body_of(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return body


@pytest.mark.timeout(120)
def test_poison_messages_go_to_dlq_after_one_receive(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    # maxReceiveCount 5: SQS alone would need five receives; the worker must need one.
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    valid = [Job(id=f"ok{i}", text=f"Valid job {i}.") for i in range(4)]
    failure_ids = {}
    for body, (job_id, _) in POISON.items():
        message_id = sqs.send_message(QueueUrl=names["queue_url"], MessageBody=body)["MessageId"]
        failure_ids[body] = job_id or message_id
    for job in valid:
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=job.body())
    with start_speech_server("tone") as speech:
        worker = procs.add(
            start_worker(aws_env, SPEECH_URL=speech.url, MAX_TEXT_CHARS=LIMIT, **env_for(names))
        )
        dead = receive_all(sqs, names["dlq_url"], expected=len(POISON), timeout=60)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60)
        worker.terminate()
        assert worker.wait(30) == 0

    assert sorted(m["Body"] for m in dead) == sorted(POISON)
    for message in dead:
        job_id, words = POISON[message["Body"]]
        assert words in message["MessageAttributes"]["error"]["StringValue"]
        record = body_of(s3, names["bucket"], f"failures/{failure_ids[message['Body']]}.json")
        assert words in record["detail"]
        assert record["attempts"] == 1
        assert record["sender_id"]  # SQS's SenderId of the message, which the producer cannot set
    assert set(list_keys(s3, names["bucket"], "failures/")) == {
        f"failures/{i}.json" for i in failure_ids.values()
    }
    assert version_counts(s3, names["bucket"], "outputs/") == {
        f"outputs/{j.id}.{ext}": 1 for j in valid for ext in ("wav", "json")
    }
    metrics = [json.loads(line) for line in worker.metrics().splitlines()]
    assert sum(m.get("JobsFailed", 0) for m in metrics) == len(POISON)
    assert sum(m.get("JobsCompleted", 0) for m in metrics) == len(valid)


@pytest.mark.timeout(120)
def test_same_job_twice_is_one_output(
    aws_env: dict[str, str], sqs: Any, s3: Any, procs: Processes
) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    named = Job(id="dup-1", text="Said once.")
    unnamed = Job(text="Also said once.")  # id derived from the request
    entries = [named.body(), named.body(), unnamed.model_dump_json(), unnamed.model_dump_json()]
    sqs.send_message_batch(
        QueueUrl=names["queue_url"],
        Entries=[{"Id": str(i), "MessageBody": body} for i, body in enumerate(entries)],
    )
    expected = {f"outputs/{i}.{e}": 1 for i in (named.id, unnamed.job_id) for e in ("wav", "json")}
    with start_speech_server("tone", latency_ms=500, batch_exponent=0) as speech:
        worker = procs.add(start_worker(aws_env, SPEECH_URL=speech.url, **env_for(names)))
        wait_for(lambda: version_counts(s3, names["bucket"]) == expected, 60)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60)
        sqs.send_message(QueueUrl=names["queue_url"], MessageBody=named.body())  # a resubmit
        wait_for_log(worker, r"made from this request: deleting the message", count=3)
        wait_for(lambda: visible_and_in_flight(sqs, names["queue_url"]) == (0, 0), 60)
        worker.terminate()
        assert worker.wait(30) == 0
    assert version_counts(s3, names["bucket"]) == expected
    assert visible_and_in_flight(sqs, names["dlq_url"]) == (0, 0)
