"""The SQS consumer's timing on a fake clock, against a stubbed SQS client: the drain's
deadlines, the release backoff, the delete retries. No process, no real waiting."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from worker.consumer import Consumer, Control
from worker.deletion import BEFORE_SEND_DELETE, LONGEST_RETRY_SECONDS
from worker.events import Event, Events, Happened
from worker.heartbeat import Heartbeat
from worker.held import HeldMessage
from worker.protection import Protection
from worker.settings import Settings

START = 1_000.0


class FakeClock:
    """Time moves only when the consumer sleeps or waits for something that does not come."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if not event.is_set():
            self.now += max(0.0, timeout)
        return event.is_set()


def aws_error(code: str, status: int) -> ClientError:
    answer = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(answer, "DeleteMessage")  # type: ignore[arg-type]


class StubSqs:
    """Records each call with the fake time it was made at. DeleteMessage runs botocore's
    before-send hook first (as a real client does), then fails `delete_failures` times."""

    def __init__(self, clock: FakeClock, delete_failures: int = 0, error: Any = None) -> None:
        self.clock = clock
        self.calls: list[tuple[float, str, dict[str, Any]]] = []
        self.delete_failures = delete_failures
        self.error = error or aws_error("ServiceUnavailable", 503)
        self.messages: list[list[dict[str, Any]]] = []  # ReceiveMessage answers, in turn
        self.hooks: dict[str, Callable[..., Any]] = {}
        self.meta = SimpleNamespace(events=SimpleNamespace(register=self.hooks.__setitem__))

    def _record(self, name: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((self.clock.now, name, kwargs))

    def of(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        return [(when, kwargs) for when, called, kwargs in self.calls if called == name]

    def delete_message(self, **kwargs: Any) -> dict[str, Any]:
        self._record("delete_message", kwargs)
        self.hooks[BEFORE_SEND_DELETE]()
        if len(self.of("delete_message")) <= self.delete_failures:
            raise self.error
        return {}

    def change_message_visibility_batch(self, **kwargs: Any) -> dict[str, Any]:
        self._record("change_message_visibility_batch", kwargs)
        return {"Successful": [{"Id": entry["Id"]} for entry in kwargs["Entries"]]}

    def get_queue_attributes(self, **kwargs: Any) -> dict[str, Any]:
        return {"Attributes": {"RedrivePolicy": '{"maxReceiveCount": 5}'}}

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self._record("receive_message", kwargs)
        return {"Messages": self.messages.pop(0) if self.messages else []}


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        wait_time_seconds=0,
        visibility_timeout=30,
        heartbeat_seconds=10,
        stop_timeout_seconds=20,
        retry_base_seconds=10,
        retry_max_seconds=600,
    )
    values.update(overrides)
    return Settings("q", "dlq", "bucket", **values)


def message(n: int = 0, receive_count: int = 1) -> dict[str, Any]:
    attributes = {"ApproximateReceiveCount": str(receive_count)}
    return {"MessageId": f"m{n}", "ReceiptHandle": f"r{n}", "Body": "{}", "Attributes": attributes}


def consumer_on(
    sqs: StubSqs, clock: FakeClock, handle: Any = None, **overrides: Any
) -> tuple[Consumer, list[Happened]]:
    events, seen = Events(log_lines=False), []
    events.subscribe(seen.append)
    consumer = Consumer(
        settings(**overrides), sqs, handle or (lambda held, control: None), Protection(""),
        events, clock,
    )  # fmt: skip
    return consumer, seen


def named(seen: list[Happened], event: Event) -> list[dict[str, Any]]:
    return [happened.fields for happened in seen if happened.event is event]


# ---- release backoff ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("receive_count", "delay"), [(1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (20, 600)]
)
def test_a_release_hides_the_message_for_the_backoff_of_its_receive(
    receive_count: int, delay: int
) -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    consumer, seen = consumer_on(sqs, clock)
    held = HeldMessage(message(receive_count=receive_count), job_id="j")
    consumer.release(held, "speech server unreachable")
    [(_, call)] = sqs.of("change_message_visibility_batch")
    assert [entry["VisibilityTimeout"] for entry in call["Entries"]] == [delay]
    assert held.settled  # the heartbeat extends it no more
    assert named(seen, Event.RELEASED) == [
        dict(job_id="j", delay=delay, receive_count=receive_count,
             reason="speech server unreachable")
    ]  # fmt: skip


def test_a_release_at_a_stop_is_immediate() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    consumer, _ = consumer_on(sqs, clock)
    consumer.release(HeldMessage(message(receive_count=4)), "stopping before it started", 0)
    [(_, call)] = sqs.of("change_message_visibility_batch")
    assert call["Entries"][0]["VisibilityTimeout"] == 0


# ---- delete retries -----------------------------------------------------------------


def test_a_failed_delete_is_retried_quickly_doubling_to_a_second_and_counted_once() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock, delete_failures=8)
    consumer, seen = consumer_on(sqs, clock)
    sent: list[float] = []
    held = HeldMessage(message())
    consumer.delete(held, on_send=lambda: sent.append(clock.now))
    assert len(sqs.of("delete_message")) == 9
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert len(clock.sleeps) == len(ceilings)
    for pause, ceiling in zip(clock.sleeps, ceilings, strict=True):
        assert ceiling / 2 <= pause <= ceiling  # jittered, so peers spread out
    assert sent == [START]  # with the first request, never again
    assert held.settled and not named(seen, Event.DELETE_FAILED)


