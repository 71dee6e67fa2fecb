"""The set of in-flight messages and the heartbeat that keeps them invisible (DESIGN §5.4).

Every `interval` seconds the heartbeat sets each in-flight message's visibility to
`extension` seconds from now (ChangeMessageVisibilityBatch, 10 per call). Because
extension > interval (checked at start), a message stays invisible for as long as its job
runs, however long, and reappears within `extension` seconds of a crash.

No lock is held across an SQS or S3 call: `Visibility` keeps a release from being undone by a
tick already in flight (it is sent again once the tick's call returns), and `Task.writing()`
lets the drain wait for a job's S3 writes on a condition, not on a lock the writer holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("worker.heartbeat")
# SQS batch actions take at most 10 entries (ChangeMessageVisibilityBatch, DeleteMessageBatch).
MAX_BATCH_ENTRIES = 10


@dataclass(eq=False)
class Task:
    """One received message while this worker owns it."""

    message: dict[str, Any]
    received_at: float = field(default_factory=time.time)
    job_id: str | None = None
    abandoned: bool = False  # set by the drain; the job thread then writes nothing more
    settled: bool = False  # deleted or released: the heartbeat must not extend it any more
    # The manifest body of a PUT that raised: it may have landed after all, as this attempt's.
    unanswered_manifest: bytes | None = None
    # Guarded by Visibility's lock: heartbeat calls in flight that include this task, and the
    # visibility of a release made meanwhile, to be sent again when the last of them returns.
    extending: int = 0
    resend: int | None = None
    _writes: threading.Condition = field(default_factory=threading.Condition)
    _writing: bool = False

    @contextmanager
    def writing(self) -> Iterator[bool]:
        """Yields False once the drain abandoned the task; while True, it cannot abandon it."""
        with self._writes:
            allowed = self._writing = not self.abandoned
        try:
            yield allowed
        finally:
            with self._writes:
                self._writing = False
                self._writes.notify_all()

    def abandon(self, timeout: float) -> bool:
        """Marks the task abandoned unless its writes outlast `timeout` seconds."""
        with self._writes:
            if not self._writes.wait_for(lambda: not self._writing, max(0.0, timeout)):
                return False
            self.abandoned = True
            return True

    @property
    def receipt(self) -> str:
        return str(self.message["ReceiptHandle"])

    @property
    def receive_count(self) -> int:
        return int(self.message.get("Attributes", {}).get("ApproximateReceiveCount", 1))


class InFlight:
    """Thread-safe registry of the tasks this worker holds; also counts free slots."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._tasks: set[Task] = set()
        self._changed = threading.Condition()

    def add(self, task: Task) -> None:
        with self._changed:
            self._tasks.add(task)

    def discard(self, task: Task) -> None:
        with self._changed:
            self._tasks.discard(task)
            self._changed.notify_all()

    def snapshot(self) -> list[Task]:
        with self._changed:
            return list(self._tasks)

    def __len__(self) -> int:
        with self._changed:
            return len(self._tasks)

    def free(self) -> int:
        return self.capacity - len(self)

    def wait_free(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._tasks) < self.capacity, timeout)

    def wait_empty(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._tasks, max(0.0, timeout))


def change_visibility(sqs: Any, queue_url: str, tasks: list[Task], seconds: int) -> int:
    """Sets visibility for tasks in batches of 10; returns how many SQS accepted."""
    accepted = 0
    for start in range(0, len(tasks), MAX_BATCH_ENTRIES):
        chunk = tasks[start : start + MAX_BATCH_ENTRIES]
        entries = [
            {"Id": str(i), "ReceiptHandle": t.receipt, "VisibilityTimeout": seconds}
            for i, t in enumerate(chunk)
        ]
        try:
            result = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
        except Exception as error:  # the next tick retries; a crash loses nothing
            log.warning("visibility change failed: %r", error)
            continue
        accepted += len(result.get("Successful", []))
        for failure in result.get("Failed", []):
            log.warning("visibility change refused: %s", failure.get("Message", failure))
    return accepted


class Visibility:
    """Extensions and releases of held messages, ordered without a lock across the calls.

    A release settles its tasks first (no tick picks them after that) and is sent at once. A
    tick's extension may already be on its way for one of them and land after the release:
    such a release is sent again when that call returns, so the last word is the release's.
    A slow ChangeMessageVisibility therefore delays no other release.
    """

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs, self.queue_url = sqs, queue_url
        self._lock = threading.Lock()

    def extend(self, tasks: list[Task], seconds: int) -> int:
        with self._lock:
            picked = [t for t in tasks if not (t.abandoned or t.settled)]
            for task in picked:
                task.extending += 1
        accepted = change_visibility(self.sqs, self.queue_url, picked, seconds) if picked else 0
        again: dict[int, list[Task]] = {}
        with self._lock:
            for task in picked:
                task.extending -= 1
                if task.extending == 0 and task.resend is not None:
                    again.setdefault(task.resend, []).append(task)
                    task.resend = None
        for delay, settled in again.items():
            change_visibility(self.sqs, self.queue_url, settled, delay)
        return accepted

    def release(self, tasks: list[Task], seconds: int, *, unsettled_only: bool = False) -> int:
        """Settles `tasks` and sets their visibility to `seconds`; returns how many SQS took.

        An abandoned task is settled but not sent (the drain releases it); with
        `unsettled_only`, a task already settled (deleted or released) is left alone."""
        with self._lock:
            chosen = [t for t in tasks if not (unsettled_only and t.settled)]
            for task in chosen:
                task.settled = True
            sent = [t for t in chosen if unsettled_only or not t.abandoned]
            for task in sent:
                task.resend = seconds if task.extending else None
        return change_visibility(self.sqs, self.queue_url, sent, seconds) if sent else 0


class Heartbeat(threading.Thread):
    def __init__(
        self,
        visibility: Visibility,
        inflight: InFlight,
        interval: float,
        extension: int,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        if extension <= interval:
            raise ValueError(f"visibility extension {extension}s must exceed interval {interval}s")
        super().__init__(name="heartbeat", daemon=True)
        self.visibility, self.inflight = visibility, inflight
        self.interval, self.extension, self.on_tick = interval, extension, on_tick
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            tasks = self.inflight.snapshot()
            if tasks and not self._stop_event.is_set():
                self.visibility.extend(tasks, self.extension)
            if self.on_tick is not None:
                try:
                    self.on_tick()
                except Exception:
                    log.exception("heartbeat tick failed")

    def stop(self) -> None:
        self._stop_event.set()
