"""A local stand-in for vLLM-Omni 0.30's `/v1/audio/speech` serving Qwen3-TTS CustomVoice.

    python -m tts_fleet.local.speech_server --host 127.0.0.1 --port 0 --backend espeak

The first line on stdout is `listening on http://HOST:PORT` (flushed), so a parent process
can start it with `--port 0` and read the address. `serve_in_thread` runs it in-process.

It behaves like the real server where a client can tell (file references are to the
vllm-omni 0.30.0 wheel, `vllm_omni/entrypoints/openai/`):
- request fields and their limits as `protocol/audio.py` `OpenAICreateSpeechRequest`;
- the checks of `serving_speech.py` `create_speech` (sample rate, then the model name: 404
  "The model `X` does not exist.") and of `tts_adapters/qwen3_tts.py` `validate` (task type
  against the checkpoint, empty input, language, voice, instructions ≤ 500 characters), each
  a 400 with the real wording; the Base task's `ref_audio` + `ref_text` (a reference in a
  form it reads, a transcript unless `x_vector_only_mode`) and VoiceDesign's description in
  `instructions`, each spoken in a stand-in voice picked by a hash of the reference or the
  description (`stand_in_speaker`), so a cloned voice sounds unlike the default speaker;
- 24 kHz audio encoded by soundfile exactly as `audio_utils_mixin.py` `create_audio` does,
  with no sample-rate header; the `X-VLLM-OMNI-*-TOKENS` usage headers;
- the talker's 4,096-token context (`speech_backends.generate`): audio cut short with HTTP 200
  past it, a 500 when the prompt alone does not fit; `max_new_tokens` when sent stops it
  sooner, the same way; `seed` picks the rendering.

Two things the real server does not do: `--faults` makes a share of the pieces come out bad
as the real model's sometimes do (`speech_faults.py`; the header `X-TTS-FLEET-FAULT` names the
fault), and a second port (`--asr-port`, 8092) answers `POST /v1/audio/transcriptions` by
recalling what each piece says (`asr.py`: a stand-in, not a recognizer).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import click
import numpy as np
import soundfile  # type: ignore[import-untyped]

from tts_fleet.exit_codes import ExitCode
from tts_fleet.local import asr
from tts_fleet.local.speech_backends import (
    AUTO,
    CODEC_FRAME_RATE,
    LANGUAGES,
    OUTPUT_RATE,
    SPEAKERS,
    Backend,
    Generation,
    PromptTooLong,
    frame_budget,
    generate,
    make_backend,
    prompt_tokens,
    text_tokens,
    to_float,
)
from tts_fleet.local.speech_faults import (
    FaultPlan,
    FaultSpecError,
    reshape,
    rewrite,
    spoken_words,
    stretch,
)
from worker.settings import DEFAULT_MODEL, SPEECH_PORT, model_variant

log = logging.getLogger("speech_server")
# response_format -> (soundfile format, media type, soundfile options): create_audio's table.
ENCODINGS: dict[str, tuple[str, str, dict[str, str]]] = {
    "wav": ("WAV", "audio/wav", {}),
    "pcm": ("RAW", "audio/pcm", {"subtype": "PCM_16"}),
    "flac": ("FLAC", "audio/flac", {}),
    "mp3": ("MP3", "audio/mpeg", {}),
    "opus": ("OGG", "audio/ogg", {"subtype": "OPUS"}),
}
FORMATS = tuple(ENCODINGS)
MIN_SPEED, MAX_SPEED = 0.25, 4.0
TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
# Qwen3TTSAdapter.supported_output_sample_rates.
SAMPLE_RATES = (8_000, 24_000)
# serving_speech.py _TTS_MAX_INSTRUCTIONS_LENGTH.
MAX_INSTRUCTIONS = 500
# The checkpoint's spk_id keys, as the adapter compares them (lower case); the first is the
# default speaker (TTSModelAdapter.load_capabilities).
VOICES = tuple(name.lower() for name in SPEAKERS)
SUPPORTED_LANGUAGES = frozenset({*LANGUAGES, AUTO})


class HTTPError(Exception):
    """An error answer: status, message and vLLM's error type."""

    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": str(self),
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def bad_request(message: str) -> HTTPError:
    return HTTPError(400, message, "BadRequestError")


