"""Client of an OpenAI-compatible `POST /v1/audio/transcriptions` (vLLM serving a Whisper-class
model beside vLLM-Omni in the GPU task, worker/asr_server.sh; the stand-in locally).

The request is multipart: `file` (the piece as 16-bit WAV), `model`, and `language` (ISO 639-1)
when the job names one; the answer is JSON `{"text": ...}` (the API's default
`response_format`, json). Every failure is transient for the job: a recognizer that does not
answer says nothing about the audio, so the job is released and tried again later.
"""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import soundfile  # type: ignore[import-untyped]

from worker.text import error_message

# Qwen3-TTS's languages (worker/jobs.py LANGUAGES) as the ISO 639-1 codes Whisper takes.
LANGUAGE_CODES = {
    "Chinese": "zh",
    "English": "en",
    "Japanese": "ja",
    "Korean": "ko",
    "German": "de",
    "French": "fr",
    "Russian": "ru",
    "Portuguese": "pt",
    "Spanish": "es",
    "Italian": "it",
}


class AsrError(Exception):
    """The recognizer did not give a transcript (unreachable, an error answer, a bad body)."""


class AsrClient:
    """Thread-safe: one httpx.Client shared by every job thread."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        timeout = httpx.Timeout(timeout_s, connect=5.0)
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def healthy(self) -> bool:
        try:
            return self._http.get(f"{self.base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def transcribe(self, pcm: bytes, rate: int, language: str = "Auto") -> str:
        """The transcript of 16-bit mono PCM at `rate` Hz; raises AsrError."""
        data: dict[str, Any] = {"model": self.model}
        code = LANGUAGE_CODES.get(language)
        if code is not None:
            data["language"] = code
        files = {"file": ("piece.wav", wav(pcm, rate), "audio/wav")}
        url = f"{self.base_url}/v1/audio/transcriptions"
        try:
            response = self._http.post(url, data=data, files=files)
        except httpx.HTTPError as error:
            raise AsrError(f"ASR server unreachable: {error!r}") from None
        if response.status_code != 200:
            detail = error_message(response)
            raise AsrError(f"ASR server answered {response.status_code}: {detail}")
        try:
            body = response.json()
        except ValueError:
            raise AsrError("ASR server answered a body that is not JSON") from None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise AsrError('ASR server answered JSON without a "text" string')
        return text


def wav(pcm: bytes, rate: int) -> bytes:
    """16-bit mono PCM as a WAV file."""
    samples = np.frombuffer(pcm, dtype="<i2")
    with io.BytesIO() as buffer:
        soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
        return buffer.getvalue()
