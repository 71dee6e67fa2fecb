"""The producer and operator side against SQS and S3 (boto3): submit, status, outcomes,
results and the dead-letter queue. The command line (fleet/commands/jobs.py) only renders.

boto3 reads AWS_ENDPOINT_URL by itself (botocore ≥ 1.31), so every function here works
unchanged against the local emulator. Clients are shared across threads; resources are not.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from worker.jobs import Job, failure_key

# SQS limits (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/
# quotas-messages.html): 10 entries per batch call and a batch payload limit. The limit
# rose from 256 KiB to 1 MiB in 2025, but a queue created earlier keeps MaximumMessageSize
# 262,144 unless changed, so batches stay within the old limit and work on both.
SEND_BATCH_MAX_ENTRIES = 10
SEND_BATCH_MAX_BYTES = 262_144
RECEIVE_MAX_MESSAGES = 10  # ReceiveMessage MaxNumberOfMessages
DELETE_BATCH_MAX_ENTRIES = 10
DELETE_OBJECTS_MAX_KEYS = 1_000  # S3 DeleteObjects takes at most 1,000 keys per request
# Partial batch failures are retried with exponential backoff and full jitter.
SEND_ATTEMPTS = 6
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0
ERROR_ATTRIBUTE = "error"  # message attribute the worker sets when it dead-letters a job


@dataclass(frozen=True)
class Target:
    """Where a stack's jobs go and its outputs land."""

    queue_url: str | None
    dlq_url: str | None
    bucket: str | None
    prefix: str = ""
    cluster: str | None = None
    service: str | None = None


@cache
def aws_client(service: str, endpoint: str | None = None) -> Any:
    """One client per service per process; generous pool for the sender threads."""
    del endpoint  # part of the cache key only: boto3 reads AWS_ENDPOINT_URL itself
    # botocore reads AWS_DEFAULT_REGION but not AWS_REGION, which other SDKs prefer.
    region = os.environ.get("AWS_REGION") or None
    return boto3.client(service, region_name=region, config=Config(max_pool_connections=32))


def client_for(service: str) -> Any:
    return aws_client(service, os.environ.get("AWS_ENDPOINT_URL"))


# ---------------------------------------------------------------------------- submit


@dataclass
class SubmitReport:
    sent: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # job id -> reason
    calls: int = 0  # SendMessageBatch calls


def batches(jobs: Sequence[Job]) -> Iterator[list[tuple[str, str]]]:
    """(id, body) batches within the entry and byte limits; an oversized body goes alone."""
    batch: list[tuple[str, str]] = []
    size = 0
    for job in jobs:
        body = job.body()
        length = len(body.encode("utf-8"))
        if batch and (len(batch) == SEND_BATCH_MAX_ENTRIES or size + length > SEND_BATCH_MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((job.job_id, body))
        size += length
    if batch:
        yield batch


def submit_jobs(
    sqs_client: Any,
    queue_url: str,
    jobs: Sequence[Job],
    *,
    threads: int = 8,
    progress: Callable[[int], None] | None = None,
) -> SubmitReport:
    """Sends every job once with SendMessageBatch from `threads` threads.

    Only the entries SQS reports as failed are resent, so a retry never duplicates a message.
    A call that fails as a whole (after botocore's own retries) marks its entries failed:
    they may or may not have arrived, and a re-run of the same submit is harmless because ids
    are deterministic and the worker skips done ids.
    """
    report = SubmitReport()
    lock = threading.Lock()

    def send(batch: list[tuple[str, str]]) -> None:
        sent, failed, calls = _send_batch(sqs_client, queue_url, batch)
        with lock:
            report.sent.extend(sent)
            report.failed.update(failed)
            report.calls += calls
        if progress is not None:
            progress(len(batch))

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for future in [pool.submit(send, batch) for batch in batches(jobs)]:
            future.result()
    return report


def _send_batch(
    sqs: Any, queue_url: str, batch: list[tuple[str, str]]
) -> tuple[list[str], dict[str, str], int]:
    pending = {str(index): item for index, item in enumerate(batch)}  # entry Id -> (id, body)
    sent: list[str] = []
    failed: dict[str, str] = {}
    calls = 0
    for attempt in range(SEND_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)))
        entries = [{"Id": key, "MessageBody": body} for key, (_, body) in pending.items()]
        calls += 1
        try:
            answer = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except (ClientError, BotoCoreError) as error:
            failed.update({job_id: f"SendMessageBatch: {error}" for job_id, _ in pending.values()})
            break
        sent.extend(pending.pop(item["Id"])[0] for item in answer.get("Successful", []))
        for item in answer.get("Failed", []):
            reason = f"{item.get('Code')}: {item.get('Message', '')}".strip()
            if item.get("SenderFault"):  # the request itself is wrong: retrying cannot help
                failed[pending.pop(item["Id"])[0]] = reason
            else:
                failed[pending[item["Id"]][0]] = reason
        if not pending:
            break
    for job_id in sent:
        failed.pop(job_id, None)
    return sent, failed, calls


