"""`tts-fleet wait --events` against the emulator: the bucket is listed once, then the events
queue settles the jobs; other jobs' events are consumed too; a lost event is found by the
sweep; without an events queue the wait polls, saying so. Same exit codes and --json keys.

The end-to-end test runs the stack's own event pattern (components/notifications.py) through
moto's S3 → EventBridge → SQS path; the others put real-shaped events on the queue directly.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from components.notifications import event_pattern
from tests.lib.aws_events import counting_calls, s3_object_event
from tests.lib.client_stack import Stack, depth, run, run_json
from tts_fleet.client.aws import Target, client_for
from tts_fleet.client.events import Completion, parse_event, wait_for_completions
from worker.jobs import FailureRecord, Manifest, failure_key, manifest_key, request_hash

IDS = ["ch-1", "ch-2", "ch-3"]
WAIT_KEYS = {"total", "done", "failed", "pending", "timed_out", "elapsed_s", "untrusted",
             "checks_failed", "batches"}  # fmt: skip
POISON = FailureRecord(
    id="ch-3",
    error="invalid job",
    detail="text is blank",
    attempts=1,
    message_id="m-1",
    worker="w-1",
    failed_at="2026-01-12T00:00:00.000Z",
)


def s3_event(key: str, bucket: str = "tts-outputs") -> str:
    """An S3 Object Created event as the rule delivers it to the events queue."""
    return json.dumps(s3_object_event(key, bucket))


@pytest.fixture
def events_queue(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> str:
    url: str = boto3.client("sqs").create_queue(QueueName="tts-events")["QueueUrl"]
    monkeypatch.setenv("TTS_FLEET_EVENTS_QUEUE_URL", url)
    return url


@pytest.fixture
def s3_calls(stack: Stack) -> Iterator[dict[str, int]]:
    """API calls made by the CLI's own shared S3 client, by operation name."""
    with counting_calls(client_for("s3"), "s3") as counts:
        yield counts


def ids_file(tmp_path: Path, ids: list[str] = IDS) -> str:
    path = tmp_path / "submitted.json"
    path.write_text(json.dumps({"ids": ids}))
    return str(path)


def put(key: str, body: bytes = b"{}") -> None:
    boto3.client("s3").put_object(Bucket="tts-outputs", Key=key, Body=body)


def send(queue_url: str, *bodies: str) -> None:
    for body in bodies:
        boto3.client("sqs").send_message(QueueUrl=queue_url, MessageBody=body)