@dataclass(frozen=True)
class Request:
    text: str
    voice: str
    language: str
    instructions: str
    format: str
    speed: float
    sample_rate: int | None
    seed: int | None = None
    max_new_tokens: int | None = None
    word_timestamps: bool = False


def _schema_error(field: str, problem: str) -> HTTPError:
    # FastAPI's RequestValidationError as vLLM reports it: a 400 naming the field (the exact
    # text is pydantic's and varies by version; clients should rely on the status).
    return bad_request(f"1 validation error for OpenAICreateSpeechRequest\n{field}\n  {problem}")


def _check_schema(body: Any) -> dict[str, Any]:
    """What pydantic enforces on OpenAICreateSpeechRequest, for the fields that matter here."""
    if not isinstance(body, dict):
        raise _schema_error("body", "Input should be a valid dictionary")
    if not isinstance(body.get("input"), str):
        raise _schema_error(
            "input", "Field required" if "input" not in body else "Input should be a valid string"
        )
    voice = body["voice"] if "voice" in body else body.get("speaker")
    if isinstance(voice, dict):
        if "id" not in voice:
            raise _schema_error("voice", "Value error, voice dict must contain 'id'")
        voice = voice["id"]
    for field in ("model", "instructions", "language"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise _schema_error(field, "Input should be a valid string")
    if voice is not None and not isinstance(voice, str):
        raise _schema_error("voice", "Input should be a valid string")
    fmt = body.get("response_format", "wav")
    if fmt not in FORMATS:
        raise _schema_error(
            "response_format", "Input should be 'wav', 'pcm', 'flac', 'mp3' or 'opus'"
        )
    speed = body.get("speed", 1.0)
    if speed is not None and (
        isinstance(speed, bool)
        or not isinstance(speed, int | float)
        or not MIN_SPEED <= speed <= MAX_SPEED
    ):
        raise _schema_error("speed", f"Input should be between {MIN_SPEED} and {MAX_SPEED}")
    if body.get("task_type") is not None and body["task_type"] not in TASK_TYPES:
        raise _schema_error("task_type", "Input should be 'CustomVoice', 'VoiceDesign' or 'Base'")
    rate = body.get("sample_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise _schema_error("sample_rate", "Input should be greater than 0")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _schema_error("seed", "Input should be a valid integer")
    if not isinstance(body.get("word_timestamps", False), bool):
        raise _schema_error("word_timestamps", "Input should be a valid boolean")
    ref_audio = body.get("ref_audio")
    if ref_audio is not None and not (
        isinstance(ref_audio, str)
        or (
            isinstance(ref_audio, list)
            and ref_audio
            and all(isinstance(item, str) for item in ref_audio)
        )
    ):
        raise _schema_error("ref_audio", "Value error, 'ref_audio' must be a string or list")
    if body.get("ref_text") is not None and not isinstance(body["ref_text"], str):
        raise _schema_error("ref_text", "Input should be a valid string")
    x_vector = body.get("x_vector_only_mode")
    if x_vector is not None and not isinstance(x_vector, bool):
        raise _schema_error("x_vector_only_mode", "Input should be a valid boolean")
    limit = body.get("max_new_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _schema_error("max_new_tokens", "Input should be a valid integer >= 1")
    return {
        **body,
        "voice": voice,
        "response_format": fmt,
        "speed": 1.0 if speed is None else speed,
    }


def validate(body: Any, served_model: str) -> Request:
    """The request as vLLM-Omni would accept it, or the HTTPError it would answer."""
    fields = _check_schema(body)
    rate = fields.get("sample_rate")
    if rate is not None and rate not in SAMPLE_RATES:
        supported = ", ".join(str(r) for r in SAMPLE_RATES)
        raise bad_request(
            f"sample_rate={rate} is not supported by the current TTS model; "
            f"supported rates: {supported}"
        )
    model = fields.get("model")
    if model and model != served_model:
        raise HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    return _check_qwen3(fields, served_model)


def _check_qwen3(fields: dict[str, Any], served_model: str) -> Request:
    """Qwen3TTSAdapter.validate, in its order, for what a CustomVoice stand-in can serve."""
    ref_audio, ref_text = fields.get("ref_audio"), fields.get("ref_text")
    task_type = fields.get("task_type")
    if task_type is None and (ref_audio is not None or ref_text is not None):
        task_type = "Base"  # the adapter infers it from a reference
    task_type = task_type or "CustomVoice"
    variant = model_variant(served_model)
    if variant is not None and task_type != variant:
        raise bad_request(
            f"Qwen3-TTS {variant} checkpoint does not support task_type='{task_type}'. "
            f"Use task_type='{variant}' or load the matching {task_type} checkpoint."
        )
    text = fields["input"]
    if not text.strip():
        raise bad_request("Input text cannot be empty")
    language = fields.get("language")
    if language is not None:
        language = language.title()
        if language not in SUPPORTED_LANGUAGES:
            known = ", ".join(sorted(SUPPORTED_LANGUAGES))
            raise bad_request(f"Invalid language '{language}'. Supported: {known}")
    voice = fields.get("voice")
    voice = None if voice is None or voice.lower() == "default" else voice.lower()
    if task_type == "CustomVoice" and voice is not None and voice not in VOICES:
        raise bad_request(f"Invalid voice '{voice}'. Supported: {', '.join(sorted(VOICES))}")
    if task_type == "Base":
        _check_reference(fields, voice)
    elif ref_text is not None:
        raise bad_request("'ref_text' is only valid for Base task")
    elif fields.get("x_vector_only_mode") is not None:
        raise bad_request("'x_vector_only_mode' is only valid for Base task")
    instructions = fields.get("instructions") or ""
    if task_type == "VoiceDesign" and not instructions:
        raise bad_request("VoiceDesign task requires 'instructions' to describe the voice")
    if len(instructions) > MAX_INSTRUCTIONS:
        raise bad_request(f"Instructions too long (max {MAX_INSTRUCTIONS} characters)")
    if task_type == "Base" and ref_audio is not None:  # _check_reference required it
        speaker = stand_in_speaker(_first(ref_audio))
    elif task_type == "VoiceDesign":
        speaker = stand_in_speaker(instructions)
    else:
        speaker = SPEAKERS_BY_LOWER[voice or VOICES[0]]
    return Request(
        text,
        speaker,
        language or AUTO,
        instructions,
        fields["response_format"],
        float(fields["speed"]),
        fields.get("sample_rate"),
        fields.get("seed"),
        fields.get("max_new_tokens"),
        bool(fields.get("word_timestamps", False)),
    )


SPEAKERS_BY_LOWER = {name.lower(): name for name in SPEAKERS}
# The real adapter's answer to a reference it cannot take (serving_speech.py
# _validate_ref_audio_format) and to a Base request without a transcript.
REF_AUDIO_SCHEMES = ("http", "https", "data", "file")
_BAD_REF_AUDIO = (
    "ref_audio must be a URL (http/https), base64 data URL (data:...), or file URI (file://...)"
)
_NO_REF_TEXT = (
    "Base task requires non-empty 'ref_text' (transcript of the reference audio) unless "
    "'x_vector_only_mode' is enabled"
)


def _check_reference(fields: dict[str, Any], voice: str | None) -> None:
    """Qwen3TTSAdapter.validate's Base rules: a reference in a form it reads, and its
    transcript unless only the speaker embedding is used."""
    ref_audio = fields.get("ref_audio")
    if ref_audio is None:
        if voice is None:
            raise bad_request(
                "Base task requires 'ref_audio' or 'speaker_embedding' for voice cloning"
            )
        raise bad_request(
            f"Base task with built-in speaker '{voice}' requires 'ref_audio' for voice cloning"
        )
    scheme = ref_audio.split(":", 1)[0].lower() if isinstance(ref_audio, str) else ""
    if scheme not in REF_AUDIO_SCHEMES or ":" not in ref_audio:
        raise bad_request(_BAD_REF_AUDIO)
    ref_text = fields.get("ref_text")
    if not fields.get("x_vector_only_mode") and not (ref_text and ref_text.strip()):
        raise bad_request(_NO_REF_TEXT)


def _first(ref_audio: str | list[str]) -> str:
    return ref_audio if isinstance(ref_audio, str) else ref_audio[0]


def stand_in_speaker(voice_source: str) -> str:
    """The stand-in's voice for a cloned (Base: the reference) or designed (VoiceDesign: the
    description) voice: one of its speakers' espeak variants and tone pitches, picked by a
    hash of the source, so the same reference always sounds the same and another reference
    sounds, most of the time, different."""
    digest = int.from_bytes(hashlib.sha256(voice_source.encode()).digest()[:8], "big")
    names = sorted(SPEAKERS)
    return names[digest % len(names)]


def encode(audio: np.ndarray, rate: int, fmt: str) -> bytes:
    """soundfile.write as create_audio calls it (float input, the format's default subtype)."""
    container, _, options = ENCODINGS[fmt]
    with io.BytesIO() as buffer:
        soundfile.write(buffer, audio, rate, format=container, **options)
        return buffer.getvalue()


def usage_headers(request: Request, output_tokens: int) -> dict[str, str]:
    """serving_speech._build_speech_usage_headers: input = text (+ instructions) tokens."""
    text = text_tokens(request.text) + (
        text_tokens(request.instructions) if request.instructions.strip() else 0
    )
    return {
        "X-VLLM-OMNI-INPUT-TOKENS": str(text),
        "X-VLLM-OMNI-OUTPUT-TOKENS": str(output_tokens),
        "X-VLLM-OMNI-TOTAL-TOKENS": str(text + output_tokens),
        "X-VLLM-OMNI-INPUT-TEXT-TOKENS": str(text),
        "X-VLLM-OMNI-INPUT-AUDIO-TOKENS": "0",
    }


class Latency:
    """Simulated model time: base × (requests in flight)^exponent, like a batching GPU."""

    def __init__(self, base_ms: float, exponent: float) -> None:
        self.base = base_ms / 1000
        self.exponent = exponent
        self.active = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.active += 1
            load = self.active
        if self.base > 0:
            time.sleep(self.base * load**self.exponent)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.active -= 1


class SpeechServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        backend: Backend,
        latency: Latency,
        model: str,
        faults: FaultPlan | None = None,
        transcripts: asr.Transcripts | None = None,
    ):
        super().__init__(address, Handler)
        self.backend = backend
        self.latency = latency
        self.model = model
        self.faults = faults or FaultPlan()
        # What each piece says, for the ASR stand-in on the other port.
        self.transcripts = transcripts or asr.Transcripts()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host if isinstance(host, str) else host.decode()
        return f"http://{name}:{port}"


class Handler(BaseHTTPRequestHandler):
    server: SpeechServer
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without TCP_NODELAY, Nagle + delayed ACK add
    # ~40 ms to every keep-alive response (it cost the worker benchmark 10 points).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _error(self, error: HTTPError) -> None:
        self._json(error.status, error.body())

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"", "application/json")  # vLLM answers an empty 200
        elif self.path == "/v1/audio/voices":
            self._json(200, {"voices": sorted([*VOICES, "default"]), "uploaded_voices": []})
        elif self.path == "/v1/models":
            self._json(
                200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]}
            )
        else:
            self._json(404, {"detail": "Not Found"})  # FastAPI's answer to an unknown route

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/audio/speech":
            self._json(404, {"detail": "Not Found"})
            return
        try:
            request = validate(json.loads(raw or b"null"), self.server.model)
        except json.JSONDecodeError as error:
            self._error(bad_request(f"JSON decode error: {error.msg}"))
            return
        except HTTPError as error:
            self._error(error)
            return
        self._synthesize(request)

    def _synthesize(self, request: Request) -> None:
        prompt_len = prompt_tokens(request.text, request.instructions)
        try:
            with self.server.latency:
                piece = render(self.server, request, prompt_len)
        except PromptTooLong as error:
            # The engine's input check fails inside the stage pipeline, which create_speech
            # answers as an InternalServerError, not as the 400 a plain vLLM would give.
            self._error(HTTPError(500, f"Speech generation failed: {error}", "InternalServerError"))
            return
        except Exception as error:  # a backend fault is the server's, not the caller's
            log.exception("synthesis failed")
            self._error(HTTPError(500, f"Speech generation failed: {error}", "InternalServerError"))
            return
        result = piece.generation
        if result.truncated:
            log.info("talker hit its budget: %d frames, audio cut", result.output_tokens)
        audio, rate = result.audio, OUTPUT_RATE
        if request.sample_rate is not None and request.sample_rate != rate:
            audio = to_float(_to_pcm16(audio), rate, request.sample_rate)
            rate = request.sample_rate
        self.server.transcripts.remember(audio, rate, piece.spoken)
        body = encode(audio, rate, request.format)
        media_type = ENCODINGS[request.format][1]
        headers = usage_headers(request, result.output_tokens)
        if piece.fault:
            headers[FAULT_HEADER] = piece.fault
        if request.word_timestamps:
            headers.update(word_timestamp_headers(request.text, audio.size / rate, request.speed))
        self._send(200, body, media_type, headers)


