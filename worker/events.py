"""What the worker does, as named events: each is logged with its line by default, and a
subscriber (a test, a benchmark run in process) is told of it as it happens.

The log lines are those the worker has always written: tests of the worker process and
benchmarks/chaos.py match some of them ("polling ", "job <id> started", "released for …s
after receive …", "released N unfinished job(s)", "made from this request: deleting the
message"), so a line changes only with every reader of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

log = logging.getLogger("worker")


class Event(Enum):
    """One thing the worker did, with its log level, line and the fields the line names."""

    POLLING = (
        "polling",
        logging.INFO,
        "polling %s: %d synthesis slots, up to %d messages held, %ds long poll",
        ("queue_url", "slots", "held", "wait_seconds"),
    )
    NO_REDRIVE = (
        "no redrive",
        logging.WARNING,
        "no redrive policy readable (%r): SQS alone bounds retries",
        ("error",),
    )
    RECEIVE_FAILED = ("receive failed", logging.WARNING, "receive failed: %r", ("error",))
    RECEIVED = ("received", logging.DEBUG, "received %d message(s)", ("count",))
    STARTED = (
        "started",
        logging.INFO,
        "job %s %s (receive %d)",
        ("job_id", "what", "receive_count"),
    )
    SETTLED = ("settled", logging.INFO, "job %s %s: deleting the message", ("job_id", "verdict"))
    DONE = (
        "done",
        logging.INFO,
        "job %s done: %.2fs audio in %.2fs",
        ("job_id", "audio_seconds", "synth_seconds"),
    )
    COUNT_FAILED = (
        "count failed",
        logging.ERROR,
        "job %s: the JobsCompleted line failed",
        ("job_id",),
    )
    OWN_WRITE_FOUND = (
        "own write found",
        logging.INFO,
        "job %s manifest: a retried PUT found its own write",
        ("job_id",),
    )
    MANIFEST_CHANGED = (
        "manifest changed",
        logging.INFO,
        "job %s manifest changed by another worker first: judging again",
        ("job_id",),
    )
    MANIFEST_UNREADABLE = (
        "manifest unreadable",
        logging.WARNING,
        "job %s: manifest not readable (%r)",
        ("job_id", "error"),
    )
    RELEASED = (
        "released",
        logging.WARNING,
        "job %s released for %ds after receive %d: %s",
        ("job_id", "delay", "receive_count", "reason"),
    )
    DEAD_LETTERED = (
        "dead-lettered",
        logging.WARNING,
        "job %s failed permanently: %s",
        ("job_id", "reason"),
    )
    DELETE_FAILED = (
        "delete failed",
        logging.WARNING,
        "delete of job %s failed: a redelivery finds its outputs",
        ("job_id",),
    )
    CRASHED = ("crashed", logging.ERROR, "job %s crashed", ("job_id",))
    STOP_REQUESTED = (
        "stop requested",
        logging.INFO,
        "stop requested: no more receives, draining %d job(s)",
        ("held",),
    )
    RELEASED_LATE = (
        "released late",
        logging.INFO,
        "released %d message(s) received after the stop",
        ("count",),
    )
    RELEASED_AT_STOP = (
        "released at stop",
        logging.INFO,
        "released %d unfinished job(s) for other workers",
        ("count",),
    )
    STILL_WRITING = (
        "still writing",
        logging.WARNING,
        "%d job(s) still writing at the stop timeout",
        ("count",),
    )
    STOPPED = ("stopped", logging.INFO, "drained; exiting", ())

    def __init__(self, label: str, level: int, line: str, fields: tuple[str, ...]) -> None:
        self.label, self.level, self.line, self.fields = label, level, line, fields


@dataclass(frozen=True)
class Happened:
    """An event as it happened: the fields its line names (`job_id` among them, for a job)."""

    event: Event
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def job_id(self) -> str | None:
        value = self.fields.get("job_id")
        return None if value is None else str(value)


Subscriber = Callable[[Happened], None]


class Events:
    """Logs each event with its line (unless `log_lines` is off) and tells every subscriber.

    A subscriber runs on the thread that emitted the event, so it must return quickly; one
    that raises is logged and the worker goes on."""

    def __init__(self, logger: logging.Logger = log, log_lines: bool = True) -> None:
        self.logger, self.log_lines = logger, log_lines
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Adds a subscriber; returns the call that removes it."""
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: Event, exc_info: bool = False, **fields: Any) -> None:
        missing = set(event.fields) - set(fields)
        if missing:
            raise TypeError(f"event {event.label!r} needs {', '.join(sorted(missing))}")
        if self.log_lines:
            args = tuple(fields[name] for name in event.fields)
            self.logger.log(event.level, event.line, *args, exc_info=exc_info)
        happened = Happened(event, fields)
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(happened)
            except Exception:
                self.logger.exception("a subscriber to %r failed", event.label)
