"""The local ASR stand-in: `POST /v1/audio/transcriptions` as vLLM serves Whisper, by recall.

**This is not a speech recognizer.** The local speech server remembers, for every piece it
answers, a fingerprint of the audio and the words that are really in it (after any injected
fault: a truncated piece lacks its last words, a garbled one has other words, a runaway one
repeats itself). Asked to transcribe audio, this server finds the piece by its fingerprint and
answers those words; audio it did not make is a 400 saying so. Every answer says what it is
(`X-TTS-FLEET-ASR` and the JSON's `stand_in`).

Why not a real CPU recognizer: the one registry package that ships an English model inside
its wheel, pocketsphinx 5.1.1, transcribed clean espeak-ng speech of this server at 44-85 %
word error rate (five sentences, four voices; docs/local.md), so no word-error bound could tell
a clean piece from a garbled one. Whisper-class models need weights from a hub, which this
project's machines cannot fetch. The transcript check's real work (normalising, word error
rate, the bound) runs in the worker against whatever this endpoint answers, exactly as it
will against vLLM's Whisper.

The fingerprint is the audio's duration and its energy envelope (RMS per 20 ms), so the same
audio re-encoded (WAV, FLAC) or resampled (to 16 kHz for Whisper) is still found.
"""

from __future__ import annotations

import io
import subprocess
import threading
from collections import OrderedDict
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path

import numpy as np
import soundfile  # type: ignore[import-untyped]

from tts_fleet.local import procs

STAND_IN = (
    "tts-fleet local ASR stand-in: the words the local speech server put in this audio, "
    "recalled by fingerprint; not a speech recognizer"
)
FRAME_SECONDS = 0.02
# Resampling and re-encoding move the duration by a sample or two and the envelope by a
# fraction of a percent; two different pieces of the same length correlate far lower.
DURATION_TOLERANCE_S = 0.03
MIN_SIMILARITY = 0.98
REMEMBERED = 20_000  # pieces; a benchmark of 500 jobs with re-renders stays well inside


def envelope(audio: np.ndarray, rate: int) -> np.ndarray:
    """RMS per FRAME_SECONDS of float mono audio."""
    frame = max(1, round(rate * FRAME_SECONDS))
    usable = audio.size // frame * frame
    if usable == 0:
        return np.zeros(0, dtype=np.float32)
    frames = audio[:usable].astype(np.float64).reshape(-1, frame)
    return np.asarray(np.sqrt((frames**2).mean(axis=1)), dtype=np.float32)


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    if n == 0:
        return 1.0 if a.size == b.size else 0.0
    x, y = a[:n], b[:n]
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norm == 0.0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(np.dot(x, y)) / norm


@dataclass(frozen=True)
class _Piece:
    seconds: float
    envelope: np.ndarray
    words: str


class Transcripts:
    """What the speech server said in each piece it answered, by the audio's fingerprint."""

    def __init__(self, capacity: int = REMEMBERED) -> None:
        self._pieces: OrderedDict[int, _Piece] = OrderedDict()
        self._capacity = capacity
        self._next = 0
        self._lock = threading.Lock()

    def remember(self, audio: np.ndarray, rate: int, words: str) -> None:
        piece = _Piece(audio.size / rate, envelope(audio, rate), words)
        with self._lock:
            self._pieces[self._next] = piece
            self._next += 1
            while len(self._pieces) > self._capacity:
                self._pieces.popitem(last=False)

    def recall(self, audio: np.ndarray, rate: int) -> str | None:
        """The words of the remembered piece this audio is, or None."""
        seconds, env = audio.size / rate, envelope(audio, rate)
        with self._lock:
            near = [
                p for p in self._pieces.values()
                if abs(p.seconds - seconds) <= DURATION_TOLERANCE_S
            ]  # fmt: skip
        scored = [(_similarity(env, p.envelope), p.words) for p in near]
        best = max(scored, default=(0.0, None), key=lambda s: s[0])
        return best[1] if best[0] >= MIN_SIMILARITY else None


class TranscriptionError(Exception):
    """A 400 for the transcription request, with vLLM's error wording where it has one."""


def read_form(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body (the file's bytes, the model's name)."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise TranscriptionError("expected multipart/form-data with a `file` and a `model`")
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Any libsndfile format (wav, flac, ogg, mp3) as float mono."""
    try:
        audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        raise TranscriptionError(f"could not decode the audio file: {error}") from None
    return np.asarray(audio.mean(axis=1), dtype=np.float32), int(rate)


def transcribe(transcripts: Transcripts, content_type: str, body: bytes) -> str:
    """The answer to one transcription request, or a TranscriptionError for a 400."""
    fields = read_form(content_type, body)
    if "file" not in fields:
        raise TranscriptionError("Field required: file")
    if "model" not in fields:
        raise TranscriptionError("Field required: model")
    audio, rate = decode(fields["file"])
    words = transcripts.recall(audio, rate)
    if words is None:
        raise TranscriptionError(
            "this ASR stand-in transcribes only audio the local speech server produced "
            f"({audio.size / rate:.2f} s of audio matches none of its pieces)"
        )
    return words


ASR_LINE = "asr listening on "


def url_from_log(log_path: Path, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> str:
    """The ASR stand-in's URL from a speech server's log (its second line)."""
    line = procs.wait_for_line(log_path, ASR_LINE, proc, timeout)
    return line.removeprefix(ASR_LINE).strip()