FAULT_HEADER = "X-TTS-FLEET-FAULT"
# The word timestamps of a non-streaming answer, and their cap (serving_speech.py
# create_speech: a JSON list of {word, start_ms, end_ms}, ASCII-escaped; past 4,096 bytes the
# other header says so instead).
WORD_TIMESTAMPS_HEADER = "X-Word-Timestamps"
WORD_TIMESTAMPS_OMITTED_HEADER = "X-Word-Timestamps-Omitted"
WORD_TIMESTAMPS_LIMIT = 4_096


def aligned_words(text: str) -> list[str]:
    """The forced aligner's words for space-separated text (qwen3_force_align_processor's
    port: split on whitespace, keep letters, digits and the apostrophe). Han, kana and hangul
    are not cut into characters here: the worker then finds the counts differ and estimates."""
    words = ("".join(c for c in s if c == "'" or unicodedata.category(c)[0] in "LN")
             for s in text.split())  # fmt: skip
    return [w for w in words if w]


def word_timestamp_headers(text: str, seconds: float, speed: float) -> dict[str, str]:
    """A stand-in for the aligner: the audio's length shared by the words in proportion to
    their letters (not measured: espeak's own word events are not read), a tenth of each
    share left as the gap after it. In milliseconds of the audio before the time stretch, as
    the real aligner measures it, so a client divides by the speed."""
    words = aligned_words(text)
    total = sum(len(w) + 1 for w in words) or 1
    stamps, at = [], 0.0
    for word in words:
        share = seconds * speed * (len(word) + 1) / total
        stamps.append(
            {"word": word, "start_ms": round(at * 1000), "end_ms": round((at + 0.9 * share) * 1000)}
        )
        at += share
    encoded = json.dumps(stamps)
    if len(encoded) > WORD_TIMESTAMPS_LIMIT:
        limit = WORD_TIMESTAMPS_LIMIT
        return {WORD_TIMESTAMPS_OMITTED_HEADER: f"oversize; bytes={len(encoded)}; limit={limit}"}
    return {WORD_TIMESTAMPS_HEADER: encoded}