def preflight_queue(sqs: Any, queue_url: str) -> None:
    """Raises ClientError now rather than once per batch when the queue is wrong. A producer
    role may send without reading attributes (the stack's producer policy grants only
    SendMessage and GetQueueUrl): access denied here is no reason not to try."""
    try:
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    except ClientError as error:
        if "AccessDenied" not in error.response.get("Error", {}).get("Code", ""):
            raise


# ---------------------------------------------------------------------------- status


def queue_counts(sqs: Any, queue_url: str) -> dict[str, int]:
    names = {
        "visible": "ApproximateNumberOfMessages",
        "in_flight": "ApproximateNumberOfMessagesNotVisible",
        "delayed": "ApproximateNumberOfMessagesDelayed",
    }
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(names.values()))
    values = attributes.get("Attributes", {})
    return {key: int(values.get(name, 0)) for key, name in names.items()}


def find_dlq_url(sqs: Any, queue_url: str) -> str | None:
    """The DLQ named by the queue's RedrivePolicy, when it has one."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    policy = attributes.get("Attributes", {}).get("RedrivePolicy")
    if not policy:
        return None
    arn = json.loads(policy)["deadLetterTargetArn"]
    _, _, _, _, account, name = arn.split(":", 5)
    return sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]


def oldest_age_s(cloudwatch: Any, queue_url: str) -> float | None:
    """ApproximateAgeOfOldestMessage over the last 5 minutes, or None when CloudWatch has none
    (no data yet, or an emulator that does not publish SQS metrics)."""
    now = datetime.now(UTC)
    try:
        answer = cloudwatch.get_metric_statistics(
            Namespace="AWS/SQS",
            MetricName="ApproximateAgeOfOldestMessage",
            Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
            StartTime=now - timedelta(minutes=5),
            EndTime=now,
            Period=60,
            Statistics=["Maximum"],
        )
    except (ClientError, BotoCoreError):
        return None
    points = sorted(answer.get("Datapoints", []), key=lambda point: point["Timestamp"])
    return float(points[-1]["Maximum"]) if points else None


def service_counts(ecs: Any, cluster: str, service: str) -> dict[str, int] | None:
    """The ECS service's desired and running task counts, or None when ECS cannot say."""
    try:
        services = ecs.describe_services(cluster=cluster, services=[service]).get("services", [])
    except (ClientError, BotoCoreError):
        return None
    if not services:
        return None
    return {"desired": services[0]["desiredCount"], "running": services[0]["runningCount"]}


# ---------------------------------------------------------------------------- outcomes


