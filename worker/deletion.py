"""Deleting a finished job's message, and counting the job at the instant the delete leaves.

Who counts a job (`JobsCompleted`) is decided by its message, not by its worker's memory: a
manifest records the SQS MessageId of the message that made it, and the job is counted once,
by whichever attempt of that message deletes it. The writer counts as its delete goes out; a
redelivery of the same message that finds its manifest (the writer died, or its PUT's answer
was lost, before the delete went out) counts then. A message with another MessageId (a late
duplicate, a resubmit) finds a manifest not its own and only deletes.

The line and the delete are two effects, and a SIGKILL can fall between them. A redelivery
exists only if no delete landed, so the line must not go out before the delete can land
(a kill in that gap counts the job twice) nor after it (a kill in the request's round trip,
which the server completes without the client, would leave it uncounted). It is written from
botocore's `before-send` event: after the request is serialized and signed, just before its
bytes are written, so the gap left is one socket write. A delete that fails is retried while
the heartbeat keeps the message invisible: a counted message must not come back. The retries come
quickly (50 ms, doubling to 1 s, jittered), not at botocore's backoff of up to a second and
more: until one lands, a SIGKILL counts the job twice. Give this class a client that botocore
does not retry (worker/__main__.py does).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from worker.aws_errors import AWS_ERRORS, aws_error_is_transient

log = logging.getLogger("worker")
# https://botocore.amazonaws.com/v1/documentation/api/latest/topics/events.html: emitted per
# attempt, with the prepared request, right before the HTTP send.
BEFORE_SEND_DELETE = "before-send.sqs.DeleteMessage"
FIRST_RETRY_SECONDS = 0.05
LONGEST_RETRY_SECONDS = 1.0


class MessageDeleter:
    """DeleteMessage with retries, and a callback run as the first of its requests leaves."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs, self.queue_url = sqs, queue_url
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
                    if not aws_error_is_transient(error) or time.monotonic() + wait > deadline():
                        log.warning("delete failed, not retried: %r", error)
                        return False
                    pause = wait * random.uniform(0.5, 1.0)  # peers that failed together spread out
                    log.info("delete failed (%r): again in %.2fs", error, pause)
                    time.sleep(pause)
                    wait = min(wait * 2, LONGEST_RETRY_SECONDS)
        finally:
            self._armed.on_send = None

    def _on_send(self, **_: Any) -> None:
        on_send: Callable[[], None] | None = getattr(self._armed, "on_send", None)
        self._armed.on_send = None
        if on_send is not None:
            on_send()
        # None: botocore goes on to send the request (a value here would be its response)
