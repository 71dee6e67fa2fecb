"""Counting a job once (`JobsCompleted`, DESIGN §5.7): who counts, and when the line goes out.

Who counts a job is decided by its message, not by its worker's memory: a manifest records
the SQS MessageId of the message that made it, and the job is counted once, by whichever
attempt of that message deletes it. The writer counts as its delete goes out; a redelivery of
the same message that finds its manifest (the writer died, or its PUT's answer was lost,
before the delete went out) counts then. A message with another MessageId (a late duplicate,
a resubmit) finds a manifest not its own and only deletes. `counts_here` is that rule.

When: the line and the delete are two effects, and a SIGKILL can fall between them. A
redelivery exists only if no delete landed, so the line must not go out before the delete can
land (a kill in that gap counts the job twice) nor after it (a kill in the request's round
trip, which the server completes without the client, would leave it uncounted). So the line
is written from botocore's `before-send` event of the DeleteMessage request: after the request
is serialized and signed, just before its bytes are written, so the gap left is one socket
write (`worker/deletion.py` runs the hook). A delete that fails is retried while the heartbeat
keeps the message invisible, quickly (50 ms, doubling to 1 s, jittered) rather than at
botocore's backoff: a counted message must not come back, and until a delete lands a SIGKILL
counts the job twice.
"""

from __future__ import annotations

from worker.events import Event, Events
from worker.held import HeldMessage
from worker.jobs import Manifest
from worker.metrics import Metrics
from worker.outputs import Stored


def counts_here(held: HeldMessage, stored: Stored) -> bool:
    """Whether this attempt counts the job of the manifest it found: the manifest is this
    attempt's own write whose answer was lost, or an earlier attempt's of this same message
    (a later receive: that attempt ended before its delete went out). Not one a concurrent
    receive of the same message wrote (same receive count): its writer counts it. Not one
    another message made: a duplicate's, a resubmit's."""
    found = stored.manifest
    if found is None or found.message_id != held.message_id:
        return False
    return stored.body == held.unanswered_manifest or held.receive_count > found.attempts


class Counter:
    """The job's `done` event and its JobsCompleted line, run as the delete goes out."""

    def __init__(self, metrics: Metrics, events: Events, worker_id: str) -> None:
        self.metrics, self.events, self.worker_id = metrics, events, worker_id

    def count(self, found: Manifest) -> None:
        self.events.emit(
            Event.DONE,
            job_id=found.id,
            audio_seconds=found.duration_s or 0,
            synth_seconds=found.synth_s,
        )
        try:
            self.metrics.completed(
                found.synth_s,
                found.duration_s,
                found.queue_wait_s,
                job_id=found.id,
                message_id=found.message_id,  # with job_id, what a reader dedupes on
                worker=self.worker_id,
            )
        except Exception:  # run as the delete goes out: a metric line must not stop it
            self.events.emit(Event.COUNT_FAILED, exc_info=True, job_id=found.id)
