"""The ASR stand-in's recall: a piece is found again after re-encoding and resampling."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile  # type: ignore[import-untyped]

from tts_fleet.local.asr import TranscriptionError, Transcripts, transcribe
from tts_fleet.local.speech_backends import ToneBackend, to_float

RATE = 24_000


def piece(seed: int, seconds: float = 3.0) -> np.ndarray:
    """Speech-like audio: noise bursts with pauses, different per seed."""
    rng = np.random.default_rng(seed)
    audio = rng.normal(0, 0.2, int(seconds * RATE)).astype(np.float32)
    gates = np.repeat(rng.random(int(seconds * 10)) > 0.4, RATE // 10)
    return audio[: gates.size] * gates[: audio.size]


def resampled(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    count = round(audio.size * target / rate)
    return np.asarray(np.interp(np.arange(count) * rate / target, np.arange(audio.size), audio))


def form(audio: np.ndarray, rate: int, fmt: str = "WAV", **fields: str) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, rate, format=fmt)
    request = httpx.Request(
        "POST", "http://asr/v1/audio/transcriptions",
        files={"file": ("piece.wav", buffer.getvalue())}, data=fields,
    )  # fmt: skip
    return request.headers["Content-Type"], request.read()


def test_a_piece_is_recalled_after_flac_at_16_khz() -> None:
    transcripts = Transcripts()
    for seed in range(20):
        transcripts.remember(piece(seed), RATE, f"words of piece {seed}")
    audio = resampled(piece(7), RATE, 16_000)
    content_type, body = form(audio, 16_000, "FLAC", model="whisper")
    assert transcribe(transcripts, content_type, body) == "words of piece 7"


def test_audio_it_did_not_make_is_refused() -> None:
    transcripts = Transcripts()
    transcripts.remember(piece(1), RATE, "one")
    content_type, body = form(piece(2), RATE, model="whisper")
    with pytest.raises(TranscriptionError, match="only audio the local speech server produced"):
        transcribe(transcripts, content_type, body)


def test_the_oldest_pieces_are_forgotten_past_capacity() -> None:
    transcripts = Transcripts(capacity=2)
    for seed in range(3):
        transcripts.remember(piece(seed), RATE, str(seed))
    assert transcripts.recall(piece(0), RATE) is None
    assert transcripts.recall(piece(2), RATE) == "2"


@pytest.mark.parametrize("missing", ["file", "model"])
def test_the_form_needs_a_file_and_a_model(missing: str) -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, piece(0), RATE, format="WAV")
    files = {"file": ("a.wav", buffer.getvalue())} if missing != "file" else None
    data = {"model": "whisper"} if missing != "model" else {"language": "en"}
    request = httpx.Request("POST", "http://asr/x", files=files or {"x": ("x", b"x")}, data=data)
    with pytest.raises(TranscriptionError, match=f"Field required: {missing}"):
        transcribe(Transcripts(), request.headers["Content-Type"], request.read())


def test_not_multipart_and_not_audio_are_refused() -> None:
    with pytest.raises(TranscriptionError, match="multipart/form-data"):
        transcribe(Transcripts(), "application/json", b"{}")
    request = httpx.Request(
        "POST", "http://asr/x", files={"file": ("a.wav", b"not audio")}, data={"model": "m"}
    )
    with pytest.raises(TranscriptionError, match="could not decode"):
        transcribe(Transcripts(), request.headers["Content-Type"], request.read())


def test_tone_pieces_of_one_length_and_voice_are_told_apart() -> None:
    tone = ToneBackend()
    texts = ["The cat sat on the mat.", "A dog ran in the park!!"]  # 23 characters each
    transcripts = Transcripts()
    audio = [to_float(tone.synthesize(t, "Ryan", "English", 1.0), tone.sample_rate) for t in texts]
    assert audio[0].size == audio[1].size
    for text, samples in zip(texts, audio, strict=True):
        transcripts.remember(samples, RATE, text)
    assert [transcripts.recall(samples, RATE) for samples in audio] == texts
