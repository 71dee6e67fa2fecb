"""Receive → synthesize → audio → manifest → delete, with up to CONCURRENCY jobs in flight.

Invariants (DESIGN §5): a message is deleted only after its outputs (or its failure record
and DLQ copy) exist; a job whose manifest exists is never synthesized again; a transient
failure releases the message with a growing delay so the queue's maxReceiveCount bounds it;
SIGTERM stops receiving, lets in-flight jobs finish within the stop timeout and releases the
rest at once.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from worker.heartbeat import MAX_BATCH_ENTRIES, Heartbeat, InFlight, Task, change_visibility
from worker.jobs import (
    DLQ_ERROR_ATTRIBUTE,
    DLQ_JOB_ID_ATTRIBUTE,
    FailureRecord,
    InvalidJob,
    Job,
    Manifest,
    audio_key,
    failure_key,
    manifest_key,
    parse_job,
)
from worker.metrics import Metrics
from worker.protection import Protection, Renewal
from worker.settings import MAX_VISIBILITY_SECONDS, Settings
from worker.speech import PermanentSpeechError, Speech, SpeechClient, TransientSpeechError

log = logging.getLogger("worker")
CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg", "flac": "audio/flac"}
# SQS message attribute values count toward the 256 KiB message size; keep the reason short.
MAX_ERROR_ATTRIBUTE_BYTES = 1_000
# SQS accepts only these characters in a body or a String attribute value (SQS API reference,
# SendMessage): #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
_NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
STORAGE_ERRORS = (ClientError, BotoCoreError)
# A conditional PUT (If-None-Match: *) on an existing key: 412 PreconditionFailed (S3 user
# guide, conditional writes). A concurrent conditional PUT may get 409 instead: that one is an
# ordinary storage error, retried later, and the retry finds the manifest.
PRECONDITION_FAILED = ("PreconditionFailed", "412")


class KeyLocks:
    """One holder per job id in this process, so a duplicate waits and then finds the manifest."""

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]


def sqs_text(text: str, max_bytes: int) -> str:
    """`text` as SQS accepts it: others escaped as \\xNN (\\uNNNN above FF), at most max_bytes."""

    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    clean = _NOT_SQS_TEXT.sub(escape, text).encode()[:max_bytes]
    return clean.decode(errors="ignore")  # drops a character cut in half, nothing else


def backoff_seconds(receive_count: int, base: float, cap: float) -> int:
    """Visibility delay after the n-th failed receive: base, 2·base, 4·base, … up to cap."""
    growth = 2.0 ** max(0, receive_count - 1)  # a float power: int ** int types as Any
    delay = min(cap, base * growth, float(MAX_VISIBILITY_SECONDS))
    return max(0, round(delay))


class Worker:
    def __init__(
        self,
        settings: Settings,
        sqs: Any,
        s3: Any,
        speech: SpeechClient,
        protection: Protection,
        metrics: Metrics,
    ) -> None:
        self.s = settings
        self.sqs, self.s3, self.speech = sqs, s3, speech
        self.protection, self.metrics = protection, metrics
        # Synthesis requests are bounded by CONCURRENCY; PREFETCH more messages are held
        # (and heartbeat-extended) so a freed slot starts the next job at once while the
        # previous one is still uploading: S3 and SQS latency overlap the model's time.
        prefetch = settings.concurrency if settings.prefetch is None else settings.prefetch
        self.inflight = InFlight(settings.concurrency + prefetch)
        self.slots = threading.BoundedSemaphore(settings.concurrency)
        self.ids = KeyLocks()
        self.max_receive_count: int | None = None
        self.stop_requested = threading.Event()
        # Held by the heartbeat while it picks and extends tasks, and by every release while it
        # marks a task settled and sets its visibility: a tick never re-hides a released message.
        self.visibility_lock = threading.Lock()
        self._stop_time = 0.0

    # ---- lifecycle -------------------------------------------------------------------

    def request_stop(self) -> None:
        if not self.stop_requested.is_set():
            self._stop_time = time.monotonic()
            self.stop_requested.set()
            log.info("stop requested: no more receives, draining %d job(s)", len(self.inflight))

    def run(self) -> int:
        self.max_receive_count = self._read_max_receive_count()
        heartbeat = Heartbeat(
            self.sqs,
            self.s.queue_url,
            self.inflight,
            self.s.heartbeat_seconds,
            self.s.visibility_timeout,
            lock=self.visibility_lock,
        )
        heartbeat.start()
        renewal = Renewal(self.protection, self.s.protection_tick_seconds)
        renewal.start()
        log.info(
            "polling %s: %d synthesis slots, up to %d messages held",
            self.s.queue_url,
            self.s.concurrency,
            self.inflight.capacity,
        )
        try:
            while not self.stop_requested.is_set():
                self._poll_once()
        finally:
            self._drain(heartbeat)
            renewal.stop()
            self.protection.idle()
            log.info("drained; exiting")
        return 0

    def _read_max_receive_count(self) -> int | None:
        """The redrive bound, so the last allowed attempt can record why it failed."""
        try:
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=self.s.queue_url, AttributeNames=["RedrivePolicy"]
            )["Attributes"]
            return int(json.loads(attrs["RedrivePolicy"])["maxReceiveCount"])
        except (KeyError, ValueError, *STORAGE_ERRORS) as error:
            log.warning("no redrive policy readable (%r): SQS alone bounds retries", error)
            return None

    def _poll_once(self) -> None:
        if not self.inflight.wait_free(timeout=0.5):
            return
        wanted = min(MAX_BATCH_ENTRIES, self.inflight.free())
        try:
            messages = self.sqs.receive_message(
                QueueUrl=self.s.queue_url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=self.s.wait_time_seconds,
                VisibilityTimeout=self.s.visibility_timeout,
                # AttributeNames (deprecated for MessageSystemAttributeNames) works with every
                # boto3 that requirements.txt allows, and with the older ones too.
                AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        except STORAGE_ERRORS as error:
            log.warning("receive failed: %r", error)
            self.stop_requested.wait(1.0)
            return
        tasks = [Task(message) for message in messages]
        if self.stop_requested.is_set():
            change_visibility(self.sqs, self.s.queue_url, tasks, 0)
            return
        if not tasks:
            if not len(self.inflight):
                self.protection.idle()
            return
        self.protection.busy()  # before any work starts, so ECS cannot stop us mid-job
        for task in tasks:
            self.inflight.add(task)
            threading.Thread(target=self._run_task, args=(task,), daemon=True).start()

    def _drain(self, heartbeat: Heartbeat) -> None:
        end = self._stop_time + self.s.stop_timeout_seconds
        margin = min(5.0, self.s.stop_timeout_seconds * 0.2)  # left for releasing the rest
        self.inflight.wait_empty(end - margin - time.monotonic())  # jobs still kept invisible
        heartbeat.stop()
        heartbeat.join(max(0.0, end - time.monotonic()))
        leftovers = self.inflight.snapshot()
        # A job thread holds its task's lock while it writes to S3: abandon (and release) every
        # task whose lock is free now, then wait for the writers only as long as the stop allows.
        busy = [task for task in leftovers if not self._abandon(task, 0.0)]
        self._release_abandoned([task for task in leftovers if task not in busy])
        late = [task for task in busy if self._abandon(task, end - time.monotonic())]
        self._release_abandoned(late)
        if len(late) < len(busy):
            log.warning("%d job(s) still writing at the stop timeout", len(busy) - len(late))

    @staticmethod
    def _abandon(task: Task, timeout: float) -> bool:
        """Marks the task abandoned (its thread then writes nothing more) if its lock comes."""
        if not (task.lock.acquire(timeout=timeout) if timeout > 0 else task.lock.acquire(False)):
            return False
        task.abandoned = True
        task.lock.release()
        return True

    def _release_abandoned(self, tasks: list[Task]) -> None:
        with self.visibility_lock:
            unsettled = [task for task in tasks if not task.settled]
            for task in unsettled:
                task.settled = True
            if unsettled:
                released = change_visibility(self.sqs, self.s.queue_url, unsettled, 0)
                log.info("released %d unfinished job(s) for other workers", released)

    # ---- one message -----------------------------------------------------------------

    def _run_task(self, task: Task) -> None:
        try:
            self._process(task)
        except Exception as error:  # never let a bug lose the message: release it
            log.exception("job %s crashed", task.job_id)
            if not (task.settled or task.abandoned):  # deleted, released, or the drain's
                self._retry_later(task, f"worker error: {error!r}")
        finally:
            self.inflight.discard(task)

    def _process(self, task: Task) -> None:
        message = task.message
        try:
            job = parse_job(message["Body"], self.s.max_text_chars)
        except InvalidJob as error:
            task.job_id = error.job_id or message["MessageId"]
            self._fail(task, "invalid job", error.reason)
            return
        task.job_id = job.job_id
        with self.ids.hold(job.job_id):
            self._process_job(task, job)

    def _process_job(self, task: Task, job: Job) -> None:
        try:
            if self._manifest_exists(job.job_id):
                log.info("job %s already done: deleting the duplicate message", job.job_id)
                self._delete(task)
                return
            if not self._acquire_slot():
                self._release(task, "stopping before it started", delay=0)
                return
            try:
                log.info("job %s started (receive %d)", job.job_id, task.receive_count)
                started = time.monotonic()
                speech = self.speech.synthesize(job)
                synth_s = time.monotonic() - started
            finally:
                self.slots.release()
            self._complete(task, job, speech, synth_s)
        except PermanentSpeechError as error:
            self._fail(task, "rejected by the speech server", str(error))
        except TransientSpeechError as error:
            self._retry_later(task, str(error))
        except STORAGE_ERRORS as error:
            self._retry_later(task, f"storage error: {error}")

    def _acquire_slot(self) -> bool:
        """A synthesis slot, unless a stop comes first (then the job is not started)."""
        while not self.slots.acquire(timeout=0.2):
            if self.stop_requested.is_set():
                return False
        if self.stop_requested.is_set():
            self.slots.release()
            return False
        return True

    def _manifest_exists(self, job_id: str) -> bool:
        try:
            self.s3.head_object(
                Bucket=self.s.output_bucket, Key=manifest_key(job_id, self.s.output_prefix)
            )
            return True
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def _complete(self, task: Task, job: Job, speech: Speech, synth_s: float) -> None:
        queue_wait = task.received_at - self._sent_at(task)
        manifest = Manifest(
            id=job.job_id,
            request=job.request(),
            audio_key=audio_key(job.job_id, job.format, self.s.output_prefix),
            duration_s=speech.duration_s,
            sample_rate=speech.sample_rate,
            model=self.s.speech_model,
            voice=job.voice,
            synth_s=round(synth_s, 3),
            queue_wait_s=round(queue_wait, 3),
            attempts=task.receive_count,
            pieces=speech.pieces,
            worker=self.s.worker_id,
            finished_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        )
        with task.lock:
            if task.abandoned or not self._store(task, job, speech.audio, manifest):
                return
        log.info("job %s done: %.2fs audio in %.2fs", job.job_id, speech.duration_s or 0, synth_s)
        self.metrics.completed(
            synth_s, speech.duration_s, queue_wait, job_id=job.job_id, worker=self.s.worker_id
        )

    def _store(self, task: Task, job: Job, audio: bytes, manifest: Manifest) -> bool:
        """Audio, then the manifest, then delete; False when another worker got there first.

        Guaranteed, across workers: at most one manifest PUT per job id ever succeeds (the
        conditional PUT; a second gets 412 and only deletes its message), and no worker
        starts an audio PUT after it can see the manifest. Not guaranteed: two workers that
        both re-check before either manifest exists both PUT the audio (same key, same
        request), so the audio can be written twice and the manifest's figures describe the
        winner's synthesis. A 412 after our own PUT's lost answer was retried also lands here,
        and deleting is then right too: the manifest exists.
        """
        if self._manifest_exists(job.job_id):
            log.info("job %s finished by another worker meanwhile: deleting", job.job_id)
            self._delete(task)
            return False
        self._put(manifest.audio_key, audio, CONTENT_TYPES[job.format])
        try:
            self._put(
                manifest_key(job.job_id, self.s.output_prefix),
                manifest.to_json(),
                "application/json",
                only_if_new=True,
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in PRECONDITION_FAILED:
                raise
            log.info("job %s manifest written by another worker first: deleting", job.job_id)
            self._delete(task)
            return False
        self._delete(task)
        return True

    def _sent_at(self, task: Task) -> float:
        sent_ms = task.message.get("Attributes", {}).get("SentTimestamp")
        return int(sent_ms) / 1000 if sent_ms else task.received_at

    def _put(self, key: str, body: bytes, content_type: str, only_if_new: bool = False) -> None:
        condition = {"IfNoneMatch": "*"} if only_if_new else {}
        self.s3.put_object(
            Bucket=self.s.output_bucket, Key=key, Body=body, ContentType=content_type, **condition
        )

    def _delete(self, task: Task) -> None:
        task.settled = True  # stays in flight (so a drain waits) until its thread ends
        try:
            self.sqs.delete_message(QueueUrl=self.s.queue_url, ReceiptHandle=task.receipt)
        except STORAGE_ERRORS as error:  # outputs exist: a redelivery finds the manifest
            log.warning("delete of job %s failed: %r", task.job_id, error)

    # ---- failures --------------------------------------------------------------------

    def _fail(self, task: Task, error: str, detail: str) -> None:
        """Permanent: failure record, a copy in the DLQ with the reason, then delete."""
        job_id = task.job_id or task.message["MessageId"]
        record = FailureRecord(
            id=job_id,
            error=error,
            detail=detail,
            attempts=task.receive_count,
            message_id=task.message["MessageId"],
            worker=self.s.worker_id,
            failed_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        )
        reason = sqs_text(f"{error}: {detail}", MAX_ERROR_ATTRIBUTE_BYTES)
        try:
            with task.lock:
                if task.abandoned:
                    return
                self._put(
                    failure_key(job_id, self.s.output_prefix),
                    record.to_json(),
                    "application/json",
                )
                self.sqs.send_message(
                    QueueUrl=self.s.dlq_url,
                    MessageBody=task.message["Body"],
                    MessageAttributes={
                        DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": reason},
                        DLQ_JOB_ID_ATTRIBUTE: {
                            "DataType": "String",
                            "StringValue": sqs_text(job_id, MAX_ERROR_ATTRIBUTE_BYTES),
                        },
                    },
                )
                self._delete(task)
        except STORAGE_ERRORS as storage_error:
            self._release(task, f"could not record failure ({storage_error!r})")
            return
        log.warning("job %s failed permanently: %s", job_id, reason)
        self.metrics.failed(job_id=job_id, worker=self.s.worker_id, error=error)

    def _retry_later(self, task: Task, reason: str) -> None:
        limit = self.max_receive_count
        if limit is not None and task.receive_count >= limit:
            self._fail(task, f"transient failures on all {limit} receives", reason)
        else:
            self._release(task, reason)

    def _release(self, task: Task, reason: str, delay: int | None = None) -> None:
        if delay is None:
            delay = backoff_seconds(
                task.receive_count, self.s.retry_base_seconds, self.s.retry_max_seconds
            )
        with self.visibility_lock:
            task.settled = True
            if not task.abandoned:
                change_visibility(self.sqs, self.s.queue_url, [task], delay)
        log.warning(
            "job %s released for %ds after receive %d: %s",
            task.job_id,
            delay,
            task.receive_count,
            reason,
        )
