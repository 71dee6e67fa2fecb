"""The SQS consumer (DESIGN §5.2, §5.4-5.6): receives messages and hands each to the job
handler, injected as a function (like sqs-consumer's `handleMessage`), on a thread of its own.

It owns the mechanics around the handler: the poll thread, the synthesis slots and prefetch,
the heartbeat and task-protection wiring, the drain at a stop, releases with a growing delay,
and deletes (through worker/deletion.py). What a message means, and whether it is done,
failed or to be tried later, is the handler's (worker/handler.py): it calls back through
`Control`. Time comes from an injected `Clock`.

Invariants: a message is deleted only when the handler says so (after its outputs, or its
failure record and DLQ copy, exist); a stop ends receiving, lets running jobs finish within
the stop budget and releases the rest at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from worker.aws_errors import AWS_ERRORS
from worker.clock import SYSTEM_CLOCK, Clock
from worker.deletion import MessageDeleter
from worker.events import Event, Events
from worker.heartbeat import MAX_BATCH_ENTRIES, Heartbeat, Visibility, change_visibility
from worker.held import HeldMessage, InFlight
from worker.protection import Protection, Renewal
from worker.settings import MAX_VISIBILITY_SECONDS, Settings

# How long a failing delete is retried while the heartbeat keeps its message invisible.
DELETE_PATIENCE_SECONDS = 60
# Polls of the consumer's own waits: a free place, a poll's end, a synthesis slot.
FREE_PLACE_POLL_SECONDS = 0.5
RECEIVE_POLL_SECONDS = 0.1
SLOT_POLL_SECONDS = 0.2
# After a failed or (with short polls) empty receive: not a spin against the queue.
RECEIVE_PAUSE_SECONDS = 1.0
# What each message is received with (worker/held.py reads them): the attempt, for counting
# and backoff; the send time, for ordering an edited job; the sending IAM identity, recorded in
# the job's manifest or failure record.
SYSTEM_ATTRIBUTES = ("ApproximateReceiveCount", "SentTimestamp", "SenderId")


class Control(Protocol):
    """What the handler may ask of the consumer about the message it was given."""

    @property
    def max_receive_count(self) -> int | None: ...

    def synthesis_slot(self) -> AbstractContextManager[bool]: ...

    def release(self, held: HeldMessage, reason: str, delay: int | None = None) -> None: ...

    def delete(self, held: HeldMessage, on_send: Callable[[], None] | None = None) -> None: ...


Handle = Callable[[HeldMessage, Control], None]


def backoff_seconds(receive_count: int, base: float, cap: float) -> int:
    """Visibility delay after the n-th failed receive: base, 2·base, 4·base, … up to cap."""
    growth = 2.0 ** max(0, receive_count - 1)  # a float power: int ** int types as Any
    delay = min(cap, base * growth, float(MAX_VISIBILITY_SECONDS))
    return max(0, round(delay))


def poll_wait_seconds(settings: Settings) -> int:
    """The long poll's wait: at most half the stop budget, so a poll under way at SIGTERM
    returns (and its messages are released) well inside it."""
    return max(0, min(settings.wait_time_seconds, int(settings.stop_timeout_seconds // 2)))


class Poll:
    """One ReceiveMessage in its own thread, so a SIGTERM need not wait for a long poll.

    Whoever comes second handles the messages: the consumer takes them if the call returned
    before it gave up on it (`abandon`); otherwise the poll thread releases them itself at
    once (visibility 0), so a message received after the stop is not hidden for the timeout."""

    def __init__(self, receive: Any, release_late: Any) -> None:
        self.receive, self.release_late = receive, release_late
        self.done = threading.Event()
        self.messages: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self.thread = threading.Thread(target=self._run, name="poll", daemon=True)

    def _run(self) -> None:
        try:
            messages = list(self.receive())
        except Exception as error:  # reported by the consumer; a poll must always end as done
            messages, self.error = [], error
        with self._lock:
            self.messages, late = messages, self._abandoned
            self.done.set()
        if late and messages:
            self.release_late(messages)

    def abandon(self) -> bool:
        """True when the consumer may walk away: the messages, if any come, are released."""
        with self._lock:
            self._abandoned = not self.done.is_set()
            return self._abandoned


class Consumer:
    """Up to CONCURRENCY syntheses at once, PREFETCH more messages held ready (DESIGN §5.2)."""

    def __init__(
        self,
        settings: Settings,
        sqs: Any,
        handle: Handle,
        protection: Protection,
        events: Events,
        clock: Clock = SYSTEM_CLOCK,
        delete_sqs: Any = None,
    ) -> None:
        self.settings, self.sqs, self.handle = settings, sqs, handle
        self.protection, self.events, self.clock = protection, events, clock
        # Synthesis requests are bounded by CONCURRENCY; PREFETCH more messages are held
        # (and heartbeat-extended) so a freed slot starts the next job at once while the
        # previous one is still uploading: S3 and SQS latency overlap the model's time.
        prefetch = settings.concurrency if settings.prefetch is None else settings.prefetch
        self.inflight = InFlight(settings.concurrency + prefetch)
        self.slots = threading.BoundedSemaphore(settings.concurrency)
        self.max_receive_count: int | None = None
        self.stop_requested = threading.Event()
        self.visibility = Visibility(sqs, settings.queue_url)
        self.poll_wait = poll_wait_seconds(settings)
        self.poll: Poll | None = None
        self.deleter = MessageDeleter(delete_sqs or sqs, settings.queue_url, clock)
        self._stop_time = 0.0

    # ---- lifecycle -------------------------------------------------------------------

    def request_stop(self) -> None:
        if not self.stop_requested.is_set():
            self._stop_time = self.clock.monotonic()
            self.stop_requested.set()
            self.events.emit(Event.STOP_REQUESTED, held=len(self.inflight))

    def run(self) -> int:
        self.max_receive_count = self._read_max_receive_count()
        heartbeat = Heartbeat(
            self.visibility,
            self.inflight,
            self.settings.heartbeat_seconds,
            self.settings.visibility_timeout,
        )
        heartbeat.start()
        renewal = Renewal(self.protection, self.settings.protection_tick_seconds)
        renewal.start()
        self.events.emit(
            Event.POLLING,
            queue_url=self.settings.queue_url,
            slots=self.settings.concurrency,
            held=self.inflight.capacity,
            wait_seconds=self.poll_wait,
        )
        try:
            while not self.stop_requested.is_set():
                self._poll_once()
        finally:
            self.drain(heartbeat)
            renewal.stop()
            self.protection.idle()
            self.events.emit(Event.STOPPED)
        return 0

    def _read_max_receive_count(self) -> int | None:
        """The redrive bound, so the last allowed attempt can record why it failed."""
        try:
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=self.settings.queue_url, AttributeNames=["RedrivePolicy"]
            )["Attributes"]
            return int(json.loads(attrs["RedrivePolicy"])["maxReceiveCount"])
        except (KeyError, ValueError, *AWS_ERRORS) as error:
            self.events.emit(Event.NO_REDRIVE, error=error)
            return None

    def _poll_once(self) -> None:
        if not self.inflight.wait_free(timeout=FREE_PLACE_POLL_SECONDS):
            return
        messages = self._receive(min(MAX_BATCH_ENTRIES, self.inflight.free()))
        if messages is None:  # the stop came during the poll: its thread releases them
            return
        if self.stop_requested.is_set():
            self._release_late(messages)
            return
        if not messages:
            if not len(self.inflight):
                self.protection.idle()
            if not self.poll_wait:  # short polls: do not spin on an empty queue
                self.clock.wait(self.stop_requested, RECEIVE_PAUSE_SECONDS)
            return
        self.events.emit(Event.RECEIVED, count=len(messages))
        self.protection.busy()  # before any work starts, so ECS cannot stop us mid-job
        for message in messages:
            held = HeldMessage(message)
            self.inflight.add(held)
            threading.Thread(target=self._run_one, args=(held,), daemon=True).start()

    def _receive(self, wanted: int) -> list[dict[str, Any]] | None:
        """The messages of one poll; None when a stop came first (the consumer walks away)."""

        def receive() -> list[dict[str, Any]]:
            answer = self.sqs.receive_message(
                QueueUrl=self.settings.queue_url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=self.poll_wait,
                VisibilityTimeout=self.settings.visibility_timeout,
                # System attributes, set by SQS, never by the sender: MessageSystemAttributeNames
                # (boto3 >= 1.34.101; requirements.txt asks for more) replaces AttributeNames.
                MessageSystemAttributeNames=list(SYSTEM_ATTRIBUTES),
                MessageAttributeNames=["All"],
            )
            return list(answer.get("Messages", []))

        poll = self.poll = Poll(receive, self._release_late)
        poll.thread.start()
        while not self.clock.wait(poll.done, RECEIVE_POLL_SECONDS):
            if self.stop_requested.is_set() and poll.abandon():
                return None
        if poll.error is not None:
            self.events.emit(Event.RECEIVE_FAILED, error=poll.error)
            self.clock.wait(self.stop_requested, RECEIVE_PAUSE_SECONDS)
        return poll.messages

    def _release_late(self, messages: list[dict[str, Any]]) -> None:
        held = [HeldMessage(message) for message in messages]
        released = change_visibility(self.sqs, self.settings.queue_url, held, 0)
        self.events.emit(Event.RELEASED_LATE, count=released)

    def stop_deadline(self) -> float:
        """When the drain must be done: the stop budget less what exiting takes after it, so
        the process is out inside it."""
        budget = self.settings.stop_timeout_seconds - self.settings.exit_reserve_seconds
        return self._stop_time + budget

    def drain(self, heartbeat: Heartbeat) -> None:
        """Waits for running jobs until the release reserve, then releases the rest."""
        end = self.stop_deadline()
        jobs_end = end - self.settings.release_reserve_seconds
        # Jobs still kept invisible meanwhile.
        self.clock.wait(self.inflight.emptied, jobs_end - self.clock.monotonic())
        heartbeat.stop()
        leftovers = self.inflight.snapshot()
        # A job thread marks its S3 writes (HeldMessage.writing): abandon (and release) every
        # message not writing now, then wait for the writers only as long as the stop allows.
        busy = [held for held in leftovers if not held.abandon(0.0)]
        self._release_abandoned([held for held in leftovers if held not in busy])
        late = [held for held in busy if held.abandon(end - self.clock.monotonic())]
        self._release_abandoned(late)
        if len(late) < len(busy):
            self.events.emit(Event.STILL_WRITING, count=len(busy) - len(late))
        # Within the stop budget: a poll given up on at the stop releases what it gets, and a
        # tick whose extension overlapped a release sends that release again.
        if self.poll is not None:
            self.poll.thread.join(max(0.0, end - self.clock.monotonic()))
        heartbeat.join(max(0.0, end - self.clock.monotonic()))

    def _release_abandoned(self, held: list[HeldMessage]) -> None:
        if held:
            released = self.visibility.release(held, 0, unsettled_only=True)
            self.events.emit(Event.RELEASED_AT_STOP, count=released)

    # ---- one message: what the handler may ask for -----------------------------------

    def _run_one(self, held: HeldMessage) -> None:
        try:
            self.handle(held, self)
        except Exception as error:  # never let a bug lose the message: release it
            self.events.emit(Event.CRASHED, exc_info=True, job_id=held.job_id)
            if not (held.settled or held.abandoned):  # deleted, released, or the drain's
                self.release(held, f"worker error: {error!r}")
        finally:
            self.inflight.discard(held)

    @contextmanager
    def synthesis_slot(self) -> Iterator[bool]:
        """Holds a synthesis slot (True), unless a stop comes first (False: do not start)."""
        acquired = self._acquire_slot()
        try:
            yield acquired
        finally:
            if acquired:
                self.slots.release()

    def _acquire_slot(self) -> bool:
        while not self.slots.acquire(timeout=SLOT_POLL_SECONDS):
            if self.stop_requested.is_set():
                return False
        if self.stop_requested.is_set():
            self.slots.release()
            return False
        return True

    def release(self, held: HeldMessage, reason: str, delay: int | None = None) -> None:
        """Makes the message visible again after `delay` seconds (default: the backoff of
        its receive count), for this or another worker to try again."""
        if delay is None:
            delay = backoff_seconds(
                held.receive_count,
                self.settings.retry_base_seconds,
                self.settings.retry_max_seconds,
            )
        self.visibility.release([held], delay)
        self.events.emit(
            Event.RELEASED,
            job_id=held.job_id,
            delay=delay,
            receive_count=held.receive_count,
            reason=reason,
        )

    def delete(self, held: HeldMessage, on_send: Callable[[], None] | None = None) -> None:
        """Deletes the message, running `on_send` as the delete goes out. Until the delete
        returns the heartbeat keeps extending the message, so a failed delete is retried for
        a minute (or a visibility timeout, if longer), and inside the stop budget once a stop
        comes: a counted message that came back would be counted again."""
        patience = self.clock.monotonic() + max(
            DELETE_PATIENCE_SECONDS, self.settings.visibility_timeout
        )

        def deadline() -> float:
            if not self.stop_requested.is_set():
                return patience
            return min(patience, self.stop_deadline())

        try:
            deleted = self.deleter.delete(held.receipt, deadline, on_send)
        finally:
            held.settled = True  # stays in flight (so a drain waits) until its thread ends
        if not deleted:
            self.events.emit(Event.DELETE_FAILED, job_id=held.job_id)
