"""The messages this worker holds: one `HeldMessage` per received message, the `InFlight`
registry of them, and `KeyLocks`, one holder per job id (DESIGN §5.2, §5.4).

No lock is held across an SQS or S3 call: `HeldMessage.writing()` lets the drain wait for a
job's S3 writes on a condition, not on a lock the writer holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class HeldMessage:
    """One received message while this worker owns it."""

    message: dict[str, Any]
    # Wall-clock time: the job's queue wait is measured against the message's SentTimestamp.
    received_at: float = field(default_factory=time.time)
    job_id: str | None = None
    abandoned: bool = False  # set by the drain; the job thread then writes nothing more
    settled: bool = False  # deleted or released: the heartbeat must not extend it any more
    # The manifest body of a PUT that raised: it may have landed after all, as this attempt's.
    unanswered_manifest: bytes | None = None
    # Guarded by Visibility's lock: heartbeat calls in flight that include this message, and
    # the visibility of a release made meanwhile, to be sent again when the last returns.
    extending: int = 0
    resend: int | None = None
    _writes: threading.Condition = field(default_factory=threading.Condition)
    _writing: bool = False

    @contextmanager
    def writing(self) -> Iterator[bool]:
        """Yields False once the drain abandoned the message; while True, it cannot."""
        with self._writes:
            allowed = self._writing = not self.abandoned
        try:
            yield allowed
        finally:
            with self._writes:
                self._writing = False
                self._writes.notify_all()

    def abandon(self, timeout: float) -> bool:
        """Marks the message abandoned unless its writes outlast `timeout` seconds."""
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

    @property
    def message_id(self) -> str:
        return str(self.message["MessageId"])

    @property
    def sender_id(self) -> str | None:
        """SQS SenderId: the IAM identity that sent the message (set by SQS, not the sender)."""
        sender = self.message.get("Attributes", {}).get("SenderId")
        return str(sender) if sender else None

    @property
    def sent_ms(self) -> int | None:
        """SQS SentTimestamp, in milliseconds since the epoch, when the message carries it."""
        sent = self.message.get("Attributes", {}).get("SentTimestamp")
        return int(sent) if sent else None


class InFlight:
    """Thread-safe registry of the messages this worker holds; also counts free places."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: set[HeldMessage] = set()
        self._changed = threading.Condition()
        # Set while nothing is held: what the drain waits on, through its clock.
        self.emptied = threading.Event()
        self.emptied.set()

    def add(self, held: HeldMessage) -> None:
        with self._changed:
            self._held.add(held)
            self.emptied.clear()

    def discard(self, held: HeldMessage) -> None:
        with self._changed:
            self._held.discard(held)
            if not self._held:
                self.emptied.set()
            self._changed.notify_all()

    def snapshot(self) -> list[HeldMessage]:
        with self._changed:
            return list(self._held)

    def __len__(self) -> int:
        with self._changed:
            return len(self._held)

    def free(self) -> int:
        return self.capacity - len(self)

    def wait_free(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._held) < self.capacity, timeout)


class KeyLocks:
    """One holder per job id in this process, so a duplicate waits and then finds the manifest.

    A condition, not a lock per id: nothing is locked while the holder synthesizes or writes."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: key not in self._held)
            self._held.add(key)
        try:
            yield
        finally:
            with self._changed:
                self._held.discard(key)
                self._changed.notify_all()