def route_bucket_events(queue_url: str) -> None:
    """The stack's wiring in the emulator: the bucket's EventBridge switch, the rule with the
    stack's pattern, the queue as its target."""
    boto3.client("s3").put_bucket_notification_configuration(
        Bucket="tts-outputs", NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    eventbridge = boto3.client("events")
    eventbridge.put_rule(Name="tts-completions", EventPattern=event_pattern("tts-outputs"))
    arn = boto3.client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    eventbridge.put_targets(Rule="tts-completions", Targets=[{"Id": "events-queue", "Arn": arn}])


def test_wait_events_settles_on_the_events_without_listing_the_bucket_again(
    tmp_path: Path, events_queue: str, s3_calls: dict[str, int]
) -> None:
    put(manifest_key("ch-1"))  # finished before the wait began: the first listing finds it
    send(events_queue, s3_event(manifest_key("ch-2")), s3_event(failure_key("ch-3")))
    put(failure_key("ch-3"), POISON.to_json())  # read for the reason (the event's object)
    s3_calls.clear()
    code, waited = run_json("wait", ids_file(tmp_path), "--events", "--timeout", "30")
    assert code == 1  # a job failed
    assert waited["done"] == 2 and waited["failed"] == {"ch-3": "invalid job: text is blank"}
    assert waited["pending"] == [] and waited["timed_out"] is False
    # One listing of outputs/ and one of failures/, and the failure record read once (by the
    # listing, which found it; its event then reads nothing).
    assert s3_calls == {"ListObjectsV2": 2, "GetObject": 1}
    assert depth(events_queue) == 0


def test_jobs_finishing_during_the_wait_arrive_through_eventbridge(
    tmp_path: Path, events_queue: str, s3_calls: dict[str, int]
) -> None:
    route_bucket_events(events_queue)

    def worker() -> None:  # what the worker writes: audio, then the manifest; or a failure
        for job_id in ("ch-1", "ch-2"):
            put(f"outputs/{job_id}.wav", b"RIFF")
            put(manifest_key(job_id))
        put(failure_key("ch-3"), POISON.to_json())

    writer = threading.Timer(1.0, worker)
    s3_calls.clear()
    writer.start()
    try:
        code, waited = run_json("wait", ids_file(tmp_path), "--events", "--timeout", "60")
    finally:
        writer.join()
    assert (code, waited["done"], waited["pending"]) == (1, 2, [])
    assert waited["failed"] == {"ch-3": "invalid job: text is blank"}
    # The first check only, then the failure record its event named; the events did the rest.
    assert s3_calls == {"ListObjectsV2": 2, "GetObject": 1}
    assert depth(events_queue) == 0  # the audio sent no event, the three events are consumed


def test_other_jobs_events_and_unreadable_messages_are_consumed_too(
    tmp_path: Path, events_queue: str
) -> None:
    send(
        events_queue,
        s3_event(manifest_key("someone-elses-job")),
        s3_event("outputs/ch-1.wav"),  # not an event the rule sends; ignored all the same
        "not json",
        *(s3_event(manifest_key(job_id)) for job_id in IDS),
    )
    code, waited = run_json("wait", ids_file(tmp_path), "--events", "--timeout", "30")
    assert (code, waited["done"]) == (0, 3)
    assert depth(events_queue) == 0  # one consumer: nothing is left to come back


def test_without_an_events_queue_wait_polls_and_says_so(
    tmp_path: Path, stack: Stack, monkeypatch: pytest.MonkeyPatch, s3_calls: dict[str, int]
) -> None:
    monkeypatch.delenv("TTS_FLEET_EVENTS_QUEUE_URL", raising=False)
    for job_id in IDS:
        put(manifest_key(job_id))
    s3_calls.clear()
    result = run("wait", ids_file(tmp_path), "--events", "--interval", "0.1", "--json")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "note: the stack has no events queue (notifications.enabled is off); "
        "polling the bucket every 0.1 s"
    ]
    assert json.loads(result.stdout)["done"] == 3
    assert s3_calls == {"ListObjectsV2": 2}


def test_a_timeout_on_events_exits_4_with_the_polling_waits_json_keys(
    tmp_path: Path, events_queue: str
) -> None:
    put(manifest_key("ch-1"))
    source = ids_file(tmp_path)
    code, on_events = run_json("wait", source, "--events", "--timeout", "1")
    polled_code, polled = run_json("wait", source, "--timeout", "0.2", "--interval", "0.1")
    assert code == polled_code == 4
    assert set(on_events) == set(polled) == WAIT_KEYS
    assert on_events["pending"] == polled["pending"] == ["ch-2", "ch-3"]
    assert on_events["timed_out"] is True and on_events["done"] == 1


def test_a_lost_event_is_found_by_the_sweep(stack: Stack, events_queue: str) -> None:
    """Another waiter consumed ch-2's event (or EventBridge dropped it): the bucket has the
    manifest, the queue has nothing, and the sweep lists the bucket again."""
    s3, sqs = client_for("s3"), client_for("sqs")
    target = Target(None, None, "tts-outputs", events_queue_url=events_queue)
    writer = threading.Timer(0.5, lambda: put(manifest_key("ch-2")))
    listings: list[str] = []
    s3.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: listings.append("list"))
    writer.start()
    started = time.monotonic()
    try:
        done, failed = wait_for_completions(s3, sqs, target, ["ch-2"], timeout=30, sweep_s=1.0)
    finally:
        writer.join()
        s3.meta.events.unregister("before-call.s3.ListObjectsV2")
    assert (done, failed) == ({"ch-2"}, {})
    assert len(listings) == 4  # the first check and one sweep, two prefixes each
    assert time.monotonic() - started < 5  # the sweep did not wait out a 20 s long poll


