"""The dead-letter queue: list without consuming, redrive (StartMessageMoveTask or a
receive -> send -> delete fallback that never deletes before the send), failure-record cleanup.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from tts_fleet.client.aws import Target
from tts_fleet.client.results import bucket_of, read_failure
from tts_fleet.client.status import queue_counts
from worker.jobs import DLQ_ERROR_ATTRIBUTE, failure_key, is_job_id

RECEIVE_MAX_MESSAGES = 10  # ReceiveMessage MaxNumberOfMessages
DELETE_BATCH_MAX_ENTRIES = 10
DELETE_OBJECTS_MAX_KEYS = 1_000  # S3 DeleteObjects takes at most 1,000 keys per request
ERROR_ATTRIBUTE = DLQ_ERROR_ATTRIBUTE  # the worker sets it when it dead-letters a job


# A listed or redriven message stays invisible this long while we hold it; listing puts it
# back at once, and a killed redrive lets SQS put it back after this.
DLQ_HOLD_S = 60
MOVE_TASK_POLL_S = 2.0
MOVE_TASK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    job_id: str | None  # the body's "id", as the body says: no job id at all, maybe
    error: str | None  # the `error` message attribute, which a producer can set itself
    receive_count: int
    sent_at: str | None
    body: str
    failure: str | None = None  # the reason in the worker's failure record (`failure_reasons`)


def failure_reasons(s3: Any, target: Target, letters: Sequence[DeadLetter]) -> list[DeadLetter]:
    """The letters with the reason the worker wrote in failures/<id>.json, where a letter's id
    is a job id and its record is readable and names it: the reason to show, since the
    `error` attribute is the producer's to set on its own message."""
    reasons: dict[str, str | None] = {}
    for job_id in {letter.job_id for letter in letters if is_job_id(letter.job_id)}:
        record, reason = read_failure(s3, target, job_id)
        reasons[job_id] = reason if record is not None and record.id == job_id else None
    return [replace(letter, failure=reasons.get(letter.job_id or "")) for letter in letters]


@dataclass
class RedriveReport:
    method: str  # "start_message_move_task" or "receive-send-delete"
    moved: int = 0
    skipped: int = 0  # did not match --filter; left in the DLQ
    arrived_later: int = 0  # dead-lettered after the redrive began (e.g. a poison job again)
    failed: dict[str, str] = field(default_factory=dict)  # message id -> reason; left in DLQ
    duplicated: int = 0  # sent but not deleted from the DLQ: now in both (at-least-once)
    fallback_reason: str | None = None
    task_handle: str | None = None


def _receive(sqs: Any, queue_url: str, hold_s: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=RECEIVE_MAX_MESSAGES,
        VisibilityTimeout=hold_s,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],
    ).get("Messages", [])
    return messages


def _sent_ms(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("SentTimestamp", 0))


def _error_of(message: dict[str, Any]) -> str | None:
    error = message.get("MessageAttributes", {}).get(ERROR_ATTRIBUTE, {}).get("StringValue")
    return error if isinstance(error, str) else None


def _dead_letter(message: dict[str, Any]) -> DeadLetter:
    attributes = message.get("Attributes", {})
    sent = attributes.get("SentTimestamp")
    try:
        job_id = json.loads(message["Body"]).get("id")
    except (ValueError, AttributeError, RecursionError):  # a producer's body, any shape
        job_id = None
    return DeadLetter(
        message_id=message["MessageId"],
        job_id=job_id if isinstance(job_id, str) else None,
        error=_error_of(message),
        receive_count=int(attributes.get("ApproximateReceiveCount", 0)),
        sent_at=datetime.fromtimestamp(int(sent) / 1000, UTC).isoformat() if sent else None,
        body=message["Body"],
    )


def _release(sqs: Any, queue_url: str, messages: Sequence[dict[str, Any]]) -> None:
    """Visibility back to 0, so a listed message is immediately available again."""
    for start in range(0, len(messages), DELETE_BATCH_MAX_ENTRIES):
        chunk = messages[start : start + DELETE_BATCH_MAX_ENTRIES]
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(chunk)
        ]
        sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)


def peek_dead_letters(sqs: Any, dlq_url: str, limit: int = 100) -> list[DeadLetter]:
    """Reads up to `limit` DLQ messages without consuming them: each is received (which adds
    one to its receive count) and its visibility restored to 0 before returning."""
    held: dict[str, dict[str, Any]] = {}
    try:
        while len(held) < limit:
            fresh = [m for m in _receive(sqs, dlq_url, DLQ_HOLD_S) if m["MessageId"] not in held]
            if not fresh:
                break
            held.update((m["MessageId"], m) for m in fresh)
    finally:
        _release(sqs, dlq_url, list(held.values()))
    return [_dead_letter(message) for message in list(held.values())[:limit]]


def queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def redrive(
    sqs: Any,
    dlq_url: str,
    queue_url: str,
    *,
    error_filter: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_moved: Callable[[list[str]], None] | None = None,
    move_task: bool | None = None,
) -> RedriveReport:
    """Moves DLQ messages back to the jobs queue. Without a filter SQS moves them itself
    (StartMessageMoveTask); where that is unavailable (the emulator) or a filter is given,
    each batch is received, sent, and deleted only after its send succeeded. `on_moved`
    gets the job ids of each batch sent (receive-send-delete only). `move_task` None: use
    StartMessageMoveTask unless the client points at a local emulator, which lacks it (moto
    answers it with an HTML 500 and logs a traceback, so it is not even asked)."""
    reason = "--filter given" if error_filter is not None else None
    if move_task is None:
        move_task = not _local_endpoint(sqs)
    if error_filter is None and not move_task:
        reason = "the local emulator has no StartMessageMoveTask"
    elif error_filter is None:
        try:
            return _move_task(sqs, dlq_url, queue_url)
        except ClientError as error:
            reason = f"StartMessageMoveTask unavailable: {error}"
    mover = _Mover(sqs, dlq_url, queue_url, error_filter, on_moved)
    mover.run(queue_counts(sqs, dlq_url)["visible"], progress)
    mover.report.fallback_reason = reason
    return mover.report