@dataclass(frozen=True)
class Piece:
    generation: Generation
    fault: str | None
    spoken: str  # the words really in the audio, for the ASR stand-in


def render(server: SpeechServer, request: Request, prompt_len: int) -> Piece:
    """The backend's speech, with the fault the plan gives this request, under the budget."""
    plan, backend = server.faults, server.backend
    fault = plan.pick(request.text, request.voice, request.seed) if plan.active else None
    rng = plan.rng(request.text, request.voice, request.seed)
    said = rewrite(fault, request.text, rng)
    speak = functools.partial(backend.synthesize, voice=request.voice,
                              language=request.language, speed=request.speed)  # fmt: skip
    audio = to_float(speak(said.text), backend.sample_rate)
    if said.stretch:
        audio = stretch(audio, to_float(speak(request.text), backend.sample_rate).size, rng)
    # Frames are counted at speed 1 (see generate), so the budget in samples scales by 1/speed.
    frames = frame_budget(prompt_len, request.max_new_tokens)
    budget = math.ceil(frames / CODEC_FRAME_RATE / request.speed * OUTPUT_RATE)
    shaped = reshape(fault, audio, OUTPUT_RATE, budget, rng)
    result = generate(shaped.audio, prompt_len, request.speed, request.max_new_tokens)
    kept = shaped.words_kept
    if result.truncated and fault != "runaway":
        kept *= result.audio.size / max(1, shaped.audio.size)
    if fault:
        log.info(
            "fault %s: seed %s, %d characters, %.2f s", fault, request.seed,
            len(request.text), result.audio.size / OUTPUT_RATE,
        )  # fmt: skip
    return Piece(result, fault, spoken_words(said.text, kept, shaped.babble_repeats))


