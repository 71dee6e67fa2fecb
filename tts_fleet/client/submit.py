"""Submitting jobs: SendMessageBatch within SQS's limits, only failed entries retried; then
a nudge to the stack's scaling controller, so a job sent to an idle fleet is seen at once.

The receipt (`SubmitReceipt`, what `submit --json` prints) is written and read here, so
`wait` and `results` given a receipt know exactly which requests were sent.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tts_fleet.client.aws import Target
from tts_fleet.client.book_record import record_key
from tts_fleet.client.inputs import STDIN, InvalidLine, LoadedBook, LoadedJobs, load_jobs
from tts_fleet.client.results import Digests, bucket_of
from tts_fleet.scaling.batches import BATCH_ATTRIBUTE
from worker.jobs import DEFAULT_MAX_TEXT_CHARS, MANIFEST_DIGEST_METADATA, Job, manifest_key

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
class SubmitReceipt:
    """What a submit did, as `submit --json` prints it (keys documented in docs/cli.md)."""

    queue_url: str
    total: int  # valid jobs
    invalid: list[InvalidLine] = field(default_factory=list)
    duplicates: int = 0  # identical requests given more than once, sent once
    sent: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # job id -> reason
    calls: int = 0  # SendMessageBatch calls
    ids: list[str] = field(default_factory=list)  # the ids sent, in input order
    digests: Digests = field(default_factory=dict)  # what `wait`/`results` check manifests by
    replaces: int | None = None  # existing outputs of another request (None: unknown)
    already_done: int | None = None  # existing outputs of this very request (None: unknown)
    elapsed_s: float = 0.0
    # The deadline batch the jobs were sent as (issue #23): {"batch_id", "deadline"}; None:
    # sent without a deadline.
    batch: dict[str, str] | None = None

    @classmethod
    def before_sending(cls, queue_url: str, loaded: LoadedJobs) -> SubmitReceipt:
        return cls(
            queue_url=queue_url,
            total=len(loaded.valid),
            invalid=list(loaded.invalid),
            duplicates=loaded.duplicates,
            digests=loaded.digests,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue_url": self.queue_url,
            "total": self.total,
            "invalid": [vars(line) for line in self.invalid],
            "duplicates": self.duplicates,
            "sent": self.sent,
            "failed": self.failed,
            "calls": self.calls,
            "ids": self.ids,
            "digests": self.digests,
            "replaces": self.replaces,
            "already_done": self.already_done,
            "elapsed_s": self.elapsed_s,
            "batch": self.batch,
        }

    @classmethod
    def from_json(cls, data: object) -> SubmitReceipt:
        """A receipt from its JSON; ValueError when `data` is none. A receipt written before
        a key existed reads with that key's default (no `digests`: any manifest counts)."""
        if not isinstance(data, dict):
            raise ValueError("a submit receipt is a JSON object")
        ids = data.get("ids")
        if not (isinstance(ids, list) and all(isinstance(item, str) for item in ids)):
            raise ValueError("a submit receipt has a list of ids")
        digests = data.get("digests")
        known = digests if isinstance(digests, dict) else {}
        try:
            invalid = [InvalidLine(**item) for item in data.get("invalid") or []]
            return cls(
                queue_url=str(data.get("queue_url", "")),
                total=int(data.get("total", len(ids))),
                invalid=invalid,
                duplicates=int(data.get("duplicates", 0)),
                sent=int(data.get("sent", len(ids))),
                failed=dict(data.get("failed") or {}),
                calls=int(data.get("calls", 0)),
                ids=ids,
                digests={job_id: _text_or_none(digest) for job_id, digest in known.items()},
                replaces=data.get("replaces"),
                already_done=data.get("already_done"),
                elapsed_s=float(data.get("elapsed_s", 0.0)),
                batch=_batch_or_none(data.get("batch")),
            )
        except TypeError as error:
            raise ValueError(f"not a submit receipt: {error}") from None

    def submitted(self) -> Digests:
        """id -> request digest of every id sent, in order (None where not recorded)."""
        return {job_id: self.digests.get(job_id) for job_id in self.ids}


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _batch_or_none(value: object) -> dict[str, str] | None:
    """A receipt's batch: an object of texts, or None (a receipt from before batches)."""
    if not isinstance(value, dict):
        return None
    return {str(key): str(item) for key, item in value.items() if isinstance(item, str)}


