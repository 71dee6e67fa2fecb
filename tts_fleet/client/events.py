"""Completion events: `tts-fleet wait --events` reads the stack's events queue, not the bucket.

With `notifications.enabled` the stack delivers one EventBridge event per manifest or failure
record the worker writes (components/notifications.py) to an SQS queue, `eventsQueueUrl`.
The bucket stays the truth: a wait lists it once first (jobs that finished before the wait
began), then long-polls the queue, and lists it again only every `sweep_s` in case an event
was lost, so a missed event delays a wait but never makes it wrong.

One consumer per queue: every message received is deleted, its own job's, another job's or
an unreadable one alike. Leaving other jobs' events would have each waiter receive them
again and again until they expire; the waiter that needs them listed the bucket when it
started, so a later event is all it can miss, and its sweep finds that. Several waiters at
once therefore work, slower; each subscriber that needs every event adds its own rule and
queue (docs/cli.md#completion-events).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tts_fleet.client.aws import Target
from tts_fleet.client.results import (
    Digests,
    OutcomeCache,
    failure_of,
    outcomes,
    read_failure,
    read_manifest,
)
from worker.jobs import OUTPUTS_PREFIX, job_id_of

DONE: Final = "done"
FAILED: Final = "failed"
MAX_WAIT_S = 20  # SQS long polling's ceiling
MAX_MESSAGES = 10  # ReceiveMessage's ceiling
SWEEP_S = 300.0  # how long a lost event can delay a wait


@dataclass(frozen=True)
class Completion:
    job_id: str
    outcome: Literal["done", "failed"]


def parse_event(body: str, prefix: str = "") -> Completion | None:
    """(job id, done | failed) from an EventBridge S3 `Object Created` event's object key:
    `<prefix>outputs/<id>.json` is done, `<prefix>failures/<id>.json` failed. None for any
    other message (another key, another event type, not JSON)."""
    try:
        event = json.loads(body)
        key = event["detail"]["object"]["key"]
    except (ValueError, TypeError, KeyError):
        return None
    if event.get("detail-type") != "Object Created" or not isinstance(key, str):
        return None
    job_id = job_id_of(key, prefix)
    if job_id is None:
        return None
    return Completion(job_id, DONE if key.startswith(prefix + OUTPUTS_PREFIX) else FAILED)


def receive_completions(
    sqs: Any, queue_url: str, wait_s: int, prefix: str = ""
) -> list[Completion]:
    """One long poll of up to 10 events; deletes every message it received (one consumer)."""
    messages = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=MAX_MESSAGES, WaitTimeSeconds=wait_s
    ).get("Messages", [])
    if messages:
        # Deleted before they are acted on: a crash here loses events the next wait's first
        # listing covers. A failed delete only brings an event back, which is harmless.
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )
    found = (parse_event(message.get("Body", ""), prefix) for message in messages)
    return [completion for completion in found if completion is not None]


@dataclass
class Waiting:
    """What a wait knows: done ids and failed id -> reason, among the ids it waits on. An event
    is judged by `outcomes`' rules (tts_fleet/client/results.py), for its one job."""

    ids: frozenset[str]
    digests: Digests  # id -> the submitted request's digest (None: any manifest will do)
    done: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    cache: OutcomeCache = field(default_factory=OutcomeCache)  # what the listings read

    @property
    def settled(self) -> int:
        return len(self.done) + len(self.failed)

    def list_bucket(self, s3: Any, target: Target) -> None:
        """The bucket's word on every id: what is done or failed now."""
        self.done, self.failed = outcomes(
            s3, target, sorted(self.ids), self.cache, digests=self.digests
        )

    def apply(self, s3: Any, target: Target, completion: Completion) -> None:
        job_id = completion.job_id
        if job_id not in self.ids or job_id in self.done:
            return
        digest = self.digests.get(job_id)
        if completion.outcome == DONE:
            # Without a digest any manifest counts; with one, only the submitted request's.
            manifest = read_manifest(s3, target, job_id) if digest is not None else None
            if digest is None or (manifest is not None and manifest.made_from(digest)):
                # A manifest wins: a redriven job that then succeeds leaves its failure behind.
                self.done.add(job_id)
                self.failed.pop(job_id, None)
            return
        if job_id in self.failed:
            return  # failed already: its record was read once
        record, reason = read_failure(s3, target, job_id)
        # Another request's record (an earlier version of an edited job) is not this failure.
        if failure_of(record, job_id, digest):
            self.failed[job_id] = reason


def wait_for_completions(
    s3: Any,
    sqs: Any,
    target: Target,
    ids: Sequence[str],
    *,
    timeout: float,
    digests: Mapping[str, str | None] | None = None,
    on_settled: Callable[[int], None] = lambda _: None,
    sweep_s: float = SWEEP_S,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[set[str], dict[str, str]]:
    """(done ids, failed id -> reason) once every id is settled or `timeout` has passed."""
    assert target.events_queue_url, "the caller falls back to polling without a queue"
    started = clock()
    waiting = Waiting(frozenset(ids), dict(digests or {}))
    waiting.list_bucket(s3, target)  # the jobs that finished before the wait began
    swept = clock()
    on_settled(waiting.settled)
    while waiting.settled < len(waiting.ids):
        remaining = timeout - (clock() - started)
        if remaining <= 0:
            break
        # Neither the timeout nor the next sweep waits for a long poll to end.
        until_sweep = sweep_s - (clock() - swept)
        wait_s = max(0, min(MAX_WAIT_S, math.ceil(min(remaining, until_sweep))))
        for completion in receive_completions(sqs, target.events_queue_url, wait_s, target.prefix):
            waiting.apply(s3, target, completion)
        if clock() - swept >= sweep_s:
            waiting.list_bucket(s3, target)
            swept = clock()
        on_settled(waiting.settled)
    return waiting.done, waiting.failed
