"""The voice library in a stack's bucket: voices/<name>.json (the record) and voices/<name>.wav
(a clone voice's reference audio), for `tts-fleet voices` and `submit`'s voice check.

A record is written last, so its presence means the voice is complete; `rm` deletes it first.
A voice is never changed in place: workers cache a voice for their task's life and a job's
request digest names the voice, not its audio, so a changed voice would sound different in
jobs that count as the same. To change one, remove it and add it under a new name.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from worker.jobs import (
    CUSTOM_VOICE_SPEAKERS,
    MAX_CONSENT_CHARS,
    MAX_INSTRUCTIONS_CHARS,
    MAX_REF_AUDIO_BYTES,
    MAX_REF_SECONDS,
    MAX_REF_TEXT_CHARS,
    MAX_VOICE_RECORD_BYTES,
    MIN_REF_SECONDS,
    VOICES_PREFIX,
    Job,
    VoiceRecord,
    describe_errors,
    is_voice_name,
    voice_audio_key,
    voice_name_of,
    voice_record_key,
)

# What `voices preview` says when no text is given: two sentences, a few seconds of speech.
PREVIEW_TEXT = "This is a preview of the voice. It reads one short paragraph."
PREVIEW_ID_PREFIX = "voice-preview-"


class VoiceError(Exception):
    """A voice that cannot be added, found or used; one line saying why."""


@dataclass(frozen=True)
class Reference:
    """A reference clip checked for the library: its bytes and what soundfile read of it."""

    audio: bytes
    sha256: str
    duration_s: float
    sample_rate: int


def check_name(name: str) -> str:
    """A voice name: a key of its own under voices/ and no speaker of the checkpoint (the two
    would be one name to a job)."""
    if not is_voice_name(name):
        raise VoiceError(
            f"voice name {name!r}: 1-64 letters, digits, '_' or '-', starting with a letter or"
            " digit"
        )
    if name.lower() in {speaker.lower() for speaker in CUSTOM_VOICE_SPEAKERS}:
        raise VoiceError(f"voice name {name!r} is a speaker of the CustomVoice checkpoint")
    return name


def read_reference(path: Path) -> Reference:
    """The clip, if it is a WAV that soundfile reads, of MIN..MAX_REF_SECONDS and at most
    MAX_REF_AUDIO_BYTES (a clone's prompt is the whole clip, in every request)."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise VoiceError(f"{path}: {error.strerror}") from None
    if size > MAX_REF_AUDIO_BYTES:
        raise VoiceError(f"{path}: {size} bytes, more than {MAX_REF_AUDIO_BYTES}")
    try:  # libsndfile comes with the `local` extra: only `voices add` reads audio
        import soundfile  # type: ignore[import-untyped]
    except ModuleNotFoundError:
        raise VoiceError(
            "reading a reference clip needs soundfile: pip install 'tts-fleet[local]'"
        ) from None
    audio = path.read_bytes()
    try:
        info = soundfile.info(io.BytesIO(audio))
    except (soundfile.LibsndfileError, RuntimeError) as error:
        raise VoiceError(f"{path}: not readable audio: {error}") from None
    if info.format != "WAV":
        raise VoiceError(f"{path}: a {info.format} file; the reference must be a WAV")
    seconds = info.frames / info.samplerate
    if not MIN_REF_SECONDS <= seconds <= MAX_REF_SECONDS:
        raise VoiceError(
            f"{path}: {seconds:.2f} s of audio; a reference lasts {MIN_REF_SECONDS:g} to "
            f"{MAX_REF_SECONDS:g} s"
        )
    digest = hashlib.sha256(audio).hexdigest()
    return Reference(audio, digest, round(seconds, 3), int(info.samplerate))


def caller_arn(sts: Any) -> str:
    """Who is adding the voice, as STS names the credentials (recorded, never trusted)."""
    return str(sts.get_caller_identity()["Arn"])


def add_voice(
    s3: Any,
    bucket: str,
    prefix: str,
    name: str,
    *,
    added_by: str,
    reference: Reference | None = None,
    ref_text: str = "",
    description: str = "",
    consent: str = "",
) -> VoiceRecord:
    """Writes a clone voice (a reference and its transcript) or a design voice (a description)
    and returns its record. Refuses a name already in the library."""
    check_name(name)
    if (reference is None) == (not description):
        raise VoiceError("a voice is either a reference clip (--audio, --text) or --description")
    if reference is not None and not ref_text.strip():
        raise VoiceError("--text: the transcript of the reference clip is required")
    for what, value, limit in (
        ("--text", ref_text, MAX_REF_TEXT_CHARS),
        ("--description", description, MAX_INSTRUCTIONS_CHARS),
        ("--consent", consent, MAX_CONSENT_CHARS),
    ):
        if len(value) > limit:
            raise VoiceError(f"{what}: {len(value)} characters, more than {limit}")
    record_key = voice_record_key(name, prefix)
    if _exists(s3, bucket, record_key):
        raise VoiceError(f"voice {name!r} is already in the library: remove it first")
    fields: dict[str, Any] = {"name": name, "kind": "design", "description": description}
    if reference is not None:
        audio_key = voice_audio_key(name, prefix)
        s3.put_object(Bucket=bucket, Key=audio_key, Body=reference.audio, ContentType="audio/wav")
        fields = {
            "name": name,
            "kind": "clone",
            "ref_text": ref_text.strip(),
            "audio_key": audio_key,
            "sha256": reference.sha256,
            "duration_s": reference.duration_s,
            "sample_rate": reference.sample_rate,
        }
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    try:
        record = VoiceRecord(**fields, consent=consent, added_by=added_by, added_at=now)
    except ValidationError as error:
        raise VoiceError(describe_errors(error)) from None
    # If-None-Match: of two adds of one name, one wins and the other is told.
    try:
        s3.put_object(
            Bucket=bucket,
            Key=record_key,
            Body=record.to_json(),
            ContentType="application/json",
            IfNoneMatch="*",
        )
    except ClientError as error:
        if _code(error) in ("PreconditionFailed", "412"):
            raise VoiceError(f"voice {name!r} was added meanwhile: remove it first") from None
        raise
    return record


def list_voices(s3: Any, bucket: str, prefix: str) -> tuple[list[VoiceRecord], list[str]]:
    """Every voice of the library by name, and one line per record that cannot be read."""
    records: list[VoiceRecord] = []
    problems: list[str] = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}{VOICES_PREFIX}"):
        for item in page.get("Contents", []):
            name = voice_name_of(item["Key"], prefix)
            if name is None:
                continue
            try:
                records.append(read_voice(s3, bucket, prefix, name))
            except VoiceError as error:
                problems.append(str(error))
    return sorted(records, key=lambda r: r.name), problems


