"""Library voices (voices/<name>.json and .wav in the bucket) as the speech request's fields.

A job names a voice in `voice`. With the stack's task type CustomVoice that is a speaker of the
checkpoint and goes to the server as it is. With Base it names a `clone` voice of the library:
its reference audio goes as a base64 `data:` URL in `ref_audio` and its transcript in
`ref_text` (vLLM-Omni's Qwen3TTSAdapter.validate: both required unless x_vector_only_mode);
with VoiceDesign a `design` voice, whose description goes in `instructions` (the job's own
instructions after it). Everything read from the bucket is untrusted: sizes are bounded before
the body is read, the record is validated, and the audio must hash to the record's sha256.
A voice is read once per task (the cache lives as long as the worker), so a thousand jobs of
one voice cost two GETs, not two thousand.
"""

from __future__ import annotations

import base64
import hashlib
import math
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from worker.jobs import (
    MAX_INSTRUCTIONS_CHARS,
    MAX_REF_AUDIO_BYTES,
    MAX_REF_SECONDS,
    MAX_VOICE_RECORD_BYTES,
    VoiceRecord,
    VoiceUse,
    describe_errors,
    is_voice_name,
    voice_audio_key,
    voice_record_key,
)
from worker.qa.checks import CODEC_FRAME_RATE

# The task type each kind of library voice is for.
KIND_OF_TASK = {"Base": "clone", "VoiceDesign": "design"}


class VoiceError(Exception):
    """A voice that cannot be used; `transient` when reading it again may help."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class ResolvedVoice:
    """What a job's requests carry for its voice, and what its manifest records."""

    fields: dict[str, Any]  # request fields: ref_audio + ref_text, or instructions
    use: VoiceUse
    # Codec frames of the reference clip, which a Base prompt carries before the text (12.5 a
    # second, Qwen3-TTS-12Hz): the talker's context has that much less room for the audio.
    reference_frames: int = 0


class VoiceLibrary:
    """Thread-safe: job threads share one cache; two that miss at once both read (harmless)."""

    def __init__(self, s3: Any, bucket: str, prefix: str, task_type: str) -> None:
        self.s3, self.bucket, self.prefix, self.task_type = s3, bucket, prefix, task_type
        self._cache: dict[str, tuple[VoiceRecord, str]] = {}
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether jobs name library voices at all (CustomVoice names speakers)."""
        return self.task_type in KIND_OF_TASK

    def resolve(self, voice: str, instructions: str = "") -> ResolvedVoice:
        """The request fields of `voice` for this task type. Raises VoiceError."""
        record, audio_url = self._load(voice)
        if record.kind == "design":
            said = f"{record.description} {instructions}".strip()
            if len(said) > MAX_INSTRUCTIONS_CHARS:
                raise VoiceError(
                    f"voice {voice!r}: its description and the job's instructions are "
                    f"{len(said)} characters, more than the server's {MAX_INSTRUCTIONS_CHARS}"
                )
            return ResolvedVoice({"instructions": said}, record.use())
        fields: dict[str, Any] = {"ref_audio": audio_url, "ref_text": record.ref_text}
        frames = math.ceil((record.duration_s or MAX_REF_SECONDS) * CODEC_FRAME_RATE)
        return ResolvedVoice(fields, record.use(), frames)

    def _load(self, voice: str) -> tuple[VoiceRecord, str]:
        with self._lock:
            cached = self._cache.get(voice)
        if cached is not None:
            return cached
        if not is_voice_name(voice):
            raise VoiceError(f"voice {voice!r} is no library voice name")
        record = self._record(voice)
        wanted = KIND_OF_TASK[self.task_type]
        if record.kind != wanted:
            raise VoiceError(
                f"voice {voice!r} is a {record.kind} voice; this stack ({self.task_type}) "
                f"takes {wanted} voices"
            )
        audio_url = self._audio_url(record) if record.kind == "clone" else ""
        with self._lock:
            self._cache[voice] = (record, audio_url)
        return record, audio_url

    def _record(self, voice: str) -> VoiceRecord:
        key = voice_record_key(voice, self.prefix)
        body = self._get(key, MAX_VOICE_RECORD_BYTES, f"voice {voice!r}")
        try:
            record = VoiceRecord.model_validate_json(body)
        except ValidationError as error:
            raise VoiceError(
                f"voice {voice!r}: bad record {key}: {describe_errors(error)}"
            ) from None
        if record.name != voice:
            raise VoiceError(f"voice {voice!r}: {key} is the record of {record.name!r}")
        return record

    def _audio_url(self, record: VoiceRecord) -> str:
        if record.audio_key != voice_audio_key(record.name, self.prefix) or not record.sha256:
            raise VoiceError(
                f"voice {record.name!r}: its record names no reference audio of its own"
            )
        if not record.ref_text.strip():
            raise VoiceError(f"voice {record.name!r}: its record has no transcript (ref_text)")
        audio = self._get(record.audio_key, MAX_REF_AUDIO_BYTES, f"voice {record.name!r} audio")
        if hashlib.sha256(audio).hexdigest() != record.sha256:
            raise VoiceError(f"voice {record.name!r}: its audio does not match its record's sha256")
        return "data:audio/wav;base64," + base64.b64encode(audio).decode("ascii")

    def _get(self, key: str, limit: int, what: str) -> bytes:
        """The object's body, at most `limit` bytes (a Range GET: a huge object is never read
        whole); VoiceError naming `what` when it is missing, too large or unreadable."""
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{limit}")
            body: bytes = answer["Body"].read(limit + 1)
        except Exception as error:  # botocore's ClientError and transport errors alike
            code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "InvalidRange"):
                raise VoiceError(f"{what} is not in the library ({key})") from None
            raise VoiceError(f"{what}: reading {key} failed: {error}", transient=True) from None
        if len(body) > limit:
            raise VoiceError(f"{what}: {key} is larger than {limit} bytes")
        return body