class AsrServer(ThreadingHTTPServer):
    """`POST /v1/audio/transcriptions` on its own port, as vLLM serves a Whisper model beside
    the speech model; answers from the speech server's transcripts (asr.py)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], transcripts: asr.Transcripts) -> None:
        super().__init__(address, AsrHandler)
        self.transcripts = transcripts

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host if isinstance(host, str) else host.decode()
        return f"http://{name}:{port}"


class AsrHandler(Handler):
    server: AsrServer  # type: ignore[assignment]

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"", "application/json")
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": ASR_STAND_IN, "object": "model"}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/audio/transcriptions":
            self._json(404, {"detail": "Not Found"})
            return
        content_type = self.headers.get("Content-Type") or ""
        try:
            text = asr.transcribe(self.server.transcripts, content_type, raw)
        except asr.TranscriptionError as error:
            self._error(bad_request(str(error)))
            return
        body = json.dumps({"text": text, "stand_in": asr.STAND_IN}).encode()
        self._send(200, body, "application/json", {ASR_HEADER: "recall"})


ASR_HEADER = "X-TTS-FLEET-ASR"
ASR_STAND_IN = "tts-fleet-recall"
ASR_PORT = 8092  # where the GPU image serves its ASR model (worker's default ASR_URL)


def _to_pcm16(audio: np.ndarray) -> bytes:
    return bytes((np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes())


@contextmanager
def serve_in_thread(
    backend: str = "tone",
    model: str = DEFAULT_MODEL,
    latency_ms: float = 0.0,
    faults: FaultPlan | None = None,
) -> Iterator[SpeechServer]:
    """The server on a free port in this process: the fast mode for tests. `asr_in_thread`
    serves its transcripts."""
    server = SpeechServer(
        ("127.0.0.1", 0), make_backend(backend), Latency(latency_ms, 0), model, faults
    )
    with _in_thread(server):
        yield server


@contextmanager
def asr_in_thread(speech: SpeechServer) -> Iterator[AsrServer]:
    """The ASR stand-in for `speech` on a free port in this process."""
    with _in_thread(AsrServer(("127.0.0.1", 0), speech.transcripts)) as server:
        yield server


@contextmanager
def _in_thread(server: S) -> Iterator[S]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


S = TypeVar("S", bound=ThreadingHTTPServer)


class BackendMissing(Exception):
    """The chosen backend's package is not installed; one line saying what to install."""


