"""The job message (DESIGN §3.2), the S3 output layout and its records (§3.3), the DLQ copy.

The worker writes all of these and owns them; `tts_fleet/client/`, the local fleet and the
task role's IAM policy read them from here. So it imports nothing heavier than pydantic.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any, Literal, TypeGuard, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

DEFAULT_MAX_TEXT_CHARS = 20_000
# Applied with `fullmatch` (is_job_id): with `match`, the `$` would admit a trailing newline.
ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
_ID = re.compile(ID_PATTERN)
AudioFormat = Literal["wav", "flac", "mp3", "pcm"]
# What vLLM-Omni 0.30's /v1/audio/speech accepts for Qwen3-TTS CustomVoice (protocol/audio.py
# and tts_adapters/qwen3_tts.py): speed 0.25..4.0; instructions up to 500 characters
# (serving_speech.py _TTS_MAX_INSTRUCTIONS_LENGTH); a language from the checkpoint's
# codec_language_id, title-cased, or "Auto" (its default, which lets the model tell by the
# text). The checkpoint also lists Beijing_Dialect and Sichuan_Dialect, reached through the
# Dylan and Eric speakers; the contract keeps to the adapter's DEFAULT_TTS_LANGUAGES.
MIN_SPEED = 0.25
MAX_SPEED = 4.0
MAX_INSTRUCTIONS_CHARS = 500
DEFAULT_LANGUAGE = "Auto"
LANGUAGES = frozenset(
    {"Auto", "Chinese", "English", "Japanese", "Korean", "German", "French", "Russian",
     "Portuguese", "Spanish", "Italian"}
)  # fmt: skip
# The CustomVoice checkpoints' speakers (talker_config.spk_id; the server compares them in
# lower case). `submit` checks a voice against these; the worker leaves it to the server, which
# may serve another checkpoint.
CUSTOM_VOICE_SPEAKERS = (
    "Vivian", "Serena", "Uncle_Fu", "Dylan", "Eric", "Ryan", "Aiden", "Ono_Anna", "Sohee",
)  # fmt: skip
# A vLLM-Omni seed is a signed 64-bit integer; 31 bits keep it positive in every client.
MAX_SEED = 2**31 - 1
# Under the stack's output prefix: audio and manifests, and failure records (DESIGN §3.3).
OUTPUTS_PREFIX = "outputs/"
FAILURES_PREFIX = "failures/"
# A manifest and a failure record are <folder><id> and this.
RECORD_SUFFIX = ".json"
AUDIO_HASH_CHARS = 16
# S3 user metadata on every manifest: the request's digest (Job.digest()), so a producer can
# tell with a HEAD whether a manifest is that of the request it is about to send.
MANIFEST_DIGEST_METADATA = "request-digest"
# Message attributes of a dead-lettered job's copy in the DLQ: why it failed, and its id.
DLQ_ERROR_ATTRIBUTE = "error"
DLQ_JOB_ID_ATTRIBUTE = "job_id"


class Job(BaseModel):
    """One synthesis request. Only `text` is required; unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = Field(None, pattern=ID_PATTERN)
    text: str = Field(min_length=1)
    voice: str = Field("Vivian", min_length=1, max_length=64)
    language: str = Field(DEFAULT_LANGUAGE, min_length=1, max_length=32)
    instructions: str = Field("", max_length=MAX_INSTRUCTIONS_CHARS)
    format: AudioFormat = "wav"
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED)
    # The first rendering's seed of every piece (None: derived from the job id; re-renders
    # derive theirs from it: worker/speech.py job_seed), so a voice stays the same across
    # pieces and re-renders. Left out of the request while unset, so no job's digest changed.
    seed: int | None = Field(None, ge=0, le=MAX_SEED)

    @field_validator("text")
    @classmethod
    def _text_limits(cls, text: str, info: ValidationInfo) -> str:
        if is_blank(text):
            raise ValueError("text is blank")
        limit = (info.context or {}).get("max_text_chars", DEFAULT_MAX_TEXT_CHARS)
        if len(text) > limit:
            raise ValueError(f"text has {len(text)} characters, more than the limit of {limit}")
        return text

    @field_validator("language")
    @classmethod
    def _known_language(cls, language: str) -> str:
        # Title-cased as the server does, so "english" and "English" are one request.
        named = language.title()
        if named not in LANGUAGES:
            known = ", ".join(sorted(LANGUAGES))
            raise ValueError(f"unknown language {language!r}; one of {known}")
        return named

    @field_validator("voice")
    @classmethod
    def _known_voice(cls, voice: str, info: ValidationInfo) -> str:
        voices = (info.context or {}).get("voices")
        if voices is not None and voice.lower() not in {v.lower() for v in voices}:
            raise ValueError(f"unknown voice {voice!r}; one of {', '.join(voices)}")
        return voice

    @property
    def job_id(self) -> str:
        """The explicit id, or one derived from the request so a resubmit is the same job."""
        return self.id if self.id is not None else derive_id(self.request())

    def request(self) -> dict[str, Any]:
        """The synthesis request without the id: what makes two jobs the same work (an unset
        seed left out, so a job from before it has the digest it had)."""
        unset = {"seed"} if self.seed is None else set()
        return self.model_dump(exclude={"id", *unset})

    def digest(self) -> str:
        """SHA-256 of the canonical request: the derived id is its first 32 characters."""
        return request_digest(self.request())

    def request_hash(self, model: str) -> str:
        """What a manifest records: this request as synthesized by `model`."""
        return request_hash(self.digest(), model)

    def with_id(self) -> Job:
        return self if self.id is not None else self.model_copy(update={"id": self.job_id})

    def body(self) -> str:
        """The SQS message body, with the id made explicit."""
        body = {"id": self.job_id, **self.request()}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def is_job_id(candidate: object) -> TypeGuard[str]:
    """Whether `candidate` is a job id: the whole string matches ID_PATTERN."""
    return isinstance(candidate, str) and _ID.fullmatch(candidate) is not None


