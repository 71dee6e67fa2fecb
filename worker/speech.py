"""Client for an OpenAI-compatible `POST /v1/audio/speech` (vLLM-Omni serving Qwen3-TTS).

Transient failures (connection refused, timeouts, 5xx, 429, and 401/403/404, which mean a
misconfigured server, route, model or proxy rather than a bad job) are retried a few times
and then raised as TransientSpeechError; anything else the server rejects (400/422: unknown
voice, bad language) is a PermanentSpeechError and never retried. Long text is split on sentence
boundaries and the pieces' audio concatenated (wav, pcm, mp3; other formats go in one piece).
"""

from __future__ import annotations

import io
import re
import time
import wave
from dataclasses import dataclass
from typing import Any

import httpx

from worker.jobs import Job

# vLLM-Omni answers pcm as 16-bit mono at 24 kHz unless it says otherwise.
DEFAULT_PCM_RATE = 24_000
CONCATENABLE = ("wav", "pcm", "mp3")
# 4xx answers that are the server's (or its route's, model's, proxy's) fault, not the job's:
# releasing the job with a backoff loses nothing while someone fixes the deployment.
SERVER_SIDE_4XX = (401, 403, 404, 408, 429)
_SENTENCE_END = re.compile(r"(?<=[.!?;…。！？；])\s*")
_WORD_BREAK = re.compile(r"(?<=[,，、:：])\s*|\s+")


class SpeechError(Exception):
    """A synthesis that failed; `transient` says whether trying later can help."""

    transient = False


class TransientSpeechError(SpeechError):
    transient = True


class PermanentSpeechError(SpeechError):
    pass


@dataclass(frozen=True)
class Speech:
    audio: bytes
    sample_rate: int | None
    duration_s: float | None
    pieces: int


def split_text(text: str, max_chars: int) -> list[str]:
    """Pieces of at most max_chars, cut at sentence ends, else at commas/spaces, else hard."""
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in _units(text, max_chars):
        if current and len(current) + len(sentence) > max_chars:
            pieces.append(current.strip())
            current = ""
        current += sentence
    if current.strip():
        pieces.append(current.strip())
    return [piece for piece in pieces if piece]


def _units(text: str, max_chars: int) -> list[str]:
    units: list[str] = []
    for sentence in _split_keep(text, _SENTENCE_END):
        if len(sentence) <= max_chars:
            units.append(sentence)
            continue
        for word in _split_keep(sentence, _WORD_BREAK):
            units.extend(word[i : i + max_chars] for i in range(0, len(word), max_chars))
    return units


def _split_keep(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Splits after each match, keeping the separator with the piece before it."""
    parts, start = [], 0
    for match in pattern.finditer(text):
        if match.end() > start and match.end() < len(text):
            parts.append(text[start : match.end()])
            start = match.end()
    parts.append(text[start:])
    return [part for part in parts if part]


def wav_info(audio: bytes) -> tuple[int, float] | None:
    """(sample rate, seconds) of a WAV, or None when it does not parse."""
    try:
        with wave.open(io.BytesIO(audio)) as reader:
            rate = reader.getframerate()
            return rate, reader.getnframes() / rate
    except (wave.Error, EOFError):
        return None


def join_wavs(parts: list[bytes]) -> bytes:
    frames, params = [], None
    for part in parts:
        with wave.open(io.BytesIO(part)) as reader:
            current = (reader.getnchannels(), reader.getsampwidth(), reader.getframerate())
            if params is not None and current != params:
                raise PermanentSpeechError(f"pieces differ in format: {params} vs {current}")
            params = current
            frames.append(reader.readframes(reader.getnframes()))
    assert params is not None
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(params[0])
        out.setsampwidth(params[1])
        out.setframerate(params[2])
        out.writeframes(b"".join(frames))
    return buffer.getvalue()


class SpeechClient:
    """Thread-safe: one httpx.Client (connection pool) shared by every job thread."""

    def __init__(
        self,
        base_url: str,
        model: str = "",
        task_type: str = "",
        timeout_s: float = 600.0,
        retries: int = 2,
        chunk_chars: int = 1_000,
        retry_delay_s: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.task_type = task_type
        self.retries = retries
        self.chunk_chars = chunk_chars
        self.retry_delay_s = retry_delay_s
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0))

    def close(self) -> None:
        self._http.close()

    def healthy(self) -> bool:
        try:
            return self._http.get(f"{self.base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float, interval_s: float = 0.5) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval_s)
        return True

    def synthesize(self, job: Job) -> Speech:
        fmt = job.format
        pieces = split_text(job.text, self.chunk_chars) if fmt in CONCATENABLE else [job.text]
        results = [self._with_retries(self._payload(job, piece)) for piece in pieces]
        audio_parts = [content for content, _ in results]
        if fmt == "wav":
            audio = audio_parts[0] if len(audio_parts) == 1 else join_wavs(audio_parts)
            info = wav_info(audio)
            rate, duration = info if info else (None, None)
        elif fmt == "pcm":
            audio = b"".join(audio_parts)
            rate = int(results[0][1].get("x-sample-rate", DEFAULT_PCM_RATE))
            duration = len(audio) / 2 / rate
        else:  # mp3 frames concatenate; flac is one piece. Duration would need a decoder.
            audio, rate, duration = b"".join(audio_parts), None, None
        return Speech(audio, rate, duration, len(pieces))

    def _payload(self, job: Job, text: str) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "input": text,
            "voice": job.voice,
            "language": job.language,
            "response_format": job.format,
            "speed": job.speed,
        }
        if self.model:
            payload["model"] = self.model
        if job.instructions:
            payload["instructions"] = job.instructions
        if self.task_type:
            payload["task_type"] = self.task_type
        return payload

    def _with_retries(self, payload: dict[str, Any]) -> tuple[bytes, httpx.Headers]:
        for attempt in range(self.retries + 1):
            try:
                return self._post(payload)
            except TransientSpeechError:
                if attempt == self.retries:
                    raise
                time.sleep(self.retry_delay_s * 2**attempt)
        raise AssertionError("unreachable")

    def _post(self, payload: dict[str, Any]) -> tuple[bytes, httpx.Headers]:
        url = f"{self.base_url}/v1/audio/speech"
        try:
            response = self._http.post(url, json=payload)
        except httpx.TimeoutException as error:
            raise TransientSpeechError(f"speech server timed out: {error!r}") from None
        except httpx.TransportError as error:
            raise TransientSpeechError(f"speech server unreachable: {error!r}") from None
        if response.status_code == 200:
            return response.content, response.headers
        detail = _error_message(response)
        message = f"speech server answered {response.status_code}: {detail}"
        if response.status_code >= 500 or response.status_code in SERVER_SIDE_4XX:
            raise TransientSpeechError(message)
        raise PermanentSpeechError(message)


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:500]
        if "message" in body:
            return str(body["message"])[:500]
    return str(body)[:500]