def serve(
    host: str = "127.0.0.1",
    port: int = SPEECH_PORT,
    backend: str = "espeak",
    latency_ms: float = 0.0,
    batch_exponent: float = 0.5,
    model: str = DEFAULT_MODEL,
    log_level: str = "WARNING",
    faults: FaultPlan | None = None,
    asr_port: int | None = None,
) -> None:
    """Serves until interrupted; first prints `listening on http://HOST:PORT`, then
    `asr listening on http://HOST:PORT` (flushed). `asr_port` None: ASR_PORT, or a free port
    when `port` is 0 (a test's server never takes the fixed port).
    OSError when a port is taken; BackendMissing when the backend is not installed."""
    logging.basicConfig(
        level=log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s speech_server %(message)s",
    )
    try:
        made = make_backend(backend)
    except ImportError as error:
        extra = "voice" if backend == "piper" else "local"
        raise BackendMissing(
            f"backend {backend} is not installed ({error}); try: pip install -e '.[{extra}]'"
        ) from None
    plan = faults or FaultPlan()
    server = SpeechServer((host, port), made, Latency(latency_ms, batch_exponent), model, plan)
    if asr_port is None:
        asr_port = 0 if port == 0 else ASR_PORT
    try:
        recall = AsrServer((host, asr_port), server.transcripts)
    except OSError:
        server.server_close()
        raise
    print(f"listening on {server.url}", flush=True)
    print(f"{asr.ASR_LINE}{recall.url}", flush=True)
    if plan.active:
        log.warning("injecting faults %s (fault seed %d)", plan.describe(), plan.seed)
    asr_thread = threading.Thread(target=recall.serve_forever, daemon=True)
    asr_thread.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        recall.shutdown()
        recall.server_close()
        server.server_close()


