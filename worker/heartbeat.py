"""The heartbeat that keeps held messages invisible, and their visibility changes (DESIGN §5.4).

Every `interval` seconds the heartbeat sets each in-flight message's visibility to
`extension` seconds from now (ChangeMessageVisibilityBatch, 10 per call). Because
extension > interval (checked at start), a message stays invisible for as long as its job
runs, however long, and reappears within `extension` seconds of a crash.

No lock is held across an SQS or S3 call: `Visibility` keeps a release from being undone by a
tick already in flight (it is sent again once the tick's call returns), and `HeldMessage.writing()`
(worker/held.py) lets the drain wait for a job's S3 writes on a condition, not on a lock.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from worker.held import HeldMessage, InFlight

log = logging.getLogger("worker.heartbeat")
# SQS batch actions take at most 10 entries (ChangeMessageVisibilityBatch, DeleteMessageBatch).
MAX_BATCH_ENTRIES = 10


def change_visibility(sqs: Any, queue_url: str, messages: list[HeldMessage], seconds: int) -> int:
    """Sets visibility for messages in batches of 10; returns how many SQS accepted."""
    accepted = 0
    for start in range(0, len(messages), MAX_BATCH_ENTRIES):
        chunk = messages[start : start + MAX_BATCH_ENTRIES]
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

    A release settles its messages first (no tick picks them after that) and is sent at once. A
    tick's extension may already be on its way for one of them and land after the release:
    such a release is sent again when that call returns, so the last word is the release's.
    A slow ChangeMessageVisibility therefore delays no other release.
    """

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs, self.queue_url = sqs, queue_url
        self._lock = threading.Lock()

    def extend(self, messages: list[HeldMessage], seconds: int) -> int:
        with self._lock:
            picked = [t for t in messages if not (t.abandoned or t.settled)]
            for held in picked:
                held.extending += 1
        accepted = change_visibility(self.sqs, self.queue_url, picked, seconds) if picked else 0
        again: dict[int, list[HeldMessage]] = {}
        with self._lock:
            for held in picked:
                held.extending -= 1
                if held.extending == 0 and held.resend is not None:
                    again.setdefault(held.resend, []).append(held)
                    held.resend = None
        for delay, settled in again.items():
            change_visibility(self.sqs, self.queue_url, settled, delay)
        return accepted

    def release(
        self, messages: list[HeldMessage], seconds: int, *, unsettled_only: bool = False
    ) -> int:
        """Settles `messages` and sets their visibility to `seconds`; returns how many SQS took.

        An abandoned message is settled but not sent (the drain releases it); with
        `unsettled_only`, a message already settled (deleted or released) is left alone."""
        with self._lock:
            chosen = [t for t in messages if not (unsettled_only and t.settled)]
            for held in chosen:
                held.settled = True
            sent = [t for t in chosen if unsettled_only or not t.abandoned]
            for held in sent:
                held.resend = seconds if held.extending else None
        return change_visibility(self.sqs, self.queue_url, sent, seconds) if sent else 0


class Heartbeat(threading.Thread):
    def __init__(
        self,
        visibility: Visibility,
        inflight: InFlight,
        interval: float,
        extension: int,
    ) -> None:
        if extension <= interval:
            raise ValueError(f"visibility extension {extension}s must exceed interval {interval}s")
        super().__init__(name="heartbeat", daemon=True)
        self.visibility, self.inflight = visibility, inflight
        self.interval, self.extension = interval, extension
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            messages = self.inflight.snapshot()
            if messages and not self._stop_event.is_set():
                self.visibility.extend(messages, self.extension)

    def stop(self) -> None:
        self._stop_event.set()
