"""The loop's stop (issue #12, item 8): no lock across an SQS call, a long poll that never
outlasts the stop budget, and messages received after SIGTERM released at once."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests.lib.fake_worker import FakeSpeech, make_worker
from tests.lib.procs import make_queues_and_bucket
from worker.consumer import Poll, poll_wait_seconds
from worker.events import Event
from worker.heartbeat import Visibility
from worker.held import HeldMessage
from worker.jobs import Job
from worker.settings import Settings

EXTENSION = 300


class SlowExtensions:
    """SQS stand-in: an extension (to EXTENSION s) blocks until `go`; every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []  # (when it returned, seconds)
        self.extending, self.go = threading.Event(), threading.Event()

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict]) -> dict:
        seconds = Entries[0]["VisibilityTimeout"]
        if seconds == EXTENSION:
            self.extending.set()
            self.go.wait(10)
        self.calls.append((time.monotonic(), seconds))
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def task(n: int = 0) -> HeldMessage:
    return HeldMessage({"ReceiptHandle": f"r{n}", "MessageId": f"m{n}", "Body": "{}"})


def test_a_slow_extension_delays_no_release_and_cannot_undo_it() -> None:
    sqs = SlowExtensions()
    visibility = Visibility(sqs, "q")
    held = [task(0), task(1)]
    tick = threading.Thread(target=visibility.extend, args=(held, 300))
    tick.start()
    assert sqs.extending.wait(5)
    started = time.monotonic()
    assert visibility.release([held[0]], 7) == 1
    assert time.monotonic() - started < 1.0  # not behind the hung tick
    sqs.go.set()
    tick.join(5)
    # The release, the tick that landed after it, then the release again: the last word.
    assert [seconds for _, seconds in sqs.calls] == [7, 300, 7]
    assert visibility.extend(held, 300) == 1  # the released task is never extended again


def test_a_release_with_no_tick_in_flight_is_sent_once() -> None:
    sqs = SlowExtensions()
    sqs.go.set()
    visibility = Visibility(sqs, "q")
    held = task()
    visibility.extend([held], 300)
    visibility.release([held], 0)
    assert [seconds for _, seconds in sqs.calls] == [300, 0]


def test_an_abandoned_poll_releases_what_it_gets_and_a_finished_one_does_not() -> None:
    go, released = threading.Event(), []
    poll = Poll(lambda: go.wait(5) and [{"ReceiptHandle": "late"}], released.extend)
    poll.thread.start()
    assert poll.abandon()  # still waiting: the loop walks away
    go.set()
    poll.thread.join(5)
    assert released == [{"ReceiptHandle": "late"}]

    finished = Poll(lambda: [{"ReceiptHandle": "mine"}], released.extend)
    finished.thread.start()
    finished.thread.join(5)
    assert not finished.abandon()  # the loop takes these itself
    assert released == [{"ReceiptHandle": "late"}]


@pytest.mark.parametrize(
    ("wait", "stop", "expected"), [(20, 120, 20), (20, 10, 5), (20, 21, 10), (5, 1, 0)]
)
def test_the_long_poll_waits_at_most_half_the_stop_budget(wait, stop, expected) -> None:
    settings = Settings("q", "d", "b", wait_time_seconds=wait, stop_timeout_seconds=stop)
    assert poll_wait_seconds(settings) == expected


class CountingReceives:
    """SQS client recording when each ReceiveMessage returns."""

    def __init__(self, sqs: Any) -> None:
        self.sqs, self.returned = sqs, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)

    def receive_message(self, **kwargs: Any) -> Any:
        answer = self.sqs.receive_message(**kwargs)
        self.returned.append((time.monotonic(), kwargs["WaitTimeSeconds"]))
        return answer


@pytest.mark.timeout(60)
def test_sigterm_during_a_long_poll_and_a_message_it_brings(aws_env, sqs, s3) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=600)
    counting = CountingReceives(sqs)
    speech = FakeSpeech()
    worker = make_worker(names, counting, s3, speech, wait_time_seconds=20, stop_timeout_seconds=4)
    polling = threading.Event()
    worker.events.subscribe(lambda happened: happened.event is Event.POLLING and polling.set())
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert polling.wait(10)
    time.sleep(0.5)  # the first (empty) long poll is under way
    stopped = time.monotonic()
    worker.request_stop()
    # Arrives while that poll still waits: it takes the message after the stop.
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="late", text="Hi.").body())
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - stopped < 4  # inside the stop budget
    poll = worker.consumer.poll
    assert poll is not None and not poll.thread.is_alive()  # nothing dangles
    assert {wait for _, wait in counting.returned} == {2}  # half the 4 s budget
    # Visible again at once (not hidden for the 600 s the poll asked for), and not started.
    got = sqs.receive_message(
        QueueUrl=names["queue_url"], WaitTimeSeconds=1, AttributeNames=["All"]
    ).get("Messages", [])
    assert [json.loads(m["Body"])["id"] for m in got] == ["late"]
    assert speech.calls == []