def voice_names(s3: Any, bucket: str, prefix: str) -> tuple[str, ...]:
    """The library's names, from one listing (what `submit` checks jobs against)."""
    names: list[str] = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}{VOICES_PREFIX}"):
        for item in page.get("Contents", []):
            name = voice_name_of(item["Key"], prefix)
            if name is not None:
                names.append(name)
    return tuple(sorted(names))


def read_voice(s3: Any, bucket: str, prefix: str, name: str) -> VoiceRecord:
    key = voice_record_key(name, prefix)
    try:
        answer = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{MAX_VOICE_RECORD_BYTES}")
    except ClientError as error:
        if _code(error) in ("NoSuchKey", "404"):
            raise VoiceError(f"no voice {name!r} in the library") from None
        raise
    body = answer["Body"].read(MAX_VOICE_RECORD_BYTES + 1)
    try:
        if len(body) > MAX_VOICE_RECORD_BYTES:
            raise ValueError(f"larger than {MAX_VOICE_RECORD_BYTES} bytes")
        record = VoiceRecord.model_validate(json.loads(body))
    except (ValueError, ValidationError) as error:
        raise VoiceError(f"{key}: not a voice record: {error}") from None
    if record.name != name:
        raise VoiceError(f"{key}: the record of {record.name!r}")
    return record


def remove_voice(s3: Any, bucket: str, prefix: str, name: str) -> VoiceRecord:
    """Deletes the record (first: the voice is gone for new jobs at once), then the audio."""
    record = read_voice(s3, bucket, prefix, check_name(name))
    s3.delete_object(Bucket=bucket, Key=voice_record_key(name, prefix))
    s3.delete_object(Bucket=bucket, Key=voice_audio_key(name, prefix))
    return record


def preview_job(name: str, text: str = PREVIEW_TEXT, language: str | None = None) -> Job:
    """The one short job of `voices preview`: its id names the voice and the request, so
    previewing the same voice and text again finds the audio already made."""
    fields: dict[str, Any] = {"text": text, "voice": check_name(name)}
    if language:
        fields["language"] = language
    request = Job(**fields)
    return request.model_copy(update={"id": f"{PREVIEW_ID_PREFIX}{name}-{request.job_id[:12]}"})


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if _code(error) in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class VoiceFile:
    """A voice given as `NAME=PATH` (`tts-fleet local --library-voice`): PATH a WAV reference
    with its transcript beside it in PATH.txt (a clone voice), or a .txt description."""

    name: str
    reference: Reference | None
    ref_text: str
    description: str

    @classmethod
    def parse(cls, spec: str) -> VoiceFile:
        name, sep, where = spec.partition("=")
        if not sep or not where:
            raise VoiceError(
                f"{spec!r}: give NAME=REF.wav (transcript in REF.txt) or NAME=DESC.txt"
            )
        path = Path(where)
        check_name(name)
        if path.suffix.lower() == ".txt":
            return cls(name, None, "", _read_text(path))
        return cls(name, read_reference(path), _read_text(path.with_suffix(".txt")), "")

    def add(self, s3: Any, bucket: str, prefix: str, added_by: str) -> VoiceRecord:
        return add_voice(
            s3, bucket, prefix, self.name, added_by=added_by, reference=self.reference,
            ref_text=self.ref_text, description=self.description,
        )  # fmt: skip


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise VoiceError(f"{path}: {error}") from None