def is_blank(text: str) -> bool:
    """Nothing but whitespace and invisible format characters (Unicode category Cf: zero-width
    space, joiners, BOM, bidi marks): nothing to speak, though `str.strip` keeps the latter."""
    return all(char.isspace() or unicodedata.category(char) == "Cf" for char in text)


def request_digest(request: dict[str, Any]) -> str:
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def derive_id(request: dict[str, Any]) -> str:
    return request_digest(request)[:32]


def request_hash(digest: str, model: str) -> str:
    """The synthesis request's hash (text, voice, language, instructions, format, speed and
    model). Built on the model-free digest so a producer that kept only the digest (`submit
    --json`) can check a manifest against it with the manifest's own `model`."""
    return hashlib.sha256(f"{digest}\n{model}".encode()).hexdigest()


def parse_job(body: str, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> Job:
    """Parses an SQS body. Raises InvalidJob with a one-line reason."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        raise InvalidJob(f"body is not JSON: {error.msg} at position {error.pos}") from None
    except UnicodeDecodeError as error:
        raise InvalidJob(f"body is not UTF-8: byte {error.start} cannot be decoded") from None
    except RecursionError:
        raise InvalidJob("body is not JSON: nested too deeply") from None
    except ValueError as error:  # e.g. an integer of more digits than int() converts
        raise InvalidJob(f"body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidJob(f"body must be a JSON object, got {type(data).__name__}")
    return validate_job(data, max_text_chars)


def validate_job(
    data: dict[str, Any],
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    voices: tuple[str, ...] | None = None,
) -> Job:
    """`voices`, when given, are the only ones accepted (`submit` passes the CustomVoice
    speakers; the worker passes none and lets its server decide)."""
    context = {"max_text_chars": max_text_chars, "voices": voices}
    try:
        return Job.model_validate(data, context=context)
    except ValidationError as error:
        raise InvalidJob(describe_errors(error), best_effort_id(data)) from None


def describe_errors(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "body"
        message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        parts.append(f"{field}: {message}")
    return "; ".join(parts)


def best_effort_id(data: dict[str, Any]) -> str | None:
    """The message's own id when it is a valid one, so a failure record can use it."""
    candidate = data.get("id")
    return candidate if is_job_id(candidate) else None


class InvalidJob(ValueError):
    """A message that can never succeed; `job_id` is its id when one could be read."""

    def __init__(self, reason: str, job_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id


def audio_key(job_id: str, fmt: str, prefix: str = "", version: str | None = None) -> str:
    """outputs/<id>.<fmt>, written once (If-None-Match) by a job's first synthesis; a remade
    job's audio goes to outputs/<id>.<hash16>.<fmt>, so the manifest it replaces keeps
    pointing at its own audio until the swap (DESIGN §3.3). Readers follow `audio_key`."""
    tag = f".{version[:AUDIO_HASH_CHARS]}" if version else ""
    return f"{prefix}{OUTPUTS_PREFIX}{job_id}{tag}.{fmt}"


AUDIO_FORMATS: tuple[str, ...] = get_args(AudioFormat)
# What follows `<prefix>outputs/<id>` in a key `audio_key` writes: `.<format>`, or a remade
# job's `.<hash16>.<format>` (the hash a hex digest).
_AUDIO_TAIL = re.compile(
    rf"(?:\.[0-9a-f]{{{AUDIO_HASH_CHARS}}})?\.(?P<format>{'|'.join(AUDIO_FORMATS)})"
)


def audio_format_of(key: str, job_id: str, prefix: str = "") -> str | None:
    """The inverse of `audio_key`: the format of `key` when it is a key `audio_key` writes for
    `job_id` under `prefix`; None for any other key."""
    base = f"{prefix}{OUTPUTS_PREFIX}{job_id}"
    if not is_job_id(job_id) or not key.startswith(base):
        return None
    match = _AUDIO_TAIL.fullmatch(key, len(base))
    return match.group("format") if match else None


def manifest_key(job_id: str, prefix: str = "") -> str:
    return f"{prefix}{OUTPUTS_PREFIX}{job_id}{RECORD_SUFFIX}"


def failure_key(job_id: str, prefix: str = "") -> str:
    return f"{prefix}{FAILURES_PREFIX}{job_id}{RECORD_SUFFIX}"


def job_id_of(key: str, prefix: str = "") -> str | None:
    """The job id of a manifest's or a failure record's key (the inverse of `manifest_key`
    and `failure_key` under `prefix`); None for any other key: audio, another prefix, a
    name that is no job id."""
    for folder in (OUTPUTS_PREFIX, FAILURES_PREFIX):
        start = f"{prefix}{folder}"
        if key.startswith(start) and key.endswith(RECORD_SUFFIX):
            job_id = key[len(start) : -len(RECORD_SUFFIX)]
            return job_id if is_job_id(job_id) else None
    return None


class _Record(BaseModel):
    # Unknown fields are ignored on read: a newer worker may add one, and the tools reading
    # its outputs must still parse them.
    model_config = ConfigDict(extra="ignore", frozen=True)

    def to_json(self) -> bytes:
        """The object body the worker PUTs (field order as declared, non-ASCII kept)."""
        return json.dumps(self.model_dump(), ensure_ascii=False).encode()


class PieceQa(_Record):
    """One piece's output checks (worker/qa/): the attempt used and every attempt's seed."""

    characters: int
    seconds: float
    expected_seconds: float
    longest_silence_s: float  # the longest pause between its first and last sound
    wer: float | None = None  # word error rate of its transcript (QA_MODE=asr)
    attempts: int  # renderings asked for: 1 + its re-renders
    seeds: list[int]  # each attempt's seed, the first attempt's first
    passed: bool
    failed: list[str] = []  # the checks the attempt used failed ("runaway: …")
    excerpt: str = ""  # its text's first words, to find it in the job's text


class QaRecord(_Record):
    """A manifest's `qa`: the checks every piece went through (None when QA_MODE=off)."""

    mode: str  # basic | asr
    passed: bool  # every piece passed every check
    rerenders: int  # attempts beyond the first, over all pieces
    reason: str | None = None  # the first piece that failed for good, and why
    pieces: list[PieceQa] = []


class WordTime(_Record):
    """One word's place in the audio, in seconds (the server's forced aligner)."""

    word: str
    start: float
    end: float


class Segment(_Record):
    """One sentence of the job's text and where it sits in the job's audio (worker/timings.py):
    `timing` "aligned" (from the server's word timestamps, WORD_TIMESTAMPS=on) or "estimated"
    (its piece's measured span shared out by the text, moved to the pauses). `paragraph`: the
    index of the text's blank-line paragraph it starts in."""

    start: float
    end: float
    text: str
    paragraph: int = 0
    timing: str = "estimated"
    words: list[WordTime] | None = None


# ---- The voice library (issue 25): voices/<name>.json and voices/<name>.wav --------------
VOICES_PREFIX = "voices/"
VOICE_AUDIO_SUFFIX = ".wav"
# A voice name: a job's `voice`, and a key of its own under voices/ (no dots, no slashes).
VOICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_VOICE_NAME = re.compile(VOICE_NAME_PATTERN)
VoiceKind = Literal["clone", "design"]
# What a record (and the reference audio) may be: read by the worker as untrusted input.
MAX_VOICE_RECORD_BYTES = 64 * 1024
MAX_REF_TEXT_CHARS = 2_000
MAX_CONSENT_CHARS = 2_000
# Qwen3-TTS clones from about 3 s of reference audio ("3-second voice cloning", the model
# card); more than half a minute only makes every request's prompt longer.
MIN_REF_SECONDS = 1.0
MAX_REF_SECONDS = 30.0
# 30 s of 48 kHz 16-bit stereo WAV is 5.8 MB: anything larger is not a reference clip.
MAX_REF_AUDIO_BYTES = 8 * 1024 * 1024


def is_voice_name(candidate: object) -> TypeGuard[str]:
    return isinstance(candidate, str) and _VOICE_NAME.fullmatch(candidate) is not None


def voice_record_key(name: str, prefix: str = "") -> str:
    return f"{prefix}{VOICES_PREFIX}{name}{RECORD_SUFFIX}"


def voice_audio_key(name: str, prefix: str = "") -> str:
    return f"{prefix}{VOICES_PREFIX}{name}{VOICE_AUDIO_SUFFIX}"


def voice_name_of(key: str, prefix: str = "") -> str | None:
    """The voice of a record's key (the inverse of `voice_record_key`); None for others."""
    start = f"{prefix}{VOICES_PREFIX}"
    if key.startswith(start) and key.endswith(RECORD_SUFFIX):
        name = key[len(start) : -len(RECORD_SUFFIX)]
        return name if is_voice_name(name) else None
    return None


class VoiceRecord(_Record):
    """voices/<name>.json: a voice of the library. A `clone` voice (task type Base) is its
    reference audio (voices/<name>.wav) and its transcript; a `design` voice (VoiceDesign) is
    its description. Strict on read: the worker and the client take it as untrusted input."""

    model_config = ConfigDict(extra="ignore", frozen=True, str_max_length=MAX_CONSENT_CHARS)

    name: str = Field(pattern=VOICE_NAME_PATTERN)
    kind: VoiceKind
    ref_text: str = Field("", max_length=MAX_REF_TEXT_CHARS)
    audio_key: str | None = None
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    duration_s: float | None = Field(None, ge=0, le=MAX_REF_SECONDS)
    sample_rate: int | None = Field(None, gt=0)
    description: str = Field("", max_length=MAX_INSTRUCTIONS_CHARS)
    consent: str = ""  # the consent statement given with the voice (`voices add --consent`)
    added_by: str  # the STS caller ARN of who added it
    added_at: str  # ISO 8601, UTC

    def use(self) -> VoiceUse:
        return VoiceUse(
            name=self.name,
            kind=self.kind,
            sha256=self.sha256,
            consent=self.consent,
            added_by=self.added_by,
            added_at=self.added_at,
        )


class VoiceUse(_Record):
    """A manifest's `voice_library`: which library voice made the audio, with whose consent."""

    name: str
    kind: str
    sha256: str | None  # the reference audio's (None for a designed voice)
    consent: str
    added_by: str
    added_at: str


class Manifest(_Record):
    """outputs/<id>.json: written last, so its presence means the job is done."""

    id: str
    request: dict[str, Any]  # Job.request(): the synthesis request without the id
    audio_key: str
    duration_s: float | None
    sample_rate: int | None
    model: str
    voice: str
    synth_s: float
    queue_wait_s: float
    attempts: int  # the message's receive count
    pieces: int  # speech requests the text was split into
    worker: str
    finished_at: str  # ISO 8601, UTC, milliseconds
    # request_hash(): None in manifests written before it existed, which count as made from
    # another request. sent_at_ms: SQS SentTimestamp of the message that made it, so an older
    # message of an edited job never replaces the newer one's output.
    request_hash: str | None = None
    sent_at_ms: int | None = None
    # The SQS MessageId of the message that made it: that message's attempts count the job
    # (worker/deletion.py); None in manifests written before it existed.
    message_id: str | None = None
    # The SQS SenderId of that message: the IAM user or role (AROA…:session) that sent it, set
    # by SQS and unforgeable by the producer; None in manifests written before it existed.
    sender_id: str | None = None
    # The output checks (QaRecord); None with QA_MODE=off and in manifests written before them.
    # `passed: false` only with QA_ON_FAIL=keep: a job that failed a check is otherwise a
    # `quality:` failure, never a manifest.
    qa: QaRecord | None = None
    # Measured throughput (worker/throughput.py; issue 23), None in manifests written before it.
    # The host's EC2 type (`unknown` outside ECS); the worker's audio seconds per wall second
    # over its window when this job finished (its concurrency's rate, synth_s and duration_s
    # being this job's own); the job's share of its pool's worker-hour at that rate, None
    # without POOL_USD_PER_HOUR. An estimate: idle time and cold starts are not in it.
    instance_type: str | None = None
    audio_s_per_s: float | None = None
    cost_usd: float | None = None
    # Every sentence's start and end in the audio, in order (Segment); None in manifests written
    # before them.
    segments: list[Segment] | None = None
    # The library voice the job named (voices/<name>.json): its consent and who added it;
    # None for a speaker of the checkpoint and in manifests written before the library.
    voice_library: VoiceUse | None = None

    def made_from(self, digest: str) -> bool:
        """Whether this manifest is the output of the request with this digest."""
        return self.request_hash == request_hash(digest, self.model)


class FailureRecord(_Record):
    """failures/<id>.json: why a job failed permanently (its message went to the DLQ)."""

    id: str
    error: str  # the kind of failure, e.g. "invalid job"
    detail: str
    attempts: int
    message_id: str
    worker: str
    failed_at: str  # ISO 8601, UTC, milliseconds
    # The failed request's digest (Job.digest()), None when the body could not be read as a
    # job: a later, edited submit of the same id is not reported as this failure.
    request_digest: str | None = None
    # The SQS SenderId of the failed message (see Manifest.sender_id): who sent it.
    sender_id: str | None = None
    # A `quality` failure's output checks, up to the piece that failed every attempt.
    qa: QaRecord | None = None

    def reason(self) -> str:
        """One line: the kind, then the detail when there is one."""
        return f"{self.error}: {self.detail}" if self.detail else self.error
