"""Receive → synthesize → audio → manifest → delete, with up to CONCURRENCY jobs in flight.

Invariants (DESIGN §5): a message is deleted only after its outputs (or its failure record
and DLQ copy) exist; a job whose manifest exists is never synthesized again; a transient
failure releases the message with a growing delay so the queue's maxReceiveCount bounds it;
SIGTERM stops receiving, lets in-flight jobs finish within the stop timeout and releases the
rest at once.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from worker.aws_errors import AWS_ERRORS, error_code
from worker.deletion import MessageDeleter
from worker.heartbeat import (
    MAX_BATCH_ENTRIES,
    Heartbeat,
    InFlight,
    Task,
    Visibility,
    change_visibility,
)
from worker.jobs import (
    DLQ_ERROR_ATTRIBUTE,
    DLQ_JOB_ID_ATTRIBUTE,
    MANIFEST_DIGEST_METADATA,
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
# A conditional PUT (If-None-Match: *, or If-Match on an ETag) whose condition fails: 412
# PreconditionFailed (S3 user guide, conditional writes); If-Match on a missing key: 404. A
# concurrent conditional PUT may get 409 instead: that one is an ordinary storage error,
# retried later, and the retry reads the manifest again.
PRECONDITION_FAILED = ("PreconditionFailed", "412")
NOT_FOUND = ("404", "NoSuchKey", "NotFound")
# Manifest swaps lost to other writers before the job is released to try again later.
MAX_SWAPS = 3
# How long a failing delete is retried while the heartbeat keeps its message invisible.
DELETE_PATIENCE_SECONDS = 60


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


class ManifestContended(Exception):
    """Other writers changed the manifest under every swap this worker tried: try later."""


class Verdict(Enum):
    """What an existing manifest means for the job in hand (DESIGN §3.3)."""

    NEW = "no manifest yet"
    DONE = "done: its manifest was made from this request"
    SUPERSEDED = "superseded: a later submit of this id is done"
    REPLACE = "edited: its manifest was made from another request"


@dataclass(frozen=True)
class Stored:
    """outputs/<id>.json as read: its ETag (the swap's condition), bytes and content."""

    etag: str
    body: bytes
    manifest: Manifest | None  # None: not a readable manifest (made from another request)


class Poll:
    """One ReceiveMessage in its own thread, so a SIGTERM need not wait for a long poll.

    Whoever comes second handles the messages: the loop takes them if the call returned before
    the loop gave up on it (`abandon`); otherwise the poll thread releases them itself at once
    (visibility 0), so a message received after the stop is not hidden for the timeout."""

    def __init__(self, receive: Any, release_late: Any) -> None:
        self.receive, self.release_late = receive, release_late
        self.done = threading.Event()
        self.messages: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self.thread = threading.Thread(target=self._run, name="poll", daemon=True)

    def _run(self) -> None:
        try:
            messages = list(self.receive())
        except Exception as error:  # reported by the loop; a poll must always end as done
            messages, self.error = [], error
        with self._lock:
            self.messages, late = messages, self._abandoned
            self.done.set()
        if late and messages:
            self.release_late(messages)

    def abandon(self) -> bool:
        """True when the loop may walk away: the messages, if any come, are released."""
        with self._lock:
            self._abandoned = not self.done.is_set()
            return self._abandoned


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


def poll_wait_seconds(settings: Settings) -> int:
    """The long poll's wait: at most half the stop budget, so a poll under way at SIGTERM
    returns (and its messages are released) well inside it."""
    return max(0, min(settings.wait_time_seconds, int(settings.stop_timeout_seconds // 2)))


def sent_ms(task: Task) -> int | None:
    sent = task.message.get("Attributes", {}).get("SentTimestamp")
    return int(sent) if sent else None


def _counts_here(task: Task, stored: Stored) -> bool:
    """Whether this attempt counts the job of the manifest it found (worker/deletion.py): the
    manifest is this attempt's own write whose answer was lost, or an earlier attempt's of
    this same message (a later receive: that attempt ended before its delete went out). Not
    one a concurrent receive of the same message wrote (same receive count): its writer
    counts it. Not one another message made: a duplicate's, a resubmit's."""
    found = stored.manifest
    if found is None or found.message_id != task.message["MessageId"]:
        return False
    return stored.body == task.unanswered_manifest or task.receive_count > found.attempts


class Worker:
    def __init__(
        self,
        settings: Settings,
        sqs: Any,
        s3: Any,
        speech: SpeechClient,
        protection: Protection,
        metrics: Metrics,
        delete_sqs: Any = None,
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
        self.visibility = Visibility(sqs, settings.queue_url)
        self.poll_wait = poll_wait_seconds(settings)
        self._poll: Poll | None = None
        self.deleter = MessageDeleter(delete_sqs or sqs, settings.queue_url)
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
            self.visibility, self.inflight, self.s.heartbeat_seconds, self.s.visibility_timeout
        )
        heartbeat.start()
        renewal = Renewal(self.protection, self.s.protection_tick_seconds)
        renewal.start()
        log.info(
            "polling %s: %d synthesis slots, up to %d messages held, %ds long poll",
            self.s.queue_url,
            self.s.concurrency,
            self.inflight.capacity,
            self.poll_wait,
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
        except (KeyError, ValueError, *AWS_ERRORS) as error:
            log.warning("no redrive policy readable (%r): SQS alone bounds retries", error)
            return None

    def _poll_once(self) -> None:
        if not self.inflight.wait_free(timeout=0.5):
            return
        messages = self._receive(min(MAX_BATCH_ENTRIES, self.inflight.free()))
        if messages is None:  # the stop came during the poll: its thread releases them
            return
        tasks = [Task(message) for message in messages]
        if self.stop_requested.is_set():
            self._release_late(messages)
            return
        if not tasks:
            if not len(self.inflight):
                self.protection.idle()
            if not self.poll_wait:  # short polls: do not spin on an empty queue
                self.stop_requested.wait(1.0)
            return
        self.protection.busy()  # before any work starts, so ECS cannot stop us mid-job
        for task in tasks:
            self.inflight.add(task)
            threading.Thread(target=self._run_task, args=(task,), daemon=True).start()

    def _receive(self, wanted: int) -> list[dict[str, Any]] | None:
        """The messages of one poll; None when a stop came first (the loop walks away)."""

        def receive() -> list[dict[str, Any]]:
            answer = self.sqs.receive_message(
                QueueUrl=self.s.queue_url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=self.poll_wait,
                VisibilityTimeout=self.s.visibility_timeout,
                # AttributeNames (deprecated for MessageSystemAttributeNames) works with every
                # boto3 that requirements.txt allows, and with the older ones too.
                AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                MessageAttributeNames=["All"],
            )
            return list(answer.get("Messages", []))

        poll = self._poll = Poll(receive, self._release_late)
        poll.thread.start()
        while not poll.done.wait(0.1):
            if self.stop_requested.is_set() and poll.abandon():
                return None
        if poll.error is not None:
            log.warning("receive failed: %r", poll.error)
            self.stop_requested.wait(1.0)
        return poll.messages

    def _release_late(self, messages: list[dict[str, Any]]) -> None:
        released = change_visibility(self.sqs, self.s.queue_url, [Task(m) for m in messages], 0)
        log.info("released %d message(s) received after the stop", released)

    def _stop_deadline(self) -> float:
        """When the drain must be done: the stop budget less what exiting takes after it (the
        log lines, the threads' and interpreter's end), so the process is out inside it."""
        reserve = min(1.0, self.s.stop_timeout_seconds * 0.1)
        return self._stop_time + self.s.stop_timeout_seconds - reserve

    def _drain(self, heartbeat: Heartbeat) -> None:
        end = self._stop_deadline()
        margin = min(5.0, self.s.stop_timeout_seconds * 0.2)  # left for releasing the rest
        self.inflight.wait_empty(end - margin - time.monotonic())  # jobs still kept invisible
        heartbeat.stop()
        leftovers = self.inflight.snapshot()
        # A job thread marks its S3 writes (Task.writing): abandon (and release) every task not
        # writing now, then wait for the writers only as long as the stop allows.
        busy = [task for task in leftovers if not task.abandon(0.0)]
        self._release_abandoned([task for task in leftovers if task not in busy])
        late = [task for task in busy if task.abandon(end - time.monotonic())]
        self._release_abandoned(late)
        if len(late) < len(busy):
            log.warning("%d job(s) still writing at the stop timeout", len(busy) - len(late))
        # Within the stop budget: a poll given up on at the stop releases what it gets, and a
        # tick whose extension overlapped a release sends that release again.
        if self._poll is not None:
            self._poll.thread.join(max(0.0, end - time.monotonic()))
        heartbeat.join(max(0.0, end - time.monotonic()))

    def _release_abandoned(self, tasks: list[Task]) -> None:
        if tasks:
            released = self.visibility.release(tasks, 0, unsettled_only=True)
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
            stored = self._read_manifest(job.job_id)
            verdict = self._verdict(task, job, stored)
            if verdict in (Verdict.DONE, Verdict.SUPERSEDED):
                with task.writing() as allowed:
                    if allowed:
                        self._settle(task, job, stored, verdict)
                return
            if not self._acquire_slot():
                self._release(task, "stopping before it started", delay=0)
                return
            try:
                what = "started" if verdict is Verdict.NEW else "started again (edited)"
                log.info("job %s %s (receive %d)", job.job_id, what, task.receive_count)
                started = time.monotonic()
                speech = self.speech.synthesize(job)
                synth_s = time.monotonic() - started
            finally:
                self.slots.release()
            self._complete(task, job, speech, synth_s)
        except PermanentSpeechError as error:
            self._fail(task, "rejected by the speech server", str(error), job)
        except TransientSpeechError as error:
            self._retry_later(task, str(error), job)
        except (*AWS_ERRORS, ManifestContended) as error:
            self._retry_later(task, f"storage error: {error}", job)

    def _acquire_slot(self) -> bool:
        """A synthesis slot, unless a stop comes first (then the job is not started)."""
        while not self.slots.acquire(timeout=0.2):
            if self.stop_requested.is_set():
                return False
        if self.stop_requested.is_set():
            self.slots.release()
            return False
        return True

    # ---- the manifest: read, judged, swapped -------------------------------------------

    def _read_manifest(self, job_id: str) -> Stored | None:
        try:
            answer = self.s3.get_object(
                Bucket=self.s.output_bucket, Key=manifest_key(job_id, self.s.output_prefix)
            )
            body = answer["Body"].read()
        except ClientError as error:
            if error_code(error) in NOT_FOUND:
                return None
            raise
        try:
            manifest: Manifest | None = Manifest.model_validate_json(body)
        except ValidationError:
            manifest = None
        return Stored(str(answer["ETag"]), body, manifest)

    def _verdict(self, task: Task, job: Job, stored: Stored | None) -> Verdict:
        if stored is None:
            return Verdict.NEW
        found = stored.manifest
        if found is None:
            return Verdict.REPLACE
        if found.request_hash == job.request_hash(self.s.speech_model):
            return Verdict.DONE
        # Standard queues do not keep order: an older message of an edited job (a late
        # duplicate, a redelivery) must not replace the output of the newer one.
        mine = sent_ms(task)
        if found.sent_at_ms is not None and mine is not None and found.sent_at_ms > mine:
            return Verdict.SUPERSEDED
        return Verdict.REPLACE

    def _settle(self, task: Task, job: Job, stored: Stored | None, verdict: Verdict) -> None:
        """Deletes the message of a job whose output exists, counting it if this attempt is
        the one to (`_counts_here`). Called while writing."""
        log.info("job %s %s: deleting the message", job.job_id, verdict.value)
        mine = stored is not None and _counts_here(task, stored)
        self._delete(task, counting=stored.manifest if stored is not None and mine else None)

    def _complete(self, task: Task, job: Job, speech: Speech, synth_s: float) -> None:
        queue_wait = task.received_at - self._sent_at(task)
        manifest = Manifest(
            id=job.job_id,
            request=job.request(),
            audio_key="",  # set where the audio is written
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
            request_hash=job.request_hash(self.s.speech_model),
            sent_at_ms=sent_ms(task),
            message_id=task.message["MessageId"],
        )
        with task.writing() as allowed:
            if allowed:
                self._store(task, job, speech.audio, manifest)

    def _count(self, manifest: Manifest) -> None:
        log.info(
            "job %s done: %.2fs audio in %.2fs",
            manifest.id,
            manifest.duration_s or 0,
            manifest.synth_s,
        )
        try:
            self.metrics.completed(
                manifest.synth_s,
                manifest.duration_s,
                manifest.queue_wait_s,
                job_id=manifest.id,
                message_id=manifest.message_id,  # with job_id, what a reader dedupes on
                worker=self.s.worker_id,
            )
        except Exception:  # run as the delete goes out: a metric line must not stop it
            log.exception("job %s: the JobsCompleted line failed", manifest.id)

    def _store(self, task: Task, job: Job, audio: bytes, manifest: Manifest) -> Manifest | None:
        """Audio, then the manifest, then delete; the manifest written, or None when there is
        nothing (more) for this worker to write.

        Guaranteed, across workers: a manifest is only ever written conditionally, on "no
        manifest" (If-None-Match) or on the ETag of the one this worker judged (If-Match), so
        of two workers only one write of what they both read succeeds, and a manifest always
        points at audio of its own request: a first synthesis writes outputs/<id>.<fmt> only
        if nothing is there, a re-made one writes a key of its own (<id>.<hash>.<fmt>) before
        the swap. Not guaranteed: two workers that both pass the check write the audio twice
        (the loser's copy of a re-made job stays, unreferenced), and the manifest's figures
        describe the winner's synthesis.
        """
        for _ in range(MAX_SWAPS):
            stored = self._read_manifest(job.job_id)
            verdict = self._verdict(task, job, stored)
            if verdict in (Verdict.DONE, Verdict.SUPERSEDED):
                self._settle(task, job, stored, verdict)
                return None
            key = self._put_audio(job, audio, replacing=stored is not None)
            if key is None:
                key = self._put_own_audio(job, audio)
            final = manifest.model_copy(update={"audio_key": key})
            if self._swap_manifest(task, final.to_json(), stored, job.digest()):
                self._delete(task, counting=final)  # counted as the delete goes out
                return final
        raise ManifestContended(f"manifest of {job.job_id} changed under {MAX_SWAPS} swaps")

    def _put_audio(self, job: Job, audio: bytes, replacing: bool) -> str | None:
        """The audio's key: outputs/<id>.<fmt> if it is still free or already holds this
        request's audio (a duplicate message's peer, or this job's own earlier attempt that
        died before its manifest: nothing is written again); None when it holds another
        request's, and a key of its own when the job replaces an older output."""
        if replacing:
            return self._put_own_audio(job, audio)
        first = audio_key(job.job_id, job.format, self.s.output_prefix)
        try:
            self._put(first, audio, CONTENT_TYPES[job.format], IfNoneMatch="*",
                      Metadata={MANIFEST_DIGEST_METADATA: job.digest()})  # fmt: skip
        except ClientError as error:
            if error_code(error) not in PRECONDITION_FAILED:
                raise
            return first if self._audio_digest(first) == job.digest() else None
        return first

    def _audio_digest(self, key: str) -> str | None:
        head = self.s3.head_object(Bucket=self.s.output_bucket, Key=key)
        digest = head.get("Metadata", {}).get(MANIFEST_DIGEST_METADATA)
        return str(digest) if digest else None

    def _put_own_audio(self, job: Job, audio: bytes) -> str:
        version = job.request_hash(self.s.speech_model)
        key = audio_key(job.job_id, job.format, self.s.output_prefix, version)
        self._put(key, audio, CONTENT_TYPES[job.format])
        return key

    def _swap_manifest(self, task: Task, body: bytes, stored: Stored | None, digest: str) -> bool:
        """Writes the manifest on the condition it was judged on; False if another writer
        changed it first. A 412 on a PUT whose own earlier try landed (its answer lost) finds
        this very body stored: that is this worker's success. A PUT that raised may have
        landed: the task says so, and is judged again before it is given up."""
        job_id = str(task.job_id)
        condition = {"IfMatch": stored.etag} if stored else {"IfNoneMatch": "*"}
        key = manifest_key(job_id, self.s.output_prefix)
        metadata = {MANIFEST_DIGEST_METADATA: digest}
        try:
            self._put(key, body, "application/json", Metadata=metadata, **condition)
            return True
        except ClientError as error:
            if error_code(error) not in (*PRECONDITION_FAILED, *NOT_FOUND):
                task.unanswered_manifest = body
                raise
        except BotoCoreError:
            task.unanswered_manifest = body
            raise
        now = self._read_manifest(job_id)
        if now is not None and now.body == body:
            log.info("job %s manifest: a retried PUT found its own write", job_id)
            return True
        log.info("job %s manifest changed by another worker first: judging again", job_id)
        return False

    def _sent_at(self, task: Task) -> float:
        sent = sent_ms(task)
        return sent / 1000 if sent else task.received_at

    def _put(self, key: str, body: bytes, content_type: str, **condition: Any) -> None:
        self.s3.put_object(
            Bucket=self.s.output_bucket, Key=key, Body=body, ContentType=content_type, **condition
        )

    def _delete(self, task: Task, counting: Manifest | None = None) -> None:
        """Deletes the message, counting `counting` as the delete goes out. Until the delete
        returns the heartbeat keeps extending the message, so a failed delete is retried for
        a minute (or a visibility timeout, if longer), and inside the stop budget once a stop
        comes: a counted message that came back would be counted again."""
        patience = time.monotonic() + max(DELETE_PATIENCE_SECONDS, self.s.visibility_timeout)

        def deadline() -> float:
            if not self.stop_requested.is_set():
                return patience
            return min(patience, self._stop_deadline())

        on_send = functools.partial(self._count, counting) if counting is not None else None
        try:
            deleted = self.deleter.delete(task.receipt, deadline, on_send)
        finally:
            task.settled = True  # stays in flight (so a drain waits) until its thread ends
        if not deleted:
            log.warning("delete of job %s failed: a redelivery finds its outputs", task.job_id)

    # ---- failures --------------------------------------------------------------------

    def _fail(self, task: Task, error: str, detail: str, job: Job | None = None) -> None:
        """Permanent: failure record, a copy in the DLQ with the reason, then delete. A job
        whose manifest turns out to be there (its write landed, the answer was lost; or a peer
        made it) is done instead."""
        job_id = task.job_id or task.message["MessageId"]
        record = FailureRecord(
            id=job_id,
            error=error,
            detail=detail,
            attempts=task.receive_count,
            message_id=task.message["MessageId"],
            worker=self.s.worker_id,
            failed_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            request_digest=job.digest() if job is not None else None,
        )
        reason = sqs_text(f"{error}: {detail}", MAX_ERROR_ATTRIBUTE_BYTES)
        try:
            with task.writing() as allowed:
                if not allowed or (job is not None and self._done_after_all(task, job)):
                    return
                self._record_failure(task, job_id, record, reason)
        except AWS_ERRORS as storage_error:
            self._release(task, f"could not record failure ({storage_error!r})")
            return
        log.warning("job %s failed permanently: %s", job_id, reason)
        self.metrics.failed(job_id=job_id, worker=self.s.worker_id, error=error)

    def _done_after_all(self, task: Task, job: Job) -> bool:
        """The manifest checked again before giving up on a job: found made from this request
        (or a later one), the job is done and its message deleted. Called while writing."""
        stored = self._read_manifest(job.job_id)
        verdict = self._verdict(task, job, stored)
        if verdict not in (Verdict.DONE, Verdict.SUPERSEDED):
            return False
        self._settle(task, job, stored, verdict)
        return True

    def _record_failure(self, task: Task, job_id: str, record: FailureRecord, reason: str) -> None:
        self._put(failure_key(job_id, self.s.output_prefix), record.to_json(), "application/json")
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

    def _retry_later(self, task: Task, reason: str, job: Job | None = None) -> None:
        limit = self.max_receive_count
        if limit is not None and task.receive_count >= limit:
            self._fail(task, f"transient failures on all {limit} receives", reason, job)
            return
        if job is not None and task.unanswered_manifest is not None and self._landed(task, job):
            return
        self._release(task, reason)

    def _landed(self, task: Task, job: Job) -> bool:
        """After a manifest PUT raised: whether it landed after all (then the job is done)."""
        try:
            with task.writing() as allowed:
                return allowed and self._done_after_all(task, job)
        except AWS_ERRORS as error:
            log.warning("job %s: manifest not readable (%r)", job.job_id, error)
            return False

    def _release(self, task: Task, reason: str, delay: int | None = None) -> None:
        if delay is None:
            delay = backoff_seconds(
                task.receive_count, self.s.retry_base_seconds, self.s.retry_max_seconds
            )
        self.visibility.release([task], delay)
        log.warning(
            "job %s released for %ds after receive %d: %s",
            task.job_id,
            delay,
            task.receive_count,
            reason,
        )