def _local_endpoint(sqs: Any) -> bool:
    """True for an emulator on this machine (AWS_ENDPOINT_URL=http://127.0.0.1:…)."""
    host = urlsplit(str(getattr(sqs.meta, "endpoint_url", "") or "")).hostname or ""
    return host in {"127.0.0.1", "localhost", "::1"} or host.endswith(".localhost")


def _move_task(sqs: Any, dlq_url: str, queue_url: str) -> RedriveReport:
    source = queue_arn(sqs, dlq_url)
    handle = sqs.start_message_move_task(
        SourceArn=source, DestinationArn=queue_arn(sqs, queue_url)
    )["TaskHandle"]
    deadline = time.monotonic() + MOVE_TASK_TIMEOUT_S
    task: dict[str, Any] = {}
    while time.monotonic() < deadline:
        results = sqs.list_message_move_tasks(SourceArn=source, MaxResults=1)["Results"]
        task = results[0] if results else {}
        if task.get("Status") != "RUNNING":
            break
        time.sleep(MOVE_TASK_POLL_S)
    report = RedriveReport("start_message_move_task", task_handle=handle)
    report.moved = int(task.get("ApproximateNumberOfMessagesMoved", 0))
    if task.get("Status") == "FAILED":
        report.failed[handle] = task.get("FailureReason", "move task failed")
    return report


@dataclass
class _Mover:
    """receive → send → delete, batch by batch; a message is deleted from the DLQ only after
    SQS accepted its copy, so a crash at any point leaves it in the DLQ, in the queue, or (if
    killed between send and delete) in both: at-least-once, never lost."""

    sqs: Any
    dlq_url: str
    queue_url: str
    error_filter: str | None
    on_moved: Callable[[list[str]], None] | None
    report: RedriveReport = field(default_factory=lambda: RedriveReport("receive-send-delete"))
    held: dict[str, dict[str, Any]] = field(default_factory=dict)  # released at the end

    def run(self, budget: int, progress: Callable[[int], None] | None) -> None:
        """Handles at most `budget` messages (the DLQ's depth at the start), and never one
        dead-lettered after the start: a poison job redriven here comes straight back to the
        DLQ as a new message, and moving it again would loop for ever. (SentTimestamp is the
        server's clock and the start ours; the budget bounds the loop even under clock skew.)"""
        began_ms = int(time.time() * 1000)
        seen = 0
        try:
            while seen < budget:
                received = _receive(self.sqs, self.dlq_url, DLQ_HOLD_S)
                fresh = [m for m in received if m["MessageId"] not in self.held]
                if not fresh:
                    break
                later = [m for m in fresh if _sent_ms(m) >= began_ms]
                chosen = [m for m in fresh if m not in later and self._matches(m)]
                self.held.update((m["MessageId"], m) for m in fresh if m not in chosen)
                self.report.arrived_later += len(later)
                self.report.skipped += len(fresh) - len(chosen) - len(later)
                seen += len(fresh) - len(later)
                if chosen:
                    self._move(chosen)
                if progress is not None:
                    progress(len(fresh) - len(later))
        finally:
            _release(self.sqs, self.dlq_url, list(self.held.values()))

    def _matches(self, message: dict[str, Any]) -> bool:
        if self.error_filter is None:
            return True
        return self.error_filter.lower() in (_error_of(message) or "").lower()

    def _move(self, messages: list[dict[str, Any]]) -> None:
        entries = [
            {"Id": str(i), "MessageBody": m["Body"], "MessageAttributes": _carried_attributes(m)}
            for i, m in enumerate(messages)
        ]
        answer = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        for item in answer.get("Failed", []):
            message = messages[int(item["Id"])]
            reason = f"{item.get('Code')}: {item.get('Message', '')}"
            self.report.failed[message["MessageId"]] = reason
            self.held[message["MessageId"]] = message
        sent = [messages[int(item["Id"])] for item in answer.get("Successful", [])]
        if not sent:
            return
        handles = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(sent)]
        deleted = self.sqs.delete_message_batch(QueueUrl=self.dlq_url, Entries=handles)
        self.report.moved += len(sent)
        self.report.duplicated += len(deleted.get("Failed", []))
        if self.on_moved is not None:
            # Only job ids name a failure record: a body's "id" is whatever its sender wrote.
            self.on_moved([d.job_id for d in map(_dead_letter, sent) if is_job_id(d.job_id)])


def _carried_attributes(message: dict[str, Any]) -> dict[str, Any]:
    """The message's attributes without the old `error`, which a new failure will set anew."""
    carried = {}
    for name, value in message.get("MessageAttributes", {}).items():
        if name != ERROR_ATTRIBUTE:
            keep = ("DataType", "StringValue", "BinaryValue")
            carried[name] = {key: value[key] for key in keep if key in value}
    return carried


def clear_failure_records(s3: Any, target: Target, job_ids: Sequence[str]) -> None:
    """Deletes failures/<id>.json of redriven jobs: they are pending again, and `wait` must
    not report them failed from a record of the previous attempt."""
    keys = [{"Key": failure_key(job_id, target.prefix)} for job_id in job_ids]
    for start in range(0, len(keys), DELETE_OBJECTS_MAX_KEYS):
        chunk = keys[start : start + DELETE_OBJECTS_MAX_KEYS]
        s3.delete_objects(Bucket=bucket_of(target), Delete={"Objects": chunk, "Quiet": True})