def list_keys(s3: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def _ids_with_json(s3: Any, bucket: str, prefix: str) -> set[str]:
    return {
        item["Key"][len(prefix) : -len(".json")]
        for item in list_keys(s3, bucket, prefix)
        if item["Key"].endswith(".json")
    }


def outcomes(
    s3: Any, target: Target, ids: Sequence[str], known_failures: dict[str, str] | None = None
) -> tuple[set[str], dict[str, str]]:
    """(done ids, failed id -> error) among `ids`. A manifest wins over a failure record, since
    a redriven job that then succeeds leaves its old failure record behind."""
    wanted = set(ids)
    done = wanted & _ids_with_json(s3, target.bucket, f"{target.prefix}outputs/")
    failed_ids = (wanted - done) & _ids_with_json(s3, target.bucket, f"{target.prefix}failures/")
    cache = known_failures if known_failures is not None else {}
    for job_id in failed_ids - cache.keys():
        cache[job_id] = _failure_reason(s3, target, job_id)
    return done, {job_id: cache[job_id] for job_id in failed_ids}


def _failure_reason(s3: Any, target: Target, job_id: str) -> str:
    try:
        body = s3.get_object(Bucket=target.bucket, Key=failure_key(job_id, target.prefix))
        record = json.loads(body["Body"].read())
    except (ClientError, BotoCoreError, ValueError) as error:
        return f"failure record unreadable: {error}"
    detail = record.get("detail")
    return f"{record.get('error', 'failed')}: {detail}" if detail else str(record.get("error"))


# ---------------------------------------------------------------------------- results

ETAG_SIDECAR = ".tts-fleet-etags.json"


@dataclass
class ResultsReport:
    downloaded: list[str] = field(default_factory=list)  # local file names
    skipped: list[str] = field(default_factory=list)  # already present with the same ETag
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    missing: list[str] = field(default_factory=list)  # requested ids with no manifest yet
    bytes: int = 0


def result_objects(
    s3: Any, target: Target, ids: Sequence[str] | None, id_prefix: str = ""
) -> tuple[list[dict[str, Any]], list[str]]:
    """The audio and manifest objects of done jobs (manifest present), and missing ids."""
    base = f"{target.prefix}outputs/"
    by_id: dict[str, list[dict[str, Any]]] = {}
    for item in list_keys(s3, target.bucket, base + id_prefix):
        job_id = item["Key"][len(base) :].rsplit(".", 1)[0]
        by_id.setdefault(job_id, []).append(item)
    done = {job_id for job_id, items in by_id.items() if any(_is_json(i) for i in items)}
    wanted = set(ids) if ids is not None else done
    objects = [item for job_id in sorted(wanted & done) for item in by_id[job_id]]
    return objects, sorted(wanted - done)


def _is_json(item: dict[str, Any]) -> bool:
    return item["Key"].endswith(".json")


def download_results(
    s3: Any,
    target: Target,
    objects: Sequence[dict[str, Any]],
    directory: Path,
    *,
    threads: int = 8,
    progress: Callable[[int], None] | None = None,
) -> ResultsReport:
    """Downloads in parallel; skips a file whose ETag matches the sidecar or, for a
    single-part upload (ETag = MD5), the file's own MD5. Writes are atomic (temp + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    etags = _read_sidecar(directory)
    report = ResultsReport()
    lock = threading.Lock()

    def fetch(item: dict[str, Any]) -> None:
        name = item["Key"].rsplit("/", 1)[-1]
        try:
            outcome = _fetch_one(s3, target.bucket, item, directory / name, etags.get(name))
        except (ClientError, BotoCoreError, OSError) as error:
            with lock:
                report.failed[item["Key"]] = str(error)
        else:
            with lock:
                getattr(report, outcome).append(name)
                report.bytes += item.get("Size", 0) if outcome == "downloaded" else 0
                etags[name] = item["ETag"].strip('"')
        if progress is not None:
            progress(1)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        list(pool.map(fetch, objects))
    _write_sidecar(directory, etags)
    return report


def _fetch_one(
    s3: Any, bucket: str, item: dict[str, Any], local: Path, recorded: str | None
) -> str:
    """ "skipped" when the local copy has the object's ETag, else downloads: "downloaded"."""
    if local.exists() and _same_etag(local, item["ETag"].strip('"'), recorded):
        return "skipped"
    temp = local.with_name(f".{local.name}.part")
    s3.download_file(bucket, item["Key"], str(temp))
    temp.replace(local)
    return "downloaded"


def _same_etag(local: Path, etag: str, recorded: str | None) -> bool:
    if recorded is not None:
        return recorded == etag
    if "-" in etag:  # multipart ETag is not an MD5 of the content; no sidecar, so fetch again
        return False
    return hashlib.md5(local.read_bytes(), usedforsecurity=False).hexdigest() == etag


def _read_sidecar(directory: Path) -> dict[str, str]:
    try:
        data = json.loads((directory / ETAG_SIDECAR).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_sidecar(directory: Path, etags: dict[str, str]) -> None:
    temp = directory / f".{ETAG_SIDECAR}.part"
    temp.write_text(json.dumps(etags, sort_keys=True, indent=0))
    temp.replace(directory / ETAG_SIDECAR)


# ---------------------------------------------------------------------------- dead letters

# A listed or redriven message stays invisible this long while we hold it; listing puts it
# back at once, and a killed redrive lets SQS put it back after this.
DLQ_HOLD_S = 60
MOVE_TASK_POLL_S = 2.0
MOVE_TASK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    job_id: str | None
    error: str | None
    receive_count: int
    sent_at: str | None
    body: str


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
    return sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=RECEIVE_MAX_MESSAGES,
        VisibilityTimeout=hold_s,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        AttributeNames=["All"],
    ).get("Messages", [])


def _sent_ms(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("SentTimestamp", 0))


def _error_of(message: dict[str, Any]) -> str | None:
    return message.get("MessageAttributes", {}).get(ERROR_ATTRIBUTE, {}).get("StringValue")


def _dead_letter(message: dict[str, Any]) -> DeadLetter:
    attributes = message.get("Attributes", {})
    sent = attributes.get("SentTimestamp")
    try:
        job_id = json.loads(message["Body"]).get("id")
    except (ValueError, AttributeError):
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
    return attributes["Attributes"]["QueueArn"]


def redrive(
    sqs: Any,
    dlq_url: str,
    queue_url: str,
    *,
    error_filter: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_moved: Callable[[list[str]], None] | None = None,
) -> RedriveReport:
    """Moves DLQ messages back to the jobs queue. Without a filter SQS moves them itself
    (StartMessageMoveTask); where that is unavailable (the emulator) or a filter is given,
    each batch is received, sent, and deleted only after its send succeeded. `on_moved`
    gets the job ids of each batch sent (receive-send-delete only)."""
    reason = "--filter given" if error_filter is not None else None
    if error_filter is None:
        try:
            return _move_task(sqs, dlq_url, queue_url)
        except ClientError as error:
            reason = f"StartMessageMoveTask unavailable: {error}"
    mover = _Mover(sqs, dlq_url, queue_url, error_filter, on_moved)
    mover.run(queue_counts(sqs, dlq_url)["visible"], progress)
    mover.report.fallback_reason = reason
    return mover.report


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
            self.on_moved([d.job_id for d in map(_dead_letter, sent) if d.job_id])


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
        s3.delete_objects(Bucket=target.bucket, Delete={"Objects": chunk, "Quiet": True})
