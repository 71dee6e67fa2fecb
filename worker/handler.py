"""The TTS job (DESIGN §5.3): parse → verdict → synthesize → store, injected into the consumer
as its `handle`. Everything a message means is here; the SQS mechanics are the consumer's
(worker/consumer.py), the S3 layout and its conditions the output store's (worker/outputs.py).

Invariants: a job whose manifest exists (made from this request, or from one sent later) is
never synthesized again, only its message deleted; a permanent failure is recorded and
dead-lettered before its message is deleted, unless its manifest turns out to be there; a
transient failure releases the message with a growing delay so the queue's maxReceiveCount
bounds it, and the last receive it allows records why. A job whose output failed its checks
(worker/qa/) on every attempt is never stored as passed: with QA_ON_FAIL=fail it is a permanent
failure whose reason starts `quality:`, with keep its manifest says `qa.passed: false`.
"""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime
from typing import Protocol

from worker.aws_errors import AWS_ERRORS
from worker.clock import SYSTEM_CLOCK, Clock
from worker.consumer import Control
from worker.counting import Counter, counts_here
from worker.events import Event, Events
from worker.held import HeldMessage, KeyLocks
from worker.jobs import FailureRecord, InvalidJob, Job, Manifest, QaRecord, parse_job
from worker.metrics import Metrics, ThroughputMetrics
from worker.outputs import MAX_ERROR_ATTRIBUTE_BYTES, OutputStore, Stored, Verdict, sqs_text
from worker.settings import Settings
from worker.speech import PermanentSpeechError, Speech, TransientSpeechError
from worker.throughput import Measured, Throughput, this_host

# Manifest swaps lost to other writers before the job is released to try again later.
MAX_SWAPS = 3
# The failure kind of a job whose output failed its checks: its reason reads "quality: …".
QUALITY = "quality"


class Synthesizer(Protocol):
    """The speech client's one call the handler needs (worker/speech.py SpeechClient)."""

    def synthesize(self, job: Job) -> Speech: ...


class ManifestContended(Exception):
    """Other writers changed the manifest under every swap this worker tried: try later."""


