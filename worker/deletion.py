"""Deleting a finished job's message, and running a callback at the instant the delete leaves.

The callback is how a job is counted exactly once (the rule and why it is this instant:
worker/counting.py): it runs from botocore's `before-send` event of the first DeleteMessage
request, after the request is serialized and signed, just before its bytes are written. A
delete that fails is retried quickly (50 ms, doubling to 1 s, jittered), not at botocore's
backoff of up to a second and more, while the heartbeat keeps the message invisible. Give
this class a client that botocore does not retry (worker/__main__.py does).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from worker.aws_errors import AWS_ERRORS, aws_error_is_transient
from worker.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("worker")
# https://botocore.amazonaws.com/v1/documentation/api/latest/topics/events.html: emitted per
# attempt, with the prepared request, right before the HTTP send.
BEFORE_SEND_DELETE = "before-send.sqs.DeleteMessage"
FIRST_RETRY_SECONDS = 0.05
LONGEST_RETRY_SECONDS = 1.0


class MessageDeleter:
    """DeleteMessage with retries, and a callback run as the first of its requests leaves."""

    def __init__(self, sqs: Any, queue_url: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.sqs, self.queue_url, self.clock = sqs, queue_url, clock
        self._armed = threading.local()  # the callback of the delete this thread is sending
        sqs.meta.events.register(BEFORE_SEND_DELETE, self._on_send)

    def delete(
        self,
        receipt: str,
        deadline: Callable[[], float],
        on_send: Callable[[], None] | None = None,
    ) -> bool:
        """Deletes the message; retries a failed delete until `deadline()` (monotonic
        seconds, asked again before each retry: a stop brings it forward). Runs `on_send`
        once, as the first DeleteMessage request is about to be written; if none was (every
        try failed before sending), not at all: the message comes back, and its redelivery
        counts. True when a delete was answered with success."""
        wait = FIRST_RETRY_SECONDS
        self._armed.on_send = on_send
        try:
            while True:
                try:
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=receipt)
                    return True
                except AWS_ERRORS as error:
                    # A definite answer (no such receipt or queue, access denied) stays so.
                    if (
                        not aws_error_is_transient(error)
                        or self.clock.monotonic() + wait > deadline()
                    ):
                        log.warning("delete failed, not retried: %r", error)
                        return False
                    pause = wait * random.uniform(0.5, 1.0)  # peers that failed together spread out
                    log.info("delete failed (%r): again in %.2fs", error, pause)
                    self.clock.sleep(pause)
                    wait = min(wait * 2, LONGEST_RETRY_SECONDS)
        finally:
            self._armed.on_send = None

    def _on_send(self, **_: Any) -> None:
        on_send: Callable[[], None] | None = getattr(self._armed, "on_send", None)
        self._armed.on_send = None
        if on_send is not None:
            on_send()
        # None: botocore goes on to send the request (a value here would be its response)