def fault_plan(spec: str | None, seed: int) -> FaultPlan:
    """--faults and --fault-seed as a plan; click.BadParameter naming --faults when bad."""
    try:
        return FaultPlan.parse(spec or "", seed)
    except FaultSpecError as error:
        raise click.BadParameter(str(error), param_hint="--faults") from None


F = TypeVar("F", bound=Callable[..., Any])


def server_options(func: F) -> F:
    """The options of `serve`, for both entries: `tts-fleet speech-server` and `python -m`."""
    for option in reversed(
        (
            click.option("--host", default="127.0.0.1", show_default=True),
            click.option(
                "--port", type=int, default=SPEECH_PORT, show_default=True,
                help="0 picks a free port",
            ),
            click.option(
                "--backend", type=click.Choice(["espeak", "tone", "piper"]), default="espeak",
                show_default=True,
                help="espeak: real speech via espeak-ng (espeakng-loader wheel); tone: a sine "
                "tone as long as the text, FOR LOAD TESTS AND BENCHMARKS only; piper: a neural "
                "voice (needs the .[voice] extra)",
            ),
            click.option(
                "--latency-ms", type=float, default=0.0, show_default=True,
                help="added model time per request (simulates a GPU; used with tone)",
            ),
            click.option(
                "--batch-exponent", type=float, default=0.5, show_default=True,
                help="latency = latency-ms × concurrent_requests^X; 0 = fixed latency, 0.5 = "
                "grows sub-linearly like a batching GPU",
            ),
            click.option(
                "--model", default=DEFAULT_MODEL, show_default=True,
                help="the served model name: requests naming another get 404; its -CustomVoice/"
                "-VoiceDesign/-Base suffix sets the task type it accepts",
            ),
            click.option("--log-level", default="WARNING", show_default=True),
            click.option(
                "--asr-port", type=int, default=None,
                help=f"where POST /v1/audio/transcriptions is served (the ASR stand-in) "
                f"[default: {ASR_PORT}; a free port when --port is 0]",
            ),
            *fault_options(),
        )
    ):  # fmt: skip
        func = option(func)
    return func


def fault_options() -> tuple[Callable[[F], F], ...]:
    """--faults and --fault-seed, shared with `tts-fleet local`."""
    return (
        click.option(
            "--faults", default=None, metavar="KIND=SHARE,...",
            help="make that share of pieces come out bad, as the real model's sometimes do: "
            "runaway, truncate, silence, drop, garble (e.g. runaway=0.04,truncate=0.04)",
        ),
        click.option(
            "--fault-seed", type=int, default=0, show_default=True,
            help="which pieces get a fault (with the request's text, voice and seed)",
        ),
    )  # fmt: skip


@click.command()
@server_options
@click.pass_context
def main(ctx: click.Context, **options: Any) -> None:
    """Local stand-in for vLLM-Omni's /v1/audio/speech (Qwen3-TTS CustomVoice)."""
    options["faults"] = fault_plan(options["faults"], options.pop("fault_seed"))
    try:
        serve(**options)
    except BackendMissing as error:
        click.echo(f"Error: {error}", err=True)
        ctx.exit(ExitCode.BAD_INPUT)


if __name__ == "__main__":
    main(prog_name="python -m tts_fleet.local.speech_server")