def batch_attribute(batch_id: str) -> dict[str, dict[str, str]]:
    """The message attribute naming a job's batch; the body stays the worker's job."""
    return {BATCH_ATTRIBUTE: {"DataType": "String", "StringValue": batch_id}}


def attribute_bytes(attributes: dict[str, dict[str, str]]) -> int:
    """What message attributes add to a message's size as SQS counts it: each name, type and
    value (SQS Developer Guide, "Message metadata": attributes count toward the size limit)."""
    return sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
        for name, value in attributes.items()
    )


def read_receipt(path: Path) -> SubmitReceipt | None:
    """The receipt a file holds; None when it holds jobs (JSONL) or anything else."""
    try:
        return SubmitReceipt.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, OSError, RecursionError):  # e.g. JSONL whose first line nests deeply
        return None


def load_submitted(
    source: str | Path | None,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    split_chars: int | None = None,
) -> Digests:
    """id -> request digest of what was submitted, in order: from a receipt, or from the same
    input the submit read (its valid jobs, at the same text limit and --split-chars)."""
    if source is not None and str(source) != STDIN and Path(source).is_file():
        receipt = read_receipt(Path(source))
        if receipt is not None:
            return receipt.submitted()
    # Any voice: what was sent passed submit's check against the library of its day.
    return load_jobs(source, max_text_chars, split_chars=split_chars, voices=None).digests


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
        head = s3.head_object(Bucket=bucket_of(target), Key=manifest_key(job.job_id, target.prefix))
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


def batches(jobs: Sequence[Job], extra_bytes: int = 0) -> Iterator[list[tuple[str, str]]]:
    """(id, body) batches within the entry and byte limits; an oversized body goes alone.
    `extra_bytes`: what each message's attributes add to its size."""
    batch: list[tuple[str, str]] = []
    size = 0
    for job in jobs:
        body = job.body()
        length = len(body.encode("utf-8")) + extra_bytes
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
    batch_id: str | None = None,
) -> SubmitReport:
    """Sends every job once with SendMessageBatch from `threads` threads.

    Only the entries SQS reports as failed are resent, so a retry never duplicates a message.
    A call that fails as a whole (after botocore's own retries) marks its entries failed:
    they may or may not have arrived, and a re-run of the same submit is harmless because ids
    are deterministic and the worker skips done ids. With `batch_id` each message carries
    it as the BATCH_ATTRIBUTE message attribute.
    """
    report = SubmitReport()
    lock = threading.Lock()
    attributes = batch_attribute(batch_id) if batch_id is not None else {}

    def send(batch: list[tuple[str, str]]) -> None:
        sent, failed, calls = _send_batch(sqs_client, queue_url, batch, attributes)
        with lock:
            report.sent.extend(sent)
            report.failed.update(failed)
            report.calls += calls
        if progress is not None:
            progress(len(batch))

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        extra = attribute_bytes(attributes)
        for future in [pool.submit(send, batch) for batch in batches(jobs, extra)]:
            future.result()
    return report


def _send_batch(
    sqs: Any,
    queue_url: str,
    batch: list[tuple[str, str]],
    attributes: dict[str, dict[str, str]] | None = None,
) -> tuple[list[str], dict[str, str], int]:
    pending = {str(index): item for index, item in enumerate(batch)}  # entry Id -> (id, body)
    sent: list[str] = []
    failed: dict[str, str] = {}
    calls = 0
    for attempt in range(SEND_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)))
        entries: list[dict[str, Any]] = [
            {
                "Id": key,
                "MessageBody": body,
                **({"MessageAttributes": attributes} if attributes else {}),
            }
            for key, (_, body) in pending.items()
        ]
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


# ---- a book's record (issue 25): what `results --book` reads back -------------------------


def store_book(s3: Any, target: Target, book: LoadedBook) -> str:
    """Writes the cover (`books/<book>/cover.<ext>`), then the record `books/<book>.json`
    that names it, before the jobs are sent: a record is never left naming a cover that is not
    there. Each submit writes it again, with the digests of what it sends now. Returns the
    record's key; ClientError when the producer may not write `books/`."""
    bucket = bucket_of(target)
    record = book.record(target.prefix)
    cover = book.epub.cover
    if cover is not None and record.cover_key is not None:
        s3.put_object(
            Bucket=bucket, Key=record.cover_key, Body=cover.data, ContentType=cover.media_type
        )
    key = record_key(book.book, target.prefix)
    s3.put_object(Bucket=bucket, Key=key, Body=record.to_json(), ContentType="application/json")
    return key
