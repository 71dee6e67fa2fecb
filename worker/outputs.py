"""The job's outputs in S3 and its failure records (DESIGN §3.3): the manifest read and
judged, the audio and the manifest written under the conditions that keep one output per
job across workers, and the failure record with its copy in the DLQ.

Guaranteed, across workers: a manifest is only ever written conditionally, on "no manifest"
(If-None-Match) or on the ETag of the one this worker judged (If-Match), so of two workers
only one write of what they both read succeeds, and a manifest always points at audio of its
own request: a first synthesis writes outputs/<id>.<fmt> only if nothing is there, a re-made
one writes a key of its own (<id>.<hash>.<fmt>) before the swap. Not guaranteed: two workers
that both pass the check write the audio twice (the loser's copy of a re-made job stays,
unreferenced), and the manifest's figures describe the winner's synthesis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from worker.aws_errors import error_code
from worker.events import Event, Events
from worker.held import HeldMessage
from worker.jobs import (
    DLQ_ERROR_ATTRIBUTE,
    DLQ_JOB_ID_ATTRIBUTE,
    MANIFEST_DIGEST_METADATA,
    FailureRecord,
    Job,
    Manifest,
    audio_key,
    failure_key,
    manifest_key,
)
from worker.settings import Settings

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


class Verdict(Enum):
    """What an existing manifest means for the job in hand (DESIGN §3.3)."""

    NEW = "no manifest yet"
    DONE = "done: its manifest was made from this request"
    SUPERSEDED = "superseded: a later submit of this id is done"
    REPLACE = "edited: its manifest was made from another request"

    @property
    def finished(self) -> bool:
        """The job's output exists: its message is only deleted."""
        return self in (Verdict.DONE, Verdict.SUPERSEDED)


@dataclass(frozen=True)
class Stored:
    """outputs/<id>.json as read: its ETag (the swap's condition), bytes and content."""

    etag: str
    body: bytes
    manifest: Manifest | None  # None: not a readable manifest (made from another request)


def sqs_text(text: str, max_bytes: int) -> str:
    """`text` as SQS accepts it: others escaped as \\xNN (\\uNNNN above FF), at most max_bytes."""

    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    clean = _NOT_SQS_TEXT.sub(escape, text).encode()[:max_bytes]
    return clean.decode(errors="ignore")  # drops a character cut in half, nothing else


class OutputStore:
    """The bucket's outputs/ and failures/ for one worker, and its DLQ copies."""

    def __init__(self, settings: Settings, s3: Any, sqs: Any, events: Events) -> None:
        self.settings, self.s3, self.sqs, self.events = settings, s3, sqs, events

    def read_manifest(self, job_id: str) -> Stored | None:
        key = manifest_key(job_id, self.settings.output_prefix)
        try:
            answer = self.s3.get_object(Bucket=self.settings.output_bucket, Key=key)
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

    def verdict(self, held: HeldMessage, job: Job, stored: Stored | None) -> Verdict:
        if stored is None:
            return Verdict.NEW
        found = stored.manifest
        if found is None:
            return Verdict.REPLACE
        if found.request_hash == job.request_hash(self.settings.speech_model):
            return Verdict.DONE
        # Standard queues do not keep order: an older message of an edited job (a late
        # duplicate, a redelivery) must not replace the output of the newer one.
        mine = held.sent_ms
        if found.sent_at_ms is not None and mine is not None and found.sent_at_ms > mine:
            return Verdict.SUPERSEDED
        return Verdict.REPLACE

    def put_audio(self, job: Job, audio: bytes, replacing: bool) -> str | None:
        """The audio's key: outputs/<id>.<fmt> if it is still free or already holds this
        request's audio (a duplicate message's peer, or this job's own earlier attempt that
        died before its manifest: nothing is written again); None when it holds another
        request's, and a key of its own when the job replaces an older output."""
        if replacing:
            return self.put_own_audio(job, audio)
        first = audio_key(job.job_id, job.format, self.settings.output_prefix)
        try:
            self._put(first, audio, CONTENT_TYPES[job.format], IfNoneMatch="*",
                      Metadata={MANIFEST_DIGEST_METADATA: job.digest()})  # fmt: skip
        except ClientError as error:
            if error_code(error) not in PRECONDITION_FAILED:
                raise
            return first if self._audio_digest(first) == job.digest() else None
        return first

    def put_own_audio(self, job: Job, audio: bytes) -> str:
        version = job.request_hash(self.settings.speech_model)
        key = audio_key(job.job_id, job.format, self.settings.output_prefix, version)
        self._put(key, audio, CONTENT_TYPES[job.format])
        return key

    def swap_manifest(
        self, held: HeldMessage, body: bytes, stored: Stored | None, digest: str
    ) -> bool:
        """Writes the manifest on the condition it was judged on; False if another writer
        changed it first. A 412 on a PUT whose own earlier try landed (its answer lost) finds
        this very body stored: that is this worker's success. A PUT that raised may have
        landed: the held message says so, and is judged again before it is given up."""
        job_id = str(held.job_id)
        condition = {"IfMatch": stored.etag} if stored else {"IfNoneMatch": "*"}
        key = manifest_key(job_id, self.settings.output_prefix)
        metadata = {MANIFEST_DIGEST_METADATA: digest}
        try:
            self._put(key, body, "application/json", Metadata=metadata, **condition)
            return True
        except ClientError as error:
            if error_code(error) not in (*PRECONDITION_FAILED, *NOT_FOUND):
                held.unanswered_manifest = body
                raise
        except BotoCoreError:
            held.unanswered_manifest = body
            raise
        now = self.read_manifest(job_id)
        if now is not None and now.body == body:
            self.events.emit(Event.OWN_WRITE_FOUND, job_id=job_id)
            return True
        self.events.emit(Event.MANIFEST_CHANGED, job_id=job_id)
        return False

    def record_failure(self, held: HeldMessage, record: FailureRecord, reason: str) -> None:
        """failures/<id>.json, then the message's copy in the DLQ with the reason and the id
        as attributes (the caller deletes the message after both)."""
        key = failure_key(record.id, self.settings.output_prefix)
        self._put(key, record.to_json(), "application/json")
        self.sqs.send_message(
            QueueUrl=self.settings.dlq_url,
            MessageBody=held.message["Body"],
            MessageAttributes={
                DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": reason},
                DLQ_JOB_ID_ATTRIBUTE: {
                    "DataType": "String",
                    "StringValue": sqs_text(record.id, MAX_ERROR_ATTRIBUTE_BYTES),
                },
            },
        )

    def _audio_digest(self, key: str) -> str | None:
        head = self.s3.head_object(Bucket=self.settings.output_bucket, Key=key)
        digest = head.get("Metadata", {}).get(MANIFEST_DIGEST_METADATA)
        return str(digest) if digest else None

    def _put(self, key: str, body: bytes, content_type: str, **condition: Any) -> None:
        self.s3.put_object(
            Bucket=self.settings.output_bucket,
            Key=key,
            Body=body,
            ContentType=content_type,
            **condition,
        )
