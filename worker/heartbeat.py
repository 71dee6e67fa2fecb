"""The set of in-flight messages and the heartbeat that keeps them invisible (DESIGN §5.4).

Every `interval` seconds the heartbeat sets each in-flight message's visibility to
`extension` seconds from now (ChangeMessageVisibilityBatch, 10 per call). Because
extension > interval (checked at start), a message stays invisible for as long as its job
runs, however long, and reappears within `extension` seconds of a crash.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
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
    lock: threading.Lock = field(default_factory=threading.Lock)

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


class Heartbeat(threading.Thread):
    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        inflight: InFlight,
        interval: float,
        extension: int,
        on_tick: Callable[[], None] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        if extension <= interval:
            raise ValueError(f"visibility extension {extension}s must exceed interval {interval}s")
        super().__init__(name="heartbeat", daemon=True)
        self.sqs, self.queue_url, self.inflight = sqs, queue_url, inflight
        self.interval, self.extension, self.on_tick = interval, extension, on_tick
        # Shared with whoever releases tasks (settled=True + visibility change under it), so
        # a tick that picked a task cannot extend it after the release set it visible.
        self.lock = lock or threading.Lock()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            with self.lock:
                tasks = [t for t in self.inflight.snapshot() if not (t.abandoned or t.settled)]
                if tasks and not self._stop_event.is_set():
                    change_visibility(self.sqs, self.queue_url, tasks, self.extension)
            if self.on_tick is not None:
                try:
                    self.on_tick()
                except Exception:
                    log.exception("heartbeat tick failed")

    def stop(self) -> None:
        self._stop_event.set()