def test_a_delete_is_given_a_minute_or_a_visibility_timeout_if_longer() -> None:
    for visibility, patience in ((30, 60), (300, 300)):
        clock = FakeClock()
        sqs = StubSqs(clock, delete_failures=10_000)
        consumer, seen = consumer_on(sqs, clock, visibility_timeout=visibility)
        consumer.delete(HeldMessage(message(), job_id="j"))
        last_try = sqs.of("delete_message")[-1][0]
        assert patience - LONGEST_RETRY_SECONDS <= last_try - START <= patience
        assert named(seen, Event.DELETE_FAILED) == [{"job_id": "j"}]


def test_a_stop_brings_the_delete_deadline_inside_the_stop_budget() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock, delete_failures=10_000)
    consumer, _ = consumer_on(sqs, clock, stop_timeout_seconds=20)
    consumer.request_stop()
    consumer.delete(HeldMessage(message()))
    # The drain must be done by the stop budget less the exit reserve: 20 - min(1, 10 %).
    last_try = sqs.of("delete_message")[-1][0]
    assert 19 - LONGEST_RETRY_SECONDS <= last_try - START <= 19


def test_a_definite_delete_answer_is_not_retried() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock, delete_failures=1, error=aws_error("ReceiptHandleIsInvalid", 400))
    consumer, seen = consumer_on(sqs, clock)
    consumer.delete(HeldMessage(message(), job_id="j"))
    assert (len(sqs.of("delete_message")), clock.sleeps) == (1, [])
    assert named(seen, Event.DELETE_FAILED) == [{"job_id": "j"}]


# ---- the drain ----------------------------------------------------------------------


def heartbeat_of(consumer: Consumer) -> Heartbeat:
    heartbeat = Heartbeat(consumer.visibility, consumer.inflight, 100, 300)
    heartbeat.start()
    return heartbeat


@pytest.mark.parametrize(
    ("stop_timeout", "jobs_until"),
    [
        (120.0, 120 - 1 - 5),  # the release reserve is 5 s at most, the exit reserve 1 s
        (20.0, 20 - 1 - 4),  # 20 %, under 5 s
        (5.0, 5 - 0.5 - 1),  # the exit reserve is 10 % under 10 s
    ],
)
def test_the_drain_waits_for_jobs_until_the_reserves_then_releases_the_rest(
    stop_timeout: float, jobs_until: float
) -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    consumer, seen = consumer_on(sqs, clock, stop_timeout_seconds=stop_timeout)
    running, finished = HeldMessage(message(1)), HeldMessage(message(2))
    consumer.inflight.add(running)
    consumer.inflight.add(finished)
    finished.settled = True  # deleted, its thread not yet ended
    consumer.request_stop()
    consumer.drain(heartbeat_of(consumer))
    [(when, call)] = sqs.of("change_message_visibility_batch")
    assert when - START == pytest.approx(jobs_until)
    assert [(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in call["Entries"]] == [("r1", 0)]
    assert running.abandoned and named(seen, Event.RELEASED_AT_STOP) == [{"count": 1}]


def test_a_drain_with_nothing_held_neither_waits_nor_releases() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    consumer, seen = consumer_on(sqs, clock)
    consumer.request_stop()
    consumer.drain(heartbeat_of(consumer))
    assert clock.now == START and sqs.calls == []
    assert named(seen, Event.STOP_REQUESTED) == [{"held": 0}]


# ---- the loop -----------------------------------------------------------------------


def test_each_message_goes_to_the_handler_which_deletes_it_through_the_consumer() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    sqs.messages = [[message(1), message(2)]]
    handled: list[str] = []
    both = threading.Event()

    def handle(held: HeldMessage, control: Control) -> None:
        held.job_id = held.message_id
        control.delete(held)
        handled.append(held.receipt)
        if len(handled) == 2:
            both.set()

    consumer, seen = consumer_on(sqs, clock, handle)
    runner = threading.Thread(target=consumer.run)
    runner.start()
    assert both.wait(10)
    consumer.request_stop()
    runner.join(10)
    assert not runner.is_alive() and sorted(handled) == ["r1", "r2"]
    assert sorted(call["ReceiptHandle"] for _, call in sqs.of("delete_message")) == ["r1", "r2"]
    assert consumer.max_receive_count == 5
    order = [happened.event for happened in seen]
    assert order[:2] == [Event.POLLING, Event.RECEIVED]
    assert Event.STOP_REQUESTED in order and order[-1] is Event.STOPPED


def test_a_handler_that_raises_has_its_message_released_not_lost() -> None:
    clock = FakeClock()
    sqs = StubSqs(clock)
    sqs.messages = [[message(1, receive_count=2)]]
    crashed = threading.Event()

    def handle(held: HeldMessage, control: Control) -> None:
        crashed.set()
        raise RuntimeError("a bug")

    consumer, seen = consumer_on(sqs, clock, handle)
    runner = threading.Thread(target=consumer.run)
    runner.start()
    assert crashed.wait(10)
    consumer.request_stop()
    runner.join(10)
    [released] = named(seen, Event.RELEASED)
    assert (released["delay"], released["reason"]) == (20, "worker error: RuntimeError('a bug')")
    assert len(named(seen, Event.CRASHED)) == 1
