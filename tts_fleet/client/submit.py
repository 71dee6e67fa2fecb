"""Submitting jobs: SendMessageBatch within SQS's limits, only failed entries retried; then
a nudge to the stack's scaling controller, so a job sent to an idle fleet is seen at once."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.client.aws import Target
from worker.jobs import MANIFEST_DIGEST_METADATA, Job, manifest_key

# SQS limits (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/
# quotas-messages.html): 10 entries per batch call and a batch payload limit. The limit
# rose from 256 KiB to 1 MiB in 2025, but a queue created earlier keeps MaximumMessageSize
# 262,144 unless changed, so batches stay within the old limit and work on both.
SEND_BATCH_MAX_ENTRIES = 10
SEND_BATCH_MAX_BYTES = 262_144
# Partial batch failures are retried with exponential backoff and full jitter.
SEND_ATTEMPTS = 6
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0


@dataclass
class Existing:
    """What the bucket already holds for the jobs about to be sent."""

    replaces: int = 0  # a manifest made from another request: the job will be made again
    done: int = 0  # a manifest made from this very request: the worker skips the job


def existing_outputs(
    s3: Any, target: Target, jobs: Sequence[Job], threads: int = 8
) -> Existing | None:
    """HEADs each job's manifest. None when the producer may not read the bucket (the stack's
    producer policy grants no s3:GetObject): submitting does not need it."""
    existing = Existing()
    lock = threading.Lock()

    def look(job: Job) -> None:
        made_from = _made_from(s3, target, job)
        if made_from is None:
            return
        with lock:
            if made_from:
                existing.done += 1
            else:
                existing.replaces += 1

    try:
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            list(pool.map(look, jobs))
    except (ClientError, BotoCoreError):
        return None
    return existing


def _made_from(s3: Any, target: Target, job: Job) -> bool | None:
    """None: no manifest; else whether it was made from this job's request (the digest the
    worker stores as the manifest's metadata; a manifest without it is another request's)."""
    try:
        head = s3.head_object(Bucket=target.bucket, Key=manifest_key(job.job_id, target.prefix))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return bool(head.get("Metadata", {}).get(MANIFEST_DIGEST_METADATA) == job.digest())


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


def invoke_controller(lambda_client: Any, function_arn: str) -> str | None:
    """Asks the scaling controller to look now (asynchronously: the submit does not wait for
    it); the minute schedule would see the jobs anyway, so a failure is a warning, returned
    as one line, never an error. None when the invoke was accepted."""
    try:
        lambda_client.invoke(
            FunctionName=function_arn,
            InvocationType="Event",
            Payload=b'{"source":"tts-fleet submit"}',
        )
    except (ClientError, BotoCoreError) as error:
        return (
            f"could not wake the scaling controller ({error}); "
            "it samples the queue within a minute anyway"
        )
    return None