def now_iso() -> str:
    """What records carry as their time: ISO 8601, UTC, milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class TtsHandler:
    """`handle(held, control)` for the consumer: one message, from parse to delete."""

    def __init__(
        self,
        settings: Settings,
        store: OutputStore,
        speech: Synthesizer,
        metrics: Metrics,
        events: Events,
        clock: Clock = SYSTEM_CLOCK,
        throughput: Throughput | None = None,
    ) -> None:
        self.settings, self.store, self.speech = settings, store, speech
        self.metrics, self.events, self.clock = metrics, events, clock
        # What this GPU delivers (worker/throughput.py): the manifest's instance_type,
        # audio_s_per_s and cost_usd, and an AudioSecondsPerSecond line per job.
        self.throughput = throughput or Throughput(
            dict(settings.pool_usd_per_hour), lambda: this_host(os.environ)
        )
        self.rates = ThroughputMetrics(metrics)
        self.counter = Counter(metrics, events, settings.worker_id)
        self.ids = KeyLocks()

    def __call__(self, held: HeldMessage, control: Control) -> None:
        try:
            self._process(held, control)
        except Exception as error:  # never let a bug lose the message: try it again later
            self.events.emit(Event.CRASHED, exc_info=True, job_id=held.job_id)
            if not (held.settled or held.abandoned):  # deleted, released, or the drain's
                self._retry_later(held, control, f"worker error: {error!r}")

    def _process(self, held: HeldMessage, control: Control) -> None:
        try:
            job = parse_job(held.message["Body"], self.settings.max_text_chars)
        except InvalidJob as error:
            held.job_id = error.job_id or held.message_id
            self._fail(held, control, "invalid job", error.reason)
            return
        held.job_id = job.job_id
        with self.ids.hold(job.job_id):
            self._process_job(held, control, job)

    def _process_job(self, held: HeldMessage, control: Control, job: Job) -> None:
        try:
            stored = self.store.read_manifest(job.job_id)
            verdict = self.store.verdict(held, job, stored)
            if verdict.finished:
                with held.writing() as allowed:
                    if allowed:
                        self._settle(held, control, job, stored, verdict)
                return
            with control.synthesis_slot() as started:
                if not started:
                    control.release(held, "stopping before it started", delay=0)
                    return
                what = "started" if verdict is Verdict.NEW else "started again (edited)"
                self.events.emit(
                    Event.STARTED, job_id=job.job_id, what=what, receive_count=held.receive_count
                )
                began = self.clock.monotonic()
                speech = self.speech.synthesize(job)
                synth_s = self.clock.monotonic() - began
            qa = speech.qa
            if qa is not None:
                self.metrics.checked(
                    speech.checked, speech.rejected, speech.rejected_by or {},
                    job_id=job.job_id, worker=self.settings.worker_id,
                )  # fmt: skip
                if not qa.passed and self.settings.qa_on_fail == "fail":
                    self._fail(held, control, QUALITY, qa.reason or "a check failed", job, qa)
                    return
            measured = self.throughput.completed(began, began + synth_s, speech.duration_s)
            if measured.audio_s_per_s is not None:
                self.rates.emit(
                    measured.audio_s_per_s, measured.instance_type,
                    job_id=job.job_id, worker=self.settings.worker_id,
                )  # fmt: skip
            self._complete(held, control, job, speech, synth_s, measured)
        except PermanentSpeechError as error:
            self._fail(held, control, "rejected by the speech server", str(error), job)
        except TransientSpeechError as error:
            self._retry_later(held, control, str(error), job)
        except (*AWS_ERRORS, ManifestContended) as error:
            self._retry_later(held, control, f"storage error: {error}", job)

    # ---- done ------------------------------------------------------------------------

    def _settle(
        self, held: HeldMessage, control: Control, job: Job, stored: Stored | None, verdict: Verdict
    ) -> None:
        """Deletes the message of a job whose output exists, counting it if this attempt is
        the one to (worker/counting.py). Called while writing."""
        self.events.emit(Event.SETTLED, job_id=job.job_id, verdict=verdict.value)
        mine = stored is not None and counts_here(held, stored)
        self._delete(held, control, stored.manifest if stored is not None and mine else None)

    def _complete(
        self,
        held: HeldMessage,
        control: Control,
        job: Job,
        speech: Speech,
        synth_s: float,
        measured: Measured,
    ) -> None:
        sent, rate = held.sent_ms, measured.audio_s_per_s
        queue_wait = held.received_at - (sent / 1000 if sent else held.received_at)
        manifest = Manifest(
            id=job.job_id,
            request=job.request(),
            audio_key="",  # set where the audio is written
            duration_s=speech.duration_s,
            sample_rate=speech.sample_rate,
            model=self.settings.speech_model,
            voice=job.voice,
            synth_s=round(synth_s, 3),
            queue_wait_s=round(queue_wait, 3),
            attempts=held.receive_count,
            pieces=speech.pieces,
            worker=self.settings.worker_id,
            finished_at=now_iso(),
            request_hash=job.request_hash(self.settings.speech_model),
            sent_at_ms=sent,
            message_id=held.message_id,
            sender_id=held.sender_id,
            qa=speech.qa,
            instance_type=measured.instance_type,
            audio_s_per_s=None if rate is None else round(rate, 3),
            cost_usd=measured.cost_usd,
            segments=speech.segments,
            voice_library=speech.voice,
        )
        with held.writing() as allowed:
            if allowed:
                self._store(held, control, job, speech.audio, manifest)

    def _store(
        self, held: HeldMessage, control: Control, job: Job, audio: bytes, manifest: Manifest
    ) -> Manifest | None:
        """Audio, then the manifest, then delete (the conditions: worker/outputs.py); the
        manifest written, or None when there is nothing (more) for this worker to write."""
        for _ in range(MAX_SWAPS):
            stored = self.store.read_manifest(job.job_id)
            verdict = self.store.verdict(held, job, stored)
            if verdict.finished:
                self._settle(held, control, job, stored, verdict)
                return None
            key = self.store.put_audio(job, audio, replacing=stored is not None)
            if key is None:
                key = self.store.put_own_audio(job, audio)
            final = manifest.model_copy(update={"audio_key": key})
            if self.store.swap_manifest(held, final.to_json(), stored, job.digest()):
                self._delete(held, control, final)  # counted as the delete goes out
                return final
        raise ManifestContended(f"manifest of {job.job_id} changed under {MAX_SWAPS} swaps")

    def _delete(self, held: HeldMessage, control: Control, counting: Manifest | None) -> None:
        on_send = functools.partial(self.counter.count, counting) if counting is not None else None
        control.delete(held, on_send)

    # ---- failures --------------------------------------------------------------------

    def _fail(
        self,
        held: HeldMessage,
        control: Control,
        error: str,
        detail: str,
        job: Job | None = None,
        qa: QaRecord | None = None,
    ) -> None:
        """Permanent: failure record, a copy in the DLQ with the reason, then delete. A job
        whose manifest turns out to be there (its write landed, the answer was lost; or a peer
        made it) is done instead."""
        job_id = held.job_id or held.message_id
        record = FailureRecord(
            id=job_id,
            error=error,
            detail=detail,
            attempts=held.receive_count,
            message_id=held.message_id,
            worker=self.settings.worker_id,
            failed_at=now_iso(),
            request_digest=job.digest() if job is not None else None,
            sender_id=held.sender_id,
            qa=qa,
        )
        reason = sqs_text(f"{error}: {detail}", MAX_ERROR_ATTRIBUTE_BYTES)
        try:
            with held.writing() as allowed:
                if not allowed or (job is not None and self._done_after_all(held, control, job)):
                    return
                self.store.record_failure(held, record, reason)
                control.delete(held)
        except AWS_ERRORS as storage_error:
            control.release(held, f"could not record failure ({storage_error!r})")
            return
        self.events.emit(Event.DEAD_LETTERED, job_id=job_id, reason=reason)
        if error == QUALITY:
            self.metrics.failed_on_quality(
                job_id=job_id, worker=self.settings.worker_id, error=error
            )
        else:
            self.metrics.failed(job_id=job_id, worker=self.settings.worker_id, error=error)

    def _done_after_all(self, held: HeldMessage, control: Control, job: Job) -> bool:
        """The manifest checked again before giving up on a job: found made from this request
        (or a later one), the job is done and its message deleted. Called while writing."""
        stored = self.store.read_manifest(job.job_id)
        verdict = self.store.verdict(held, job, stored)
        if not verdict.finished:
            return False
        self._settle(held, control, job, stored, verdict)
        return True

    def _retry_later(
        self, held: HeldMessage, control: Control, reason: str, job: Job | None = None
    ) -> None:
        limit = control.max_receive_count
        if limit is not None and held.receive_count >= limit:
            self._fail(held, control, f"transient failures on all {limit} receives", reason, job)
            return
        maybe_landed = held.unanswered_manifest is not None
        if job is not None and maybe_landed and self._landed(held, control, job):
            return
        control.release(held, reason)

    def _landed(self, held: HeldMessage, control: Control, job: Job) -> bool:
        """After a manifest PUT raised: whether it landed after all (then the job is done)."""
        try:
            with held.writing() as allowed:
                return allowed and self._done_after_all(held, control, job)
        except AWS_ERRORS as error:
            self.events.emit(Event.MANIFEST_UNREADABLE, job_id=job.job_id, error=error)
            return False