def manifest(job_id: str, digest: str) -> bytes:
    return Manifest(
        id=job_id,
        request={},
        audio_key=f"outputs/{job_id}.wav",
        duration_s=1.0,
        sample_rate=24_000,
        model="m",
        voice="Ryan",
        synth_s=0.5,
        queue_wait_s=0.1,
        attempts=1,
        pieces=1,
        worker="w-1",
        finished_at="2026-01-12T00:00:00.000Z",
        request_hash=request_hash(digest, "m"),
    ).to_json()


def test_an_event_for_an_earlier_request_of_the_id_does_not_settle_it(
    stack: Stack, events_queue: str
) -> None:
    """An edited job resubmitted under its id: the old manifest's event (or an old failure
    record's) is not this submit's outcome, by the same rules as the bucket listing."""
    s3, sqs = client_for("s3"), client_for("sqs")
    target = Target(None, None, "tts-outputs", events_queue_url=events_queue)
    put(manifest_key("ch-1"), manifest("ch-1", "old-digest"))
    put(failure_key("ch-2"), POISON.model_copy(update={"request_digest": "old"}).to_json())
    send(events_queue, s3_event(manifest_key("ch-1")), s3_event(failure_key("ch-2")))
    digests = {"ch-1": "new-digest", "ch-2": "new"}
    done, failed = wait_for_completions(
        s3, sqs, target, ["ch-1", "ch-2"], timeout=1, digests=digests
    )
    assert (done, failed) == (set(), {})
    put(manifest_key("ch-1"), manifest("ch-1", "new-digest"))
    send(events_queue, s3_event(manifest_key("ch-1")))
    done, _ = wait_for_completions(s3, sqs, target, ["ch-1"], timeout=5, digests=digests)
    assert done == {"ch-1"}


def test_a_failure_record_without_a_digest_fails_no_waiter_that_knows_its_digest(
    stack: Stack, events_queue: str
) -> None:
    """Any producer can have such a record written for any id (an unreadable body carrying
    it); the waiter that submitted a request of its own keeps waiting for that one."""
    s3, sqs = client_for("s3"), client_for("sqs")
    target = Target(None, None, "tts-outputs", events_queue_url=events_queue)
    send(events_queue, s3_event(failure_key("ch-3")))
    put(failure_key("ch-3"), POISON.to_json())
    assert POISON.request_digest is None
    done, failed = wait_for_completions(
        s3, sqs, target, ["ch-3"], timeout=1, digests={"ch-3": "mine"}
    )
    assert (done, failed) == (set(), {})
    send(events_queue, s3_event(failure_key("ch-3")))
    _, failed = wait_for_completions(s3, sqs, target, ["ch-3"], timeout=5, digests={"ch-3": None})
    assert failed == {"ch-3": "invalid job: text is blank"}


@pytest.mark.parametrize(
    ("body", "prefix", "expected"),
    [
        (s3_event("outputs/ch-1.json"), "", Completion("ch-1", "done")),
        (s3_event("outputs/ch-1.p002.json"), "", Completion("ch-1.p002", "done")),
        (s3_event("failures/ch-1.json"), "", Completion("ch-1", "failed")),
        (s3_event("books/outputs/ch-1.json"), "books/", Completion("ch-1", "done")),
        (s3_event("books/outputs/ch-1.json"), "", None),  # another prefix's job
        (s3_event("outputs/ch-1.wav"), "", None),  # the audio, not the manifest
        (s3_event("outputs/sub/ch-1.json"), "", None),  # no job id holds a '/'
        (s3_event("outputs/../../ch-1.json"), "", None),
        (s3_event("outputs/ch-1\n.json"), "", None),  # `re.match` with `$` would take it
        (s3_event("outputs/.json"), "", None),
        (s3_event("other/ch-1.json"), "", None),
        (s3_event("outputs/ch-1.json").replace("Object Created", "Object Deleted"), "", None),
        ('{"Service": "Amazon S3", "Event": "s3:TestEvent"}', "", None),
        ("[1, 2]", "", None),
        ("not json", "", None),
    ],
)
def test_parse_event_reads_the_job_and_its_outcome_from_the_key(
    body: str, prefix: str, expected: Completion | None
) -> None:
    assert parse_event(body, prefix) == expected
